//! Results: one JSON file per invocation and a Markdown section appended to
//! BENCHMARKS.md, with medians over runs and their spread.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use crate::procfs::Machine;

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub timestamp: String,
    pub command: String,
    pub label: String,
    pub variant: String,
    pub machine: Machine,
    pub versions: BTreeMap<String, String>,
    pub cluster: ClusterShape,
    pub operator_command: String,
    /// Writes each service needs at the least, by "verb resource" (see BENCHMARKS.md).
    pub minimum_writes_per_service: BTreeMap<String, u64>,
    pub sizes: Vec<SizeResult>,
    pub plot: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterShape {
    pub nodes: usize,
    pub gpus_per_node: usize,
    pub steady_seconds: u64,
    pub create_concurrency: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    pub m: usize,
    pub runs: Vec<RunResult>,
    /// Median, min, max over runs of each scalar figure.
    pub summary: BTreeMap<String, Stat>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

/// One run of one size on a fresh cluster.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunResult {
    pub m: usize,
    pub run: usize,
    pub converged: bool,
    /// Not-Available services by reason when the run timed out.
    pub not_available: BTreeMap<String, usize>,
    /// Scalars by name (seconds, counts, MiB); the keys of [`FIGURES`].
    pub figures: BTreeMap<String, f64>,
    /// Operator writes from start to 100% Available, by "verb resource".
    pub writes: BTreeMap<String, u64>,
    /// Operator writes in the steady window after convergence.
    pub steady_writes: BTreeMap<String, u64>,
    /// VLLMService status changes seen in the steady window (what the steady writes wrote).
    pub steady_status_changes: Vec<String>,
    /// Writes of a restarted operator until it has reconciled everything and is quiet.
    pub restart_writes: BTreeMap<String, u64>,
    /// API server requests (all clients) from first create to 100% Available, by "VERB resource".
    pub apiserver_requests: BTreeMap<String, f64>,
    /// When each pipeline stage reached 50% and 100% of the services, seconds after the
    /// first create (object timestamps, 1 s resolution).
    pub stages: BTreeMap<String, (f64, f64)>,
    /// Events in the cluster after the run, by "reporting component: reason" (read last).
    pub events: BTreeMap<String, u64>,
    /// Server-side latency of the operator's requests during the run, by "VERB resource":
    /// (p50 ms, p99 ms, count).
    pub apiserver_latency_ms: BTreeMap<String, (f64, f64, f64)>,
    /// CPU seconds per process from first create to 100% Available.
    pub cpu_seconds_by_process: BTreeMap<String, f64>,
    /// (seconds since first create, created, available), every 100 ms.
    pub timeline: Vec<(f64, u64, usize)>,
}

/// The scalar figures, in report order: (key, label, unit decimals).
pub const FIGURES: &[(&str, &str, usize)] = &[
    ("create_s", "all M creates accepted (s)", 1),
    ("t50_s", "first create → 50% Available (s)", 1),
    ("t90_s", "first create → 90% Available (s)", 1),
    ("t100_s", "first create → 100% Available (s)", 1),
    ("writes_total", "operator writes, total", 0),
    ("writes_per_service", "operator writes per service", 2),
    ("reconciles", "reconciles to convergence", 0),
    ("reconciles_per_service", "reconciles per service", 2),
    ("reconcile_errors", "reconcile errors", 0),
    ("reconcile_p50_ms", "reconcile p50 (ms)", 1),
    ("reconcile_p99_ms", "reconcile p99 (ms)", 1),
    ("reconcile_mean_ms", "reconcile mean (ms)", 1),
    (
        "reconciles_in_flight",
        "reconciles in flight, average (limit: --concurrency)",
        1,
    ),
    (
        "operator_reads_per_service",
        "operator reads per service (GET, LIST and pod log reads at the API server)",
        1,
    ),
    ("steady_writes", "writes in steady window", 0),
    ("steady_reconciles", "reconciles in steady window", 0),
    ("restart_writes", "writes after restart, nothing changed", 0),
    (
        "restart_reconcile_all_s",
        "restart → every service reconciled (s)",
        1,
    ),
    ("operator_peak_rss_mib", "operator peak RSS (MiB)", 1),
    (
        "operator_rss_steady_mib",
        "operator RSS in steady state (MiB)",
        1,
    ),
    (
        "restart_peak_rss_mib",
        "restarted operator peak RSS (MiB)",
        1,
    ),
    ("operator_cpu_s", "operator CPU to convergence (s)", 2),
    (
        "operator_cpu_steady_s",
        "operator CPU in steady window (s)",
        2,
    ),
    (
        "apiserver_reads_per_s",
        "API server reads/s during run (all clients)",
        1,
    ),
    (
        "apiserver_writes_per_s",
        "API server writes/s during run (all clients)",
        1,
    ),
    (
        "clusterip_allocation_mean_ms",
        "ClusterIP allocation, mean (ms; kube-apiserver does one at a time)",
        1,
    ),
    (
        "clusterip_allocator_busy_pct",
        "ClusterIP allocator busy during run (%)",
        0,
    ),
    ("machine_busy_pct", "machine CPU busy during run (%)", 0),
    (
        "machine_steal_pct",
        "CPU time the hypervisor gave to others during run (steal, %)",
        1,
    ),
    (
        "probe_alu_ms",
        "speed probe before run: arithmetic (ms, lower is faster)",
        0,
    ),
    (
        "probe_mem_ms",
        "speed probe before run: memory (ms, lower is faster)",
        0,
    ),
    (
        "other_processes_cores",
        "cores used by other processes during run (noise)",
        2,
    ),
    (
        "apiserver_cpu_share_pct",
        "kube-apiserver share of busy CPU (%)",
        0,
    ),
    (
        "operator_cpu_share_pct",
        "operator share of busy CPU (%)",
        0,
    ),
];

/// The highest finite bucket of the operator's reconcile duration histogram, in ms.
pub const RECONCILE_TOP_BUCKET_MS: f64 = 10_000.0;

pub fn median(values: &mut Vec<f64>) -> Option<f64> {
    values.retain(|v| v.is_finite());
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

pub fn summarize(runs: &[RunResult]) -> BTreeMap<String, Stat> {
    let mut keys: Vec<&String> = runs.iter().flat_map(|r| r.figures.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let mut v: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.figures.get(k).copied())
                .collect();
            let med = median(&mut v)?;
            Some((
                k.clone(),
                Stat {
                    median: med,
                    min: v.first().copied().unwrap_or(med),
                    max: v.last().copied().unwrap_or(med),
                    n: v.len(),
                },
            ))
        })
        .collect()
}

fn fmt_num(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

fn fmt_stat(s: &Stat, decimals: usize) -> String {
    if s.n <= 1 || (s.max - s.min).abs() < f64::EPSILON {
        return fmt_num(s.median, decimals);
    }
    format!(
        "{} ({}–{})",
        fmt_num(s.median, decimals),
        fmt_num(s.min, decimals),
        fmt_num(s.max, decimals)
    )
}

/// Median over runs of one key of a per-run map.
fn median_of_key(
    runs: &[RunResult],
    key: &str,
    pick: fn(&RunResult) -> &BTreeMap<String, u64>,
) -> f64 {
    let mut v: Vec<f64> = runs
        .iter()
        .map(|r| pick(r).get(key).copied().unwrap_or(0) as f64)
        .collect();
    median(&mut v).unwrap_or(0.0)
}

/// A table with one column per size (its median run) and one row per key that any of
/// those runs has, sorted; nothing when none has any. True when it wrote the table
/// (whose last row the caller may follow with one of its own).
fn keyed_table<'a>(
    s: &mut String,
    sizes: &[SizeResult],
    median_runs: &[Option<&'a RunResult>],
    title: &str,
    keys: impl Fn(&'a RunResult) -> Vec<&'a String>,
    row_label: impl Fn(&str) -> String,
    cell: impl Fn(&'a RunResult, &str) -> Option<String>,
) -> bool {
    let mut all: Vec<&String> = median_runs.iter().flatten().flat_map(|r| keys(r)).collect();
    all.sort();
    all.dedup();
    if all.is_empty() {
        return false;
    }
    let _ = write!(s, "\n| {title} |");
    for size in sizes {
        let _ = write!(s, " M = {} |", size.m);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|".repeat(sizes.len()));
    for k in all {
        let _ = write!(s, "| {} |", row_label(k));
        for run in median_runs {
            let c = run.and_then(|run| cell(run, k)).unwrap_or("–".into());
            let _ = write!(s, " {c} |");
        }
        let _ = writeln!(s);
    }
    true
}

/// The run whose time to 100% Available is the median one (the lower middle for even counts).
fn median_run(size: &SizeResult) -> Option<&RunResult> {
    let mut runs: Vec<&RunResult> = size.runs.iter().collect();
    runs.sort_by(|a, b| {
        let t = |r: &RunResult| r.figures.get("t100_s").copied().unwrap_or(f64::INFINITY);
        t(a).total_cmp(&t(b))
    });
    runs.get(runs.len().saturating_sub(1) / 2).copied()
}

/// The exponent b of `total ∝ M^b`, fitted by least squares to log(total) over log(M)
/// (at least two sizes, positive values only). b = 1 is linear growth: flat per service.
pub fn growth_exponent(points: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> = points
        .iter()
        .filter(|(m, y)| *m > 0.0 && *y > 0.0 && y.is_finite())
        .map(|(m, y)| (m.ln(), y.ln()))
        .collect();
    linear_slope(&logs)
}

/// The least-squares slope of y over x (None for fewer than two distinct x).
pub fn linear_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Totals that should grow linearly in M: (figure key, per-service label, factor to the
/// per-service unit).
const GROWTH_TOTALS: &[(&str, &str, f64)] = &[
    ("t100_s", "time to 100 % Available per service (ms)", 1000.0),
    ("writes_total", "operator writes per service", 1.0),
    ("reconciles", "reconciles per service", 1.0),
    ("operator_cpu_s", "operator CPU per service (ms)", 1000.0),
    (
        "apiserver_cpu_s",
        "kube-apiserver CPU per service (ms)",
        1000.0,
    ),
];

/// Memory figures: a fixed base plus a part per service, so the last column is the
/// fitted increment per 1000 services.
const GROWTH_MEMORY: &[(&str, &str)] = &[
    (
        "operator_rss_steady_mib",
        "operator RSS in steady state (MiB)",
    ),
    ("restart_peak_rss_mib", "restarted operator peak RSS (MiB)"),
];

/// One row of the growth table: the median of `key` at each size as `cell(median, M)`,
/// then `fit` over the points (M / `m_unit`, median). No row when no size has the figure.
fn growth_row(
    s: &mut String,
    r: &Report,
    key: &str,
    label: &str,
    m_unit: f64,
    cell: impl Fn(f64, f64) -> String,
    fit: impl Fn(&[(f64, f64)]) -> Option<String>,
) {
    let med = |size: &SizeResult| size.summary.get(key).map(|st| st.median);
    let points: Vec<(f64, f64)> = r
        .sizes
        .iter()
        .filter_map(|z| med(z).map(|v| (z.m as f64 / m_unit, v)))
        .collect();
    if points.is_empty() {
        return;
    }
    let _ = write!(s, "| {label} |");
    for size in &r.sizes {
        let c = med(size)
            .map(|v| cell(v, size.m as f64))
            .unwrap_or("–".into());
        let _ = write!(s, " {c} |");
    }
    let _ = writeln!(s, " {} |", fit(&points).unwrap_or("–".into()));
}

/// The growth table (two sizes or more): per-service medians at each M and the fitted slope.
fn growth_table(r: &Report) -> String {
    let mut s = String::new();
    if r.sizes.len() < 2 {
        return s;
    }
    let _ = write!(s, "| growth (medians) |");
    for size in &r.sizes {
        let _ = write!(s, " M = {} |", size.m);
    }
    let _ = writeln!(s, " slope |");
    let _ = writeln!(s, "|---|{}---|", "---|".repeat(r.sizes.len()));
    for (key, label, factor) in GROWTH_TOTALS {
        growth_row(
            &mut s,
            r,
            key,
            label,
            1.0,
            |v, m| format!("{:.2}", v * factor / m),
            |points| growth_exponent(points).map(|b| format!("total ∝ M^{b:.2}")),
        );
    }
    for (key, label) in GROWTH_MEMORY {
        growth_row(
            &mut s,
            r,
            key,
            label,
            1000.0,
            |v, _| format!("{v:.1}"),
            |points| linear_slope(points).map(|k| format!("+{k:.1} MiB per 1000 services")),
        );
    }
    let _ = writeln!(
        s,
        "\nSlope: the exponent b of a least-squares fit of log(total) over log(M) (b = 1: \
         the figure per service stays flat); for memory, the fitted MiB per 1000 services.\n"
    );
    s
}

/// The Markdown section for one invocation.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## Run {} — {} variant{}\n",
        r.timestamp,
        r.variant,
        if r.label.is_empty() {
            String::new()
        } else {
            format!(" — {}", r.label)
        }
    );
    let _ = writeln!(s, "- command: `{}`", r.command);
    let _ = writeln!(s, "- operator: `{}`", r.operator_command);
    let _ = writeln!(
        s,
        "- machine: {} cores ({}), {} GiB, kernel {}; load average at start {}",
        r.machine.cores,
        r.machine.cpu_model,
        r.machine.mem_total_gib,
        r.machine.kernel,
        r.machine.loadavg_at_start
    );
    let versions: Vec<String> = r.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let _ = writeln!(s, "- versions: {}", versions.join(", "));
    let _ = writeln!(
        s,
        "- cluster: fresh per run, {} kwok nodes × {} nvidia.com/gpu; creates {} in flight; steady window {} s",
        r.cluster.nodes,
        r.cluster.gpus_per_node,
        r.cluster.create_concurrency,
        r.cluster.steady_seconds
    );
    let _ = writeln!(
        s,
        "- raw results: [`{}`]({}), plot: [`{}`]({})\n",
        r.plot
            .replace("available-", "results-")
            .replace(".png", ".json"),
        r.plot
            .replace("available-", "results-")
            .replace(".png", ".json"),
        r.plot,
        r.plot
    );
    let _ = writeln!(s, "![Available VLLMServices over time]({})\n", r.plot);

    // The figures table: one column per M.
    let _ = write!(s, "| figure |");
    for size in &r.sizes {
        let runs = size.runs.len();
        let conv = size.runs.iter().filter(|x| x.converged).count();
        let _ = write!(
            s,
            " M = {} ({} run{}{}) |",
            size.m,
            runs,
            if runs == 1 { "" } else { "s" },
            if conv == runs {
                String::new()
            } else {
                format!(", {conv} converged")
            }
        );
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|".repeat(r.sizes.len()));
    for (key, label, decimals) in FIGURES {
        if r.sizes.iter().all(|z| !z.summary.contains_key(*key)) {
            continue;
        }
        let _ = write!(s, "| {label} |");
        for size in &r.sizes {
            let cell = size
                .summary
                .get(*key)
                .map(|st| {
                    // The operator's histogram ends at 10 s: a quantile there is a floor.
                    let capped =
                        key.starts_with("reconcile_p") && st.max >= RECONCILE_TOP_BUCKET_MS;
                    format!(
                        "{}{}",
                        if capped { "≥ " } else { "" },
                        fmt_stat(st, *decimals)
                    )
                })
                .unwrap_or("–".into());
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "\nCells: median (min–max) over the runs.\n");
    s.push_str(&growth_table(r));

    // Writes by verb and resource, against the minimum.
    let mut keys: Vec<String> = r.minimum_writes_per_service.keys().cloned().collect();
    for size in &r.sizes {
        for run in &size.runs {
            keys.extend(run.writes.keys().cloned());
        }
    }
    keys.sort();
    keys.dedup();
    let _ = write!(s, "| operator writes per service (median) | minimum |");
    for size in &r.sizes {
        let _ = write!(s, " M = {} |", size.m);
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|---|{}", "---|".repeat(r.sizes.len()));
    let mut min_total = 0;
    for k in &keys {
        let min = r.minimum_writes_per_service.get(k).copied().unwrap_or(0);
        min_total += min;
        let _ = write!(s, "| `{k}` | {min} |");
        for size in &r.sizes {
            let per = median_of_key(&size.runs, k, |r| &r.writes) / size.m as f64;
            let _ = write!(s, " {per:.2} |");
        }
        let _ = writeln!(s);
    }
    let _ = write!(s, "| **total** | **{min_total}** |");
    for size in &r.sizes {
        let t = size
            .summary
            .get("writes_per_service")
            .map(|st| st.median)
            .unwrap_or(f64::NAN);
        let _ = write!(s, " **{t:.2}** |");
    }
    let _ = writeln!(s);

    // Where the time goes, from the median run.
    let median_runs: Vec<Option<&RunResult>> = r.sizes.iter().map(median_run).collect();
    let stages = keyed_table(
        &mut s,
        &r.sizes,
        &median_runs,
        "stage reached by 50% / 100% of services (s after first create; 1 s resolution), median run",
        |run| run.stages.keys().collect(),
        |k| k.split_once(' ').map_or(k, |x| x.1).to_string(),
        |run, k| run.stages.get(k).map(|(a, b)| format!("{a:.0} / {b:.0}")),
    );
    if stages {
        let _ = write!(s, "| Available (watch) |");
        for run in &median_runs {
            let cell = run
                .map(|run| {
                    let g = |k: &str| run.figures.get(k).copied().unwrap_or(f64::NAN);
                    format!("{:.0} / {:.0}", g("t50_s"), g("t100_s"))
                })
                .unwrap_or("–".into());
            let _ = write!(s, " {cell} |");
        }
        let _ = writeln!(s);
    }

    // Who wrote the events, from the median run.
    keyed_table(
        &mut s,
        &r.sizes,
        &median_runs,
        "events after the run (objects), median run",
        |run| run.events.keys().collect(),
        str::to_string,
        |run, k| run.events.get(k).map(u64::to_string),
    );

    // Server-side latency of the requests the operator sends, from the median run.
    keyed_table(
        &mut s,
        &r.sizes,
        &median_runs,
        "API server latency p50 / p99 (ms), run with the median t100",
        |run| run.apiserver_latency_ms.keys().collect(),
        |k| format!("`{k}`"),
        |run, k| {
            run.apiserver_latency_ms
                .get(k)
                .map(|(p50, p99, n)| format!("{p50:.0} / {p99:.0} ({n:.0} req)"))
        },
    );

    // Steady and restart writes, spelled out when any.
    for size in &r.sizes {
        for run in &size.runs {
            if !run.steady_writes.is_empty() || !run.restart_writes.is_empty() {
                let _ = writeln!(
                    s,
                    "\nM = {} run {}: steady-window writes {:?}, restart writes {:?}",
                    size.m, run.run, run.steady_writes, run.restart_writes
                );
                for c in run.steady_status_changes.iter().take(5) {
                    let _ = writeln!(s, "- status change in the steady window: {c}");
                }
            }
            if !run.converged {
                let _ = writeln!(
                    s,
                    "\nM = {} run {} did not converge; not Available by reason: {:?}",
                    size.m, run.run, run.not_available
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spread() {
        assert_eq!(median(&mut vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut vec![f64::NAN]), None);
        let run = |v: f64| RunResult {
            figures: [("t100_s".to_string(), v)].into(),
            ..RunResult::default()
        };
        let s = summarize(&[run(5.0), run(3.0), run(4.0)]);
        let st = s["t100_s"];
        assert_eq!((st.median, st.min, st.max, st.n), (4.0, 3.0, 5.0, 3));
        assert_eq!(fmt_stat(&st, 1), "4.0 (3.0–5.0)");
    }

    #[test]
    fn growth_slopes() {
        // Linear growth: b = 1; quadratic: b = 2; a constant: b = 0.
        let lin = [(100.0, 10.0), (1000.0, 100.0), (3000.0, 300.0)];
        assert!((growth_exponent(&lin).unwrap() - 1.0).abs() < 1e-9);
        let quad = [(100.0, 1.0), (1000.0, 100.0), (3000.0, 900.0)];
        assert!((growth_exponent(&quad).unwrap() - 2.0).abs() < 1e-9);
        let flat = [(100.0, 5.0), (1000.0, 5.0)];
        assert!(growth_exponent(&flat).unwrap().abs() < 1e-9);
        assert_eq!(growth_exponent(&[(100.0, 1.0)]), None);
        assert_eq!(growth_exponent(&[(100.0, 0.0), (1000.0, 1.0)]), None);
        // Memory: 20 MiB + 35 MiB per 1000 services.
        let mem = [(0.1, 23.5), (1.0, 55.0), (3.0, 125.0)];
        assert!((linear_slope(&mem).unwrap() - 35.0).abs() < 1e-9);
    }

    #[test]
    fn keyed_tables_have_a_row_per_key_of_any_run_and_a_dash_where_one_lacks_it() {
        let run = |events: &[(&str, u64)]| RunResult {
            events: events.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            ..RunResult::default()
        };
        let (a, b) = (run(&[("b: Two", 2), ("a: One", 1)]), run(&[("b: Two", 3)]));
        let sizes = [100, 1000].map(|m| SizeResult {
            m,
            runs: vec![],
            summary: BTreeMap::new(),
        });
        let mut s = String::new();
        let wrote = keyed_table(
            &mut s,
            &sizes,
            &[Some(&a), Some(&b)],
            "events",
            |r| r.events.keys().collect(),
            |k| format!("`{k}`"),
            |r, k| r.events.get(k).map(u64::to_string),
        );
        assert!(wrote);
        assert_eq!(
            s,
            "\n| events | M = 100 | M = 1000 |\n|---|---|---|\n\
             | `a: One` | 1 | – |\n| `b: Two` | 2 | 3 |\n"
        );
        let mut empty = String::new();
        let none = run(&[]);
        assert!(!keyed_table(
            &mut empty,
            &sizes,
            &[Some(&none), None],
            "events",
            |r| r.events.keys().collect(),
            str::to_string,
            |r, k| r.events.get(k).map(u64::to_string),
        ));
        assert!(empty.is_empty());
    }

    #[test]
    fn growth_table_needs_two_sizes_and_reports_slopes() {
        let size = |m: usize, t100: f64, rss: f64| {
            let runs = vec![RunResult {
                figures: [
                    ("t100_s".to_string(), t100),
                    ("operator_rss_steady_mib".to_string(), rss),
                ]
                .into(),
                ..RunResult::default()
            }];
            SizeResult {
                m,
                summary: summarize(&runs),
                runs,
            }
        };
        let mut r = Report {
            timestamp: String::new(),
            command: String::new(),
            label: String::new(),
            variant: "plain".into(),
            machine: Machine {
                cores: 2,
                cpu_model: String::new(),
                mem_total_gib: 24.0,
                kernel: String::new(),
                loadavg_at_start: String::new(),
            },
            versions: BTreeMap::new(),
            cluster: ClusterShape {
                nodes: 100,
                gpus_per_node: 32,
                steady_seconds: 60,
                create_concurrency: 8,
            },
            operator_command: String::new(),
            minimum_writes_per_service: BTreeMap::new(),
            sizes: vec![size(100, 10.0, 20.0)],
            plot: String::new(),
        };
        assert_eq!(growth_table(&r), "");
        r.sizes.push(size(1000, 100.0, 56.0));
        let t = growth_table(&r);
        assert!(
            t.contains(
                "| time to 100 % Available per service (ms) | 100.00 | 100.00 | total ∝ M^1.00 |"
            ),
            "{t}"
        );
        assert!(
            t.contains(
                "| operator RSS in steady state (MiB) | 20.0 | 56.0 | +40.0 MiB per 1000 services |"
            ),
            "{t}"
        );
        assert!(!t.contains("writes per service"), "{t}");
    }
}
