//! Real Python clients run from a test: the official openai SDK
//! (`openai_check.py` beside this file) and guidellm, from the venv that
//! `hack/tools/py-clients.sh` makes (path in `VLLM_PY_CLIENTS`).
//!
//! Shared by `crates/vllm-sim/tests/real_clients.rs` (simulator on 127.0.0.1)
//! and `crates/operator/tests/real_clients.rs` (a VLLMService's ClusterIP),
//! which includes this file with `#[path]`: it uses only std and serde_json.
//!
//! Every client runs offline: the Hugging Face libraries guidellm uses are told
//! so (and get an empty HF_HOME), guidellm gets a local tokenizer
//! (`tokenizer/`, made by `make_tokenizer.py`), telemetry is refused, and no
//! proxy is used; the only address a client is given is the server's.

#![allow(dead_code)] // each test binary uses a part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// This directory: the scripts and the tokenizer.
fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../vllm-sim/tests/clients")
}

/// The venv with the clients, from `VLLM_PY_CLIENTS`; a missing one fails the
/// test with what to run.
pub fn venv() -> PathBuf {
    let hint = "run `export VLLM_PY_CLIENTS=$(hack/tools/py-clients.sh | tail -n1)` \
                (hack/tools/py-clients.sh makes the venv with the pinned openai and guidellm \
                once per machine; hack/test.sh sets it)";
    let dir = std::env::var_os("VLLM_PY_CLIENTS")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| panic!("VLLM_PY_CLIENTS is not set: {hint}"));
    let dir = PathBuf::from(dir);
    for bin in ["python", "guidellm"] {
        let path = dir.join("bin").join(bin);
        assert!(
            path.is_file(),
            "VLLM_PY_CLIENTS={} has no {}: {hint}",
            dir.display(),
            path.display()
        );
    }
    dir
}

/// A scratch directory removed when dropped (HF_HOME, guidellm's report, logs).
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("py-clients-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `program` from the venv, with the offline environment.
fn offline(venv: &Path, program: &str, scratch: &Scratch) -> Command {
    let mut cmd = Command::new(venv.join("bin").join(program));
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "HF_ENDPOINT",
        "HF_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    // No Hub requests (tokenizer, datasets), no telemetry, no cache of ours
    // outside the scratch directory, no bytecode written into the repo.
    for (k, v) in [
        ("HF_HUB_OFFLINE", "1"),
        ("HF_DATASETS_OFFLINE", "1"),
        ("TRANSFORMERS_OFFLINE", "1"),
        ("HF_HUB_DISABLE_TELEMETRY", "1"),
        ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
        ("DO_NOT_TRACK", "1"),
        ("NO_PROXY", "*"),
        ("no_proxy", "*"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("TOKENIZERS_PARALLELISM", "false"),
    ] {
        cmd.env(k, v);
    }
    cmd.env("HF_HOME", scratch.0.join("hf-home"))
        .env("XDG_CACHE_HOME", scratch.0.join("cache"))
        .current_dir(&scratch.0);
    cmd
}

/// Runs `cmd` to its end within `limit` (killed past it), output in files of
/// `scratch`; returns stdout, or fails with both streams.
fn run(mut cmd: Command, what: &str, limit: Duration, scratch: &Scratch) -> String {
    let out_path = scratch.0.join(format!("{what}.stdout"));
    let err_path = scratch.0.join(format!("{what}.stderr"));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what} ({cmd:?}): {e}"));
    let start = Instant::now();
    // Polls the child's exit under a deadline: the load ends by itself
    // (bounded request count), the deadline only catches a hang.
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => stdout,
        Some(s) => panic!("{what} failed ({s}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}"),
        None => panic!(
            "{what} still running after {limit:?}, killed:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        ),
    }
}

/// `openai_check.py` against `base_url` (`http://HOST:PORT/v1`): the SDK's
/// models.list(), chat completion, streamed chat completion, completion and an
/// unknown model's 404, each answer's shape checked by the script. Returns
/// its summary (the last stdout line, JSON).
pub fn openai_check(base_url: &str, model: &str) -> Value {
    let venv = venv();
    let scratch = Scratch::new("openai");
    let mut cmd = offline(&venv, "python", &scratch);
    cmd.arg(here().join("openai_check.py"))
        .args([base_url, model]);
    let stdout = run(cmd, "openai_check", Duration::from_secs(120), &scratch);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("openai_check.py's summary is not JSON ({e}):\n{stdout}"))
}

/// The prompt and output length guidellm asks for (its tokens; the simulator
/// generates exactly `OUTPUT_TOKENS` words).
pub const PROMPT_TOKENS: u32 = 32;
pub const OUTPUT_TOKENS: u32 = 8;

/// `guidellm run` against `base_url`: `requests` synthetic chat requests
/// (streamed, as guidellm sends them) at a constant `rate` per second,
/// stopped by guidellm at that count, or at 60 s whatever happened. Returns
/// guidellm's JSON report.
pub fn guidellm(base_url: &str, model: &str, requests: u32, rate: u32) -> Value {
    let venv = venv();
    let scratch = Scratch::new("guidellm");
    let report = scratch.0.join("report.json");
    let mut cmd = offline(&venv, "guidellm", &scratch);
    cmd.arg("run")
        .arg("--backend")
        .arg(format!(
            "kind=openai_http,target={base_url},model={model},timeout=30"
        ))
        .arg("--profile")
        .arg(format!("kind=constant,rate={rate}"))
        .arg("--constraint")
        .arg(format!("kind=max_requests,count={requests}"))
        .arg("--constraint")
        .arg("kind=max_duration,seconds=60")
        .arg("--tokenizer")
        .arg(format!(
            "kind=huggingface_auto,model={}",
            here().join("tokenizer").display()
        ))
        .arg("--data")
        .arg(format!(
            "kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}"
        ))
        .arg("--output")
        .arg(format!("kind=json,path={}", report.display()))
        .arg("--disable-console-interactive");
    // guidellm imports torch and transformers first: tens of seconds on a busy 2-core machine.
    let stdout = run(cmd, "guidellm", Duration::from_secs(300), &scratch);
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report at {} ({e}):\n{stdout}", report.display()));
    serde_json::from_str(&text).expect("guidellm's report is JSON")
}

/// guidellm's own account: one benchmark, every one of `requests` completed,
/// none errored or left incomplete, each answered with `OUTPUT_TOKENS` tokens
/// (the server's usage) and a chat completion id.
pub fn assert_all_completed(report: &Value, requests: u32) {
    let benchmarks = report["benchmarks"].as_array().expect("benchmarks");
    assert_eq!(benchmarks.len(), 1, "benchmarks: {benchmarks:?}");
    let b = &benchmarks[0];
    let n = u64::from(requests);
    let totals = &b["metrics"]["request_totals"];
    assert_eq!(
        totals,
        &serde_json::json!({"successful": n, "errored": 0, "incomplete": 0, "total": n}),
        "guidellm's request totals; errored: {}",
        b["requests"]["errored"]
    );
    let state = &b["scheduler_state"];
    assert_eq!(state["errored_requests"], 0, "{state}");
    assert_eq!(state["cancelled_requests"], 0, "{state}");
    let done = b["requests"]["successful"]
        .as_array()
        .expect("successful requests");
    assert_eq!(done.len() as u64, n);
    for r in done {
        let id = r["response_id"].as_str().unwrap_or_default();
        assert!(id.starts_with("chatcmpl-"), "response id {id:?}: {r}");
        assert_eq!(
            r["output"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .count(),
            OUTPUT_TOKENS as usize,
            "{r}"
        );
    }
    let output = &b["metrics"]["output_token_count"]["successful"];
    assert_eq!(output["count"], n, "{output}");
    assert_eq!(
        output["total_sum"].as_f64(),
        Some(f64::from(requests * OUTPUT_TOKENS)),
        "{output}"
    );
}
