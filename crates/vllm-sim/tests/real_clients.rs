//! Real clients against the built `vllm-sim` on 127.0.0.1: the official openai
//! Python SDK and guidellm (tests/clients), from the venv in `VLLM_PY_CLIENTS`
//! (`hack/tools/py-clients.sh`). A missing venv fails with what to run.
//!
//! The simulator is started as tests/sim.rs does, and waited for by its own
//! "Application startup complete." and then a connection, never a fixed sleep.

mod clients;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_vllm-sim");
const DEADLINE: Duration = Duration::from_secs(30);
const MODEL: &str = "qwen";

/// The simulator with the fake model (config/samples/fake-model), on a free port.
struct Sim {
    child: Child,
    out: Arc<Mutex<String>>,
    port: u16,
    model_dir: PathBuf,
}

impl Sim {
    fn start(tag: &str) -> Sim {
        let model_dir =
            std::env::temp_dir().join(format!("vllm-sim-clients-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&model_dir);
        std::fs::create_dir_all(&model_dir).unwrap();
        std::fs::copy(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../config/samples/fake-model/config.json"
            ),
            model_dir.join("config.json"),
        )
        .unwrap();
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(BIN)
            .args([
                "--model",
                model_dir.to_str().unwrap(),
                "--served-model-name",
                MODEL,
            ])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--max-model-len",
                "4096",
                "--gpu-memory-utilization",
                "0.75",
            ])
            .args(["--max-num-seqs", "8"])
            .env_remove("VLLM_SIM_FAIL")
            .env_remove("VLLM_SIM_VLLM_VERSION")
            .env("VLLM_SIM_LOAD_SECONDS", "0")
            .env("VLLM_SIM_TOKEN_DELAY_MS", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn vllm-sim");
        let out = Arc::new(Mutex::new(String::new()));
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let out = out.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut o = out.lock().unwrap();
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        let sim = Sim {
            child,
            out,
            port,
            model_dir,
        };
        sim.wait_ready();
        sim
    }

    fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    fn wait_ready(&self) {
        let start = Instant::now();
        // Its own word first (the free port could be taken by another process
        // meanwhile), then a connection.
        while !self.output().contains("Application startup complete.")
            || TcpStream::connect(("127.0.0.1", self.port)).is_err()
        {
            assert!(
                start.elapsed() < DEADLINE,
                "not serving:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The simulator's count of requests finished with `reason` (its /metrics).
    fn finished(&self, reason: &str) -> f64 {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let prefix =
            format!("vllm:request_success_total{{engine=\"0\",finished_reason=\"{reason}\"");
        text.lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in /metrics:\n{text}"))
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.model_dir);
    }
}

/// The openai SDK's calls an application makes, each answer's shape checked
/// by the script; here what it saw is matched against the simulator.
#[test]
fn openai_sdk_lists_chats_streams_and_completes() {
    clients::venv(); // fails first, with what to run, when the clients are missing
    let sim = Sim::start("openai");
    let seen = clients::openai_check(&sim.base_url(), MODEL);
    assert_eq!(seen["models"], serde_json::json!([MODEL]), "{seen}");
    // The simulator's filler text: its first words, one per token.
    for what in ["chat", "stream", "completion"] {
        let text = seen[what]["content"]
            .as_str()
            .or(seen[what]["text"].as_str())
            .unwrap_or_default();
        assert!(text.starts_with("The simulated model"), "{what}: {seen}");
    }
    assert_eq!(seen["unknown_model"], 404, "{seen}");
    // Three generations of 5 tokens, counted by the server as finished at the length limit.
    assert_eq!(sim.finished("length"), 3.0, "{}", sim.output());
}

/// guidellm's benchmark, bounded to 20 requests: its report says all of them
/// completed and none errored, and the simulator counted the same 20.
#[test]
fn guidellm_benchmark_completes_every_request() {
    const REQUESTS: u32 = 20;
    clients::venv();
    let sim = Sim::start("guidellm");
    let report = clients::guidellm(&sim.base_url(), MODEL, REQUESTS, 10);
    clients::assert_all_completed(&report, REQUESTS);
    assert_eq!(
        sim.finished("length"),
        f64::from(REQUESTS),
        "{}",
        sim.output()
    );
}
