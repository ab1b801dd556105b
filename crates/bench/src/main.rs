//! `bench`: the operator's scale benchmark (run it through `hack/bench.sh`).
//!
//! For each size M and each run: a fresh local cluster (its own directory,
//! target/cluster-bench) with 100 kwok GPU nodes, the CRDs, the release operator
//! binary as its own process, M bound PVCs, then M VLLMServices created as fast
//! as the API server takes them; the Available count is sampled every 100 ms from
//! a watch. Then a steady window and an operator restart with nothing changed.
//! Results go to bench/results-<timestamp>.json and a section of BENCHMARKS.md.

mod cluster;
mod operator;
mod procfs;
mod prom;
mod report;
mod workload;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};

use cluster::{ApiRequests, Cluster, READ_VERBS, WRITE_VERBS};
use operator::{OperatorMetrics, OperatorProc};
use report::{ClusterShape, Report, RunResult, SizeResult};
use workload::Availability;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum Variant {
    /// Deployment + Service per VLLMService.
    Plain,
    /// Also a gatewayRef (HTTPRoute) and monitoring (ServiceMonitor, PrometheusRule).
    Routed,
    /// No operator: the harness creates the Deployment and Service the operator
    /// would make for each service (from the operator's builders) and waits until
    /// every Deployment is Available: what the control plane alone needs.
    Direct,
    /// No operator: the harness sends what the product needs sent, as the user
    /// and the operator would: each VLLMService create, its Deployment and
    /// Service (owned by it), and once the Deployment is Available one status
    /// write (a status shaped like the operator's) and one event. Ends like a
    /// plain run, when every VLLMService says Available: the product's floor,
    /// without the operator's watches, CPU, log read or timing.
    Floor,
}

#[derive(Parser, Debug)]
#[command(about = "Scale benchmark of vllmservice-operator on a local cluster")]
struct Args {
    /// Numbers of VLLMServices, one measurement series each.
    #[arg(long, value_delimiter = ',', default_values_t = [100, 1000])]
    sizes: Vec<usize>,
    /// Runs per size: one number for every size, or one per size (default: 3 for
    /// M ≤ 100, 1 above).
    #[arg(long, value_delimiter = ',')]
    runs: Vec<usize>,
    #[arg(long, value_enum, default_value = "plain")]
    variant: Variant,
    /// Fake GPU nodes.
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    /// nvidia.com/gpu per node. 16, not 8: 100 × 8 = 800 GPUs cannot hold 1,000
    /// one-GPU services.
    #[arg(long, default_value_t = 16)]
    gpus_per_node: usize,
    /// Length of the steady-state window after convergence, in seconds.
    #[arg(long, default_value_t = 120)]
    steady_seconds: u64,
    /// Create requests in flight.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Give up on convergence after this many seconds (default 180 + 0.6 s per service).
    #[arg(long)]
    timeout_seconds: Option<u64>,
    /// The operator binary (as it ships: `hack/images/shipped.sh`, static musl, dist profile).
    #[arg(
        long,
        default_value = "target/shipped/x86_64-unknown-linux-musl/dist/vllmservice-operator"
    )]
    operator_bin: PathBuf,
    /// An extra argument for `vllmservice-operator run` (repeatable), e.g.
    /// `--operator-arg=--concurrency=64`.
    #[arg(long = "operator-arg", allow_hyphen_values = true)]
    operator_args: Vec<String>,
    /// The bench cluster's state directory (never the tests' target/cluster).
    #[arg(long, default_value = "target/cluster-bench")]
    cluster_dir: PathBuf,
    /// Where results-<timestamp>.json goes.
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
    /// The Markdown file the summary is appended to.
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: PathBuf,
    /// A note recorded with the results (e.g. what was changed).
    #[arg(long, default_value = "")]
    label: String,
    /// The command line to record (hack/bench.sh passes its own).
    #[arg(long)]
    command: Option<String>,
    /// Timestamp used in file names (hack/bench.sh passes it so the plot matches).
    #[arg(long)]
    timestamp: Option<String>,
    /// Record kube-apiserver's CPU profile (Go pprof) over this many seconds from the
    /// first create, to `<out-dir>/apiserver-<timestamp>-m<M>-run<N>.pprof`
    /// (`go tool pprof -top` reads it); 0: none.
    #[arg(long, default_value_t = 0)]
    apiserver_profile_seconds: u64,
}

impl Args {
    fn runs_for(&self, index: usize, m: usize) -> usize {
        match self.runs.as_slice() {
            [] => {
                if m <= 100 {
                    3
                } else {
                    1
                }
            }
            [n] => *n,
            list => list.get(index).copied().unwrap_or(1),
        }
    }
}

fn log(msg: impl AsRef<str>) {
    eprintln!("bench: {}", msg.as_ref());
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let repo = std::env::current_dir()?;
    anyhow::ensure!(
        repo.join("hack/cluster/cluster.sh").exists(),
        "run from the repository root (hack/bench.sh does)"
    );
    let cluster_dir = repo.join(&args.cluster_dir);
    anyhow::ensure!(
        cluster_dir != repo.join("target/cluster"),
        "target/cluster is the tests' cluster; the bench uses its own directory"
    );
    let operator_bin = repo.join(&args.operator_bin);
    let runs_operator = !matches!(args.variant, Variant::Direct | Variant::Floor);
    anyhow::ensure!(
        !runs_operator || operator_bin.exists(),
        "{operator_bin:?} is missing: hack/images/shipped.sh builds it"
    );
    let routed = args.variant == Variant::Routed;
    let timestamp = args.timestamp.clone().unwrap_or_else(|| {
        k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string()
    });
    std::fs::create_dir_all(repo.join(&args.out_dir))?;
    let json_path = repo
        .join(&args.out_dir)
        .join(format!("results-{timestamp}.json"));
    let plot = format!("{}/available-{timestamp}.png", args.out_dir.display());

    let cluster = Cluster {
        repo: repo.clone(),
        dir: cluster_dir,
        nodes: args.nodes,
        gpus_per_node: args.gpus_per_node,
    };
    let crds = cluster::crd_files(&repo, routed)?;
    let mut report = Report {
        timestamp: timestamp.clone(),
        command: args
            .command
            .clone()
            .unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" ")),
        label: args.label.clone(),
        variant: format!("{:?}", args.variant).to_lowercase(),
        machine: procfs::Machine::read(),
        versions: versions(&repo, runs_operator.then_some(operator_bin.as_path())),
        cluster: ClusterShape {
            nodes: args.nodes,
            gpus_per_node: args.gpus_per_node,
            steady_seconds: args.steady_seconds,
            create_concurrency: args.create_concurrency,
        },
        operator_command: format!(
            "{} run --metrics-addr 127.0.0.1:<free port>{}",
            args.operator_bin.display(),
            args.operator_args
                .iter()
                .map(|a| format!(" {a}"))
                .collect::<String>()
        ),
        minimum_writes_per_service: minimum_writes(args.variant),
        sizes: Vec::new(),
        plot: plot.clone(),
    };

    let result = async {
        for (index, &m) in args.sizes.iter().enumerate() {
            let mut size = SizeResult {
                m,
                runs: Vec::new(),
                summary: BTreeMap::new(),
            };
            for run in 1..=args.runs_for(index, m) {
                log(format!("=== M = {m}, run {run}"));
                let r = one_run(&args, &cluster, &crds, &operator_bin, m, run).await?;
                log(format!(
                    "M = {m} run {run}: converged={} t50={:.1}s t90={:.1}s t100={:.1}s writes/service={:.2} steady writes={} restart writes={}",
                    r.converged,
                    r.figures.get("t50_s").copied().unwrap_or(f64::NAN),
                    r.figures.get("t90_s").copied().unwrap_or(f64::NAN),
                    r.figures.get("t100_s").copied().unwrap_or(f64::NAN),
                    r.figures["writes_per_service"],
                    r.figures["steady_writes"],
                    r.figures["restart_writes"],
                ));
                size.runs.push(r);
                size.summary = report::summarize(&size.runs);
                // Saved after every run: an interrupted invocation keeps what it measured.
                let mut partial = report.clone();
                partial.sizes.push(size.clone());
                std::fs::write(&json_path, serde_json::to_string_pretty(&partial)?)?;
            }
            report.sizes.push(size);
        }
        anyhow::Ok(())
    }
    .await;
    let _ = cluster.down();
    result?;

    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)?;
    let md_path = repo.join(&args.markdown);
    let mut md = std::fs::read_to_string(&md_path).unwrap_or_else(|_| {
        "# Benchmarks\n\nSections below are appended by `hack/bench.sh`.\n".to_string()
    });
    md.push_str(&report::markdown(&report));
    std::fs::write(&md_path, md)?;
    log(format!("results: {}", json_path.display()));
    log(format!("summary appended to {}", md_path.display()));
    println!("{}", json_path.display());
    Ok(())
}

/// The floor variant's status writes in flight (the operator's default `--concurrency`).
const FLOOR_IN_FLIGHT: usize = 16;

/// What each service needs written, at the least: one create per child, one
/// status write (Available: the bench runs the operator with a settle window,
/// `--status-settle-seconds=5`, within which a new service's first status waits
/// for its pods, and the kwok pods are ready within it), and the one event naming every child created
/// (a first status that is already Available is not announced again).
fn minimum_writes(variant: Variant) -> BTreeMap<String, u64> {
    if variant == Variant::Direct {
        // The harness's own creates: there is no status and no event.
        return [("create deployments", 1), ("create services", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    }
    let routed = variant == Variant::Routed;
    let mut m: BTreeMap<String, u64> = [
        ("create deployments", 1),
        ("create services", 1),
        ("patch vllmservices/status", 1),
        ("create events", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if routed {
        for k in [
            "create httproutes",
            "create servicemonitors",
            "create prometheusrules",
        ] {
            m.insert(k.to_string(), 1);
        }
    }
    m
}

/// The versions a run measured; `operator_bin` is None for the variants that run no operator.
fn versions(
    repo: &std::path::Path,
    operator_bin: Option<&std::path::Path>,
) -> BTreeMap<String, String> {
    let run = |cmd: &str, args: &[&str]| -> String {
        std::process::Command::new(cmd)
            .args(args)
            .current_dir(repo)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut v = BTreeMap::new();
    let rev = run("git", &["rev-parse", "--short=12", "HEAD"]);
    // Dirty when the sources the operator is built from differ from the commit.
    let dirty = !run(
        "git",
        &[
            "status",
            "--porcelain",
            "--",
            "crates/api",
            "crates/operator",
            "crates/cli",
            "Cargo.toml",
            "Cargo.lock",
        ],
    )
    .is_empty();
    v.insert(
        "operator git rev".into(),
        format!(
            "{rev}{}",
            if dirty {
                " (+ uncommitted changes)"
            } else {
                ""
            }
        ),
    );
    v.insert("rustc".into(), run("rustc", &["--version"]));
    if let Some(bin) = operator_bin {
        let bin = bin.to_string_lossy();
        v.insert("operator".into(), run(&bin, &["--version"]));
        // Which build exactly: two invocations with the same hash measured the same binary.
        let sha = run("sha256sum", &[&bin]);
        v.insert(
            "operator binary sha256".into(),
            sha.split_whitespace()
                .next()
                .unwrap_or("")
                .chars()
                .take(12)
                .collect(),
        );
    }
    for (name, module, file) in [
        (
            "kubernetes",
            "k8s.io/kubernetes",
            "hack/cluster/kube/go.mod",
        ),
        (
            "etcd",
            "go.etcd.io/etcd/server/v3",
            "hack/cluster/etcd/go.mod",
        ),
        ("kwok", "sigs.k8s.io/kwok", "hack/cluster/kwok/go.mod"),
    ] {
        let gomod = std::fs::read_to_string(repo.join(file)).unwrap_or_default();
        if let Some(ver) = gomod.lines().find_map(|l| {
            let l = l.trim().trim_start_matches("require ").trim();
            l.strip_prefix(module)
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_string)
        }) {
            v.insert(name.into(), ver);
        }
    }
    v
}

/// The CPU each process used between two readings.
fn cpu_delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

fn all_cpu(cluster: &Cluster, op: &OperatorProc) -> BTreeMap<String, f64> {
    let mut c = cluster.component_cpu();
    c.insert("operator".into(), op.cpu_seconds());
    if let Some(me) = procfs::cpu_seconds(std::process::id()) {
        c.insert("bench (this harness)".into(), me);
    }
    c
}

async fn one_run(
    args: &Args,
    cluster: &Cluster,
    crds: &[PathBuf],
    operator_bin: &std::path::Path,
    m: usize,
    run: usize,
) -> anyhow::Result<RunResult> {
    if matches!(args.variant, Variant::Direct | Variant::Floor) {
        return direct_run(args, cluster, crds, m, run).await;
    }
    let routed = args.variant == Variant::Routed;
    log(format!(
        "starting a fresh cluster in {} ({} nodes × {} GPUs)",
        cluster.dir.display(),
        cluster.nodes,
        cluster.gpus_per_node
    ));
    cluster.up_fresh()?;
    let client = cluster.client().await?;
    cluster.install_crds(crds)?;
    workload::prepare_namespace(&client, routed).await?;
    log(format!("creating {m} bound PVCs (before the clock starts)"));
    workload::create_bound_pvcs(&client, m, args.create_concurrency).await?;

    let logs = cluster.dir.join("logs");
    let pid_file = cluster.dir.join("operator.pid");
    let op = OperatorProc::start(
        operator_bin,
        &args.operator_args,
        &cluster.kubeconfig(),
        logs.join(format!("operator-m{m}-run{run}.log")),
        &pid_file,
    )
    .await?;
    // Let it list and watch the (empty) world before the clock starts.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let avail = Arc::new(Mutex::new(Availability::default()));
    let watch = workload::watch_availability(client.clone(), avail.clone()).await?;
    let gateway_writes = Arc::new(AtomicU64::new(0));
    let gateway =
        routed.then(|| workload::fake_gateway_controller(client.clone(), gateway_writes.clone()));

    let api_before = ApiRequests::scrape(&client).await?;
    let op_before = op.metrics().await?;
    let cpu_before = all_cpu(cluster, &op);
    // The machine's speed just before the run, to compare runs taken apart.
    let probe = procfs::speed_probe();
    let jiffies_before = procfs::machine_jiffies();

    // The clock starts at the first create.
    let profile = start_profile(args, &client, m, run);
    let t0 = Instant::now();
    let t0_wall = k8s_openapi::jiff::Timestamp::now();
    let created = Arc::new(AtomicU64::new(0));
    let sampler = Sampler::start(avail.clone(), created.clone(), t0);
    let creator = tokio::spawn({
        let (client, created) = (client.clone(), created.clone());
        let concurrency = args.create_concurrency;
        async move {
            let retries =
                workload::create_services(&client, m, routed, concurrency, &created).await?;
            anyhow::Ok((t0.elapsed().as_secs_f64(), retries))
        }
    });

    let converged = wait_converged(&avail, m, t0, timeout_for(args, m), &created, Some(&op)).await;
    let t_end = t0.elapsed().as_secs_f64();
    let jiffies_after = procfs::machine_jiffies();
    let cpu_after = all_cpu(cluster, &op);
    let op_conv = op.metrics().await?;
    let api_after = ApiRequests::scrape(&client).await?;
    let mut r = Run { m, run, t0 }
        .result(
            converged,
            sampler,
            creator,
            &avail,
            "creating the VLLMServices",
        )
        .await?;
    let f = &mut r.figures;
    let writes = op_conv.writes_since(&op_before);
    let writes_total: u64 = writes.values().sum();
    f.insert("writes_total".into(), writes_total as f64);
    f.insert("writes_per_service".into(), writes_total as f64 / m as f64);
    let reconciles = op_conv.reconciles - op_before.reconciles;
    f.insert("reconciles".into(), reconciles as f64);
    f.insert(
        "reconciles_per_service".into(),
        reconciles as f64 / m as f64,
    );
    f.insert(
        "reconcile_errors".into(),
        (op_conv.reconcile_errors - op_before.reconcile_errors) as f64,
    );
    // Reconcile time summed over workers / wall time = reconciles in flight on
    // average; at the --concurrency limit the worker pool is the bottleneck.
    let busy = op_conv.duration_sum - op_before.duration_sum;
    f.insert(
        "reconcile_mean_ms".into(),
        1000.0 * busy / reconciles.max(1) as f64,
    );
    f.insert("reconciles_in_flight".into(), busy / t_end);
    if let Some(p) = prom::quantile(&op_conv.duration_buckets, 0.5) {
        f.insert("reconcile_p50_ms".into(), p * 1000.0);
    }
    if let Some(p) = prom::quantile(&op_conv.duration_buckets, 0.99) {
        f.insert("reconcile_p99_ms".into(), p * 1000.0);
    }
    r.writes = writes;

    let api = api_after.since(&api_before);
    let f = &mut r.figures;
    api_rates(&api, t_end, f);
    // During the run only the operator GETs single children, LISTs pods and
    // reads pod logs (the engine's settings); the controllers, the scheduler and
    // kwok work from their informers' caches.
    let mut operator_reads = api.get("GET deployments")
        + api.get("GET services")
        + api.get("GET persistentvolumeclaims")
        + api.get("LIST pods")
        + api.get("GET pods")
        + api.get("CONNECT pods/log");
    if routed {
        operator_reads += api.get("GET gateways")
            + api.get("GET httproutes")
            + api.get("GET servicemonitors")
            + api.get("GET prometheusrules");
    }
    f.insert(
        "operator_reads_per_service".into(),
        operator_reads / m as f64,
    );
    api_latencies(&api_before, &api_after, &mut r);
    r.apiserver_requests = api.0;
    let f = &mut r.figures;
    if routed {
        f.insert(
            "gateway_controller_writes".into(),
            gateway_writes.load(Ordering::Relaxed) as f64,
        );
    }

    let cpu = cpu_delta(&cpu_before, &cpu_after);
    let f = &mut r.figures;
    let busy_s = cpu_figures(&cpu, (jiffies_before, jiffies_after), probe, t_end, f);
    if busy_s > 0.0 {
        f.insert(
            "operator_cpu_share_pct".into(),
            100.0 * cpu.get("operator").copied().unwrap_or(0.0) / busy_s,
        );
    }
    f.insert(
        "operator_cpu_s".into(),
        cpu.get("operator").copied().unwrap_or(f64::NAN),
    );
    r.cpu_seconds_by_process = cpu;
    f.insert("operator_rss_converged_mib".into(), op.rss_mib());

    // Steady state: nothing changes; the goal is no write at all.
    log(format!("steady window: {} s", args.steady_seconds));
    let cpu_steady0 = op.cpu_seconds();
    avail.lock().expect("availability lock").record_changes = true;
    tokio::time::sleep(Duration::from_secs(args.steady_seconds)).await;
    let op_steady = op.metrics().await?;
    {
        let mut a = avail.lock().expect("availability lock");
        a.record_changes = false;
        r.steady_status_changes = std::mem::take(&mut a.changes);
    }
    r.steady_writes = op_steady.writes_since(&op_conv);
    let f = &mut r.figures;
    f.insert(
        "steady_writes".into(),
        r.steady_writes.values().sum::<u64>() as f64,
    );
    f.insert(
        "steady_reconciles".into(),
        (op_steady.reconciles - op_conv.reconciles) as f64,
    );
    f.insert(
        "operator_cpu_steady_s".into(),
        op.cpu_seconds() - cpu_steady0,
    );
    f.insert("operator_peak_rss_mib".into(), op.peak_rss_mib());
    f.insert("operator_rss_steady_mib".into(), op.rss_mib());

    // Restart with nothing changed: a new process re-reconciles everything.
    log("restarting the operator (nothing changed)");
    op.stop().await?;
    let op2 = OperatorProc::start(
        operator_bin,
        &args.operator_args,
        &cluster.kubeconfig(),
        logs.join(format!("operator-m{m}-run{run}-restart.log")),
        &pid_file,
    )
    .await?;
    let t_restart = Instant::now();
    let mut all_reconciled: Option<f64> = None;
    let mut last = OperatorMetrics::default();
    let mut quiet_since = Instant::now();
    let restart_metrics = loop {
        let now = op2.metrics().await?;
        if all_reconciled.is_none() && now.reconciles >= m as u64 {
            all_reconciled = Some(t_restart.elapsed().as_secs_f64());
        }
        if now.reconciles != last.reconciles || now.write_total() != last.write_total() {
            quiet_since = Instant::now();
        }
        last = now;
        let quiet = quiet_since.elapsed() > Duration::from_secs(5);
        if (all_reconciled.is_some() && quiet) || t_restart.elapsed() > Duration::from_secs(180) {
            break last;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    r.restart_writes = restart_metrics.writes_since(&OperatorMetrics::default());
    let f = &mut r.figures;
    f.insert(
        "restart_writes".into(),
        r.restart_writes.values().sum::<u64>() as f64,
    );
    f.insert(
        "restart_reconcile_all_s".into(),
        all_reconciled.unwrap_or(f64::NAN),
    );
    f.insert("restart_peak_rss_mib".into(), op2.peak_rss_mib());
    f.insert("restart_cpu_s".into(), op2.cpu_seconds());
    let still = avail.lock().expect("availability lock").available();
    f.insert("available_after_restart".into(), still as f64);
    op2.stop().await?;
    let _ = std::fs::remove_file(&pid_file);

    watch.abort();
    if let Some(g) = gateway {
        g.abort();
    }
    // Read last: the lists must not disturb the measured windows.
    read_last(&client, t0_wall, &mut r).await;
    finish_profile(profile).await;
    cluster.down()?;
    Ok(r)
}

/// What a run reads after its measured windows (the lists must not disturb them): the
/// stage timestamps of the objects and the cluster's events.
async fn read_last(
    client: &kube::Client,
    t0_wall: k8s_openapi::jiff::Timestamp,
    r: &mut RunResult,
) {
    match workload::stage_times(client, t0_wall).await {
        Ok(stages) => r.stages = stages,
        Err(e) => log(format!("reading the stage timestamps failed: {e}")),
    }
    match workload::events_by_reason(client).await {
        Ok(events) => r.events = events,
        Err(e) => log(format!("counting the events failed: {e}")),
    }
}

/// Starts recording kube-apiserver's CPU profile if asked (`--apiserver-profile-seconds`).
fn start_profile(
    args: &Args,
    client: &kube::Client,
    m: usize,
    run: usize,
) -> Option<tokio::task::JoinHandle<()>> {
    let seconds = args.apiserver_profile_seconds;
    if seconds == 0 {
        return None;
    }
    let stamp = args.timestamp.clone().unwrap_or_else(|| "now".into());
    let path = args
        .out_dir
        .join(format!("apiserver-{stamp}-m{m}-run{run}.pprof"));
    let client = client.clone();
    Some(tokio::spawn(async move {
        match cluster::apiserver_profile(&client, seconds, &path).await {
            Ok(()) => log(format!("kube-apiserver CPU profile: {}", path.display())),
            Err(e) => log(format!(
                "recording kube-apiserver's CPU profile failed: {e:#}"
            )),
        }
    }))
}

/// Waits for the profile (it ends by itself after its seconds).
async fn finish_profile(profile: Option<tokio::task::JoinHandle<()>>) {
    if let Some(p) = profile {
        let _ = p.await;
    }
}

/// How long a run waits for convergence (default 180 + 0.6 s per service).
fn timeout_for(args: &Args, m: usize) -> Duration {
    Duration::from_secs(
        args.timeout_seconds
            .unwrap_or(180 + (m as f64 * 0.6) as u64),
    )
}

/// The Available count every 100 ms: (seconds since t0, created, available).
struct Sampler {
    sampling: Arc<AtomicBool>,
    timeline: Arc<Mutex<Vec<(f64, u64, usize)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(avail: Arc<Mutex<Availability>>, created: Arc<AtomicU64>, t0: Instant) -> Sampler {
        let sampling = Arc::new(AtomicBool::new(true));
        let timeline = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let (sampling, timeline) = (sampling.clone(), timeline.clone());
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(100));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                while sampling.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let a = avail.lock().expect("availability lock").available();
                    timeline.lock().expect("timeline lock").push((
                        t0.elapsed().as_secs_f64(),
                        created.load(Ordering::Relaxed),
                        a,
                    ));
                }
            }
        });
        Sampler {
            sampling,
            timeline,
            task,
        }
    }

    /// Stops after a few samples past convergence (for the plot); the timeline.
    async fn finish(self) -> Vec<(f64, u64, usize)> {
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.sampling.store(false, Ordering::Relaxed);
        let _ = self.task.await;
        std::mem::take(&mut *self.timeline.lock().expect("timeline lock"))
    }
}

/// Waits until `m` objects are Available or `timeout` passes since `t0`,
/// logging progress every 10 s; true when converged.
async fn wait_converged(
    avail: &Mutex<Availability>,
    m: usize,
    t0: Instant,
    timeout: Duration,
    created: &AtomicU64,
    op: Option<&OperatorProc>,
) -> bool {
    let mut last_progress = Instant::now();
    loop {
        let a = avail.lock().expect("availability lock").available();
        // Every create done too: the direct variant's Deployments can be Available
        // before the last Services exist, and the operator writes a status only after
        // it created both.
        if a >= m && created.load(Ordering::Relaxed) >= m as u64 {
            return true;
        }
        if t0.elapsed() > timeout {
            return false;
        }
        if last_progress.elapsed() > Duration::from_secs(10) {
            last_progress = Instant::now();
            let reconciles = match op {
                Some(op) => op
                    .metrics()
                    .await
                    .map(|x| format!(" operator reconciles={}", x.reconciles))
                    .unwrap_or_default(),
                None => String::new(),
            };
            log(format!(
                "  t={:>5.1}s created={} available={a}{reconciles}",
                t0.elapsed().as_secs_f64(),
                created.load(Ordering::Relaxed)
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which run of which size, and when its clock started.
struct Run {
    m: usize,
    run: usize,
    t0: Instant,
}

impl Run {
    /// The run's result so far: the timeline, the create task's time and
    /// retries, and the availability figures.
    async fn result(
        &self,
        converged: bool,
        sampler: Sampler,
        creator: tokio::task::JoinHandle<anyhow::Result<(f64, u64)>>,
        avail: &Mutex<Availability>,
        what: &'static str,
    ) -> anyhow::Result<RunResult> {
        let timeline = sampler.finish().await;
        let (create_s, create_retries) = creator
            .await
            .context("the create task panicked")?
            .context(what)?;
        let mut r = RunResult {
            m: self.m,
            run: self.run,
            converged,
            timeline,
            ..RunResult::default()
        };
        r.figures.insert("create_s".into(), create_s);
        r.figures
            .insert("create_retries".into(), create_retries as f64);
        availability_figures(avail, self.t0, self.m, &mut r);
        Ok(r)
    }
}

/// t50/t90/t100 from when each object was first seen Available, and not before the
/// harness had created that many (the direct variant's Deployments can be Available
/// before its last Services exist; the operator creates both before it writes a
/// status); the reasons of those that never were.
fn availability_figures(avail: &Mutex<Availability>, t0: Instant, m: usize, r: &mut RunResult) {
    let a = avail.lock().expect("availability lock");
    let mut times: Vec<f64> = a
        .first_available
        .values()
        .map(|t| t.saturating_duration_since(t0).as_secs_f64())
        .collect();
    times.sort_by(|x, y| x.total_cmp(y));
    for (key, q) in [("t50_s", 0.5), ("t90_s", 0.9), ("t100_s", 1.0)] {
        let needed = ((m as f64) * q).ceil() as usize;
        if needed >= 1 && times.len() >= needed {
            let created_by = r
                .timeline
                .iter()
                .find(|(_, created, _)| *created >= needed as u64)
                .map_or(0.0, |(t, _, _)| *t);
            r.figures
                .insert(key.into(), times[needed - 1].max(created_by));
        }
    }
    if !r.converged {
        r.not_available = a.reasons();
    }
}

/// The API server's read and write rates over the run.
fn api_rates(api: &ApiRequests, t_end: f64, f: &mut BTreeMap<String, f64>) {
    let (alloc_s, allocs) = api.2;
    if allocs > 0.0 {
        f.insert(
            "clusterip_allocation_mean_ms".into(),
            1000.0 * alloc_s / allocs,
        );
        f.insert(
            "clusterip_allocator_busy_pct".into(),
            100.0 * alloc_s / t_end,
        );
    }
    f.insert(
        "apiserver_reads_per_s".into(),
        api.total(&READ_VERBS) / t_end,
    );
    f.insert(
        "apiserver_writes_per_s".into(),
        api.total(&WRITE_VERBS) / t_end,
    );
}

/// p50/p99 latency of the request kinds a run sends most.
fn api_latencies(before: &ApiRequests, after: &ApiRequests, r: &mut RunResult) {
    for key in [
        "GET deployments",
        "GET services",
        "GET persistentvolumeclaims",
        "LIST pods",
        "APPLY deployments",
        "APPLY services",
        "POST deployments",
        "POST services",
        "APPLY vllmservices/status",
        "POST events",
        "POST vllmservices",
        "GET httproutes",
        "APPLY httproutes",
        "POST ipaddresses",
    ] {
        if let Some((p50, p99, n)) = after.latency_since(before, key)
            && n > 0.0
        {
            r.apiserver_latency_ms
                .insert(key.to_string(), (p50 * 1000.0, p99 * 1000.0, n));
        }
    }
}

/// How busy and how fast the machine was and the API server's share of the
/// CPU the measured processes used; returns their CPU seconds.
fn cpu_figures(
    cpu: &BTreeMap<String, f64>,
    jiffies: (Option<procfs::Jiffies>, Option<procfs::Jiffies>),
    (probe_alu_ms, probe_mem_ms): (f64, f64),
    t_end: f64,
    f: &mut BTreeMap<String, f64>,
) -> f64 {
    let busy_s: f64 = cpu.values().sum();
    f.insert("probe_alu_ms".into(), probe_alu_ms);
    f.insert("probe_mem_ms".into(), probe_mem_ms);
    if let (Some(a), Some(b)) = jiffies
        && b.total > a.total
    {
        let total = (b.total - a.total) as f64;
        f.insert(
            "machine_busy_pct".into(),
            100.0 * (b.busy - a.busy) as f64 / total,
        );
        f.insert(
            "machine_steal_pct".into(),
            100.0 * (b.steal - a.steal) as f64 / total,
        );
    }
    if let Some(busy_pct) = f.get("machine_busy_pct").copied() {
        // Cores busy with anything else (builds, other tests): the run's noise.
        let cores = procfs::Machine::read().cores as f64;
        f.insert(
            "other_processes_cores".into(),
            (cores * busy_pct / 100.0 - busy_s / t_end).max(0.0),
        );
    }
    if busy_s > 0.0 {
        f.insert(
            "apiserver_cpu_share_pct".into(),
            100.0 * cpu.get("kube-apiserver").copied().unwrap_or(0.0) / busy_s,
        );
    }
    f.insert(
        "apiserver_cpu_s".into(),
        cpu.get("kube-apiserver").copied().unwrap_or(f64::NAN),
    );
    busy_s
}

/// The direct and floor variants' run: the same cluster, PVCs and objects as a
/// plain run, created by the harness with no operator. Direct: every Deployment
/// Available (and every Service created) ends it; floor: every VLLMService
/// Available, as in a plain run.
async fn direct_run(
    args: &Args,
    cluster: &Cluster,
    crds: &[PathBuf],
    m: usize,
    run: usize,
) -> anyhow::Result<RunResult> {
    log(format!(
        "starting a fresh cluster in {} ({} nodes × {} GPUs); no operator",
        cluster.dir.display(),
        cluster.nodes,
        cluster.gpus_per_node
    ));
    cluster.up_fresh()?;
    let client = cluster.client().await?;
    cluster.install_crds(crds)?;
    workload::prepare_namespace(&client, false).await?;
    log(format!("creating {m} bound PVCs (before the clock starts)"));
    workload::create_bound_pvcs(&client, m, args.create_concurrency).await?;
    let floor = args.variant == Variant::Floor;
    let avail = Arc::new(Mutex::new(Availability::default()));
    let deployments = kube::api::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
    let watch = match floor {
        true => workload::watch_availability(client.clone(), avail.clone()).await?,
        false => {
            workload::watch_availability_of(client.clone(), avail.clone(), deployments).await?
        }
    };
    // The floor's status step: as many in flight as the operator's workers.
    let written = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let writer = floor
        .then(|| workload::floor_status_writer(client.clone(), FLOOR_IN_FLIGHT, written.clone()));
    let harness_cpu = || {
        let mut c = cluster.component_cpu();
        if let Some(me) = procfs::cpu_seconds(std::process::id()) {
            c.insert("bench (this harness)".into(), me);
        }
        c
    };
    let api_before = ApiRequests::scrape(&client).await?;
    let cpu_before = harness_cpu();
    // The machine's speed just before the run, to compare runs taken apart.
    let probe = procfs::speed_probe();
    let jiffies_before = procfs::machine_jiffies();

    let profile = start_profile(args, &client, m, run);
    let t0 = Instant::now();
    let t0_wall = k8s_openapi::jiff::Timestamp::now();
    let created = Arc::new(AtomicU64::new(0));
    let sampler = Sampler::start(avail.clone(), created.clone(), t0);
    let creator = tokio::spawn({
        let (client, created) = (client.clone(), created.clone());
        let concurrency = args.create_concurrency;
        async move {
            let retries =
                workload::create_without_operator(&client, m, floor, concurrency, &created).await?;
            anyhow::Ok((t0.elapsed().as_secs_f64(), retries))
        }
    });
    let converged = wait_converged(&avail, m, t0, timeout_for(args, m), &created, None).await;
    let t_end = t0.elapsed().as_secs_f64();
    let jiffies_after = procfs::machine_jiffies();
    let cpu_after = harness_cpu();
    let api_after = ApiRequests::scrape(&client).await?;
    let mut r = Run { m, run, t0 }
        .result(
            converged,
            sampler,
            creator,
            &avail,
            "creating the Deployments and Services",
        )
        .await?;
    if let Some(w) = writer {
        w.abort();
    }
    let api = api_after.since(&api_before);
    api_rates(&api, t_end, &mut r.figures);
    // The harness's creates (and the floor's status writes and events) stand
    // in for the operator's writes; the user's VLLMService creates are not counted.
    r.writes = BTreeMap::from([
        ("create deployments".to_string(), m as u64),
        ("create services".to_string(), m as u64),
    ]);
    let mut writes = 2 * m as u64;
    if floor {
        let statuses = written.0.load(Ordering::Relaxed);
        let events = written.1.load(Ordering::Relaxed);
        r.writes
            .insert("patch vllmservices/status".into(), statuses);
        r.writes.insert("create events".into(), events);
        writes += statuses + events;
    }
    r.figures.insert("writes_total".into(), writes as f64);
    r.figures
        .insert("writes_per_service".into(), writes as f64 / m as f64);
    api_latencies(&api_before, &api_after, &mut r);
    r.apiserver_requests = api.0;
    let cpu = cpu_delta(&cpu_before, &cpu_after);
    cpu_figures(
        &cpu,
        (jiffies_before, jiffies_after),
        probe,
        t_end,
        &mut r.figures,
    );
    r.cpu_seconds_by_process = cpu;
    // No operator: nothing to watch in a steady window or after a restart.
    r.figures.insert("steady_writes".into(), 0.0);
    r.figures.insert("restart_writes".into(), 0.0);
    watch.abort();
    read_last(&client, t0_wall, &mut r).await;
    finish_profile(profile).await;
    cluster.down()?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_runs_are_three_for_small_sizes_and_one_for_large() {
        let args = Args::parse_from(["bench"]);
        assert_eq!(args.sizes, vec![100, 1000]);
        assert_eq!((args.runs_for(0, 100), args.runs_for(1, 1000)), (3, 1));
        let args = Args::parse_from(["bench", "--runs", "2"]);
        assert_eq!((args.runs_for(0, 100), args.runs_for(1, 1000)), (2, 2));
        let args = Args::parse_from(["bench", "--runs", "3,2", "--operator-arg=--concurrency=64"]);
        assert_eq!((args.runs_for(0, 100), args.runs_for(1, 1000)), (3, 2));
        assert_eq!(args.operator_args, vec!["--concurrency=64"]);
    }

    #[test]
    fn the_minimum_counts_every_child() {
        assert_eq!(minimum_writes(Variant::Plain).values().sum::<u64>(), 4);
        assert_eq!(minimum_writes(Variant::Routed).values().sum::<u64>(), 7);
        assert_eq!(minimum_writes(Variant::Direct).values().sum::<u64>(), 2);
        assert_eq!(minimum_writes(Variant::Floor).values().sum::<u64>(), 4);
    }
}
