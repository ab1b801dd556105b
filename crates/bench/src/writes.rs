//! `bench-writes`: what one write of each kind the operator could send costs
//! the API server (run it through `hack/bench-writes.sh`).
//!
//! On a fresh bench cluster with no operator, N writes of one kind at a time
//! (`--concurrency` in flight, as the operator's workers send them), and the
//! CPU that kube-apiserver and etcd spent on them from /proc, minus what they
//! spend idle over the same time. Pairs that do the same thing: creating a
//! Deployment or a Service with a POST or with a server-side apply, and
//! writing a VLLMService's status with a server-side apply or a merge patch;
//! events (events.k8s.io/v1 POST) for reference; and the one read the operator
//! sends, a vLLM container's log (`pods/log`, which kube-apiserver fetches
//! from the node's kubelet, here kwok). Every round runs every kind
//! once, in turn forwards and backwards, on objects of its own; the figures
//! are medians over the rounds.

#[allow(dead_code)]
mod cluster;
#[allow(dead_code)]
mod procfs;
#[allow(dead_code)]
mod prom;
#[allow(dead_code)]
mod realnode;
#[allow(dead_code)]
mod workload;

use std::{
    collections::BTreeMap,
    path::PathBuf,
    time::{Duration, Instant},
};

use clap::Parser;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service, events::v1::Event};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
};
use serde::Serialize;
use serde_json::{Value, json};

use cluster::Cluster;
use workload::NAMESPACE;

#[derive(Parser, Debug)]
#[command(about = "What one write of each kind costs kube-apiserver and etcd (CPU per write)")]
struct Args {
    /// Writes per kind and round.
    #[arg(long, default_value_t = 300)]
    count: usize,
    /// Rounds (every kind once per round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Writes in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The bench cluster's state directory (never the tests' target/cluster).
    #[arg(long, default_value = "target/cluster-bench")]
    cluster_dir: PathBuf,
    /// Where writes-<timestamp>.json goes.
    #[arg(long, default_value = "bench")]
    out_dir: PathBuf,
    /// The Markdown file the summary is appended to.
    #[arg(long, default_value = "BENCHMARKS.md")]
    markdown: PathBuf,
    /// The command line to record (hack/bench-writes.sh passes its own).
    #[arg(long, default_value = "bench-writes")]
    command: String,
    /// Timestamp used in file names.
    #[arg(long, default_value = "")]
    timestamp: String,
    /// Only these kinds, comma-separated: deployment-post, deployment-post-ignore,
    /// deployment-apply, service-post, service-post-ignore, service-apply,
    /// status-apply, status-merge, event, vllm, status-norules, status-ignore,
    /// log-read. All when empty.
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
}

/// The kinds of write measured, in round order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
enum Kind {
    DeploymentPost,
    DeploymentPostIgnore,
    DeploymentApply,
    ServicePost,
    ServicePostIgnore,
    ServiceApply,
    StatusApply,
    StatusMerge,
    EventPost,
    VllmPost,
    StatusApplyNoRules,
    StatusApplyIgnore,
    LogRead,
}

const KINDS: [Kind; 13] = [
    Kind::DeploymentPost,
    Kind::DeploymentPostIgnore,
    Kind::DeploymentApply,
    Kind::ServicePost,
    Kind::ServicePostIgnore,
    Kind::ServiceApply,
    Kind::StatusApply,
    Kind::StatusMerge,
    Kind::EventPost,
    Kind::VllmPost,
    Kind::StatusApplyNoRules,
    Kind::StatusApplyIgnore,
    Kind::LogRead,
];

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::DeploymentPost => "create a Deployment: POST",
            Kind::DeploymentPostIgnore => "create a Deployment: POST, fieldValidation=Ignore",
            Kind::DeploymentApply => "create a Deployment: server-side apply",
            Kind::ServicePost => "create a Service: POST",
            Kind::ServicePostIgnore => "create a Service: POST, fieldValidation=Ignore",
            Kind::ServiceApply => "create a Service: server-side apply",
            Kind::StatusApply => "VLLMService status: server-side apply",
            Kind::StatusMerge => "VLLMService status: merge patch",
            Kind::EventPost => "an event: POST (events.k8s.io/v1)",
            Kind::VllmPost => "create a VLLMService: POST",
            Kind::StatusApplyNoRules => {
                "VLLMService status: server-side apply, the CRD without its CEL rules"
            }
            Kind::StatusApplyIgnore => {
                "VLLMService status: server-side apply, fieldValidation=Ignore"
            }
            Kind::LogRead => "read a pod's log (pods/log, the operator's 64 KiB limit)",
        }
    }

    /// How a create kind creates.
    fn how(self) -> How {
        match self {
            Kind::DeploymentPostIgnore | Kind::ServicePostIgnore => How::PostIgnoringUnknownFields,
            Kind::DeploymentApply | Kind::ServiceApply => How::Apply,
            _ => How::Post,
        }
    }

    /// The kind's name for `--kinds`.
    fn short(self) -> &'static str {
        match self {
            Kind::DeploymentPost => "deployment-post",
            Kind::DeploymentPostIgnore => "deployment-post-ignore",
            Kind::DeploymentApply => "deployment-apply",
            Kind::ServicePost => "service-post",
            Kind::ServicePostIgnore => "service-post-ignore",
            Kind::ServiceApply => "service-apply",
            Kind::LogRead => "log-read",
            other => other.prefix(),
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Kind::DeploymentPost | Kind::ServicePost => "post",
            Kind::DeploymentPostIgnore | Kind::ServicePostIgnore => "post-ignore",
            Kind::DeploymentApply | Kind::ServiceApply => "apply",
            Kind::StatusApply => "status-apply",
            Kind::StatusMerge => "status-merge",
            Kind::EventPost => "event",
            Kind::VllmPost => "vllm",
            Kind::StatusApplyNoRules => "status-norules",
            Kind::StatusApplyIgnore => "status-ignore",
            Kind::LogRead => "log",
        }
    }
}

const MANAGER: &str = "bench-writes";

/// One kind's measurement in one round.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    kind: Kind,
    round: usize,
    writes: usize,
    wall_s: f64,
    /// CPU ms per write above the idle rate.
    apiserver_ms: f64,
    etcd_ms: f64,
    /// Every control-plane process (the controllers' reactions included).
    cluster_ms: f64,
    latency_p50_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    timestamp: String,
    command: String,
    machine: String,
    count: usize,
    rounds: usize,
    concurrency: usize,
    samples: Vec<Sample>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let repo = std::env::current_dir()?;
    anyhow::ensure!(
        repo.join("hack/cluster/cluster.sh").exists(),
        "run from the repository root"
    );
    std::fs::create_dir_all(&args.out_dir)?;
    let machine = realnode::machine();
    let cluster = Cluster {
        repo: repo.clone(),
        dir: repo.join(&args.cluster_dir),
        nodes: 1,
        gpus_per_node: 16,
    };
    eprintln!(
        "bench-writes: starting a fresh cluster in {:?}",
        cluster.dir
    );
    cluster.up_fresh()?;
    let result = measure_all(&args, &cluster).await;
    cluster.down()?;
    let samples = result?;
    let ts = if args.timestamp.is_empty() {
        k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string()
    } else {
        args.timestamp.clone()
    };
    let report = Report {
        timestamp: ts.clone(),
        command: args.command.clone(),
        machine,
        count: args.count,
        rounds: args.rounds,
        concurrency: args.concurrency,
        samples,
    };
    let json_path = args.out_dir.join(format!("writes-{ts}.json"));
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)?;
    realnode::append_markdown(&args.markdown, &markdown(&report, &json_path))?;
    Ok(())
}

async fn measure_all(args: &Args, cluster: &Cluster) -> anyhow::Result<Vec<Sample>> {
    let client = cluster.client().await?;
    cluster.install_crds(&cluster::crd_files(&cluster.repo, false)?)?;
    workload::prepare_namespace(&client, false).await?;
    // The VLLMServices whose status is written: one set per status kind and
    // round, created before anything is measured.
    install_ruleless_crd(&client).await?;
    let objects: Vec<(Kind, String)> = [
        Kind::StatusApply,
        Kind::StatusMerge,
        Kind::StatusApplyNoRules,
        Kind::StatusApplyIgnore,
    ]
    .iter()
    .flat_map(|k| {
        (0..args.rounds).flat_map(move |r| (0..args.count).map(move |i| (*k, name(*k, r, i))))
    })
    .collect();
    eprintln!("bench-writes: creating {} VLLMServices", objects.len());
    stream::iter(objects)
        .map(|(kind, n)| {
            let api = vllm_api(&client, kind);
            async move {
                let mut body = workload::service_body(0, false);
                body["metadata"]["name"] = n.into();
                body["apiVersion"] = api_version(kind).into();
                let obj: DynamicObject = serde_json::from_value(body)?;
                api.create(&PostParams::default(), &obj).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    create_log_pods(&client).await?;
    let mut samples = Vec::new();
    let chosen = |k: &Kind| args.kinds.is_empty() || args.kinds.iter().any(|n| n == k.short());
    for round in 0..args.rounds {
        let mut kinds: Vec<Kind> = KINDS.into_iter().filter(chosen).collect();
        if round % 2 == 1 {
            kinds.reverse();
        }
        for kind in kinds {
            let s = measure(args, cluster, &client, kind, round).await?;
            eprintln!(
                "bench-writes: round {round} {:<42} apiserver {:>6.2} ms/write, etcd {:>5.2}, cluster {:>6.2}, p50 {:>6.1} ms",
                kind.label(),
                s.apiserver_ms,
                s.etcd_ms,
                s.cluster_ms,
                s.latency_p50_ms
            );
            samples.push(s);
        }
    }
    Ok(samples)
}

/// The group of a copy of the VLLMService CRD with every CEL rule removed.
const RULELESS_GROUP: &str = "norules.bench.example.com";

fn api_version(kind: Kind) -> String {
    match kind {
        Kind::StatusApplyNoRules => format!("{RULELESS_GROUP}/v1alpha1"),
        _ => "aiinfra.example.com/v1alpha1".to_string(),
    }
}

/// The VLLMServices of `kind`'s CRD.
fn vllm_api(client: &Client, kind: Kind) -> Api<DynamicObject> {
    let resource = match kind {
        Kind::StatusApplyNoRules => kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk(RULELESS_GROUP, "v1alpha1", "VLLMService"),
            "vllmservices",
        ),
        _ => workload::vllm_resource(),
    };
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

/// The operator's CRD under [`RULELESS_GROUP`] without its `x-kubernetes-validations`:
/// what its status writes cost without the CEL rules.
async fn install_ruleless_crd(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.remove("x-kubernetes-validations");
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut crd = serde_json::to_value(vllmservice_api::VLLMService::crd())?;
    strip(&mut crd);
    crd["metadata"] = json!({"name": format!("vllmservices.{RULELESS_GROUP}")});
    crd["spec"]["group"] = RULELESS_GROUP.into();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(crd)?)
        .await?;
    let name = format!("vllmservices.{RULELESS_GROUP}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let crd = crds.get(&name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "CRD {name} not Established in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Pods whose logs [`Kind::LogRead`] reads, in turn.
const LOG_PODS: usize = 8;

fn log_pod(i: usize) -> String {
    format!("w-log-pod-{}", i % LOG_PODS)
}

/// [`LOG_PODS`] pods bound to the kwok node, with a `vllm` container as the
/// operator's pods have; waits until kwok runs them (its ClusterLogs rule then
/// serves their log).
async fn create_log_pods(client: &Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..LOG_PODS {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": log_pod(i)},
            "spec": {"nodeName": "gpu-node-0",
                     "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut running = 0;
        for i in 0..LOG_PODS {
            let phase = pods.get(&log_pod(i)).await?.status.and_then(|s| s.phase);
            running += usize::from(phase.as_deref() == Some("Running"));
        }
        if running == LOG_PODS {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{running} of {LOG_PODS} log pods Running after 60 s (is kwok running?)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn name(kind: Kind, round: usize, i: usize) -> String {
    format!("w-{}-r{round}-{i:04}", kind.prefix())
}

/// CPU seconds of kube-apiserver, etcd and every control-plane process.
fn cpu(cluster: &Cluster) -> (f64, f64, f64) {
    let c = cluster.component_cpu();
    let get = |k: &str| c.get(k).copied().unwrap_or(0.0);
    (get("kube-apiserver"), get("etcd"), c.values().sum())
}

/// Waits until the control plane is idle (kube-apiserver under 4 % of a core
/// over half a second, after the controllers' reactions to the last writes),
/// at most 30 s; returns the idle CPU rates (apiserver, etcd, cluster) per second.
async fn settle(cluster: &Cluster) -> (f64, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (a0, e0, c0) = cpu(cluster);
        let t = Instant::now();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (a1, e1, c1) = cpu(cluster);
        let dt = t.elapsed().as_secs_f64();
        let rates = ((a1 - a0) / dt, (e1 - e0) / dt, (c1 - c0) / dt);
        if rates.0 < 0.04 || Instant::now() > deadline {
            return rates;
        }
    }
}

async fn measure(
    args: &Args,
    cluster: &Cluster,
    client: &Client,
    kind: Kind,
    round: usize,
) -> anyhow::Result<Sample> {
    let idle = settle(cluster).await;
    let before = cpu(cluster);
    let t0 = Instant::now();
    let mut latencies: Vec<f64> = stream::iter(0..args.count)
        .map(|i| {
            let client = client.clone();
            async move {
                let started = Instant::now();
                write(&client, kind, round, i).await?;
                anyhow::Ok(started.elapsed().as_secs_f64() * 1000.0)
            }
        })
        .buffer_unordered(args.concurrency)
        .try_collect()
        .await?;
    let wall = t0.elapsed().as_secs_f64();
    // What the writes cause afterwards (watch fan-out, the controllers'
    // reactions) belongs to them too.
    let _ = settle(cluster).await;
    let elapsed = t0.elapsed().as_secs_f64();
    let after = cpu(cluster);
    let per_write =
        |d: f64, idle_rate: f64| 1000.0 * (d - idle_rate * elapsed).max(0.0) / args.count as f64;
    latencies.sort_by(f64::total_cmp);
    Ok(Sample {
        kind,
        round,
        writes: args.count,
        wall_s: wall,
        apiserver_ms: per_write(after.0 - before.0, idle.0),
        etcd_ms: per_write(after.1 - before.1, idle.1),
        cluster_ms: per_write(after.2 - before.2, idle.2),
        latency_p50_ms: latencies[latencies.len() / 2],
    })
}

/// The children as the operator builds them, renamed, without owner
/// references (there is no VLLMService behind them), the Deployment at 0
/// replicas so that no pod follows.
fn children(n: &str) -> anyhow::Result<(Deployment, Service)> {
    let (mut d, mut s) = workload::direct_children(0)?;
    d.metadata.name = Some(n.to_string());
    s.metadata.name = Some(n.to_string());
    if let Some(spec) = d.spec.as_mut() {
        spec.replicas = Some(0);
    }
    Ok((d, s))
}

/// A status shaped like the operator's, different in every round.
fn status(n: &str, round: usize) -> Value {
    workload::operator_like_status(n, false, &format!("round {round}"))
}

async fn write(client: &Client, kind: Kind, round: usize, i: usize) -> anyhow::Result<()> {
    let n = name(kind, round, i);
    let ns = NAMESPACE;
    let post = PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    };
    let apply = PatchParams::apply(MANAGER).force();
    match kind {
        Kind::DeploymentPost | Kind::DeploymentPostIgnore | Kind::DeploymentApply => {
            let (d, _) = children(&n)?;
            create(client, kind.how(), &n, &d).await?;
        }
        Kind::ServicePost | Kind::ServicePostIgnore | Kind::ServiceApply => {
            let (_, s) = children(&n)?;
            create(client, kind.how(), &n, &s).await?;
        }
        Kind::StatusApply | Kind::StatusApplyNoRules | Kind::StatusApplyIgnore => {
            let body = json!({"apiVersion": api_version(kind), "kind": "VLLMService",
                              "status": status(&n, round)});
            let params = PatchParams {
                field_validation: (kind == Kind::StatusApplyIgnore)
                    .then_some(kube::api::ValidationDirective::Ignore),
                ..apply
            };
            vllm_api(client, kind)
                .patch_status(&n, &params, &Patch::Apply(body))
                .await?;
        }
        Kind::LogRead => {
            let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
            let params = kube::api::LogParams {
                container: Some("vllm".into()),
                limit_bytes: Some(64 * 1024),
                ..Default::default()
            };
            let log = pods.logs(&log_pod(i), &params).await?;
            anyhow::ensure!(!log.is_empty(), "the log of {} is empty", log_pod(i));
        }
        Kind::StatusMerge => {
            let api = vllm_api(client, kind);
            let params = PatchParams {
                field_manager: Some(MANAGER.into()),
                ..PatchParams::default()
            };
            let body = json!({"status": status(&n, round)});
            api.patch_status(&n, &params, &Patch::Merge(body)).await?;
        }
        Kind::EventPost => {
            let api: Api<Event> = Api::namespaced(client.clone(), ns);
            let target = workload::service_name(i % 10);
            let ev: Event = serde_json::from_value(workload::created_event(&n, &target))?;
            api.create(&post, &ev).await?;
        }
        Kind::VllmPost => {
            let api = vllm_api(client, kind);
            let mut body = workload::service_body(i, false);
            body["metadata"]["name"] = n.into();
            api.create(&post, &serde_json::from_value(body)?).await?;
        }
    }
    Ok(())
}

/// How a child is created.
#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Post,
    /// A POST that asks the API server not to look for unknown or duplicate
    /// fields (`fieldValidation=Ignore`; kube's `PostParams` has no such
    /// field, so the query parameter is added to the request kube builds).
    PostIgnoringUnknownFields,
    Apply,
}

/// Creates `obj` (named `n`) in the bench namespace, `how`.
async fn create<K>(client: &Client, how: How, n: &str, obj: &K) -> anyhow::Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + Serialize
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), NAMESPACE);
    let post = PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    };
    match how {
        How::Post => {
            api.create(&post, obj).await?;
        }
        How::PostIgnoringUnknownFields => {
            let mut request = kube::core::Request::new(api.resource_url())
                .create(&post, serde_json::to_vec(obj)?)?;
            let uri = format!("{}&fieldValidation=Ignore", request.uri());
            *request.uri_mut() = uri.parse()?;
            let _: K = client.request(request).await?;
        }
        How::Apply => {
            let params = PatchParams::apply(MANAGER).force();
            api.patch(n, &params, &Patch::Apply(obj)).await?;
        }
    }
    Ok(())
}

fn median(v: Vec<f64>) -> f64 {
    realnode::median(v).unwrap_or(f64::NAN)
}

fn markdown(r: &Report, json_path: &std::path::Path) -> String {
    let mut by_kind: BTreeMap<Kind, Vec<&Sample>> = BTreeMap::new();
    for s in &r.samples {
        by_kind.entry(s.kind).or_default().push(s);
    }
    let mut out = format!(
        "\n## Run {} — write costs\n\n`{}`: {} writes per kind and round, {} in flight, {} rounds, on a fresh bench \
         cluster with no operator (1 kwok node; the Deployments at 0 replicas). CPU per write is what \
         kube-apiserver, etcd and every control-plane process used from the first write until the \
         API server was idle again, minus their idle rate; medians over the rounds. Machine: {}. Raw: \
         [`{}`]({}).\n\n| write | kube-apiserver CPU ms/write | etcd ms/write | control plane ms/write | latency p50 ms |\n|---|---|---|---|---|\n",
        r.timestamp,
        r.command,
        r.count,
        r.concurrency,
        r.rounds,
        r.machine,
        json_path.display(),
        json_path.display(),
    );
    for kind in KINDS {
        let Some(samples) = by_kind.get(&kind) else {
            continue;
        };
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(|s| f(s)).collect());
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} |\n",
            kind.label(),
            m(|s| s.apiserver_ms),
            m(|s| s.etcd_ms),
            m(|s| s.cluster_ms),
            m(|s| s.latency_p50_ms),
        ));
    }
    out
}
