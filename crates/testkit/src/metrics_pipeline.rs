//! The shared cluster's autoscaling pipeline (`hack/cluster/cluster.sh
//! autoscaling`, hack/cluster/autoscaling.sh): a Prometheus server scraping the
//! simulator pods on the real node, and KEDA's operator and metrics API server,
//! all real, as host processes. [`autoscaling`] starts it once per test run
//! (building it once per machine) or reuses it; [`Pipeline`] queries
//! Prometheus; [`Signal`] is a scrape target a test serves and sets itself
//! (e.g. a gateway's queue length: a signal that exists at zero replicas).

use std::{
    io::{Read, Write},
    net::TcpListener,
    path::PathBuf,
    process::Command,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::{cluster, http_request, repo_root};

/// Where the pipeline of the shared cluster listens (from `<cluster dir>/autoscaling/env`).
#[derive(Debug)]
pub struct Pipeline {
    /// `http://127.0.0.1:PORT`: the address KEDA's triggers use.
    pub prometheus_url: String,
    /// `127.0.0.1:PORT`.
    prometheus_addr: String,
    /// Prometheus' file_sd directory (`*.json` target lists).
    pub targets_dir: PathBuf,
    /// Prometheus' rule files (`*.yaml`), loaded on [`Pipeline::reload`].
    pub rules_dir: PathBuf,
}

/// The autoscaling pipeline of the shared cluster, started (or reused) once per
/// process. Panics with the script's error when it cannot start (a test never skips).
pub fn autoscaling() -> &'static Pipeline {
    static PIPELINE: OnceLock<Pipeline> = OnceLock::new();
    PIPELINE.get_or_init(|| {
        let c = cluster();
        let script = repo_root().join("hack/cluster/cluster.sh");
        let out = Command::new(&script)
            .arg("autoscaling")
            .env("VLLM_CLUSTER_DIR", c.dir())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "the autoscaling pipeline (Prometheus, KEDA) did not start ({} autoscaling):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let env_file = c.dir().join("autoscaling/env");
        let text = std::fs::read_to_string(&env_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", env_file.display()));
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("{} has no {key}", env_file.display()))
                .to_string()
        };
        let prometheus_url = get("PROMETHEUS_URL");
        Pipeline {
            prometheus_addr: prometheus_url
                .strip_prefix("http://")
                .expect("an http:// URL")
                .to_string(),
            prometheus_url,
            targets_dir: get("PROMETHEUS_TARGETS_DIR").into(),
            rules_dir: get("PROMETHEUS_RULES_DIR").into(),
        }
    })
}

/// One sample of an instant query: its labels and value.
pub type Sample = (serde_json::Map<String, serde_json::Value>, f64);

impl Pipeline {
    /// The result of an instant query (a vector), or the error Prometheus gave.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, String> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let body = self.get(&path)?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if v["status"] != "success" {
            return Err(format!("query {promql:?} failed: {body}"));
        }
        let samples = v["data"]["result"]
            .as_array()
            .ok_or_else(|| format!("not a vector: {body}"))?
            .iter()
            .filter_map(|s| {
                let labels = s["metric"].as_object()?.clone();
                let value = s["value"][1].as_str()?.parse().ok()?;
                Some((labels, value))
            })
            .collect();
        Ok(samples)
    }

    /// The value of a query that yields one sample, if it yields one.
    pub fn value(&self, promql: &str) -> Option<f64> {
        self.query(promql).ok()?.first().map(|(_, v)| *v)
    }

    /// Prometheus' alerts (`/api/v1/alerts`: name, state, labels), as JSON.
    pub fn alerts(&self) -> Result<Vec<serde_json::Value>, String> {
        let body = self.get("/api/v1/alerts")?;
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        Ok(v["data"]["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// Makes Prometheus read its configuration and rule files again.
    pub fn reload(&self) {
        let (status, body) = http_request(&self.prometheus_addr, "POST", "/-/reload", None)
            .unwrap_or_else(|e| panic!("POST {}/-/reload: {e}", self.prometheus_url));
        assert_eq!(status, 200, "Prometheus refused the reload: {body}");
    }

    fn get(&self, path: &str) -> Result<String, String> {
        let (status, body) = http_request(&self.prometheus_addr, "GET", path, None)
            .map_err(|e| format!("GET {}{path}: {e}", self.prometheus_url))?;
        match status {
            200 => Ok(body),
            _ => Err(format!("GET {path}: {status} {body}")),
        }
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A gauge a test serves on 127.0.0.1 and Prometheus scrapes (a file_sd target
/// of the pipeline): `metric{labels} value`, with the value the test sets.
/// Removed from Prometheus' targets and stopped when dropped.
pub struct Signal {
    value: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    file: PathBuf,
}

impl Signal {
    /// Serves `metric{labels}` (labels in PromQL form, e.g. `service="a"`) at `value`.
    pub fn start(pipeline: &Pipeline, metric: &str, labels: &str, value: f64) -> Signal {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a signal port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(AtomicU64::new(value.to_bits()));
        let stop = Arc::new(AtomicBool::new(false));
        let line = format!("{metric}{{{labels}}}");
        let metric = metric.to_string();
        let thread = {
            let (shared, stop) = (shared.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut conn, _)) => {
                            let _ = conn.set_nonblocking(false);
                            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                            let mut buf = [0u8; 4096];
                            let _ = conn.read(&mut buf);
                            let v = f64::from_bits(shared.load(Ordering::Relaxed));
                            let body = format!("# TYPE {metric} gauge\n{line} {v}\n");
                            let _ = write!(
                                conn,
                                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                body.len()
                            );
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
        };
        let file = pipeline
            .targets_dir
            .join(format!("signal-{}.json", addr.port()));
        let targets = serde_json::json!([{ "targets": [addr.to_string()] }]);
        // Written whole, then renamed: Prometheus never reads half a file.
        let tmp = file.with_extension("tmp");
        std::fs::write(&tmp, targets.to_string()).expect("write the file_sd target");
        std::fs::rename(&tmp, &file).expect("publish the file_sd target");
        Signal {
            value: shared,
            stop,
            thread: Some(thread),
            file,
        }
    }

    /// Sets the value served from now on.
    pub fn set(&self, value: f64) {
        self.value.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
