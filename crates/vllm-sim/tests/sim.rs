//! Runs the built `vllm-sim` on 127.0.0.1 with a temporary model directory. Every wait polls for a
//! condition (a log line, a connection, a metric, an exit) under a deadline; none is a fixed sleep.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-sim");
const DEADLINE: Duration = Duration::from_secs(30);
const QWEN: &str = include_str!("../../../config/samples/fake-model/config.json");

struct ModelDir(PathBuf);

impl ModelDir {
    fn new(tag: &str) -> ModelDir {
        let dir = std::env::temp_dir().join(format!("vllm-sim-it-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.json"), QWEN).unwrap();
        ModelDir(dir)
    }

    fn path(&self) -> String {
        self.0.to_str().unwrap().to_string()
    }
}

impl Drop for ModelDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Sim {
    child: Child,
    /// stdout and stderr as their lines arrived, interleaved.
    out: Arc<Mutex<String>>,
    /// stdout, stderr each on its own: the two readers interleave lines
    /// arbitrarily, so a passage of several lines is looked for in one stream.
    streams: [Arc<Mutex<String>>; 2],
    port: u16,
}

impl Sim {
    /// Starts the simulator with the operator's default flags plus `extra`.
    fn start(model: &str, extra: &[&str], env: &[(&str, &str)]) -> Sim {
        let port = free_port();
        let port_s = port.to_string();
        let mut args = vec![
            "--model",
            model,
            "--served-model-name",
            "qwen",
            "--host",
            "127.0.0.1",
            "--port",
            &port_s,
            "--dtype",
            "auto",
            "--max-model-len",
            "4096",
            "--gpu-memory-utilization",
            "0.75",
            "--max-num-seqs",
            "8",
        ];
        args.extend_from_slice(extra);
        Self::spawn(&args, env, port)
    }

    fn spawn(args: &[&str], env: &[(&str, &str)], port: u16) -> Sim {
        let mut cmd = Command::new(BIN);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        for var in [
            "VLLM_SIM_FAIL",
            "VLLM_SIM_VLLM_VERSION",
            "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
            "VLLM_DISABLE_LOG_LOGO",
            "VLLM_SIM_GPU_MEMORY_GIB",
            "VLLM_SIM_GPU_FREE_FRACTION",
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("VLLM_SIM_LOAD_SECONDS", "0")
            .env("VLLM_SIM_TOKEN_DELAY_MS", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn vllm-sim");
        let out = Arc::new(Mutex::new(String::new()));
        let streams: [Arc<Mutex<String>>; 2] = Default::default();
        for (pipe, stream) in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()) as Box<dyn Read + Send>,
        ]
        .into_iter()
        .zip(streams.clone())
        {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    for buffer in [&out, &stream] {
                        let mut b = buffer.lock().unwrap();
                        b.push_str(&line);
                        b.push('\n');
                    }
                }
            });
        }
        Sim {
            child,
            out,
            streams,
            port,
        }
    }

    /// Whether stdout or stderr has `passage` (which may span lines).
    fn in_one_stream(&self, passage: &str) -> bool {
        self.streams
            .iter()
            .any(|s| s.lock().unwrap().contains(passage))
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn wait_log(&self, needle: &str) {
        let start = Instant::now();
        while !self.output().contains(needle) {
            assert!(
                start.elapsed() < DEADLINE,
                "no {needle:?} in:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "still running:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The exit code once the process ended and its output has been read to the end.
    fn finish(&mut self) -> (i32, String) {
        let status = self.wait_exit();
        let start = Instant::now();
        // The reader threads end at EOF; give them until the deadline to drain.
        while Arc::strong_count(&self.out) > 1 && start.elapsed() < DEADLINE {
            std::thread::sleep(Duration::from_millis(5));
        }
        (status.code().unwrap_or(-1), self.output())
    }

    fn wait_ready(&self) {
        // Its own word first: the port was picked free, but another process could
        // take it meanwhile, and a connection alone would not tell whose it is.
        self.wait_log("Application startup complete.");
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                start.elapsed() < DEADLINE,
                "never listened:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(port: u16, method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One HTTP/1.1 request: (status, body).
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(request(port, method, path, body).as_bytes())
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text[9..12].parse().unwrap();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// A streamed request whose response is read as it arrives.
struct Stream {
    s: TcpStream,
    seen: String,
}

impl Stream {
    fn open(port: u16, path: &str, body: &str) -> Stream {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.write_all(request(port, "POST", path, body).as_bytes())
            .unwrap();
        Stream {
            s,
            seen: String::new(),
        }
    }

    /// Reads until `needle` was received (true) or the connection ended (false).
    fn read_until(&mut self, needle: &str) -> bool {
        let mut buf = [0u8; 4096];
        while !self.seen.contains(needle) {
            match self.s.read(&mut buf) {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
        true
    }

    /// Reads to the end; true when the chunked body ended properly (terminating chunk).
    fn read_to_end(&mut self) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => return self.seen.ends_with("0\r\n\r\n"),
                Err(_) => return false,
                Ok(n) => self.seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            }
        }
    }
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn loads_then_serves_vllm_endpoints() {
    let dir = ModelDir::new("serve");
    let spawned = Instant::now();
    let sim = Sim::start(
        &dir.path(),
        &[
            "--enable-prefix-caching",
            "--max-num-batched-tokens",
            "8192",
        ],
        &[("VLLM_SIM_LOAD_SECONDS", "1.5")],
    );
    // Closed while loading: the first attempts are refused; it opens once loading is over.
    assert!(
        TcpStream::connect(("127.0.0.1", sim.port)).is_err(),
        "port open before loading"
    );
    sim.wait_ready();
    assert!(
        spawned.elapsed() >= Duration::from_millis(1400),
        "opened after {:?}",
        spawned.elapsed()
    );
    let log = sim.output();
    for line in [
        "█  version 0.34.0\n",
        &format!("█  model   {}\n", dir.path()),
        "non-default args: {'model_tag': ",
        "'max_model_len': 4096, 'served_model_name': ['qwen'], 'gpu_memory_utilization': 0.75, 'max_num_seqs': 8}",
        "accepted and ignored: ['--enable-prefix-caching', '--max-num-batched-tokens', '8192']",
        "Loading model from scratch...",
        "Loading weights took ",
        "Model loading took 2.8751 GiB memory and ",
        "GPU KV cache size: 538,320 tokens, Maximum concurrency for 4,096 tokens per request: 131.43x\n",
        &format!("Starting vLLM server on http://127.0.0.1:{}\n", sim.port),
        "INFO:     Started server process [",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    let init = log
        .lines()
        .find(|l| l.contains("] init engine (profile"))
        .unwrap();
    assert!(init.ends_with(" s"), "{init}");
    // Lines the simulator used to print that vLLM does not.
    for line in ["vLLM API server version", "Starting vLLM API server"] {
        assert!(!log.contains(line), "{line:?} in:\n{log}");
    }
    sim.wait_log("INFO:     Application startup complete.");

    assert_eq!(http(sim.port, "GET", "/health", ""), (200, String::new()));
    assert_eq!(
        http(sim.port, "GET", "/version", ""),
        (200, r#"{"version":"0.34.0"}"#.to_string())
    );
    let (status, models) = http(sim.port, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    let models: serde_json::Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "qwen");
    assert_eq!(models["data"][0]["root"], dir.path());
    assert_eq!(models["data"][0]["max_model_len"], 4096);
    assert_eq!(models["data"][0]["owned_by"], "vllm");

    let (status, chat) = http(
        sim.port,
        "POST",
        "/v1/chat/completions",
        r#"{"model":"qwen","messages":[{"role":"user","content":"say three words"}],"max_tokens":4}"#,
    );
    assert_eq!(status, 200, "{chat}");
    let chat: serde_json::Value = serde_json::from_str(&chat).unwrap();
    assert_eq!(chat["object"], "chat.completion");
    assert_eq!(
        chat["choices"][0]["message"]["content"],
        "The simulated model answers"
    );
    assert_eq!(chat["choices"][0]["finish_reason"], "length");
    assert_eq!(chat["usage"]["prompt_tokens"], 3);
    assert_eq!(chat["usage"]["completion_tokens"], 4);

    let (status, streamed) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model":"qwen","prompt":"a b","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}"#,
    );
    assert_eq!(status, 200);
    let events: Vec<&str> = streamed.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(events.iter().all(|e| e.starts_with("data: ")), "{streamed}");
    assert_eq!(*events.last().unwrap(), "data: [DONE]");
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(&e[6..]).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(String::from))
        .collect();
    assert_eq!(text, "The simulated model");
    assert!(
        streamed.contains(r#""usage":{"completion_tokens":3,"prompt_tokens":2"#),
        "{streamed}"
    );

    let (status, err) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model":"other","prompt":"x"}"#,
    );
    assert_eq!(status, 404);
    assert!(err.contains("The model `other` does not exist."), "{err}");
    let (status, err) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model":"qwen","prompt":"x","max_tokens":5000}"#,
    );
    assert_eq!(status, 400, "{err}");

    let (_, m) = http(sim.port, "GET", "/metrics", "");
    assert_eq!(metric(&m, "vllm:prompt_tokens_total"), Some(5.0), "{m}");
    assert_eq!(metric(&m, "vllm:generation_tokens_total"), Some(7.0));
    assert!(m.contains(
        r#"vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen"} 2.0"#
    ));
    assert!(
        m.contains(r#"vllm:e2e_request_latency_seconds_count{engine="0",model_name="qwen"} 2.0"#)
    );
    assert!(
        m.contains(r#"vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen"} 2.0"#)
    );
    assert!(m.contains(r#"num_gpu_blocks="33645""#), "{m}");
    // prometheus_client's creation times, and the finish reason vLLM has but never reaches here.
    for created in [
        r#"vllm:prompt_tokens_created{engine="0",model_name="qwen"} 1."#,
        r#"vllm:request_success_created{engine="0",finished_reason="repetition",model_name="qwen"} 1."#,
        r#"vllm:e2e_request_latency_seconds_created{engine="0",model_name="qwen"} 1."#,
    ] {
        assert!(m.contains(created), "no {created:?} in {m}");
    }
    assert!(m.contains(
        r#"vllm:request_success_total{engine="0",finished_reason="repetition",model_name="qwen"} 0.0"#
    ));
    let info = m
        .lines()
        .find(|l| l.starts_with("vllm:cache_config_info{"))
        .unwrap();
    assert!(!info.contains("model_name"), "{info}");

    // /tokenize, /detokenize and /load (no --enable-server-load-tracking: 0).
    let (status, tok) = http(
        sim.port,
        "POST",
        "/tokenize",
        r#"{"model":"qwen","prompt":"The simulated model"}"#,
    );
    assert_eq!(status, 200, "{tok}");
    let tok: serde_json::Value = serde_json::from_str(&tok).unwrap();
    assert_eq!(tok["count"], 3, "{tok}");
    assert_eq!(tok["max_model_len"], 4096, "{tok}");
    assert_eq!(tok["tokens"], serde_json::json!([0, 1, 2]), "{tok}");
    let (status, chat_tok) = http(
        sim.port,
        "POST",
        "/tokenize",
        r#"{"model":"qwen","messages":[{"role":"user","content":"say three words"}]}"#,
    );
    assert_eq!(status, 200, "{chat_tok}");
    assert!(chat_tok.contains(r#""count":3"#), "{chat_tok}");
    assert_eq!(
        http(
            sim.port,
            "POST",
            "/detokenize",
            r#"{"model":"qwen","tokens":[0,1,2]}"#
        ),
        (200, r#"{"prompt":"The simulated model"}"#.to_string())
    );
    assert_eq!(
        http(
            sim.port,
            "POST",
            "/tokenize",
            r#"{"model":"x","prompt":"a"}"#
        )
        .0,
        404
    );
    assert_eq!(
        http(sim.port, "GET", "/load", ""),
        (200, r#"{"server_load":0}"#.to_string())
    );
}

/// vLLM 0.18's own lines and answers where 0.34 differs.
#[test]
fn vllm_0_18_logs_as_0_18() {
    let dir = ModelDir::new("v018");
    let sim = Sim::start(
        &dir.path(),
        &[],
        &[
            ("VLLM_SIM_VLLM_VERSION", "0.18.0"),
            ("VLLM_DISABLE_LOG_LOGO", "1"),
        ],
    );
    sim.wait_ready();
    let log = sim.output();
    for line in [
        &format!("vLLM server version 0.18.0, serving model {}\n", dir.path()),
        &format!("Starting to load model {}...", dir.path()),
        "GPU KV cache size: 538,320 tokens\n",
        "] Maximum concurrency for 4,096 tokens per request: 131.43x\n",
        "Initializing a V1 LLM engine (v0.18.0)",
    ] {
        assert!(log.contains(line), "no {line:?} in:\n{log}");
    }
    assert!(!log.contains("█"), "{log}");
    let init = log
        .lines()
        .find(|l| l.contains("] init engine (profile"))
        .unwrap();
    assert!(init.ends_with(" seconds"), "{init}");
    assert_eq!(
        http(sim.port, "GET", "/version", ""),
        (200, r#"{"version":"0.18.0"}"#.to_string())
    );
}

/// `/load` counts the requests being served with `--enable-server-load-tracking`.
#[test]
fn load_counts_requests_in_flight() {
    let dir = ModelDir::new("load");
    let sim = Sim::start(
        &dir.path(),
        &["--enable-server-load-tracking"],
        &[("VLLM_SIM_TOKEN_DELAY_MS", "100")],
    );
    sim.wait_ready();
    let mut s = Stream::open(
        sim.port,
        "/v1/completions",
        r#"{"model":"qwen","prompt":"hi","max_tokens":100,"stream":true}"#,
    );
    assert!(s.read_until("data: "), "no first chunk");
    assert_eq!(
        http(sim.port, "GET", "/load", ""),
        (200, r#"{"server_load":1}"#.to_string())
    );
}

#[test]
fn metrics_show_running_and_waiting() {
    let dir = ModelDir::new("queue");
    let sim = Sim::start(
        &dir.path(),
        &["--max-num-seqs", "1"],
        &[("VLLM_SIM_TOKEN_DELAY_MS", "100")],
    );
    sim.wait_ready();
    let body = r#"{"model":"qwen","prompt":"one two three","max_tokens":200,"stream":true}"#;
    let mut first = Stream::open(sim.port, "/v1/completions", body);
    assert!(first.read_until("data: "), "first request produced nothing");
    let _second = Stream::open(sim.port, "/v1/completions", body);
    let start = Instant::now();
    loop {
        let (_, m) = http(sim.port, "GET", "/metrics", "");
        let (running, waiting) = (
            metric(&m, "vllm:num_requests_running"),
            metric(&m, "vllm:num_requests_waiting"),
        );
        if running == Some(1.0) && waiting == Some(1.0) {
            let usage = metric(&m, "vllm:kv_cache_usage_perc").unwrap();
            assert!(usage > 0.0 && usage < 1.0, "{usage}");
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "running={running:?} waiting={waiting:?}"
        );
    }
}

#[test]
fn start_up_failures_exit_with_vllm_messages() {
    let dir = ModelDir::new("fail");
    let m = dir.path();
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, i32, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "KVCacheTooSmall")],
            1,
            "ValueError: To serve at least one request with the model's max seq len (4096), (0.11 GiB KV cache is needed, which is larger than the available KV cache memory (0.07 GiB). Based on the available memory, the estimated maximum model length is 2448.",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "InsufficientGPUMemory")],
            1,
            "ValueError: Free memory on device cuda:0 (9.0/24.0 GiB) on startup is less than desired GPU memory utilization (0.75, 18.0 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "ModelNotFound")],
            1,
            "ValueError: Invalid repository ID or local directory specified: '",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "TensorParallelMismatch")],
            1,
            "ValueError: Total number of attention heads (12) must be divisible by tensor parallel size (5).",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "OutOfMemory")],
            1,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 0.72 GiB. GPU 0 has a total capacity of 24.00 GiB",
        ),
        (
            vec!["--shutdown-timeout", "30"],
            vec![("VLLM_SIM_FAIL", "UnrecognizedArguments")],
            2,
            "            ...\nvllm: error: unrecognized arguments: --shutdown-timeout 30\n",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "UnrecognizedArguments")],
            2,
            "vllm: error: unrecognized arguments: --shutdown-timeout\n",
        ),
        (
            vec!["--shutdown-timeout=30"],
            vec![("VLLM_SIM_VLLM_VERSION", "0.17.1")],
            2,
            "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,run-batch} ...\nvllm: error: unrecognized arguments: --shutdown-timeout=30\n",
        ),
        (
            vec!["--no-such-flag", "1", "--max-num-seq", "4"],
            vec![],
            2,
            "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n            ...\nvllm: error: unrecognized arguments: --no-such-flag 1\n",
        ),
        (
            vec!["--disable-lora"],
            vec![("VLLM_SIM_VLLM_VERSION", "0.18.0")],
            2,
            "vllm: error: unrecognized arguments: --disable-lora\n",
        ),
        (
            vec!["--max", "4"],
            vec![],
            2,
            "usage: vllm serve [model_tag] [options]\nvllm serve: error: ambiguous option: --max could match --max-log-len, --max-model-len, --max-logprobs, ",
        ),
        (
            vec![],
            vec![("VLLM_SIM_VLLM_VERSION", "0.19.0")],
            2,
            "vllm-sim: VLLM_SIM_VLLM_VERSION must be one of 0.34.0, 0.18.0, 0.17.1",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "SharedMemoryTooSmall")],
            1,
            "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-v5MYcN (size 7340384)",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "GatedRepo")],
            1,
            "huggingface_hub.errors.GatedRepoError: 401 Client Error.",
        ),
        (
            vec![],
            vec![("VLLM_SIM_FAIL", "bogus")],
            1,
            "VLLM_SIM_FAIL must be one of KVCacheTooSmall,",
        ),
        // The same failures from the real checks.
        (
            vec!["-tp", "5"],
            vec![],
            1,
            "ValueError: Total number of attention heads (12) must be divisible by tensor parallel size (5).",
        ),
        (
            vec!["--max-model-len", "65536"],
            vec![],
            1,
            "ValueError: User-specified max_model_len (65536) is greater than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's config.json).",
        ),
        (
            vec![],
            vec![("VLLM_SIM_GPU_FREE_FRACTION", "0.5")],
            1,
            "ValueError: Free memory on device cuda:0 (12.0/24.0 GiB) on startup is less than desired GPU memory utilization (0.75, 18.0 GiB).",
        ),
        (
            vec![
                "--gpu-memory-utilization",
                "0.95",
                "--max-model-len",
                "32768",
            ],
            vec![("VLLM_SIM_GPU_MEMORY_GIB", "4")],
            1,
            "ValueError: To serve at least one request with the model's max seq len (32768), (0.88 GiB KV cache is needed, which is larger than the available KV cache memory (0.17 GiB). Based on the available memory, the estimated maximum model length is 6544.",
        ),
        (
            vec!["--gpu-memory-utilization", "0.9"],
            vec![("VLLM_SIM_GPU_MEMORY_GIB", "4")],
            1,
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        ),
        (
            vec!["--max-model-len", "abc"],
            vec![],
            2,
            "usage: vllm serve [model_tag] [options]\nvllm serve: error: argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'\n",
        ),
        (
            vec!["--dtype=int8"],
            vec![],
            2,
            "vllm serve: error: argument --dtype: invalid choice: 'int8' (choose from auto, bfloat16, float, float16, float32, half)\n",
        ),
    ];
    for (extra, env, code, needle) in cases {
        let mut sim = Sim::start(&m, &extra, &env);
        let (got, out) = sim.finish();
        assert_eq!(got, code, "{extra:?} {env:?}:\n{out}");
        assert!(
            sim.in_one_stream(needle),
            "{extra:?} {env:?}: no {needle:?} in:\n{out}"
        );
        assert!(!out.contains("Application startup complete."), "{out}");
    }
    // The engine's failures end the API server's traceback too.
    let mut sim = Sim::start(&m, &[], &[("VLLM_SIM_FAIL", "KVCacheTooSmall")]);
    let (_, out) = sim.finish();
    assert!(
        out.contains("ERROR") && out.contains("[core.py:708] EngineCore failed to start."),
        "{out}"
    );
    assert!(
        out.contains("RuntimeError: Engine core initialization failed. See root cause above."),
        "{out}"
    );

    // A model directory that does not exist, and one without config.json.
    let missing = format!("{m}-missing");
    for path in [missing.as_str(), "/"] {
        let mut sim = Sim::start(path, &[], &[]);
        let (got, out) = sim.finish();
        assert_eq!(got, 1, "{out}");
        assert!(
            sim.in_one_stream(&format!("ValueError: Invalid repository ID or local directory specified: '{path}'.\nPlease verify the following requirements:\n1. Provide a valid Hugging Face repository ID.")),
            "{out}"
        );
    }
}

/// A dead engine: `/health` 503 and requests 500, then vLLM's watchdog (every 5 s) stops the
/// server, which exits 0.
#[test]
fn engine_death_ends_the_server_at_the_watchdog() {
    let dir = ModelDir::new("dead");
    let mut sim = Sim::start(
        &dir.path(),
        &[],
        &[
            ("VLLM_SIM_FAIL", "EngineDeadAfterStart"),
            ("VLLM_SIM_ENGINE_DEAD_AFTER_SECONDS", "0.5"),
        ],
    );
    sim.wait_ready();
    let ready = Instant::now();
    sim.wait_log("EngineDeadError: EngineCore encountered an issue.");
    assert_eq!(http(sim.port, "GET", "/health", "").0, 503);
    assert_eq!(
        http(sim.port, "POST", "/v1/completions", r#"{"prompt":"x"}"#).0,
        500
    );
    let (code, out) = sim.finish();
    let took = ready.elapsed();
    assert_eq!(code, 0, "{out}");
    assert!(
        took < Duration::from_secs(7) && took > Duration::from_secs(3),
        "exited after {took:?}"
    );
    assert!(out.contains("INFO:     Finished server process ["), "{out}");
}

/// `VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1`: the server stays up past the watchdog, answering 503.
#[test]
fn engine_death_with_keep_alive_keeps_answering_503() {
    let dir = ModelDir::new("dead-alive");
    let mut sim = Sim::start(
        &dir.path(),
        &[],
        &[
            ("VLLM_SIM_FAIL", "EngineDeadAfterStart"),
            ("VLLM_SIM_ENGINE_DEAD_AFTER_SECONDS", "0.5"),
            ("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1"),
        ],
    );
    sim.wait_ready();
    let ready = Instant::now();
    sim.wait_log("EngineDeadError: EngineCore encountered an issue.");
    // Past two watchdog rounds, every health check is answered 503.
    while ready.elapsed() < Duration::from_secs(11) {
        assert_eq!(http(sim.port, "GET", "/health", "").0, 503);
        assert!(sim.child.try_wait().unwrap().is_none(), "{}", sim.output());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        http(sim.port, "POST", "/v1/completions", r#"{"prompt":"x"}"#).0,
        500
    );
}

/// A signal while the model loads (a startup probe giving up): vLLM's signal
/// handler's KeyboardInterrupt, after the weight-loading progress so far; Python exits 130.
#[test]
fn sigterm_while_loading_leaves_keyboard_interrupt_and_the_progress() {
    let dir = ModelDir::new("load-term");
    let mut sim = Sim::start(&dir.path(), &[], &[("VLLM_SIM_LOAD_SECONDS", "30")]);
    sim.wait_log("Loading safetensors checkpoint shards:   0% Completed | 0/4");
    sim.signal(libc::SIGTERM);
    let (code, out) = sim.finish();
    assert_eq!(code, 130, "{out}");
    assert!(
        out.contains("launchers/api_server/entry.py\", line 171, in _interrupt_init"),
        "{out}"
    );
    assert!(out.contains("KeyboardInterrupt: terminated"), "{out}");
    assert!(!out.contains("Loading weights took"), "{out}");
}

/// `tag` names the test's model directory (each test its own: they run at once).
fn sigterm_with_stream(
    tag: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (bool, String, i32, String, Duration) {
    let dir = ModelDir::new(tag);
    let mut env = env.to_vec();
    env.push(("VLLM_SIM_TOKEN_DELAY_MS", "40"));
    let mut sim = Sim::start(&dir.path(), extra, &env);
    sim.wait_ready();
    let mut s = Stream::open(
        sim.port,
        "/v1/completions",
        r#"{"model":"qwen","prompt":"hi","max_tokens":40,"stream":true}"#,
    );
    assert!(s.read_until("data: "), "no first chunk");
    sim.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let completed = s.read_to_end();
    let (code, out) = sim.finish();
    (completed, s.seen, code, out, signalled.elapsed())
}

#[test]
fn sigterm_with_shutdown_timeout_drains_in_flight_requests() {
    let (completed, seen, code, out, _) =
        sigterm_with_stream("term-drain", &["--shutdown-timeout", "20"], &[]);
    assert!(completed, "stream was cut:\n{seen}");
    assert!(seen.contains("data: [DONE]"), "{seen}");
    assert!(seen.contains(r#""finish_reason":"length""#), "{seen}");
    assert_eq!(code, 0, "{out}");
    for line in [
        "[shutdown] API server: shutdown triggered\n",
        "[shutdown] API server: stopping engine client mode=drain timeout=20s\n",
        "[shutdown] EngineCore: draining in-flight requests count=1 timeout=20s\n",
        "[shutdown] EngineCore: request processing complete; starting resource teardown\n",
        "[shutdown] API server: shutting down FastAPI HTTP server\n",
        "INFO:     Finished server process [",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(!out.contains("signal=SIGTERM, exiting now"), "{out}");
}

/// vLLM 0.18's wording of the same drain (its engine core's lines).
#[test]
fn sigterm_with_shutdown_timeout_at_0_18() {
    let (completed, seen, code, out, _) = sigterm_with_stream(
        "term-drain-018",
        &["--shutdown-timeout", "20"],
        &[("VLLM_SIM_VLLM_VERSION", "0.18.0")],
    );
    assert!(completed, "stream was cut:\n{seen}");
    assert_eq!(code, 0, "{out}");
    for line in [
        "Shutdown initiated (timeout=20)\n",
        "Draining 1 in-flight requests (timeout=20s)\n",
        "Shutdown complete\n",
        "Shutting down FastAPI HTTP server.\n",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert!(!out.contains("[shutdown]"), "{out}");
}

/// 0.18's engine core logs the request it answers with an abort during the drain.
#[test]
fn vllm_0_18_logs_the_requests_it_rejects_while_draining() {
    let dir = ModelDir::new("v018-reject");
    let mut sim = Sim::start(
        &dir.path(),
        &["--shutdown-timeout", "20"],
        &[
            ("VLLM_SIM_TOKEN_DELAY_MS", "50"),
            ("VLLM_SIM_VLLM_VERSION", "0.18.0"),
        ],
    );
    sim.wait_ready();
    let mut s = Stream::open(
        sim.port,
        "/v1/completions",
        r#"{"model":"qwen","prompt":"hi","max_tokens":40,"stream":true}"#,
    );
    assert!(s.read_until("data: "), "no first chunk");
    sim.signal(libc::SIGTERM);
    sim.wait_log("Draining 1 in-flight requests (timeout=20s)");
    let (status, body) = http(sim.port, "POST", "/v1/completions", r#"{"prompt":"late"}"#);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""finish_reason":"abort""#), "{body}");
    sim.wait_log("(server shutting down)");
    assert!(s.read_to_end(), "stream was cut:\n{}", s.seen);
    let (code, out) = sim.finish();
    assert_eq!(code, 0, "{out}");
    let id = body
        .split(r#""id":""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(
        out.contains(&format!("Rejecting request {id} (server shutting down)")),
        "{out}"
    );
}

/// 0.17.1 has no `--shutdown-timeout`: a SIGTERM aborts at once, without 0.18's engine lines.
#[test]
fn vllm_0_17_aborts_at_sigterm() {
    let (completed, seen, code, out, _) =
        sigterm_with_stream("term-017", &[], &[("VLLM_SIM_VLLM_VERSION", "0.17.1")]);
    assert!(!completed, "stream completed:\n{seen}");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Shutting down FastAPI HTTP server.\n"),
        "{out}"
    );
    assert!(!out.contains("Shutdown initiated"), "{out}");
    assert!(!out.contains("[shutdown]"), "{out}");
}

/// While draining, the listener stays open: `/health` answers 200, a new request is answered at
/// once with finish_reason "abort" (streamed: a last chunk, then [DONE]), and a second SIGTERM
/// changes nothing; the in-flight request still finishes.
#[test]
fn sigterm_with_shutdown_timeout_keeps_serving_aborts() {
    let dir = ModelDir::new("listener");
    let mut sim = Sim::start(
        &dir.path(),
        &["--shutdown-timeout", "20"],
        &[("VLLM_SIM_TOKEN_DELAY_MS", "50")],
    );
    sim.wait_ready();
    let mut s = Stream::open(
        sim.port,
        "/v1/completions",
        r#"{"model":"qwen","prompt":"hi","max_tokens":60,"stream":true}"#,
    );
    assert!(s.read_until("data: "), "no first chunk");
    sim.signal(libc::SIGTERM);
    sim.wait_log("mode=drain");
    assert_eq!(http(sim.port, "GET", "/health", ""), (200, String::new()));
    let (status, body) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model":"qwen","prompt":"late","max_tokens":50}"#,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "abort", "{body}");
    assert_eq!(v["choices"][0]["text"], "", "{body}");
    let (status, streamed) = http(
        sim.port,
        "POST",
        "/v1/chat/completions",
        r#"{"model":"qwen","messages":[{"role":"user","content":"late"}],"stream":true}"#,
    );
    assert_eq!(status, 200, "{streamed}");
    let events: Vec<&str> = streamed.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert_eq!(*events.last().unwrap(), "data: [DONE]", "{streamed}");
    assert!(
        events[events.len() - 2].contains(r#""finish_reason":"abort""#),
        "{streamed}"
    );
    sim.signal(libc::SIGTERM);
    let (_, m) = http(sim.port, "GET", "/metrics", "");
    assert!(
        m.contains(
            r#"vllm:request_success_total{engine="0",finished_reason="abort",model_name="qwen"} 2.0"#
        ),
        "{m}"
    );
    assert!(s.read_to_end(), "stream was cut:\n{}", s.seen);
    assert!(s.seen.contains(r#""finish_reason":"length""#), "{}", s.seen);
    let (code, out) = sim.finish();
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        out.matches("[shutdown] API server: shutdown triggered")
            .count(),
        1,
        "{out}"
    );
}

/// At the timeout the requests still running are cut (the engine core is killed).
#[test]
fn sigterm_with_shutdown_timeout_cuts_what_is_left_at_the_timeout() {
    // 40 tokens of 40 ms: the stream needs longer than the timeout.
    let (completed, seen, code, out, took) =
        sigterm_with_stream("term-timeout", &["--shutdown-timeout", "1"], &[]);
    assert!(!completed, "stream completed:\n{seen}");
    assert!(!seen.contains("[DONE]"), "{seen}");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("[shutdown] Process manager: force killing remaining processes count=1"),
        "{out}"
    );
    assert!(took >= Duration::from_secs(1), "took {took:?}");
}

#[test]
fn sigterm_without_shutdown_timeout_aborts_in_flight_requests() {
    let (completed, seen, code, out, took) = sigterm_with_stream("term-abort", &[], &[]);
    assert!(!completed, "stream completed:\n{seen}");
    assert!(!seen.contains("[DONE]"), "{seen}");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("mode=abort timeout=0s"), "{out}");
    assert!(
        out.contains("[shutdown] EngineCore: aborting in-flight requests count=1"),
        "{out}"
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// `--headless`: a worker node of a multi-node deployment. No HTTP server; the executor's line
/// names the head node; SIGTERM ends it with 0.
#[test]
fn headless_worker_node_serves_nothing_and_ends_on_sigterm() {
    let dir = ModelDir::new("headless");
    let mut sim = Sim::start(
        &dir.path(),
        &[
            "--headless",
            "--nnodes",
            "2",
            "--node-rank",
            "1",
            "--master-addr",
            "198.18.0.7",
            "-pp",
            "2",
        ],
        &[],
    );
    sim.wait_log(
        "Launching vLLM (v0.34.0) headless multiproc executor, with head node address 198.18.0.7:29501 for \
         torch.distributed process group.",
    );
    assert!(
        TcpStream::connect(("127.0.0.1", sim.port)).is_err(),
        "headless opened its port"
    );
    sim.signal(libc::SIGTERM);
    let (code, out) = sim.finish();
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("Application startup complete."), "{out}");
}

/// `--headless` on the head node (rank 0): its data-parallel engines, the handshake address, and
/// on SIGTERM the wait for them.
#[test]
fn headless_head_node_launches_its_engines() {
    let dir = ModelDir::new("headless0");
    let mut sim = Sim::start(
        &dir.path(),
        &["--headless", "-dpl", "2", "--shutdown-timeout", "7"],
        &[],
    );
    sim.wait_log(
        "Launching 2 data parallel engine(s) in headless mode, with head node address tcp://127.0.0.1:29550.",
    );
    sim.signal(libc::SIGTERM);
    let (code, out) = sim.finish();
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("Waiting up to 7 seconds for processes to exit\n"),
        "{out}"
    );
    assert!(out.contains("] Shutting down.\n"), "{out}");
    // No API server: no banner, and vLLM's lines carry no process prefix.
    assert!(!out.contains("█"), "{out}");
    assert!(!out.contains("(APIServer pid="), "{out}");
}

/// An adapter of the fixture hub (crates/vllm-sim/hub/org/<name>/main).
fn hub_adapter(name: &str) -> String {
    format!("{}/hub/org/{name}/main", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn static_lora_adapters_are_served_by_name() {
    let dir = ModelDir::new("lora");
    let sql = hub_adapter("sql-lora");
    let chat = format!(
        r#"{{"name": "chat-lora", "path": "{}", "base_model_name": "qwen"}}"#,
        hub_adapter("chat-lora")
    );
    let sim = Sim::start(
        &dir.path(),
        &[
            "--enable-lora",
            "--max-loras",
            "2",
            "--lora-modules",
            &format!("sql-lora={sql}"),
            &chat,
        ],
        &[],
    );
    sim.wait_ready();
    let out = sim.output();
    assert!(out.contains(&format!(
        "[serving.py:208] Loaded new LoRA adapter: name 'sql-lora', path '{sql}'"
    )));
    assert!(out.contains("'lora_modules': [LoRAModulePath(name='sql-lora', path='"));
    assert!(out.contains("base_model_name='qwen')]"));
    let (status, body) = http(sim.port, "GET", "/v1/models", "");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let data = v["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data[0]["id"], "qwen");
    assert_eq!(data[0]["max_model_len"], 4096);
    assert_eq!(data[1]["id"], "sql-lora");
    assert_eq!(data[1]["root"], sql.as_str());
    assert_eq!(data[1]["parent"], "qwen");
    assert_eq!(data[1]["owned_by"], "vllm");
    assert!(data[1]["max_model_len"].is_null());
    assert_eq!(data[2]["id"], "chat-lora");
    let (status, body) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model": "sql-lora", "prompt": "select", "max_tokens": 3}"#,
    );
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], "sql-lora");
    assert_eq!(v["choices"][0]["text"], "The simulated model");
    let (status, _) = http(
        sim.port,
        "POST",
        "/v1/chat/completions",
        r#"{"model": "chat-lora", "messages": [{"role": "user", "content": "hi"}]}"#,
    );
    assert_eq!(status, 200);
    let (status, body) = http(
        sim.port,
        "POST",
        "/v1/completions",
        r#"{"model": "big-lora", "prompt": "x"}"#,
    );
    assert_eq!(status, 404);
    assert!(body.contains("The model `big-lora` does not exist."));
}

#[test]
fn static_lora_failures_end_the_server_as_vllm() {
    let dir = ModelDir::new("lorafail");
    let big = format!("big-lora={}", hub_adapter("big-lora"));
    let sql = format!("sql-lora={}", hub_adapter("sql-lora"));
    let cases: Vec<(Vec<&str>, i32, String)> = vec![
        (
            vec!["--enable-lora", "--lora-modules", &big],
            1,
            "ValueError: Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16.\n"
                .into(),
        ),
        (
            vec!["--enable-lora", "--lora-modules", "gone=/nonexistent/lora"],
            1,
            "ValueError: Call to add_lora method failed: Loading lora gone failed: No adapter found for \
             /nonexistent/lora\n"
                .into(),
        ),
        (
            vec!["--lora-modules", &sql],
            1,
            "ValueError: Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA.\n"
                .into(),
        ),
        (
            vec!["--enable-lora", "--lora-modules", "sql-lora"],
            2,
            "vllm serve: error: Invalid JSON format for --lora-modules: sql-lora\n".into(),
        ),
    ];
    for (extra, code, tail) in cases {
        let mut sim = Sim::start(&dir.path(), &extra, &[]);
        let (got, out) = sim.finish();
        assert_eq!(got, code, "{extra:?}:\n{out}");
        assert!(sim.in_one_stream(&tail), "{extra:?}: no {tail:?} in\n{out}");
        if code == 1 {
            assert!(out.contains("[core.py:1124] Invocation of add_lora method failed"));
            assert!(!out.contains("Starting vLLM server on"));
        }
    }
    // The rank fits once --max-lora-rank allows it.
    let sim = Sim::start(
        &dir.path(),
        &[
            "--enable-lora",
            "--max-lora-rank",
            "64",
            "--lora-modules",
            &big,
        ],
        &[],
    );
    sim.wait_ready();
}
