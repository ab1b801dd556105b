//! vLLM's log format on stdout: `(APIServer pid=1) INFO 07-11 06:18:32 [api_server.py:1395] ...`
//! (the process prefix comes from vLLM's multiprocess logging; the rest is vLLM's default
//! format `%(levelname)s %(asctime)s [%(filename)s:%(lineno)d] %(message)s`, dates `%m-%d %H:%M:%S`),
//! and uvicorn's `INFO:     Started server process [1]`. Times are UTC.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy)]
pub enum Proc {
    Api,
    Engine,
    /// The `vllm` process before it names itself (headless mode never does).
    Main,
}

impl Proc {
    /// The prefix and the space after it (none for `Main`).
    fn prefix(self) -> String {
        let pid = std::process::id();
        match self {
            Proc::Api => format!("(APIServer pid={pid}) "),
            Proc::Engine => format!("(EngineCore_DP0 pid={pid}) "),
            Proc::Main => String::new(),
        }
    }
}

/// `MM-DD HH:MM:SS` (UTC) for a Unix time in seconds.
pub fn timestamp(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!(
        "{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn emit(line: String) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

pub fn line(proc: Proc, level: &str, at: &str, msg: &str) {
    for (i, part) in msg.split('\n').enumerate() {
        if i == 0 {
            emit(format!(
                "{}{level} {} [{at}] {part}",
                proc.prefix(),
                timestamp(now())
            ));
        } else {
            emit(format!("{}{part}", proc.prefix()));
        }
    }
}

pub fn info(proc: Proc, at: &str, msg: &str) {
    line(proc, "INFO", at, msg);
}

pub fn warn(proc: Proc, at: &str, msg: &str) {
    line(proc, "WARNING", at, msg);
}

pub fn error(proc: Proc, at: &str, msg: &str) {
    line(proc, "ERROR", at, msg);
}

/// uvicorn's own format.
pub fn uvicorn(msg: &str) {
    emit(format!("{}INFO:     {msg}", Proc::Api.prefix()));
}

/// Python's traceback goes to stderr.
pub fn stderr(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{text}");
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps() {
        assert_eq!(super::timestamp(0), "01-01 00:00:00");
        // 2025-07-11 06:18:32 UTC
        assert_eq!(super::timestamp(1_752_214_712), "07-11 06:18:32");
        // 2024-02-29 23:59:59 UTC
        assert_eq!(super::timestamp(1_709_251_199), "02-29 23:59:59");
    }
}
