//! The operator as users run it: the release binary in its own process,
//! `run --metrics-addr 127.0.0.1:<port>` (plain HTTP), against the bench cluster's kubeconfig.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail};
use tokio::process::{Child, Command};

use crate::{procfs, prom};

pub const PREFIX: &str = "vllmservice_operator";

pub struct OperatorProc {
    child: Child,
    pub pid: u32,
    pub port: u16,
    pub log: PathBuf,
}

/// A port nobody listens on right now.
pub fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl OperatorProc {
    /// Starts the binary and waits until its /metrics answers.
    pub async fn start(
        bin: &Path,
        extra_args: &[String],
        kubeconfig: &Path,
        log: PathBuf,
        pid_file: &Path,
    ) -> anyhow::Result<OperatorProc> {
        let port = free_port()?;
        let health_port = free_port()?;
        let out = std::fs::File::create(&log).with_context(|| format!("creating {log:?}"))?;
        let child = Command::new(bin)
            .arg("run")
            .arg("--metrics-addr")
            .arg(format!("127.0.0.1:{port}"))
            // Plain /metrics and the probes on their own port, as environment
            // variables: a binary from before they existed ignores them and
            // serves all three in plain HTTP on the metrics address.
            .env("VLLM_OPERATOR_METRICS_INSECURE", "true")
            .env(
                "VLLM_OPERATOR_HEALTH_ADDR",
                format!("127.0.0.1:{health_port}"),
            )
            // A thousand services created at once are what the settle window is
            // for (one status write per quick start instead of two); the
            // product's default writes the first status at once.
            .arg("--status-settle-seconds=5")
            .args(extra_args)
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {bin:?}"))?;
        let pid = child.id().context("the operator has no pid")?;
        std::fs::write(pid_file, pid.to_string())?;
        let mut op = OperatorProc {
            child,
            pid,
            port,
            log,
        };
        for _ in 0..200 {
            if let Some(status) = op.child.try_wait()? {
                bail!("the operator exited at start ({status}); see {:?}", op.log);
            }
            if http_get(health_port, "/readyz").await.is_ok()
                || http_get(port, "/readyz").await.is_ok()
            {
                return Ok(op);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!(
            "the operator's /readyz did not answer within 20 s; see {:?}",
            op.log
        )
    }

    pub async fn metrics(&self) -> anyhow::Result<OperatorMetrics> {
        let text = http_get(self.port, "/metrics").await?;
        Ok(OperatorMetrics::from_samples(&prom::parse(&text)))
    }

    pub fn cpu_seconds(&self) -> f64 {
        procfs::cpu_seconds(self.pid).unwrap_or(f64::NAN)
    }

    /// Peak resident set size so far, MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        procfs::status_kib(self.pid, "VmHWM").map_or(f64::NAN, |k| k as f64 / 1024.0)
    }

    /// Resident set size now, MiB.
    pub fn rss_mib(&self) -> f64 {
        procfs::status_kib(self.pid, "VmRSS").map_or(f64::NAN, |k| k as f64 / 1024.0)
    }

    /// SIGTERM, as a pod's stop would; SIGKILL after 30 s.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        // SAFETY: kill(2) on the pid of our own child.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                eprintln!("bench: the operator ignored SIGTERM for 30 s: killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

/// What the operator's /metrics says, in the units the report uses.
#[derive(Debug, Clone, Default)]
pub struct OperatorMetrics {
    /// "verb resource" -> count
    pub writes: BTreeMap<String, u64>,
    pub reconciles: u64,
    pub reconcile_errors: u64,
    /// Cumulative buckets of the reconcile duration histogram.
    pub duration_buckets: Vec<(f64, f64)>,
    /// Sum of all reconcile durations, seconds.
    pub duration_sum: f64,
}

impl OperatorMetrics {
    fn from_samples(samples: &[prom::Sample]) -> OperatorMetrics {
        let mut writes = BTreeMap::new();
        for s in samples
            .iter()
            .filter(|s| s.name == format!("{PREFIX}_write_requests_total"))
        {
            *writes
                .entry(format!("{} {}", s.label("verb"), s.label("resource")))
                .or_default() += s.value as u64;
        }
        OperatorMetrics {
            writes,
            reconciles: prom::sum(samples, &format!("{PREFIX}_reconciles_total"), |_| true) as u64,
            reconcile_errors: prom::sum(
                samples,
                &format!("{PREFIX}_reconcile_errors_total"),
                |_| true,
            ) as u64,
            duration_buckets: prom::buckets(
                samples,
                &format!("{PREFIX}_reconcile_duration_seconds"),
            ),
            duration_sum: prom::sum(
                samples,
                &format!("{PREFIX}_reconcile_duration_seconds_sum"),
                |_| true,
            ),
        }
    }

    pub fn write_total(&self) -> u64 {
        self.writes.values().sum()
    }

    /// Writes sent since `before` (same process), by "verb resource"; zeros dropped.
    pub fn writes_since(&self, before: &OperatorMetrics) -> BTreeMap<String, u64> {
        self.writes
            .iter()
            .map(|(k, v)| (k.clone(), v - before.writes.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect()
    }
}

/// A plain HTTP/1.1 GET on 127.0.0.1; the body on a 200. (Blocking std I/O on
/// the blocking pool: the bench then shares the operator's tokio build exactly.)
pub async fn http_get(port: u16, path: &str) -> anyhow::Result<String> {
    let path = path.to_string();
    tokio::task::spawn_blocking(move || http_get_blocking(port, &path)).await?
}

fn http_get_blocking(port: u16, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        bail!("GET {path}: {status}");
    }
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return dechunk(body);
    }
    Ok(body.to_string())
}

fn dechunk(mut body: &str) -> anyhow::Result<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").context("bad chunk")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("0").trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.push_str(rest.get(..size).context("short chunk")?);
        body = rest.get(size + 2..).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            "abcde"
        );
    }

    #[test]
    fn operator_metrics_are_read() {
        let text = "vllmservice_operator_write_requests_total{verb=\"patch\",resource=\"deployments\"} 4\n\
                    vllmservice_operator_write_requests_total{verb=\"create\",resource=\"events\"} 2\n\
                    vllmservice_operator_reconciles_total 9\n\
                    vllmservice_operator_reconcile_duration_seconds_bucket{le=\"0.01\"} 9\n\
                    vllmservice_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 9\n";
        let m = OperatorMetrics::from_samples(&prom::parse(text));
        assert_eq!(m.write_total(), 6);
        assert_eq!(m.writes["patch deployments"], 4);
        assert_eq!(m.reconciles, 9);
        assert_eq!(m.duration_buckets.len(), 2);
        let none = OperatorMetrics::default();
        assert_eq!(m.writes_since(&none).len(), 2);
        assert!(m.writes_since(&m).is_empty());
    }
}
