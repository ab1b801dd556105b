//! The CPU time the calling thread has used: what a computation costs,
//! without the time its thread waited for a core on a busy machine (at 1,000
//! services the bench machine's two cores are saturated and a 0.3 ms
//! computation can be preempted for milliseconds).

use std::time::Duration;

/// A point on the calling thread's CPU clock.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCpu(Duration);

impl ThreadCpu {
    pub fn now() -> Self {
        ThreadCpu(thread_cpu_time())
    }

    /// The CPU time the thread used since `self`. Only meaningful on the same
    /// thread: no `.await` between the two, which could move the task.
    pub fn elapsed(self) -> Duration {
        thread_cpu_time().saturating_sub(self.0)
    }
}

fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the valid pointer it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_counts_and_waiting_does_not() {
        let start = ThreadCpu::now();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(start.elapsed() > Duration::ZERO, "a loop uses CPU");
        let before_sleep = ThreadCpu::now();
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            before_sleep.elapsed() < Duration::from_millis(100),
            "a sleeping thread uses (almost) no CPU: {:?}",
            before_sleep.elapsed()
        );
    }
}
