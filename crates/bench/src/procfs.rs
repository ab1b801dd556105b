//! What /proc says about a process and the machine.

use serde::Serialize;

/// Clock ticks per second of `utime`/`stime` in /proc/<pid>/stat.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// User + system CPU seconds of a process so far (None when it is gone).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces: fields are counted after its ')'.
    let after = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the full line, 12 and 13 after the name.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks_per_second())
}

/// A `Vm*` line of /proc/<pid>/status, in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_field(&status, key)
}

fn status_field(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

/// Busy and total jiffies of all CPUs (from the first line of /proc/stat).
pub fn machine_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    // idle + iowait are not busy
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// The machine the benchmark ran on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub cpu_model: String,
    pub mem_total_gib: f64,
    pub kernel: String,
    /// 1-minute load average when the benchmark started (other work on the machine).
    pub loadavg_at_start: String,
}

impl Machine {
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cores = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count()
            .max(1);
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|l| l.trim_start_matches([' ', '\t', ':']).trim().to_string())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib = status_field(&meminfo, "MemTotal").unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        Machine {
            cores,
            cpu_model,
            mem_total_gib: (mem_kib as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            kernel,
            loadavg_at_start: loadavg
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_readable() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(status_kib(me, "VmHWM").unwrap() > 0);
        assert!(status_field("VmRSS:\t  1234 kB\n", "VmRSS") == Some(1234));
        let (busy, total) = machine_jiffies().unwrap();
        assert!(busy <= total);
    }
}
