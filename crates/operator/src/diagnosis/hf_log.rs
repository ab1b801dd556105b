//! What a download Job's log says, pure: why `hf download` failed (the
//! Hugging Face client's own error texts), and how far a running download
//! got (its "Fetching N files" progress bar).
//!
//! Two generations of the client print failures differently, and vLLM images
//! carry both (vLLM 0.18-0.19: huggingface_hub 0.36, later ones 1.x, 0.34 2.x):
//! 0.36 ends in a Python traceback whose last lines name the error
//! (`GatedRepoError: … Cannot access gated repo …`); 1.x and 2.x print one red
//! `Error: …` line (`huggingface_hub/cli/_errors.py`: "Access denied. …
//! requires approval.", "Model 'org/x' not found.", "Revision not found in
//! model 'org/x'.") and a gray `Hint: set HF_DEBUG=1 …`, which is never the
//! evidence. Colour codes are removed first.

use super::without_colours;

/// Why a download failed: a `ModelReady` reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 401/403 on a gated repository: no token, or the account has not accepted its terms.
    GatedRepo,
    /// The repository does not exist (or is private and invisible to the token).
    RepoNotFound,
    /// The repository exists, the revision does not.
    RevisionNotFound,
    /// The volume is full (ENOSPC).
    DiskFull,
    /// Anything else.
    DownloadError,
}

impl Failure {
    pub fn reason(self) -> &'static str {
        match self {
            Failure::GatedRepo => "GatedRepo",
            Failure::RepoNotFound => "RepoNotFound",
            Failure::RevisionNotFound => "RevisionNotFound",
            Failure::DiskFull => "DiskFull",
            Failure::DownloadError => "DownloadError",
        }
    }

    /// Whether running the same download again cannot help (the spec or the
    /// Hub's permissions must change first).
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            Failure::GatedRepo | Failure::RepoNotFound | Failure::RevisionNotFound
        )
    }
}

/// Every reason a download can fail with, for docs and tests.
pub const REASONS: &[&str] = &[
    "GatedRepo",
    "RepoNotFound",
    "RevisionNotFound",
    "DiskFull",
    "DownloadError",
];

/// A classified failure and the log line that shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub failure: Failure,
    /// The client's own words (one line, trimmed).
    pub evidence: String,
}

/// The lines of a container log, with tqdm's carriage-return redraws split
/// into their own lines.
fn lines(log: &str) -> impl DoubleEndedIterator<Item = &str> {
    log.split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
}

/// Why the download whose log is `log` failed. The most specific error wins:
/// the client's messages for a gated repository also mention authentication,
/// and a missing repository's mention gated repositories.
pub fn classify(log: &str) -> Classified {
    let log = without_colours(log);
    let log = log.as_ref();
    // Per failure, the client's words, the most telling first (it becomes the evidence);
    // exception names with their colon, so that a traceback's `raise ...(GatedRepoError, ...)`
    // line is not taken for the message. 1.x/2.x's one-line errors: "Access denied. Model
    // 'a/b' requires approval." (or "This repository …"), "Revision not found in model 'a/b'.",
    // "Model 'a/b' not found." (or "Repository not found.").
    const KINDS: &[(Failure, &[&str])] = &[
        (
            Failure::GatedRepo,
            &[
                "Cannot access gated repo",
                "requires approval.",
                "GatedRepoError:",
            ],
        ),
        (
            Failure::RevisionNotFound,
            &[
                "Invalid rev id",
                "Revision Not Found for url",
                "Error: Revision not found in ",
                "RevisionNotFoundError:",
            ],
        ),
        (
            Failure::RepoNotFound,
            &[
                "Repository Not Found for url",
                "' not found.",
                "Error: Repository not found.",
                "RepositoryNotFoundError:",
            ],
        ),
        (
            Failure::DiskFull,
            &["No space left on device", "[Errno 28]"],
        ),
    ];
    for (failure, patterns) in KINDS {
        for pattern in *patterns {
            if let Some(line) = lines(log).rev().find(|l| l.contains(pattern)) {
                return Classified {
                    failure: *failure,
                    evidence: line.to_string(),
                };
            }
        }
    }
    // Otherwise the last thing said, which for a Python client is the exception
    // and for 1.x/2.x the `Error:` line before the hint.
    let evidence = lines(log)
        .rev()
        .find(|l| {
            // Progress, hints, and the request lines HF_DEBUG adds (the Job sets it).
            !["Fetching ", "Downloading", "Hint:", "Request ", "Send: "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .unwrap_or("the download exited with an error and printed nothing")
        .to_string();
    Classified {
        failure: Failure::DownloadError,
        evidence,
    }
}

/// How far a running download got, from its last progress line: e.g.
/// "40% (4/10 files)".
pub fn progress(log: &str) -> Option<String> {
    let line = lines(log).rev().find(|l| l.starts_with("Fetching "))?;
    let rest = line.strip_prefix("Fetching ")?;
    let (total, rest) = rest.split_once(" files:")?;
    let percent = rest.split('%').next()?.trim();
    let done = rest
        .split('|')
        .nth(2)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.split_once('/'))
        .map(|(d, _)| d.trim().to_string());
    percent.parse::<u32>().ok()?;
    Some(match done {
        Some(d) => format!("{percent}% ({d}/{} files)", total.trim()),
        None => format!("{percent}% of {} files", total.trim()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_specific_error_wins() {
        let gated = "huggingface_hub.errors.GatedRepoError: 401 Client Error.\n\nCannot access \
                     gated repo for url https://huggingface.co/api/models/a/b.\nAccess to model \
                     a/b is restricted. You must have access to it and be authenticated to \
                     access it. Please log in.";
        assert_eq!(classify(gated).failure, Failure::GatedRepo);
        let missing = "Repository Not Found for url: https://huggingface.co/api/models/a/b.\n\
                       Please make sure you specified the correct `repo_id`.\nIf you are trying \
                       to access a private or gated repo, make sure you are authenticated.";
        assert_eq!(classify(missing).failure, Failure::RepoNotFound);
        assert_eq!(
            classify("OSError: [Errno 28] No space left on device").failure,
            Failure::DiskFull
        );
        let other = classify("Fetching 3 files:   0%|          | 0/3\nValueError: boom\n");
        assert_eq!(other.failure, Failure::DownloadError);
        assert_eq!(other.evidence, "ValueError: boom");
    }

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/tests/fixtures/hf-logs/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The Hugging Face client's real output (tests/fixtures/hf-logs/README.md): 0.36.2
    /// without HF_DEBUG (the top directory), and every generation as the download Job runs
    /// it (HF_DEBUG=1: 0.36.2, 1.31.0, 2.4.0).
    #[test]
    fn the_clients_own_failures_are_told_apart() {
        for dir in ["", "0.36.2/", "1.31.0/", "2.4.0/"] {
            the_failures_in(dir);
        }
    }

    fn the_failures_in(dir: &str) {
        let fixture = |name: &str| fixture(&format!("{dir}{name}"));
        for (file, failure) in [
            ("gated.log", Failure::GatedRepo),
            ("gated-wrong-token.log", Failure::GatedRepo),
            ("repo-not-found.log", Failure::RepoNotFound),
            ("revision-not-found.log", Failure::RevisionNotFound),
            ("disk-full.log", Failure::DiskFull),
        ] {
            let c = classify(&fixture(file));
            assert_eq!(c.failure, failure, "{dir}{file}: {c:?}");
            assert!(!c.evidence.starts_with("raise "), "{dir}{file}: {c:?}");
            assert!(
                !c.evidence.is_empty() && !c.evidence.contains('\n'),
                "{dir}{file}"
            );
        }
        assert_eq!(
            progress(&fixture("progress.log")).as_deref(),
            Some("25% (1/4 files)")
        );
        assert_eq!(
            progress(&fixture("ok.log")).as_deref(),
            Some("100% (4/4 files)")
        );
    }

    /// huggingface_hub 1.x/2.x: one red `Error:` line and a gray hint, exit 1
    /// (the texts of `huggingface_hub/cli/_errors.py`, 2.4.0; 1.31's gated
    /// message says "This repository").
    #[test]
    fn the_current_clients_one_line_errors_are_told_apart() {
        let red = |e: &str| {
            format!(
                "\u{1b}[31mError: {e}\u{1b}[0m\n\u{1b}[90mHint: set HF_DEBUG=1 as environment \
                 variable for full traceback.\u{1b}[0m\n"
            )
        };
        for (log, failure, evidence) in [
            (
                red("Access denied. Model 'meta-llama/Llama-3.1-8B' requires approval."),
                Failure::GatedRepo,
                "Error: Access denied. Model 'meta-llama/Llama-3.1-8B' requires approval.",
            ),
            (
                red("Access denied. This repository requires approval."),
                Failure::GatedRepo,
                "Error: Access denied. This repository requires approval.",
            ),
            (
                red(
                    "Model 'org/x' not found.\nIf the repo is private, make sure you are \
                     authenticated and your token has the required permissions.\nIf the repo \
                     does not exist, create it with: hf repos create org/x",
                ),
                Failure::RepoNotFound,
                "Error: Model 'org/x' not found.",
            ),
            (
                red("Revision not found in model 'org/x'."),
                Failure::RevisionNotFound,
                "Error: Revision not found in model 'org/x'.",
            ),
            (
                red("Not logged in. Run 'hf auth login' first."),
                Failure::DownloadError,
                "Error: Not logged in. Run 'hf auth login' first.",
            ),
        ] {
            let c = classify(&log);
            assert_eq!(
                (c.failure, c.evidence.as_str()),
                (failure, evidence),
                "{log:?}"
            );
        }
    }

    #[test]
    fn progress_is_the_last_redraw() {
        let log = "Fetching 10 files:   0%|          | 0/10 [00:00<?, ?it/s]\r\
                   Fetching 10 files:  40%|████      | 4/10 [00:01<00:01,  3.1it/s]";
        assert_eq!(progress(log).as_deref(), Some("40% (4/10 files)"));
        assert_eq!(progress("nothing yet"), None);
    }
}
