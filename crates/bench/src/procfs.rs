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

/// Jiffies of all CPUs (from the first line of /proc/stat).
#[derive(Debug, Clone, Copy)]
pub struct Jiffies {
    /// Not idle and not waiting for I/O (steal included).
    pub busy: u64,
    pub total: u64,
    /// Time the hypervisor ran something else while this VM had work.
    pub steal: u64,
}

pub fn machine_jiffies() -> Option<Jiffies> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().sum();
    // idle + iowait are not busy
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some(Jiffies {
        busy: total - idle,
        total,
        steal: v.get(7).copied().unwrap_or(0),
    })
}

/// How fast one core of this (shared) machine is right now, in ms for a fixed
/// amount of work, median of 5: `alu` is integer arithmetic in registers,
/// `mem` chases pointers through 32 MiB (cache misses, the part a noisy
/// neighbour on the host slows most). Same work every time, so runs taken
/// minutes apart can be compared: a run whose probe is slower had a slower machine.
pub fn speed_probe() -> (f64, f64) {
    const ALU_STEPS: u64 = 40_000_000;
    const MEM_SLOTS: usize = 8 << 20; // u32s: 32 MiB
    const MEM_STEPS: usize = 2_000_000;
    // A single cycle through every slot (Sattolo's shuffle), from a fixed seed.
    let mut next: Vec<u32> = (0..MEM_SLOTS as u32).collect();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rand = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in (1..MEM_SLOTS).rev() {
        let j = (rand() % i as u64) as usize;
        next.swap(i, j);
    }
    let time = |f: &mut dyn FnMut() -> u64| {
        let mut ms: Vec<f64> = (0..5)
            .map(|_| {
                let t = std::time::Instant::now();
                std::hint::black_box(f());
                t.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        ms.sort_by(f64::total_cmp);
        ms[2]
    };
    let alu = time(&mut || {
        let mut h = std::hint::black_box(1u64);
        for i in 0..ALU_STEPS {
            h = (h ^ i).wrapping_mul(0x100_0000_01B3).rotate_left(5);
        }
        h
    });
    let mem = time(&mut || {
        let mut at = std::hint::black_box(0usize);
        for _ in 0..MEM_STEPS {
            at = next[at] as usize;
        }
        at as u64
    });
    (alu, mem)
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
        let j = machine_jiffies().unwrap();
        assert!(j.busy <= j.total && j.steal <= j.busy);
    }

    #[test]
    fn the_speed_probe_times_both_loops() {
        let (alu, mem) = speed_probe();
        assert!(alu.is_finite() && alu > 0.0, "alu {alu}");
        assert!(mem.is_finite() && mem > 0.0, "mem {mem}");
        eprintln!("speed probe: alu {alu:.1} ms, mem {mem:.1} ms");
    }
}
