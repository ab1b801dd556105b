//! `bench-compare`: the before/after table of a sitting (`hack/bench-compare.sh`).
//!
//! Reads the results of runs that one sitting took in rotated order (each a
//! `bench/results-*.json` of one run) grouped by arm, and writes one table:
//! the median (min–max) of each figure per arm, and each arm's medians against
//! the first arm's and against the direct variant's. Runs taken minutes apart
//! on this shared machine differ by ±10 % on their own; the table also gives
//! the speed probe taken before every run and how it tracks the time to 100 %,
//! so that a slow run can be told from a slow operator.

#[allow(dead_code)]
mod procfs;
#[allow(dead_code)]
mod report;

use std::{fmt::Write as _, path::PathBuf};

use clap::Parser;
use serde_json::Value;

#[derive(Parser, Debug)]
#[command(about = "The before/after table of one sitting of rotated bench runs")]
struct Args {
    /// The sitting's title (the section heading).
    #[arg(long)]
    title: String,
    /// The command line to record (hack/bench-compare.sh passes its own).
    #[arg(long, default_value = "bench-compare")]
    command: String,
    /// The Markdown file the table is appended to; none when empty.
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: String,
    /// NAME=results.json,results.json,... per arm, the first arm first; the
    /// direct variant's runs are found by their variant.
    #[arg(required = true)]
    arms: Vec<String>,
}

/// The rows of the table, by figure key; labels and decimals are the run
/// report's ([`report::FIGURES`]), or [`OWN`]'s for figures it lists elsewhere.
const ROWS: &[&str] = &[
    "t50_s",
    "t100_s",
    "apiserver_cpu_s",
    "operator_cpu_s",
    "writes_per_service",
    "operator_reads_per_service",
    "steady_writes",
    "restart_writes",
    "operator_rss_steady_mib",
    "restart_peak_rss_mib",
    "restart_cpu_s",
    "reconcile_p99_ms",
    "clusterip_allocation_mean_ms",
    "probe_mem_ms",
    "machine_steal_pct",
];

/// Labels of figures the run report shows in other tables.
const OWN: &[(&str, &str, usize)] = &[
    (
        "apiserver_cpu_s",
        "kube-apiserver CPU to convergence (s)",
        1,
    ),
    ("restart_cpu_s", "restart: operator CPU (s)", 2),
];

/// A figure's label and decimals.
fn label(key: &str) -> (&'static str, usize) {
    report::FIGURES
        .iter()
        .chain(OWN)
        .find(|f| f.0 == key)
        .map_or(("?", 2), |f| (f.1, f.2))
}

/// The rows whose arms are compared as ratios.
const RATIOS: &[&str] = &["t50_s", "t100_s", "apiserver_cpu_s", "operator_cpu_s"];

/// One run: its arm, its order in the sitting (timestamp), its variant and figures.
struct Run {
    arm: String,
    timestamp: String,
    variant: String,
    figures: serde_json::Map<String, Value>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut runs = Vec::new();
    let mut arms = Vec::new();
    for arm in &args.arms {
        let (name, files) = arm
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("{arm:?}: want NAME=results.json,..."))?;
        arms.push(name.to_string());
        for file in files.split(',').filter(|f| !f.is_empty()) {
            runs.extend(read_runs(name, &PathBuf::from(file))?);
        }
    }
    anyhow::ensure!(!runs.is_empty(), "no runs in {:?}", args.arms);
    let table = table(&args.title, &args.command, &arms, &runs);
    if args.markdown.is_empty() {
        print!("{table}");
    } else {
        let mut text = std::fs::read_to_string(&args.markdown).unwrap_or_default();
        text.push_str(&table);
        std::fs::write(&args.markdown, text)?;
        print!("{table}");
    }
    Ok(())
}

/// Every run of a results file, as `arm`'s.
fn read_runs(arm: &str, file: &PathBuf) -> anyhow::Result<Vec<Run>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    let v: Value = serde_json::from_str(&text)?;
    let timestamp = v["timestamp"].as_str().unwrap_or_default().to_string();
    let variant = v["variant"].as_str().unwrap_or("plain").to_string();
    let mut out = Vec::new();
    for size in v["sizes"].as_array().into_iter().flatten() {
        for run in size["runs"].as_array().into_iter().flatten() {
            out.push(Run {
                arm: arm.to_string(),
                timestamp: timestamp.clone(),
                variant: variant.clone(),
                figures: run["figures"].as_object().cloned().unwrap_or_default(),
            });
        }
    }
    anyhow::ensure!(!out.is_empty(), "{} has no runs", file.display());
    Ok(out)
}

fn values(runs: &[Run], arm: &str, key: &str) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.arm == arm)
        .filter_map(|r| r.figures.get(key)?.as_f64())
        .filter(|v| v.is_finite())
        .collect()
}

fn median_of(runs: &[Run], arm: &str, key: &str) -> Option<f64> {
    report::median(&mut values(runs, arm, key))
}

/// Pearson's r of two figures over the runs of operator arms (not direct or floor).
fn correlation(runs: &[Run], x: &str, y: &str) -> Option<(f64, usize)> {
    let pairs: Vec<(f64, f64)> = runs
        .iter()
        .filter(|r| r.variant != "direct" && r.variant != "floor")
        .filter_map(|r| Some((r.figures.get(x)?.as_f64()?, r.figures.get(y)?.as_f64()?)))
        .collect();
    let n = pairs.len();
    // Fewer runs say nothing about how the two go together.
    if n < 6 {
        return None;
    }
    let mean = |f: fn(&(f64, f64)) -> f64| pairs.iter().map(f).sum::<f64>() / n as f64;
    let (mx, my) = (mean(|p| p.0), mean(|p| p.1));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in &pairs {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    (sxx > 0.0 && syy > 0.0).then(|| (sxy / (sxx * syy).sqrt(), n))
}

fn table(title: &str, command: &str, arms: &[String], runs: &[Run]) -> String {
    let mut out = String::new();
    let mut order: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| (r.timestamp.as_str(), r.arm.as_str()))
        .collect();
    order.sort();
    let sequence: Vec<&str> = order.iter().map(|(_, arm)| *arm).collect();
    let _ = writeln!(out, "\n## Comparison — {title}\n");
    let _ = writeln!(
        out,
        "`{command}`: {} runs in this order: {}. Medians (min–max) per arm; the runs are listed \
         under [Runs](#runs) by their timestamps ({} to {}).\n",
        runs.len(),
        sequence.join(" "),
        order.first().map_or("", |o| o.0),
        order.last().map_or("", |o| o.0),
    );
    let _ = writeln!(out, "| | {} |", arms.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(arms.len()));
    for key in ROWS {
        let (label, decimals) = label(key);
        if arms.iter().all(|a| values(runs, a, key).is_empty()) {
            continue;
        }
        let cells: Vec<String> = arms
            .iter()
            .map(|arm| {
                let mut v = values(runs, arm, key);
                match report::median(&mut v) {
                    None => "—".to_string(),
                    Some(m) if v.len() == 1 => format!("{m:.decimals$}"),
                    Some(m) => format!(
                        "{m:.decimals$} ({:.decimals$}–{:.decimals$})",
                        v[0],
                        v[v.len() - 1]
                    ),
                }
            })
            .collect();
        let _ = writeln!(out, "| {label} | {} |", cells.join(" | "));
    }
    // Against the first arm, and against the control plane alone (direct) and
    // the product's floor (floor) when they ran.
    let mut bases: Vec<&String> = arms.first().into_iter().collect();
    for variant in ["direct", "floor"] {
        let arm = arms
            .iter()
            .find(|a| runs.iter().any(|r| &r.arm == *a && r.variant == variant));
        if let Some(a) = arm
            && !bases.contains(&a)
        {
            bases.push(a);
        }
    }
    for base in bases {
        for key in RATIOS {
            let Some(b) = median_of(runs, base, key).filter(|b| *b > 0.0) else {
                continue;
            };
            let (label, _) = label(key);
            let cells: Vec<String> = arms
                .iter()
                .map(|arm| {
                    median_of(runs, arm, key).map_or("—".to_string(), |m| format!("{:.2}", m / b))
                })
                .collect();
            let _ = writeln!(out, "| {label}, against {base} | {} |", cells.join(" | "));
        }
    }
    if let Some((r, n)) = correlation(runs, "probe_mem_ms", "t100_s") {
        let _ = writeln!(
            out,
            "\nThe speed probe before each run (memory) against its time to 100 %, over the {n} \
             operator runs: r = {r:.2}."
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(arm: &str, ts: &str, variant: &str, t100: f64, probe: f64) -> Run {
        Run {
            arm: arm.into(),
            timestamp: ts.into(),
            variant: variant.into(),
            figures: json!({"t100_s": t100, "probe_mem_ms": probe, "apiserver_cpu_s": t100 + 5.0})
                .as_object()
                .cloned()
                .unwrap(),
        }
    }

    #[test]
    fn the_table_has_medians_ranges_ratios_and_the_order() {
        let runs = vec![
            run("A", "1", "plain", 60.0, 250.0),
            run("B", "2", "plain", 50.0, 240.0),
            run("B", "3", "plain", 70.0, 300.0),
            run("A", "4", "plain", 80.0, 310.0),
            run("A", "5", "plain", 70.0, 280.0),
            run("D", "6", "direct", 40.0, 250.0),
            run("B", "7", "plain", 66.0, 290.0),
        ];
        let arms = ["A".to_string(), "B".to_string(), "D".to_string()];
        let t = table("test", "cmd", &arms, &runs);
        assert!(t.contains("in this order: A B B A A D B."), "{t}");
        assert!(
            t.contains(
                "| first create → 100% Available (s) | 70.0 (60.0–80.0) | 66.0 (50.0–70.0) | 40.0 |"
            ),
            "{t}"
        );
        assert!(
            t.contains("| first create → 100% Available (s), against A | 1.00 | 0.94 | 0.57 |"),
            "{t}"
        );
        assert!(
            t.contains("| first create → 100% Available (s), against D | 1.75 | 1.65 | 1.00 |"),
            "{t}"
        );
        // Rows no arm has are left out.
        assert!(!t.contains("operator CPU"), "{t}");
        // The probe tracks the time in these runs; direct's run is not counted.
        assert!(t.contains("over the 6 operator runs: r = 0.93."), "{t}");
        // With fewer runs there is no such line.
        let t = table("test", "cmd", &arms, &runs[..5]);
        assert!(!t.contains("speed probe before each run"), "{t}");
    }
}
