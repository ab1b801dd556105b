//! Runs the built `hf` simulator against the fixture hub (crates/vllm-sim/hub) and against
//! temporary hubs, for every outcome of `hf download`, and checks its failure output against the
//! real client's logs in crates/operator/tests/fixtures/hf-logs.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const HF: &str = env!("CARGO_BIN_EXE_hf");
const GATED_TOKEN: &str = "hf_simulated_test_token_0123456789";
const QWEN: &str = "Qwen/Qwen2.5-0.5B-Instruct";
const LLAMA: &str = "meta-llama/Llama-3.1-8B-Instruct";

fn hub() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hub")
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/tests/fixtures/hf-logs")
}

struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let dir = std::env::temp_dir().join(format!("vllm-sim-hf-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Tmp(dir)
    }

    fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    fn s(&self, p: &str) -> String {
        self.join(p).to_str().unwrap().to_string()
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn command(args: &[&str], env: &[(&str, &str)], hub_dir: &Path) -> Command {
    let mut cmd = Command::new(HF);
    cmd.args(args);
    for var in [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HF_ENDPOINT",
        "HF_TOKEN_PATH",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "VLLM_SIM_HUB_DELAY_MS",
        "VLLM_SIM_HUB_FREE_BYTES",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("VLLM_SIM_HUB_DIR", hub_dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// Runs `hf` with stdout and stderr to one pipe, as a container's log has them.
fn hf_in(args: &[&str], env: &[(&str, &str)], hub_dir: &Path) -> (i32, String, String) {
    let out: Output = command(args, env, hub_dir).output().expect("run hf");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hf(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    hf_in(args, env, &hub())
}

/// Request ids and timings differ from run to run; the local dir is the fixtures' /data/model.
fn mask(text: &str, local: &str) -> String {
    let mut out = String::new();
    for line in text.replace(local, "/data/model").split_inclusive('\n') {
        let mut l = line.to_string();
        while let Some(at) = l.find("Root=1-") {
            let end = l[at..]
                .find(|c: char| c == ')' || c.is_whitespace())
                .map(|e| at + e)
                .unwrap_or(l.len());
            l.replace_range(at..end, "<request id>");
        }
        out.push_str(&l);
    }
    out
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).expect("fixture")
}

/// The traceback that ends the log (from its first "Traceback" line).
fn traceback(text: &str) -> &str {
    &text[text
        .find("Traceback (most recent call last):")
        .expect("a traceback")..]
}

#[test]
fn downloads_a_revision_and_a_second_run_copies_nothing() {
    let t = Tmp::new("ok");
    let dir = t.s("model");
    let (code, out, err) = hf(
        &["download", QWEN, "--revision", "main", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{dir}\n"));
    for f in [
        ".gitattributes",
        "REVISION",
        "config.json",
        "tokenizer_config.json",
    ] {
        assert!(
            err.contains(&format!(
                "Downloading '{f}' to '{dir}/.cache/huggingface/download/"
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!("Download complete. Moving file to {dir}/{f}\n")),
            "{err}"
        );
    }
    assert!(
        err.starts_with("\rFetching 4 files:   0%|          | 0/4 [00:00<?, ?it/s]"),
        "{err}"
    );
    assert!(
        err.contains("\rFetching 4 files: 100%|██████████| 4/4 [00:00<00:00, "),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(t.join("model/REVISION")).unwrap(),
        "main\n"
    );
    let want = std::fs::read(hub().join(QWEN).join("main/config.json")).unwrap();
    assert_eq!(std::fs::read(t.join("model/config.json")).unwrap(), want);
    // The real client's bookkeeping: metadata (commit, etag, time) and lock files, no leftovers.
    let meta =
        std::fs::read_to_string(t.join("model/.cache/huggingface/download/config.json.metadata"))
            .unwrap();
    let lines: Vec<&str> = meta.lines().collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1], "f81ead14ab072d65a07817f83a3ee0e5a1890d10");
    assert_eq!(
        std::fs::read_to_string(t.join("model/.cache/huggingface/.gitignore")).unwrap(),
        "*"
    );
    let leftovers: Vec<_> = std::fs::read_dir(t.join("model/.cache/huggingface/download"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".incomplete"))
        .collect();
    assert!(leftovers.is_empty());
    let mtime = std::fs::metadata(t.join("model/config.json"))
        .unwrap()
        .modified()
        .unwrap();

    // Again: every file is there for this commit; nothing is copied, the files stay as they are.
    let (code, out, err) = hf(
        &["download", QWEN, "--revision", "main", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(out, format!("{dir}\n"));
    assert!(!err.contains("Downloading"), "{err}");
    assert_eq!(
        std::fs::metadata(t.join("model/config.json"))
            .unwrap()
            .modified()
            .unwrap(),
        mtime
    );

    // Another revision into the same directory: only what differs is copied.
    let (code, _, err) = hf(
        &["download", QWEN, "--revision", "v2", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("Downloading 'REVISION'"), "{err}");
    assert!(!err.contains("Downloading 'config.json'"), "{err}");
    assert_eq!(
        std::fs::read_to_string(t.join("model/REVISION")).unwrap(),
        "v2\n"
    );
}

#[test]
fn quiet_single_file_patterns_and_commit_ids() {
    let t = Tmp::new("modes");
    let (code, out, err) = hf(
        &["download", QWEN, "--local-dir", &t.s("q"), "--quiet"],
        &[],
    );
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(out, format!("{}\n", t.s("q")));

    // One file: `hf_hub_download`, no bar; the file's path is printed.
    let (code, out, err) = hf(
        &["download", QWEN, "config.json", "--local-dir", &t.s("one")],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{}/config.json\n", t.s("one")));
    assert!(!err.contains("Fetching"));
    let (code, _, err) = hf(
        &["download", QWEN, "nope.json", "--local-dir", &t.s("one")],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.contains(
        "huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: Root=1-"
    ));
    assert!(err.ends_with(&format!(
        "\n\nEntry Not Found for url: https://huggingface.co/{QWEN}/resolve/main/nope.json.\n"
    )));

    let (code, _, err) = hf(
        &[
            "download",
            QWEN,
            "--include",
            "*.json",
            "--local-dir",
            &t.s("inc"),
        ],
        &[],
    );
    assert_eq!(code, 0);
    assert!(err.contains("Fetching 2 files"), "{err}");
    assert!(t.join("inc/config.json").exists() && !t.join("inc/REVISION").exists());

    // The commit id of `main` (as the metadata records it) is a revision too.
    let meta =
        std::fs::read_to_string(t.join("q/.cache/huggingface/download/REVISION.metadata")).unwrap();
    let commit = meta.lines().next().unwrap().to_string();
    assert_eq!(commit.len(), 40);
    let (code, _, err) = hf(
        &[
            "download",
            QWEN,
            "--revision",
            &commit,
            "--local-dir",
            &t.s("c"),
            "--quiet",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(t.join("c/REVISION")).unwrap(),
        "main\n"
    );

    // Without --local-dir: the cache's layout, the snapshot's path printed.
    let home = t.s("home");
    let (code, out, err) = hf(&["download", QWEN, "--revision", "v2"], &[("HOME", &home)]);
    assert_eq!(code, 0, "{err}");
    let snap = PathBuf::from(out.trim());
    assert!(snap.starts_with(
        t.join("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots")
    ));
    assert_eq!(
        std::fs::read_to_string(snap.join("REVISION")).unwrap(),
        "v2\n"
    );
    assert!(
        std::fs::symlink_metadata(snap.join("REVISION"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let refs = t.join("home/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/refs/v2");
    assert_eq!(
        std::fs::read_to_string(refs).unwrap(),
        snap.file_name().unwrap().to_str().unwrap()
    );
}

#[test]
fn gated_repo_needs_an_accepted_token_which_is_never_printed() {
    let t = Tmp::new("gated");
    let dir = t.s("m");
    let (code, out, err) = hf(&["download", LLAMA, "--local-dir", &dir], &[]);
    assert_eq!(code, 1);
    assert_eq!(out, "");
    assert!(
        err.contains("huggingface_hub.errors.GatedRepoError: 401 Client Error."),
        "{err}"
    );
    assert!(err.contains(&format!(
        "Cannot access gated repo for url https://huggingface.co/{LLAMA}/resolve/"
    )));
    assert!(err.contains(&format!(
        "Access to model {LLAMA} is restricted. You must have access to it and be authenticated to access it. Please log in.\n"
    )));

    let wrong = "hf_wrong_token_for_the_test_000000000";
    for env in [[("HF_TOKEN", wrong)], [("HUGGING_FACE_HUB_TOKEN", wrong)]] {
        let (code, _, err) = hf(&["download", LLAMA, "--local-dir", &dir], &env);
        assert_eq!(code, 1);
        assert!(
            err.contains("huggingface_hub.errors.GatedRepoError: 403 Client Error."),
            "{err}"
        );
        assert!(err.contains("is restricted and you are not in the authorized list. Visit https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct to ask for access."));
        assert!(!err.contains(wrong));
    }

    let (code, out, err) = hf(
        &["download", LLAMA, "--local-dir", &dir],
        &[("HF_TOKEN", GATED_TOKEN)],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{dir}\n"));
    assert!(!err.contains(GATED_TOKEN) && !out.contains(GATED_TOKEN));
    assert!(t.join("m/config.json").exists());
    // --token (the CLI's own flag) works too, and beats a wrong HF_TOKEN.
    let (code, _, err) = hf(
        &[
            "download",
            LLAMA,
            "--local-dir",
            &t.s("m2"),
            "--token",
            GATED_TOKEN,
        ],
        &[("HF_TOKEN", wrong)],
    );
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains(GATED_TOKEN));
    // As the real client: files already there for this commit need no access (no request at all).
    let (code, _, err) = hf(&["download", LLAMA, "--local-dir", &dir], &[]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn missing_repo_and_missing_revision() {
    let t = Tmp::new("missing");
    let dir = t.s("m");
    let (code, out, err) = hf(
        &["download", "org/does-not-exist", "--local-dir", &dir],
        &[],
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error."));
    assert!(err.contains("Repository Not Found for url: https://huggingface.co/api/models/org/does-not-exist/revision/main.\n"));
    assert!(err.ends_with("\nInvalid username or password.\n"), "{err}");
    // With a token the Hub answers 404.
    let (code, _, err) = hf(
        &["download", "org/does-not-exist", "--local-dir", &dir],
        &[("HF_TOKEN", "hf_any")],
    );
    assert_eq!(code, 1);
    assert!(err.contains("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error."));
    assert!(!err.contains("Invalid username or password."));

    let (code, _, err) = hf(
        &["download", QWEN, "--revision", "nope", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 1);
    assert!(err.ends_with(&format!(
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. (Request ID: {})\n\nRevision Not Found for url: https://huggingface.co/api/models/{QWEN}/revision/nope.\nInvalid rev id: nope\n",
        err.split("(Request ID: ").nth(1).and_then(|r| r.split(')').next()).unwrap()
    )), "{err}");

    // A repo id huggingface_hub refuses before asking the Hub.
    let (code, _, err) = hf(&["download", "a/b/c"], &[]);
    assert_eq!(code, 1);
    assert!(err.ends_with("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': 'a/b/c'. Use `repo_type` argument if needed.\n"));

    // As the real client: a non-empty local dir is returned (with a warning) when the repo
    // cannot be reached.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(t.join("m/x"), "x").unwrap();
    let (code, out, err) = hf(
        &["download", "org/does-not-exist", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(out, format!("{dir}\n"));
    assert!(err.starts_with(&format!(
        "Returning existing local_dir `{dir}` as remote repo cannot be accessed in `snapshot_download` (401 Client Error."
    )));
}

#[test]
fn disk_full_is_python_errno_28() {
    let t = Tmp::new("full");
    // Simulated: no free bytes on the destination.
    let dir = t.s("m");
    let (code, out, err) = hf(
        &["download", "org/sql-lora", "--local-dir", &dir],
        &[("VLLM_SIM_HUB_FREE_BYTES", "0")],
    );
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(err.contains(&format!(
        "/usr/local/lib/python3.12/dist-packages/huggingface_hub/file_download.py:805: UserWarning: Not enough free disk space to download the file. The expected file size is: 0.00 MB. The target location {dir}/.cache/huggingface/download only has 0.00 MB free disk space.\n  warnings.warn(\n"
    )), "{err}");
    assert!(err.ends_with("    with incomplete_path.open(\"ab\") as f:\nOSError: [Errno 28] No space left on device\n"), "{err}");
    // The partial file stays for the next run to resume, and nothing reached its place.
    assert!(!t.join("m/.gitattributes").exists());

    // A real ENOSPC: the `.incomplete` file of the first file is /dev/full.
    if Path::new("/dev/full").exists() {
        let dir = t.s("devfull");
        let download = t.join("devfull/.cache/huggingface/download");
        std::fs::create_dir_all(&download).unwrap();
        let incomplete = download.join(
            "wPaCkH-WbT7GsmxMKKrNZTV4nSM=.28511c5b75f5e3c08d7621cc023841cda4af5505.incomplete",
        );
        std::os::unix::fs::symlink("/dev/full", &incomplete).unwrap();
        let (code, _, err) = hf(&["download", QWEN, "--local-dir", &dir], &[]);
        assert_eq!(code, 1);
        assert!(
            err.ends_with("OSError: [Errno 28] No space left on device\n"),
            "{err}"
        );
        assert!(
            err.contains("Fetching 4 files:  25%|██▌       | 1/4"),
            "{err}"
        );
    }
}

#[test]
fn progress_is_visible_while_copying() {
    let t = Tmp::new("progress");
    let dir = t.s("m");
    let mut child = command(
        &["download", QWEN, "--local-dir", &dir],
        &[("VLLM_SIM_HUB_DELAY_MS", "300")],
        &hub(),
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let err = Arc::new(Mutex::new(String::new()));
    let mut pipe = child.stderr.take().unwrap();
    let sink = err.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 256];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            sink.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    let start = Instant::now();
    // What a log shows mid-download: complete lines with a bar that has moved.
    loop {
        let now = err.lock().unwrap().clone();
        let lines: Vec<&str> = now.split('\n').collect();
        let complete = &lines[..lines.len() - 1];
        if complete
            .iter()
            .any(|l| l.contains("Fetching 4 files:  25%|██▌       | 1/4"))
        {
            assert!(child.try_wait().unwrap().is_none(), "still copying");
            assert!(
                complete
                    .iter()
                    .any(|l| l.starts_with("Downloading 'REVISION'")
                        || l.contains("]Downloading 'REVISION'"))
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no progress in {now:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    assert!(status.success());
    let mut out = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut out)
        .unwrap();
    assert_eq!(out, format!("{dir}\n"));
}

#[test]
fn cli_help_version_and_argparse_errors() {
    let (code, out, _) = hf(&["version"], &[]);
    assert_eq!(
        (code, out.as_str()),
        (0, "huggingface_hub version: 0.36.2\n")
    );
    let (code, out, _) = hf(&["download", "--help"], &[]);
    assert_eq!(code, 0);
    assert!(out.starts_with(
        "usage: hf <command> [<args>] download [-h] [--repo-type {model,dataset,space}]\n"
    ));
    assert!(out.contains("simulator"));
    let (code, out, _) = hf(&[], &[]);
    assert_eq!(code, 1);
    assert!(out.starts_with("usage: hf <command> [<args>]\n"));
    let (code, _, err) = hf(&["download"], &[]);
    assert_eq!(code, 2);
    assert!(err.ends_with("hf <command> [<args>] download: error: the following arguments are required: repo_id, filenames\n"));
    let (code, _, err) = hf(&["download", QWEN, "--bogus"], &[]);
    assert_eq!(code, 2);
    assert_eq!(
        err,
        "usage: hf <command> [<args>]\nhf: error: unrecognized arguments: --bogus\n"
    );
}

#[test]
fn a_hub_of_its_own_nested_files_and_datasets() {
    let t = Tmp::new("ownhub");
    let root = t.join("hub");
    let rev = root.join("org/nested/main");
    std::fs::create_dir_all(rev.join("sub/dir")).unwrap();
    std::fs::write(rev.join("sub/dir/a.txt"), "a").unwrap();
    std::fs::write(rev.join("b.txt"), "b").unwrap();
    std::fs::create_dir_all(root.join("datasets/org/data/main")).unwrap();
    std::fs::write(root.join("datasets/org/data/main/rows.jsonl"), "{}\n").unwrap();
    let (code, _, err) = hf_in(
        &["download", "org/nested", "--local-dir", &t.s("n")],
        &[],
        &root,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(t.join("n/sub/dir/a.txt")).unwrap(),
        "a"
    );
    assert!(
        t.join("n/.cache/huggingface/download/sub/dir/a.txt.metadata")
            .exists()
    );
    let (code, _, err) = hf_in(
        &[
            "download",
            "org/data",
            "--repo-type",
            "dataset",
            "--local-dir",
            &t.s("d"),
        ],
        &[],
        &root,
    );
    assert_eq!(code, 0, "{err}");
    assert!(t.join("d/rows.jsonl").exists());
    let (code, _, err) = hf_in(
        &["download", "org/data", "--local-dir", &t.s("d2")],
        &[],
        &root,
    );
    assert_eq!(code, 1);
    assert!(err.contains(
        "Repository Not Found for url: https://huggingface.co/api/models/org/data/revision/main."
    ));
    // A gated repo of the test's own: one accepted token per line.
    std::fs::write(root.join("org/nested/.gated"), "hf_a\nhf_b\n").unwrap();
    let (code, _, _) = hf_in(
        &["download", "org/nested", "--local-dir", &t.s("g")],
        &[("HF_TOKEN", "hf_b")],
        &root,
    );
    assert_eq!(code, 0);
}

/// The simulator's failures say what the real client says (crates/operator/tests/fixtures/hf-logs):
/// the same traceback, apart from request ids; before it, the real client's 8 parallel downloads
/// interleave their lines differently.
#[test]
fn failures_match_the_real_clients_logs() {
    let t = Tmp::new("fixtures");
    type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: &[Case] = &[
        (
            "repo-not-found.log",
            &["org/does-not-exist", "--revision", "main"],
            &[],
        ),
        (
            "revision-not-found.log",
            &[QWEN, "--revision", "no-such-revision"],
            &[],
        ),
        ("gated.log", &[LLAMA, "--revision", "main"], &[]),
        (
            "gated-wrong-token.log",
            &[LLAMA, "--revision", "main"],
            &[("HF_TOKEN", "hf_not_the_accepted_token_0000000000")],
        ),
        (
            "disk-full.log",
            &["org/sql-lora", "--revision", "main"],
            &[("VLLM_SIM_HUB_FREE_BYTES", "0")],
        ),
    ];
    for (name, args, env) in cases {
        let dir = t.s(&name.replace(".log", ""));
        let mut argv = vec!["download"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--local-dir", &dir]);
        let (code, out, err) = hf(&argv, env);
        assert_eq!(code, 1, "{name}");
        assert_eq!(out, "", "{name}");
        let real = mask(&fixture(name), &dir);
        let sim = mask(&err, &dir);
        assert_eq!(traceback(&sim), traceback(&real), "{name}");
        // The lines before the traceback that are not progress: each real one is in the simulator's.
        for line in real[..real.find("Traceback").unwrap()].lines() {
            if line.contains("UserWarning") || line.trim() == "warnings.warn(" {
                assert!(sim.contains(line), "{name}: {line:?} not in\n{sim}");
            }
        }
        if name.starts_with("gated") || *name == "disk-full.log" {
            assert!(sim.starts_with("\rFetching 4 files:   0%|          | 0/4 [00:00<?, ?it/s]"));
        }
    }
    // Success and progress: the same lines, in the simulator's one-at-a-time order.
    let dir = t.s("ok");
    let (code, out, err) = hf(
        &["download", QWEN, "--revision", "main", "--local-dir", &dir],
        &[],
    );
    assert_eq!(code, 0);
    let real = fixture("ok.log");
    let sim = mask(&format!("{err}{out}"), &dir);
    let strip = |s: &str| -> Vec<String> {
        let mut v: Vec<String> = s
            .split(['\n', '\r'])
            .filter_map(|l| match l.find("]Download") {
                Some(i) => Some(l[i + 1..].to_string()),
                None if l.is_empty() || l.starts_with("Fetching") => None,
                None => Some(l.to_string()),
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(strip(&sim), strip(&real));
    assert!(real.ends_with("\n/data/model\n") && sim.ends_with("\n/data/model\n"));
    let progress = fixture("progress.log");
    assert!(progress.contains("\rFetching 4 files:  25%|██▌       | 1/4 ["));
    assert!(!progress.contains("/data/model\n/data/model"));
}
