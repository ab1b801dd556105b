//! `bench-rollout`: the rollout figure (run it through `hack/bench-rollout.sh`).
//!
//! On the local cluster's real node (the simulator really runs, kube-proxy
//! really routes): N VLLMServices with R replicas each, a steady load of
//! streaming chat completions on each one's ClusterIP (testkit::load), then a
//! rolling update of all N at once (an env change); the figure is requests
//! sent / failed and latency while it runs, with drain on
//! (`drainSeconds 10, preStopSeconds 3`) and off (`0, 0`). The operator is the
//! binary as users run it, `run --watch-namespace <ns>`, in a namespace of the
//! bench's own that is deleted at the end.

#[allow(dead_code)]
mod operator;
#[allow(dead_code)]
mod procfs;
#[allow(dead_code)]
mod prom;
mod realnode;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
};
use kube::{
    Api, Client,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
};
use realnode::{MODEL, MOUNT, median, vllm};
use serde::Serialize;
use serde_json::{Value, json};
use testkit::load::{Load, LoadSpec, Report};

#[derive(Parser, Debug)]
#[command(
    about = "Rollout figure: requests during a rolling update on the real node, drain on vs off"
)]
struct Args {
    /// VLLMServices updated at once.
    #[arg(long, default_value_t = 3)]
    services: usize,
    /// Replicas of each.
    #[arg(long, default_value_t = 2)]
    replicas: i32,
    /// Requests in flight per service.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// max_tokens per request.
    #[arg(long, default_value_t = 16)]
    max_tokens: u32,
    /// The simulator's time per token (VLLM_SIM_TOKEN_DELAY_MS).
    #[arg(long, default_value_t = 40)]
    token_delay_ms: u32,
    /// Runs per mode (drain on, drain off).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// The cluster (needs its real node, docs/local-cluster.md).
    #[arg(long, default_value = "target/cluster/kubeconfig")]
    kubeconfig: PathBuf,
    /// The operator binary.
    #[arg(long, default_value = "target/release/vllmservice-operator")]
    operator_bin: PathBuf,
    /// Give up on one rollout after this many seconds.
    #[arg(long, default_value_t = 180)]
    timeout_seconds: u64,
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: PathBuf,
    #[arg(long, default_value = "")]
    label: String,
    #[arg(long)]
    command: Option<String>,
}

#[derive(Clone, Copy, Serialize, Debug)]
struct Mode {
    name: &'static str,
    drain_seconds: i32,
    pre_stop_seconds: i32,
}

const MODES: [Mode; 2] = [
    Mode {
        name: "drain on",
        drain_seconds: 10,
        pre_stop_seconds: 3,
    },
    Mode {
        name: "drain off",
        drain_seconds: 0,
        pre_stop_seconds: 0,
    },
];

#[derive(Serialize, Debug)]
struct RunResult {
    mode: Mode,
    sent: u64,
    ok: u64,
    failed: u64,
    failures: Vec<(String, u64)>,
    first_failures: Vec<String>,
    median_ms: Option<u128>,
    p99_ms: Option<u128>,
    max_ms: Option<u128>,
    rollout_seconds: f64,
}

fn log(msg: impl AsRef<str>) {
    eprintln!("bench-rollout: {}", msg.as_ref());
}

fn service_name(i: usize) -> String {
    format!("svc-{i}")
}

fn service_body(args: &Args, i: usize, mode: Mode, revision: u32) -> Value {
    json!({
        "apiVersion": "aiinfra.example.com/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": service_name(i)},
        "spec": {
            "image": "localhost/vllm-sim:dev",
            "modelPath": format!("{MOUNT}/{MODEL}"),
            "modelName": MODEL,
            "replicas": args.replicas,
            "nodeSelector": {"vllm.example.com/node": "real"},
            "tolerations": [{"key": "vllm.example.com/node", "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
            "storage": {"pvcName": format!("models-{i}"), "mountPath": MOUNT},
            "shmSize": "64Mi",
            "env": [{"name": "VLLM_SIM_LOAD_SECONDS", "value": "1"},
                    {"name": "VLLM_SIM_TOKEN_DELAY_MS", "value": args.token_delay_ms.to_string()},
                    {"name": "BENCH_REVISION", "value": revision.to_string()}],
            "readinessProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 3},
            "startupProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 120},
            "shutdown": {"drainSeconds": mode.drain_seconds, "preStopSeconds": mode.pre_stop_seconds},
            "rollout": {"strategy": "Surge", "maxSurge": 1, "maxUnavailable": 0}
        }
    })
}

/// True once every Deployment has rolled out its template to exactly
/// `replicas` ready pods, with no other pod left (terminating ones included).
async fn all_settled(client: &Client, ns: &str, args: &Args) -> anyhow::Result<bool> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &vllm());
    let r = Some(args.replicas);
    for i in 0..args.services {
        let name = service_name(i);
        let Some(d) = deployments.get_opt(&name).await? else {
            return Ok(false);
        };
        let s = d.status.clone().unwrap_or_default();
        if !(s.observed_generation == d.metadata.generation
            && s.updated_replicas == r
            && s.ready_replicas == r
            && s.available_replicas == r
            && s.replicas == r)
        {
            return Ok(false);
        }
        let selector = format!("app.kubernetes.io/instance={name}");
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        if list.items.len() != args.replicas as usize
            || list
                .items
                .iter()
                .any(|p| p.metadata.deletion_timestamp.is_some())
        {
            return Ok(false);
        }
        let vs = vss.get(&name).await?;
        let available = vs.data["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        let observed = vs.data["status"]["observedGeneration"].as_i64() == vs.metadata.generation;
        if !(available && observed) {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn wait_settled(client: &Client, ns: &str, args: &Args, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    while !all_settled(client, ns, args).await? {
        if Instant::now() > deadline {
            let out = std::process::Command::new("kubectl")
                .env("KUBECONFIG", &args.kubeconfig)
                .args(["-n", ns, "get", "pods,deployments", "-o", "wide"])
                .output()?;
            bail!(
                "{what}: not settled within {} s:\n{}",
                args.timeout_seconds,
                String::from_utf8_lossy(&out.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

async fn one_run(
    client: &Client,
    args: &Args,
    repo: &std::path::Path,
    mode: Mode,
    run: usize,
) -> anyhow::Result<RunResult> {
    let prefix = if mode.drain_seconds > 0 {
        "bench-rollout-drain"
    } else {
        "bench-rollout-nodrain"
    };
    let cleanup =
        realnode::namespace_with_models(client, &args.kubeconfig, repo, prefix, args.services)
            .await?;
    let ns = cleanup.ns.clone();

    let logs = repo.join("target/bench-rollout");
    std::fs::create_dir_all(&logs)?;
    let op_log = logs.join(format!("operator-{ns}.log"));
    let pid_file = logs.join(format!("operator-{ns}.pid"));
    let op = operator::OperatorProc::start(
        &repo.join(&args.operator_bin),
        &["--watch-namespace".to_string(), ns.clone()],
        &args.kubeconfig,
        op_log,
        &pid_file,
    )
    .await?;

    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vllm());
    for i in 0..args.services {
        let obj: DynamicObject = serde_json::from_value(service_body(args, i, mode, 1))?;
        vss.create(&PostParams::default(), &obj).await?;
    }
    wait_settled(client, &ns, args, "the first rollout").await?;
    log(format!(
        "{} run {run}: {} services × {} replicas ready",
        mode.name, args.services, args.replicas
    ));

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut loads = Vec::new();
    for i in 0..args.services {
        let svc = services.get(&service_name(i)).await?;
        let spec = svc.spec.context("a Service spec")?;
        let addr = format!(
            "{}:{}",
            spec.cluster_ip.context("a ClusterIP")?,
            spec.ports.context("ports")?[0].port
        );
        loads.push(Load::start(LoadSpec {
            concurrency: args.concurrency,
            max_tokens: args.max_tokens,
            max_requests: 100_000,
            max_duration: Duration::from_secs(args.timeout_seconds + 60),
            request_timeout: Duration::from_secs(20),
            ..LoadSpec::new(addr.parse()?, MODEL)
        }));
    }
    // The load flows before the change.
    let deadline = Instant::now() + Duration::from_secs(30);
    while loads
        .iter()
        .any(|l| l.report().ok < args.concurrency as u64)
    {
        if Instant::now() > deadline {
            bail!(
                "the load did not flow: {:?}",
                loads
                    .iter()
                    .map(|l| l.report().summary())
                    .collect::<Vec<_>>()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let started = Instant::now();
    for i in 0..args.services {
        let env = service_body(args, i, mode, 2)["spec"]["env"].clone();
        vss.patch(
            &service_name(i),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"env": env}})),
        )
        .await?;
    }
    // The operator applies the new templates; then wait for them to roll out.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    'applied: loop {
        let mut all = true;
        for i in 0..args.services {
            let d = deployments.get(&service_name(i)).await?;
            let env = d
                .spec
                .and_then(|s| s.template.spec)
                .map(|s| s.containers[0].env.clone());
            let revised = env.flatten().is_some_and(|e| {
                e.iter()
                    .any(|v| v.name == "BENCH_REVISION" && v.value.as_deref() == Some("2"))
            });
            all &= revised;
        }
        if all {
            break 'applied;
        }
        if Instant::now() > deadline {
            bail!(
                "the operator did not apply the new templates within {} s",
                args.timeout_seconds
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_settled(client, &ns, args, "the rolling update").await?;
    let rollout_seconds = started.elapsed().as_secs_f64();
    let reports: Vec<Report> =
        tokio::task::spawn_blocking(move || loads.into_iter().map(Load::stop).collect()).await?;
    op.stop().await?;
    let _ = std::fs::remove_file(&pid_file);

    let mut merged = Report::default();
    for r in &reports {
        merged.sent += r.sent;
        merged.ok += r.ok;
        merged.failed += r.failed;
        for (k, n) in &r.failures {
            *merged.failures.entry(*k).or_default() += n;
        }
        for f in &r.first_failures {
            if merged.first_failures.len() < testkit::load::FIRST_FAILURES {
                merged.first_failures.push(f.clone());
            }
        }
        merged.latencies.extend(r.latencies.iter().copied());
    }
    merged.latencies.sort();
    merged.elapsed = reports.iter().map(|r| r.elapsed).max().unwrap_or_default();
    log(format!(
        "{} run {run}: {}; rollout {rollout_seconds:.1} s",
        mode.name,
        merged.summary()
    ));
    Ok(RunResult {
        mode,
        sent: merged.sent,
        ok: merged.ok,
        failed: merged.failed,
        failures: merged
            .failures
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect(),
        first_failures: merged
            .first_failures
            .iter()
            .map(|(k, d)| format!("{k}: {d}"))
            .collect(),
        median_ms: merged.median().map(|d| d.as_millis()),
        p99_ms: merged.p99().map(|d| d.as_millis()),
        max_ms: merged.latency_quantile(1.0).map(|d| d.as_millis()),
        rollout_seconds,
    })
}

fn markdown(args: &Args, timestamp: &str, machine: &str, results: &[RunResult]) -> String {
    let mut s = format!(
        "\n## Run {timestamp} — rollout figure{}\n\n`{}`: {} VLLMServices × {} replicas of the simulator on the real node, \
         rolled out at once (an env change, Surge maxSurge 1 maxUnavailable 0) under {} streaming chat \
         requests in flight per service on its ClusterIP ({} tokens × {} ms); {} run(s) per mode, medians. \
         Machine: {machine}.\n\n\
         | mode | sent | failed | failures by kind (all runs) | median | p99 | rollout time |\n|---|---|---|---|---|---|---|\n",
        if args.label.is_empty() {
            String::new()
        } else {
            format!(" ({})", args.label)
        },
        args.command.as_deref().unwrap_or("bench-rollout"),
        args.services,
        args.replicas,
        args.concurrency,
        args.max_tokens,
        args.token_delay_ms,
        args.runs
    );
    for mode in MODES {
        let runs: Vec<&RunResult> = results
            .iter()
            .filter(|r| r.mode.name == mode.name)
            .collect();
        let m = |f: &dyn Fn(&RunResult) -> Option<f64>| {
            median(runs.iter().filter_map(|r| f(r)).collect())
        };
        let fmt = |v: Option<f64>, unit: &str| {
            v.map(|v| format!("{v:.0}{unit}"))
                .unwrap_or_else(|| "-".into())
        };
        let mut sums = std::collections::BTreeMap::<&str, u64>::new();
        for r in &runs {
            for (k, n) in &r.failures {
                *sums.entry(k.as_str()).or_default() += n;
            }
        }
        let kinds: Vec<String> = sums.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        s.push_str(&format!(
            "| {} (drainSeconds {}, preStopSeconds {}) | {} | {} | {} | {} | {} | {} |\n",
            mode.name,
            mode.drain_seconds,
            mode.pre_stop_seconds,
            fmt(m(&|r| Some(r.sent as f64)), ""),
            fmt(m(&|r| Some(r.failed as f64)), ""),
            if kinds.is_empty() {
                "–".to_string()
            } else {
                kinds.join(", ")
            },
            fmt(m(&|r| r.median_ms.map(|v| v as f64)), " ms"),
            fmt(m(&|r| r.p99_ms.map(|v| v as f64)), " ms"),
            m(&|r| Some(r.rollout_seconds))
                .map(|v| format!("{v:.1} s"))
                .unwrap_or_default(),
        ));
    }
    s
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (repo, client) =
        realnode::prepare(&args.operator_bin, &args.kubeconfig, &args.out_dir).await?;
    let timestamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let machine = realnode::machine();
    let mut results = Vec::new();
    for run in 1..=args.runs {
        for mode in MODES {
            results.push(one_run(&client, &args, &repo, mode, run).await?);
        }
    }
    let json_path = args.out_dir.join(format!("rollout-{timestamp}.json"));
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json!({
            "timestamp": timestamp, "machine": machine, "services": args.services,
            "replicas": args.replicas, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
            "token_delay_ms": args.token_delay_ms, "command": args.command, "runs": results
        }))?,
    )?;
    let md = markdown(&args, &timestamp, &machine, &results);
    realnode::append_markdown(&args.markdown, &md)?;
    log(format!(
        "results {json_path:?}, summary appended to {:?}",
        args.markdown
    ));
    Ok(())
}
