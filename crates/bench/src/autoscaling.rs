//! `bench-autoscaling`: the scaling figure (run it through `hack/bench-autoscaling.sh`).
//!
//! On the local cluster's real node with its autoscaling pipeline
//! (hack/cluster/autoscaling.sh: Prometheus and KEDA, real): one VLLMService
//! of the simulator with `autoscaling {min 1, max 3, requestsWaiting, target
//! 2}`, under a square-wave load (high: enough streaming requests to keep
//! several waiting at every replica count; low: none) for a fixed time. The
//! figure: per rising edge, the time to the first extra replica Ready and to
//! all of them; per falling edge, the time back to the minimum; and how often
//! spec.replicas changed over the whole window (the ideal is two changes per
//! period; more is flapping). The operator is the binary as users run it, `run
//! --watch-namespace <ns>`, in a namespace of the bench's own.

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

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::{
    Api, Client,
    api::{DynamicObject, PostParams},
};
use realnode::{MODEL, MOUNT, median, vllm};
use serde::Serialize;
use serde_json::json;
use testkit::load::{Load, LoadSpec};

#[derive(Parser, Debug)]
#[command(about = "Scaling figure: a square-wave load on one autoscaled VLLMService")]
struct Args {
    /// Length of the whole square wave.
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// One period: the load is on for the first half, off for the second.
    #[arg(long, default_value_t = 200)]
    period_seconds: u64,
    /// Requests in flight while the load is on.
    #[arg(long, default_value_t = 14)]
    concurrency: usize,
    /// Sequences per replica (engineArgs.maxNumSeqs): the rest wait.
    #[arg(long, default_value_t = 2)]
    max_num_seqs: i32,
    #[arg(long, default_value_t = 1)]
    min_replicas: i32,
    #[arg(long, default_value_t = 3)]
    max_replicas: i32,
    /// Waiting requests per replica (autoscaling.target).
    #[arg(long, default_value = "2")]
    target: String,
    /// autoscaling.scaleDownStabilizationSeconds.
    #[arg(long, default_value_t = 30)]
    stabilization_seconds: i32,
    /// max_tokens per request.
    #[arg(long, default_value_t = 40)]
    max_tokens: u32,
    /// The simulator's time per token (VLLM_SIM_TOKEN_DELAY_MS).
    #[arg(long, default_value_t = 10)]
    token_delay_ms: u32,
    /// The cluster (needs its real node and the autoscaling pipeline).
    #[arg(long, default_value = "target/cluster/kubeconfig")]
    kubeconfig: PathBuf,
    /// The operator binary.
    #[arg(long, default_value = "target/release/vllmservice-operator")]
    operator_bin: PathBuf,
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: PathBuf,
    #[arg(long, default_value = "")]
    label: String,
    #[arg(long)]
    command: Option<String>,
}

/// One observation of the service, every half second.
#[derive(Serialize, Debug, Clone, Copy, PartialEq)]
struct Sample {
    t: f64,
    load_on: bool,
    spec_replicas: i32,
    ready: i32,
}

#[derive(Serialize, Debug, Default)]
struct Edges {
    /// Rising edges: seconds to the first extra replica Ready, and to max.
    to_first_extra: Vec<f64>,
    to_max: Vec<Option<f64>>,
    /// Falling edges: seconds until spec.replicas is back at min and that many are ready.
    to_min: Vec<Option<f64>>,
    /// Changes of spec.replicas over the window, and the ideal (two per period).
    replica_changes: usize,
    ideal_changes: usize,
}

fn log(msg: impl AsRef<str>) {
    eprintln!("bench-autoscaling: {}", msg.as_ref());
}

/// The figure from the samples (pure, so that it can be checked on its own).
fn edges(samples: &[Sample], min: i32, max: i32) -> Edges {
    let mut e = Edges::default();
    let mut periods = 0;
    for (i, w) in samples.windows(2).enumerate() {
        let (a, b) = (w[0], w[1]);
        if a.spec_replicas != b.spec_replicas {
            e.replica_changes += 1;
        }
        if a.load_on == b.load_on {
            continue;
        }
        let after = &samples[i + 1..];
        let edge_on = b.load_on;
        let phase: Vec<&Sample> = after.iter().take_while(|s| s.load_on == edge_on).collect();
        let since = |s: &&Sample| s.t - b.t;
        if edge_on {
            periods += 1;
            let base = a.ready;
            if let Some(t) = phase.iter().find(|s| s.ready > base).map(since) {
                e.to_first_extra.push(t);
            }
            e.to_max
                .push(phase.iter().find(|s| s.ready >= max).map(since));
        } else {
            e.to_min.push(
                phase
                    .iter()
                    .find(|s| s.spec_replicas == min && s.ready == min)
                    .map(since),
            );
        }
    }
    e.ideal_changes = 2 * periods;
    e
}

async fn observe(client: &Client, ns: &str, name: &str, t0: Instant, load_on: bool) -> Sample {
    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &vllm());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let spec_replicas = match vss.get(name).await {
        Ok(vs) => vs.data["spec"]["replicas"].as_i64().unwrap_or(-1) as i32,
        Err(_) => -1,
    };
    let ready = match deployments.get(name).await {
        Ok(d) => d.status.and_then(|s| s.ready_replicas).unwrap_or(0),
        Err(_) => -1,
    };
    Sample {
        t: t0.elapsed().as_secs_f64(),
        load_on,
        spec_replicas,
        ready,
    }
}

fn markdown(args: &Args, timestamp: &str, machine: &str, e: &Edges) -> String {
    let fmt = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1} s"));
    let all = |v: &[Option<f64>]| v.iter().map(|x| fmt(*x)).collect::<Vec<_>>().join(", ");
    let settled = |v: &[Option<f64>]| median(v.iter().flatten().copied().collect());
    format!(
        "\n## Run {timestamp} — scaling figure{}\n\n`{}`: one VLLMService of the simulator on the real node, \
         `autoscaling {{minReplicas {}, maxReplicas {}, metric requestsWaiting, target {}, \
         scaleDownStabilizationSeconds {}}}`, engineArgs.maxNumSeqs {} (the rest of the requests wait); \
         a square wave of {} s: {} streaming chat requests in flight ({} tokens × {} ms) for the first half of \
         each {} s period, none in the second. Pipeline: the simulator's /metrics → Prometheus (2 s scrapes) → \
         KEDA's metrics API server → the HPA in kube-controller-manager (15 s sync) → the VLLMService's /scale → \
         the operator → the Deployment. Machine: {machine}.\n\n\
         | figure | median | each edge |\n|---|---|---|\n\
         | load step up → first extra replica Ready | {} | {} |\n\
         | load step up → {} replicas Ready | {} | {} |\n\
         | load step down → back at {} replica(s) | {} | {} |\n\
         | spec.replicas changes in {} s (ideal: 2 per period) | {} (ideal {}) | |\n",
        if args.label.is_empty() {
            String::new()
        } else {
            format!(" ({})", args.label)
        },
        args.command.as_deref().unwrap_or("bench-autoscaling"),
        args.min_replicas,
        args.max_replicas,
        args.target,
        args.stabilization_seconds,
        args.max_num_seqs,
        args.seconds,
        args.concurrency,
        args.max_tokens,
        args.token_delay_ms,
        args.period_seconds,
        fmt(median(e.to_first_extra.clone())),
        e.to_first_extra
            .iter()
            .map(|v| format!("{v:.1} s"))
            .collect::<Vec<_>>()
            .join(", "),
        args.max_replicas,
        fmt(settled(&e.to_max)),
        all(&e.to_max),
        args.min_replicas,
        fmt(settled(&e.to_min)),
        all(&e.to_min),
        args.seconds,
        e.replica_changes,
        e.ideal_changes,
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (repo, client) =
        realnode::prepare(&args.operator_bin, &args.kubeconfig, &args.out_dir).await?;
    let pipeline = testkit::autoscaling();
    let timestamp = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let machine = realnode::machine();

    let cleanup =
        realnode::namespace_with_models(&client, &args.kubeconfig, &repo, "bench-autoscaling", 1)
            .await?;
    let ns = cleanup.ns.clone();
    let logs = repo.join("target/bench-autoscaling");
    std::fs::create_dir_all(&logs)?;
    let pid_file = logs.join(format!("operator-{ns}.pid"));
    let op = operator::OperatorProc::start(
        &repo.join(&args.operator_bin),
        &["--watch-namespace".to_string(), ns.clone()],
        &args.kubeconfig,
        logs.join(format!("operator-{ns}.log")),
        &pid_file,
    )
    .await?;

    let name = "scaled";
    let body = json!({
        "apiVersion": "aiinfra.example.com/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": name},
        "spec": {
            "image": "localhost/vllm-sim:dev",
            "modelPath": format!("{MOUNT}/{MODEL}"),
            "modelName": MODEL,
            "nodeSelector": {"vllm.example.com/node": "real"},
            "tolerations": [{"key": "vllm.example.com/node", "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
            "storage": {"pvcName": "models-0", "mountPath": MOUNT},
            "shmSize": "64Mi",
            "engineArgs": {"maxNumSeqs": args.max_num_seqs},
            "env": [{"name": "VLLM_SIM_LOAD_SECONDS", "value": "1"},
                    {"name": "VLLM_SIM_TOKEN_DELAY_MS", "value": args.token_delay_ms.to_string()}],
            "readinessProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 3},
            "startupProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 120},
            "autoscaling": {
                "minReplicas": args.min_replicas, "maxReplicas": args.max_replicas,
                "metric": "requestsWaiting", "target": args.target,
                "prometheus": {"serverAddress": pipeline.prometheus_url},
                "scaleDownStabilizationSeconds": args.stabilization_seconds,
                "initialCooldownSeconds": 0
            }
        }
    });
    let vss: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vllm());
    vss.create(&PostParams::default(), &serde_json::from_value(body)?)
        .await?;
    // Settled at the minimum before the wave starts.
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs(180);
    loop {
        let s = observe(&client, &ns, name, t0, false).await;
        if s.spec_replicas == args.min_replicas && s.ready == args.min_replicas {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the service did not settle at {} replica(s): {s:?}",
            args.min_replicas
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let spec = services.get(name).await?.spec.context("a Service spec")?;
    let addr = format!(
        "{}:{}",
        spec.cluster_ip.context("a ClusterIP")?,
        spec.ports.context("ports")?[0].port
    );
    log(format!(
        "{name} ready at {}; square wave of {} s starts",
        args.min_replicas, args.seconds
    ));

    let t0 = Instant::now();
    let half = Duration::from_secs(args.period_seconds / 2);
    // The settled state before the first rising edge.
    let mut samples = vec![observe(&client, &ns, name, t0, false).await];
    let mut load: Option<Load> = None;
    let mut sent = 0;
    let mut failed = 0;
    while t0.elapsed() < Duration::from_secs(args.seconds) {
        let on = (t0.elapsed().as_secs() / half.as_secs().max(1)).is_multiple_of(2);
        match (on, load.is_some()) {
            (true, false) => {
                load = Some(Load::start(LoadSpec {
                    concurrency: args.concurrency,
                    max_tokens: args.max_tokens,
                    max_requests: 1_000_000,
                    max_duration: half + Duration::from_secs(5),
                    request_timeout: Duration::from_secs(60),
                    ..LoadSpec::new(addr.parse()?, MODEL)
                }));
                log(format!("{:.0} s: load on", t0.elapsed().as_secs_f64()));
            }
            (false, true) => {
                let l = load.take().expect("a load");
                let r = l.stop_async().await;
                sent += r.sent;
                failed += r.failed;
                log(format!(
                    "{:.0} s: load off ({})",
                    t0.elapsed().as_secs_f64(),
                    r.summary()
                ));
            }
            _ => {}
        }
        let s = observe(&client, &ns, name, t0, on).await;
        if samples.last().is_none_or(|p: &Sample| {
            p.spec_replicas != s.spec_replicas || p.ready != s.ready || p.load_on != s.load_on
        }) {
            log(format!(
                "{:.1} s: load {}, spec.replicas {}, ready {}",
                s.t,
                if s.load_on { "on" } else { "off" },
                s.spec_replicas,
                s.ready
            ));
        }
        samples.push(s);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    if let Some(l) = load.take() {
        let r = l.stop_async().await;
        sent += r.sent;
        failed += r.failed;
    }
    op.stop().await?;
    let _ = std::fs::remove_file(&pid_file);
    drop(cleanup);

    let e = edges(&samples, args.min_replicas, args.max_replicas);
    let json_path = args.out_dir.join(format!("autoscaling-{timestamp}.json"));
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json!({
            "timestamp": timestamp, "machine": machine, "command": args.command,
            "seconds": args.seconds, "period_seconds": args.period_seconds,
            "concurrency": args.concurrency, "max_num_seqs": args.max_num_seqs,
            "min_replicas": args.min_replicas, "max_replicas": args.max_replicas,
            "target": args.target, "stabilization_seconds": args.stabilization_seconds,
            "requests_sent": sent, "requests_failed": failed,
            "edges": e, "samples": samples
        }))?,
    )?;
    let md = markdown(&args, &timestamp, &machine, &e);
    realnode::append_markdown(&args.markdown, &md)?;
    log(format!(
        "results {json_path:?}, summary appended to {:?}",
        args.markdown
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, load_on: bool, spec_replicas: i32, ready: i32) -> Sample {
        Sample {
            t,
            load_on,
            spec_replicas,
            ready,
        }
    }

    #[test]
    fn edges_time_each_step_and_count_flapping() {
        let samples = [
            s(0.0, true, 1, 1),
            s(1.0, true, 1, 1),
            s(20.0, true, 3, 1),
            s(25.0, true, 3, 2),
            s(30.0, true, 3, 3),
            s(50.0, false, 3, 3),
            s(60.0, false, 2, 3),
            s(70.0, false, 3, 3),
            s(90.0, false, 1, 1),
            s(100.0, true, 1, 1),
            s(110.0, true, 2, 2),
        ];
        let e = edges(&samples, 1, 3);
        // The first sample is on already: only the rising edge at 100 s counts.
        assert_eq!(e.to_first_extra, vec![10.0]);
        assert_eq!(e.to_max, vec![None]);
        assert_eq!(e.to_min, vec![Some(40.0)]);
        // 1→3, 3→2, 2→3 (flapping), 3→1, 1→2.
        assert_eq!(e.replica_changes, 5);
        assert_eq!(e.ideal_changes, 2);
    }
}
