//! A child process of a test (e.g. the operator's binary) with its stdout and
//! stderr in a log file: the log read back, SIGTERM or SIGKILL sent, its exit
//! waited for (polled under a deadline), and killed when dropped.

use std::{
    fs::File,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

/// `127.0.0.1:PORT` with a port that was free a moment ago (for a child to listen on).
pub fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("127.0.0.1:{port}")
}

/// A running child with its output in a log file; killed (SIGKILL) when dropped.
pub struct Process {
    pub child: Child,
    log: PathBuf,
}

impl Process {
    /// Spawns `cmd` with stdin closed and stdout and stderr written to `log`
    /// (created, or truncated).
    pub fn spawn(mut cmd: Command, log: PathBuf) -> Process {
        let out = File::create(&log)
            .unwrap_or_else(|e| panic!("creating the log file {}: {e}", log.display()));
        let err = out.try_clone().expect("clone the log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {:?}: {e}", cmd.get_program()));
        Process { child, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What the process has written so far (empty when nothing yet).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of [`Process::log`].
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Sends SIGTERM (a graceful shutdown).
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {} failed", self.pid());
    }

    /// Sends SIGKILL.
    pub fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill()
    }

    /// Waits up to `timeout` for the process to exit; its exit status, None
    /// if it still runs.
    pub async fn exited(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` from `addr` (`ip:port`), off the async runtime: (status, body),
/// or None while nothing answers there.
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let addr = addr.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&addr).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split(' ').nth(1)?.parse().ok()?;
        Some((code, body.to_string()))
    })
    .await
    .ok()?
}
