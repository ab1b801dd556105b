//! The fixture tree that stands in for the Hub (`$VLLM_SIM_HUB_DIR`, default `/srv/hub`):
//!
//! ```text
//! <root>/<org>/<name>/<revision>/<files...>          model repos (`--repo-type model`)
//! <root>/datasets/<org>/<name>/<revision>/...         dataset repos; spaces/ likewise
//! <root>/<org>/<name>/.gated                          gated: the accepted tokens, one a line
//! ```
//!
//! A revision is a directory name (a branch or tag) or the 40-hex commit id the simulator
//! derives for one: the SHA-1 of `vllm-sim hub commit\nrepo <type>s/<org>/<name>\n` followed by
//! `<git blob id> <path>\n` for each file in byte order. The ETag of a file is its git blob id
//! (as the Hub's for files not in LFS).

use std::path::{Path, PathBuf};

use crate::sha1;

pub struct Hub {
    pub root: PathBuf,
}

pub struct Repo {
    pub repo_type: String,
    pub repo_id: String,
    pub dir: PathBuf,
}

pub struct RepoFile {
    /// Path in the repo, `/`-separated.
    pub path: String,
    pub source: PathBuf,
    pub size: u64,
    pub etag: String,
}

pub struct Revision {
    pub commit: String,
    /// In the order the Hub lists them (`siblings`): byte order of the paths.
    pub files: Vec<RepoFile>,
}

/// Why the Hub refuses a request (the cases huggingface_hub turns into its errors).
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// 401 without a token, 404 with one (the Hub does not say which repos exist).
    RepoNotFound,
    RevisionNotFound,
    EntryNotFound,
    /// 401 without a token, 403 with a token that is not accepted.
    Gated,
}

pub fn is_commit_hash(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::metadata(&path)?;
        if meta.is_dir() {
            walk(&path, &rel, out)?;
        } else if meta.is_file() {
            out.push((rel, path));
        }
    }
    Ok(())
}

impl Hub {
    pub fn from_env() -> Hub {
        let root = std::env::var("VLLM_SIM_HUB_DIR")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "/srv/hub".to_string());
        Hub {
            root: PathBuf::from(root),
        }
    }

    /// `repo_id` must have passed `validate_repo_id` (no `..`, at most one `/`).
    pub fn repo(&self, repo_type: &str, repo_id: &str) -> Option<Repo> {
        let (org, name) = repo_id.split_once('/')?;
        if org.starts_with('.') || name.starts_with('.') {
            return None;
        }
        let base = if repo_type == "model" {
            self.root.clone()
        } else {
            self.root.join(format!("{repo_type}s"))
        };
        let dir = base.join(org).join(name);
        dir.is_dir().then(|| Repo {
            repo_type: repo_type.to_string(),
            repo_id: repo_id.to_string(),
            dir,
        })
    }
}

impl Repo {
    /// The accepted tokens of a gated repo (`None`: not gated).
    pub fn accepted_tokens(&self) -> Option<Vec<String>> {
        let text = std::fs::read_to_string(self.dir.join(".gated")).ok()?;
        Some(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect(),
        )
    }

    /// Whether `token` may read the repo's files.
    pub fn check_access(&self, token: Option<&str>) -> Result<(), Refusal> {
        match self.accepted_tokens() {
            None => Ok(()),
            Some(ok) if token.is_some_and(|t| ok.iter().any(|a| a == t)) => Ok(()),
            Some(_) => Err(Refusal::Gated),
        }
    }

    fn load(&self, dir: &Path) -> std::io::Result<Revision> {
        let mut found = Vec::new();
        walk(dir, "", &mut found)?;
        found.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut files = Vec::new();
        let mut text = format!(
            "vllm-sim hub commit\nrepo {}s/{}\n",
            self.repo_type, self.repo_id
        );
        for (path, source) in found {
            let content = std::fs::read(&source)?;
            let etag = sha1::git_blob_id(&content);
            text.push_str(&format!("{etag} {path}\n"));
            files.push(RepoFile {
                path,
                source,
                size: content.len() as u64,
                etag,
            });
        }
        Ok(Revision {
            commit: sha1::hex(&sha1::digest(text.as_bytes())),
            files,
        })
    }

    fn revision_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        dirs
    }

    /// A branch or tag (a directory), or the commit id of one.
    pub fn revision(&self, revision: &str) -> Result<Revision, Refusal> {
        let plain = !revision.is_empty()
            && !revision.contains('/')
            && !revision.contains('\\')
            && !revision.starts_with('.');
        if plain {
            let dir = self.dir.join(revision);
            if dir.is_dir() {
                return self.load(&dir).map_err(|_| Refusal::RevisionNotFound);
            }
        }
        if is_commit_hash(revision) {
            for dir in self.revision_dirs() {
                if let Ok(rev) = self.load(&dir)
                    && rev.commit == revision
                {
                    return Ok(rev);
                }
            }
        }
        Err(Refusal::RevisionNotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Hub {
        Hub {
            root: Path::new(env!("CARGO_MANIFEST_DIR")).join("hub"),
        }
    }

    #[test]
    fn fixture_repos() {
        let hub = fixture();
        let qwen = hub.repo("model", "Qwen/Qwen2.5-0.5B-Instruct").unwrap();
        let main = qwen.revision("main").unwrap();
        let v2 = qwen.revision("v2").unwrap();
        assert_ne!(main.commit, v2.commit);
        let names: Vec<&str> = main.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            names,
            [
                ".gitattributes",
                "REVISION",
                "config.json",
                "tokenizer_config.json"
            ]
        );
        assert_eq!(qwen.revision(&main.commit).unwrap().commit, main.commit);
        assert_eq!(qwen.revision("nope").err(), Some(Refusal::RevisionNotFound));
        assert_eq!(
            qwen.revision("../v2").err(),
            Some(Refusal::RevisionNotFound)
        );
        assert!(qwen.check_access(None).is_ok());
        let llama = hub
            .repo("model", "meta-llama/Llama-3.1-8B-Instruct")
            .unwrap();
        assert_eq!(llama.check_access(None), Err(Refusal::Gated));
        assert_eq!(llama.check_access(Some("hf_wrong")), Err(Refusal::Gated));
        assert!(
            llama
                .check_access(Some("hf_simulated_test_token_0123456789"))
                .is_ok()
        );
        assert!(hub.repo("model", "org/does-not-exist").is_none());
        assert!(hub.repo("dataset", "Qwen/Qwen2.5-0.5B-Instruct").is_none());
        // The commit id in the real client's gated.log fixture.
        assert_eq!(
            llama.revision("main").unwrap().commit,
            "dc0b1302c7d013560271e9690a010c7b33a8dd56"
        );
    }
}
