//! The REAL `hf download` of huggingface_hub 0.36.2 and 2.4.0, from the images the local
//! cluster's download Jobs run (`localhost/hf:0.36`, `localhost/hf:2`: hack/images/build.sh),
//! with the Job's command and environment (crates/operator/src/reconcile/build/download.rs),
//! against the stand-in Hub served from the same image on 127.0.0.1 (`HF_ENDPOINT`), without
//! Kubernetes: a download, a gated repository with and without its token, a missing repository
//! and a missing revision. What the failures print is what the operator's classifier reads
//! (crates/operator/src/diagnosis/hf_log.rs): 0.36 a traceback ending in the error's class,
//! 2.x a red one-line `Error: …` before it.

mod image;

use std::path::{Path, PathBuf};

use image::{Image, Running, image, output};

const QWEN: &str = "Qwen/Qwen2.5-0.5B-Instruct";
const GATED: &str = "meta-llama/Llama-3.1-8B-Instruct";
/// The token crates/vllm-sim/hub/meta-llama/Llama-3.1-8B-Instruct/.gated accepts.
const TOKEN: &str = "hf_simulated_test_token_0123456789";
const LOCAL_DIR: &str = "/data/model";

fn fixture_hub() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hub")
}

/// A host directory for the image's /data, owned by the image's user (as a claim it may write).
struct Data(PathBuf);

impl Data {
    fn new(image: &Image, tag: &str) -> Data {
        let dir = std::env::temp_dir().join(format!("real-hf-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (uid, gid) = image.uid_gid();
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        Data(dir)
    }
}

impl Drop for Data {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The stand-in Hub, `stand-in-hub --root /srv/hub` in the `hf:2` image, on a free port.
struct Hub {
    endpoint: String,
    server: Running,
    _data: Data,
}

impl Hub {
    fn start(name: &str) -> Hub {
        let img = image("2");
        let data = Data::new(&img, &format!("{name}-hub"));
        let argv = [
            "/usr/local/bin/stand-in-hub",
            "--root",
            "/srv/hub",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ];
        let server = Running::spawn(img.command(&data.0, &argv, &[]));
        let endpoint = server.wait_line("`stand-in-hub: listening on` line", |l| {
            let rest = l.split_once("listening on ")?.1;
            Some(rest.split_whitespace().next()?.to_string())
        });
        Hub {
            endpoint,
            server,
            _data: data,
        }
    }

    /// Whether the Hub logged a request line for `path` answered with `status`.
    fn served(&self, path: &str, status: u16) -> bool {
        self.server
            .lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&format!(" {path} HTTP/1.1\" {status} ")))
    }
}

/// What one download Job's container did.
struct Run {
    code: i32,
    log: String,
    data: Data,
    hub: Hub,
}

impl Run {
    fn file(&self, name: &str) -> Option<Vec<u8>> {
        std::fs::read(self.data.0.join("model").join(name)).ok()
    }

    fn context(&self) -> String {
        format!(
            "exit {}; log:\n{}\n-- stand-in Hub:\n{}",
            self.code,
            self.log,
            self.hub.server.log()
        )
    }

    /// Every file of the fixture's revision is there, byte for byte.
    fn assert_downloaded(&self, repo: &str, revision: &str) {
        assert_eq!(self.code, 0, "{}", self.context());
        let src = fixture_hub().join(repo).join(revision);
        for entry in std::fs::read_dir(&src).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert_eq!(
                self.file(&name).as_deref(),
                Some(std::fs::read(src.join(&name)).unwrap().as_slice()),
                "{name} of {repo}@{revision}; {}",
                self.context()
            );
        }
    }

    /// Failed, with these lines in its log, and no model file written.
    fn assert_failed(&self, lines: &[&str]) {
        assert_eq!(self.code, 1, "{}", self.context());
        for line in lines {
            assert!(
                self.log.contains(line),
                "no {line:?} in the log; {}",
                self.context()
            );
        }
        assert!(self.file("config.json").is_none(), "{}", self.context());
    }
}

/// `hf download REPO --revision REV --local-dir /data/model` in `localhost/hf:<tag>`, as the Job runs it.
fn download(tag: &str, name: &str, repo: &str, revision: &str, token: Option<&str>) -> Run {
    let hub = Hub::start(&format!("{tag}-{name}"));
    let img = image(tag);
    let data = Data::new(&img, &format!("{tag}-{name}"));
    let mut env: Vec<(String, String)> = [
        ("HOME", "/tmp"),
        ("HF_HUB_DISABLE_TELEMETRY", "1"),
        ("HF_DEBUG", "1"),
        ("HF_HUB_DISABLE_UPDATE_CHECK", "1"),
        ("HF_ENDPOINT", hub.endpoint.as_str()),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .to_vec();
    if let Some(token) = token {
        env.push(("HF_TOKEN".into(), token.into()));
    }
    let argv = [
        "hf",
        "download",
        repo,
        "--revision",
        revision,
        "--local-dir",
        LOCAL_DIR,
    ];
    let (code, log) = output(img.command(&data.0, &argv, &env));
    Run {
        code,
        log,
        data,
        hub,
    }
}

fn downloads(tag: &str) {
    let run = download(tag, "ok", QWEN, "main", None);
    run.assert_downloaded(QWEN, "main");
    // The client asked the stand-in, not the Hub.
    assert!(
        run.hub
            .served(&format!("/api/models/{QWEN}/revision/main"), 200),
        "{}",
        run.context()
    );
    let last = run.log.lines().last().unwrap_or_default();
    if tag == "0.36" {
        assert_eq!(last, LOCAL_DIR, "{}", run.context());
    } else {
        assert!(run.log.contains("✓ Downloaded"), "{}", run.context());
        assert_eq!(last, format!("  path: {LOCAL_DIR}"), "{}", run.context());
    }
}

fn downloads_a_gated_repo_with_its_token(tag: &str) {
    let run = download(tag, "token", GATED, "main", Some(TOKEN));
    run.assert_downloaded(GATED, "main");
    assert!(
        !run.log.contains(TOKEN),
        "the token is not printed; {}",
        run.context()
    );
}

fn gated_without_token(tag: &str) {
    let run = download(tag, "gated", GATED, "main", None);
    let gated = format!(
        "Cannot access gated repo for url {}/{GATED}/resolve/",
        run.hub.endpoint
    );
    let mut lines = vec![
        "huggingface_hub.errors.GatedRepoError: 401 Client Error.",
        gated.as_str(),
        "Access to model meta-llama/Llama-3.1-8B-Instruct is restricted. You must have access to it and be authenticated to access it. Please log in.",
    ];
    if tag == "0.36" {
        lines.push("Traceback (most recent call last):");
    } else {
        lines.push(
            "Error: Access denied. Model 'meta-llama/Llama-3.1-8B-Instruct' requires approval.",
        );
    }
    run.assert_failed(&lines);
}

fn missing_repository(tag: &str) {
    let run = download(tag, "repo", "org/no-such-model", "main", None);
    let url = format!(
        "Repository Not Found for url: {}/api/models/org/no-such-model/revision/main.",
        run.hub.endpoint
    );
    let mut lines = vec![
        "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error.",
        url.as_str(),
        "Invalid username or password.",
    ];
    if tag != "0.36" {
        lines.push("Error: Model 'org/no-such-model' not found.");
    }
    run.assert_failed(&lines);
}

fn missing_revision(tag: &str) {
    let run = download(tag, "revision", QWEN, "no-such-branch", None);
    let url = format!(
        "Revision Not Found for url: {}/api/models/{QWEN}/revision/no-such-branch.",
        run.hub.endpoint
    );
    let mut lines = vec![
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error.",
        url.as_str(),
        "Invalid rev id: no-such-branch",
    ];
    if tag != "0.36" {
        lines.push("Error: Revision not found in model 'Qwen/Qwen2.5-0.5B-Instruct'.");
    }
    run.assert_failed(&lines);
}

#[test]
fn hf_0_36_downloads_from_the_stand_in_hub() {
    downloads("0.36");
}

#[test]
fn hf_2_downloads_from_the_stand_in_hub() {
    downloads("2");
}

#[test]
fn hf_0_36_downloads_a_gated_repo_with_its_token() {
    downloads_a_gated_repo_with_its_token("0.36");
}

#[test]
fn hf_2_downloads_a_gated_repo_with_its_token() {
    downloads_a_gated_repo_with_its_token("2");
}

#[test]
fn hf_0_36_gated_repo_without_token() {
    gated_without_token("0.36");
}

#[test]
fn hf_2_gated_repo_without_token() {
    gated_without_token("2");
}

#[test]
fn hf_0_36_missing_repository() {
    missing_repository("0.36");
}

#[test]
fn hf_2_missing_repository() {
    missing_repository("2");
}

#[test]
fn hf_0_36_missing_revision() {
    missing_revision("0.36");
}

#[test]
fn hf_2_missing_revision() {
    missing_revision("2");
}

/// The Hub's pod is stopped with SIGTERM: it exits 0 (a PID 1 has no default action for it).
#[test]
fn the_stand_in_hub_exits_0_on_sigterm() {
    let img = image("2");
    let data = Data::new(&img, "sigterm");
    let argv = [
        "/usr/local/bin/stand-in-hub",
        "--root",
        "/srv/hub",
        "--port",
        "0",
    ];
    let mut cmd = img.command(&data.0, &argv, &[]);
    let mut child = cmd.spawn().unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
        &mut first,
    )
    .unwrap();
    assert!(first.contains("listening on http://127.0.0.1:"), "{first}");
    // The group: unshare and, under it, the server.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
