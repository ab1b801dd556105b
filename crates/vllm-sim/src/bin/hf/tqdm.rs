//! The progress bar `snapshot_download` shows ("Fetching N files"), as tqdm (4.70, the version
//! pip installs with huggingface_hub 0.36.2) writes it to a stream that is not a terminal: each
//! refresh is `\r` + the bar (padded with spaces over a longer previous one), 10 bar cells,
//! `thread_map`'s average rate, and a newline when the bar closes. Refreshes come at most every
//! 0.1 s (tqdm's `mininterval`); the bar opens and closes with one.

use std::time::{Duration, Instant};

/// tqdm's unicode bar characters: blank, 1/8 ... 8/8.
const CHARSET: [char; 9] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉', '█'];
const BAR_WIDTH: usize = 10;
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// `tqdm.format_interval`.
pub fn format_interval(seconds: f64) -> String {
    let t = seconds.max(0.0) as u64;
    let (mins, s) = (t / 60, t % 60);
    let (h, m) = (mins / 60, mins % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m:02}:{s:02}")
    }
}

/// The bar's cells for a completed fraction.
pub fn bar(frac: f64) -> String {
    let nsyms = CHARSET.len() - 1;
    let units = (frac.clamp(0.0, 1.0) * (BAR_WIDTH * nsyms) as f64) as usize;
    let (full, part) = (units / nsyms, units % nsyms);
    let mut s: String = std::iter::repeat_n(CHARSET[nsyms], full).collect();
    if full < BAR_WIDTH {
        s.push(CHARSET[part]);
        s.extend(std::iter::repeat_n(CHARSET[0], BAR_WIDTH - full - 1));
    }
    s
}

/// tqdm's `format_meter` for `unit="it"`, without unit scaling.
pub fn format_meter(desc: &str, n: u64, total: u64, elapsed: f64) -> String {
    let rate = if elapsed > 0.0 {
        Some(n as f64 / elapsed)
    } else {
        None
    };
    let rate = rate.filter(|r| *r > 0.0);
    let rate_fmt = match rate {
        None => "?it/s".to_string(),
        Some(r) if 1.0 / r > 1.0 => format!("{:5.2}s/it", 1.0 / r),
        Some(r) => format!("{r:5.2}it/s"),
    };
    let elapsed_str = format_interval(elapsed);
    if total == 0 {
        return format!("{desc}: {n}it [{elapsed_str}, {rate_fmt}]");
    }
    let frac = n as f64 / total as f64;
    let remaining = match rate {
        Some(r) => format_interval((total.saturating_sub(n)) as f64 / r),
        None => "?".to_string(),
    };
    format!(
        "{desc}: {:3.0}%|{}| {n}/{total} [{elapsed_str}<{remaining}, {rate_fmt}]",
        frac * 100.0,
        bar(frac)
    )
}

pub struct Bar {
    desc: String,
    total: u64,
    n: u64,
    started: Instant,
    last_print: Instant,
    last_len: usize,
    enabled: bool,
    closed: bool,
}

impl Bar {
    pub fn new(desc: &str, total: u64, enabled: bool) -> Bar {
        let now = Instant::now();
        let mut b = Bar {
            desc: desc.to_string(),
            total,
            n: 0,
            started: now,
            last_print: now,
            last_len: 0,
            enabled,
            closed: false,
        };
        b.display();
        b
    }

    fn display(&mut self) {
        if !self.enabled {
            return;
        }
        let s = format_meter(
            &self.desc,
            self.n,
            self.total,
            self.started.elapsed().as_secs_f64(),
        );
        let len = s.chars().count();
        let pad = " ".repeat(self.last_len.saturating_sub(len));
        crate::out::err(&format!("\r{s}{pad}"));
        self.last_len = len;
        self.last_print = Instant::now();
    }

    /// One more file done (its download finished, or failed).
    pub fn update(&mut self) {
        self.n += 1;
        if self.last_print.elapsed() >= MIN_INTERVAL {
            self.display();
        }
    }

    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        self.display();
        if self.enabled {
            crate::out::err("\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meters_as_tqdm_prints_them() {
        assert_eq!(
            format_meter("Fetching 4 files", 0, 4, 0.0),
            "Fetching 4 files:   0%|          | 0/4 [00:00<?, ?it/s]"
        );
        // From the real client's log (progress.log): one of four files after 1.53 s.
        assert_eq!(
            format_meter("Fetching 4 files", 1, 4, 1.53),
            "Fetching 4 files:  25%|██▌       | 1/4 [00:01<00:04,  1.53s/it]"
        );
        assert_eq!(
            format_meter("Fetching 4 files", 4, 4, 4.0 / 112.22),
            "Fetching 4 files: 100%|██████████| 4/4 [00:00<00:00, 112.22it/s]"
        );
        assert_eq!(
            format_meter("Fetching 3 files", 1, 3, 0.5),
            "Fetching 3 files:  33%|███▎      | 1/3 [00:00<00:01,  2.00it/s]"
        );
        assert_eq!(
            format_meter("Fetching 0 files", 0, 0, 0.0),
            "Fetching 0 files: 0it [00:00, ?it/s]"
        );
        assert_eq!(format_interval(3725.0), "1:02:05");
    }
}
