//! vllmservice-operator: run the controller, print the CRD.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU8, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{Router, extract::State, routing::get};
use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt as _;
use vllmservice_controller::{
    runtime,
    runtime::{health::Health, metrics::Metrics},
};

#[derive(Parser)]
#[command(version, about = "Kubernetes operator that serves LLMs with vLLM")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller against the current kubeconfig or in-cluster config.
    Run(RunArgs),
    /// Print the VLLMService CustomResourceDefinition as YAML.
    Crd,
    /// Print, offline, every object the operator would create for a VLLMService
    /// (YAML file, or stdin with `-`), after the same validation the API server does.
    Render {
        /// The VLLMService manifest; `-` reads stdin.
        #[arg(required_unless_present = "filename", conflicts_with = "filename")]
        file: Option<std::path::PathBuf>,
        /// The manifest, as kubectl takes it: `-f FILE`, or `-f -` for stdin.
        #[arg(short = 'f', long = "filename", value_name = "FILE")]
        filename: Option<std::path::PathBuf>,
        /// Namespace to assume when the manifest has none.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// The Prometheus the ScaledObject queries unless the manifest sets
        /// spec.autoscaling.prometheus.serverAddress (as `run --prometheus-address`).
        #[arg(
            long,
            env = "VLLM_OPERATOR_PROMETHEUS_ADDRESS",
            default_value = vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS,
            value_parser = prometheus_address
        )]
        prometheus_address: String,
    },
    /// Print the operator's RBAC as YAML: the ClusterRole and the leader-election
    /// Role; with `--watch-namespace NS`, instead every Role, ClusterRole and
    /// binding for `run --watch-namespace NS` (no cluster-wide rights but
    /// list/watch of CRDs), to apply in place of deploy/install.yaml's RBAC.
    Rbac {
        /// The operator's own namespace, where the leader-election Role grants Leases
        /// (and where its ServiceAccount is).
        #[arg(long, default_value = vllmservice_controller::rbac::DEFAULT_NAMESPACE)]
        namespace: String,
        /// Grant the operator's rights in this namespace only (a Role and RoleBinding).
        #[arg(long)]
        watch_namespace: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Human,
    Json,
}

#[derive(clap::Args)]
struct RunArgs {
    /// VLLMServices reconciled at once.
    #[arg(long, env = "VLLM_OPERATOR_CONCURRENCY", default_value_t = 16)]
    concurrency: u16,
    /// Threads that run the controller: 1 runs everything on one thread (the
    /// least CPU, BENCHMARKS.md); more spread reconciles and watch parsing over
    /// that many threads.
    #[arg(
        long,
        env = "VLLM_OPERATOR_WORKER_THREADS",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    worker_threads: u16,
    /// Re-check every VLLMService this often even without events, in seconds.
    #[arg(long, env = "VLLM_OPERATOR_RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// Off by default (0: a new VLLMService's first status is written as soon
    /// as it is known). When set, a new service's first status waits up to
    /// this long (from its Deployment's creation) for its pods to become
    /// ready, so that a quick start costs one status write (Available) and no
    /// Available event instead of Pending, then Available: for clusters that
    /// create many services at once and would rather spare the API server
    /// than show Pending for a few seconds. Failures are written at once.
    #[arg(long, env = "VLLM_OPERATOR_STATUS_SETTLE_SECONDS", default_value_t = 0)]
    status_settle_seconds: u64,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "VLLM_OPERATOR_NAMESPACE")]
    watch_namespace: Option<String>,
    /// The Prometheus HTTP API that KEDA queries for a VLLMService's autoscaling
    /// metric, unless its spec.autoscaling.prometheus.serverAddress says otherwise.
    #[arg(
        long,
        env = "VLLM_OPERATOR_PROMETHEUS_ADDRESS",
        default_value = vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS,
        value_parser = prometheus_address
    )]
    prometheus_address: String,
    /// Fill the watch caches from streamed lists (Kubernetes' WatchList,
    /// `sendInitialEvents`) where the API server offers them, instead of
    /// lists in pages of 100: a lower memory peak at start (BENCHMARKS.md).
    #[arg(long, env = "VLLM_OPERATOR_STREAMING_LISTS")]
    streaming_lists: bool,
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(
        long,
        env = "VLLM_OPERATOR_METRICS_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    metrics_addr: SocketAddr,
    /// Log format.
    #[arg(
        long,
        env = "VLLM_OPERATOR_LOG_FORMAT",
        value_enum,
        default_value = "human"
    )]
    log_format: LogFormat,
    /// This replica's name (the pod name in a cluster), reported with events and
    /// used as its identity in the leader lease.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// Turns on leader election: only the replica holding the Lease in this namespace
    /// reconciles. Off when unset (a single replica).
    #[arg(long, env = "VLLM_OPERATOR_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "VLLM_OPERATOR_LEADER_ELECTION_LEASE_NAME",
        default_value = "vllmservice-operator"
    )]
    leader_election_lease_name: String,
    /// How long a lease stays valid without renewal, in seconds.
    #[arg(
        long,
        env = "VLLM_OPERATOR_LEADER_ELECTION_LEASE_DURATION_SECONDS",
        default_value_t = 15
    )]
    leader_election_lease_duration_seconds: u64,
    /// How long before expiry the leader renews, in seconds.
    #[arg(
        long,
        env = "VLLM_OPERATOR_LEADER_ELECTION_RENEW_GRACE_SECONDS",
        default_value_t = 5
    )]
    leader_election_renew_grace_seconds: u64,
}

/// `--prometheus-address`: the rule of spec.autoscaling.prometheus.serverAddress, not empty.
fn prometheus_address(s: &str) -> Result<String, String> {
    if !s.is_empty() && vllmservice_api::rules::is_http_url_or_empty(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} is not an http:// or https:// URL such as {}",
            vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS
        ))
    }
}

/// jemalloc instead of glibc's malloc: at 1,000 VLLMServices the operator
/// needs 20 % less CPU to converge with it (8.3 s against 10.4 s; mimalloc
/// 9.1 s) for the same memory (BENCHMARKS.md, "Allocator"): a watch-driven
/// process that parses and drops many small JSON objects spends a quarter of
/// its time in malloc and free.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `_RJEM_MALLOC_CONF` (which can still
/// override them): a background thread returns freed pages to the kernel
/// within about a second (`dirty_decay_ms:1000`, `muzzy_decay_ms:0`). With the
/// defaults, pages freed after a burst of watch events stayed with the process
/// while it idled, since jemalloc purges only when it allocates: ~1 MiB at
/// 1,000 VLLMServices (BENCHMARKS.md, "Eleventh step").
#[cfg(feature = "jemalloc")]
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &[u8; 60] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() {
    let cli = Cli::parse();
    let threads = match &cli.command {
        Command::Run(args) => usize::from(args.worker_threads),
        _ => 1,
    };
    let result = runtime(threads)
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(dispatch(cli.command)));
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The async runtime: by default everything on one thread (tokio's
/// current-thread scheduler). The operator's work is many small steps that
/// wait for the API server; on two workers a quarter of its CPU went to
/// waking and parking threads (futex, context switches), and one thread
/// converges 1,000 VLLMServices with less CPU, no slower (BENCHMARKS.md,
/// "Eighth step"). `--worker-threads N` spreads the work over N threads.
fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
    }
}

async fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Crd => {
            print!("{}", vllmservice_api::crd_yaml());
            Ok(())
        }
        Command::Rbac {
            namespace,
            watch_namespace: None,
        } => {
            print!("{}", rbac_yaml(&namespace)?);
            Ok(())
        }
        Command::Rbac {
            namespace,
            watch_namespace: Some(watch),
        } => {
            print!("{}", watch_namespace_rbac_yaml(&namespace, &watch)?);
            Ok(())
        }
        Command::Render {
            file,
            filename,
            namespace,
            prometheus_address,
        } => {
            let file = file.or(filename).expect("clap requires one of them");
            print!("{}", render(&file, &namespace, &prometheus_address)?);
            Ok(())
        }
        Command::Run(args) => run(args).await,
    }
}

/// The ClusterRole and the leader-election Role, as checked in at `config/rbac/role.yaml`.
fn rbac_yaml(namespace: &str) -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let cluster_role = serde_saphyr::to_string(&rbac::cluster_role())?;
    let role = serde_saphyr::to_string(&rbac::leader_election_role(namespace))?;
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # Regenerate with: cargo run -p vllmservice-operator -- rbac > config/rbac/role.yaml\n\
         # What each rule is for:\n{}{cluster_role}---\n{role}",
        rbac::rationale()
    ))
}

/// Every RBAC object of watch-namespace mode, as checked in (for the example
/// namespaces) at `config/rbac/watch-namespace.yaml`.
fn watch_namespace_rbac_yaml(namespace: &str, watch: &str) -> anyhow::Result<String> {
    use vllmservice_controller::rbac;
    let w = rbac::watch_namespace(namespace, watch);
    let docs = [
        serde_saphyr::to_string(&w.crd_role)?,
        serde_saphyr::to_string(&w.crd_binding)?,
        serde_saphyr::to_string(&w.role)?,
        serde_saphyr::to_string(&w.role_binding)?,
        serde_saphyr::to_string(&w.lease_role)?,
        serde_saphyr::to_string(&w.lease_binding)?,
    ];
    Ok(format!(
        "# Generated from crates/operator/src/rbac.rs by vllmservice-operator; do not edit.\n\
         # The RBAC of `vllmservice-operator run --watch-namespace {watch}` with its ServiceAccount\n\
         # {sa} in namespace {namespace}: the operator's rights in {watch} only, list/watch of\n\
         # CRDs cluster-wide, Leases in {namespace}. Instead of deploy/install.yaml's cluster-wide RBAC:\n\
         #   kubectl apply -f deploy/install.yaml\n\
         #   vllmservice-operator rbac --namespace {namespace} --watch-namespace {watch} | kubectl apply -f -\n\
         #   kubectl delete clusterrolebinding,clusterrole {cluster_role}\n\
         #   kubectl -n {namespace} set env deployment/vllmservice-operator VLLM_OPERATOR_NAMESPACE={watch}\n\
         # (the Helm chart does the same with --set watchNamespace={watch}).\n\
         # What each rule is for:\n{}{}",
        rbac::rationale(),
        docs.join("---\n"),
        sa = rbac::SERVICE_ACCOUNT_NAME,
        cluster_role = rbac::CLUSTER_ROLE_NAME,
    ))
}

/// The objects for one VLLMService manifest, as a multi-document YAML stream.
fn render(
    file: &std::path::Path,
    namespace: &str,
    prometheus_address: &str,
) -> anyhow::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    let stdin = file.as_os_str() == "-";
    let source = if stdin {
        "<stdin>".into()
    } else {
        file.display().to_string()
    };
    if stdin {
        std::io::stdin().read_to_string(&mut text)?;
    } else {
        text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    }
    let mut vs: vllmservice_api::VLLMService = serde_saphyr::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{source} is not a valid VLLMService: {e}"))?;
    vs.metadata
        .namespace
        .get_or_insert_with(|| namespace.to_string());
    // The owner reference needs the UID the API server assigns; without one, say so.
    let unknown_uid = vs.metadata.uid.is_none();
    vs.metadata.uid.get_or_insert_with(String::new);
    let valid = vllmservice_api::validate(&vs).map_err(|invalid| {
        let lines: Vec<String> = invalid
            .errors
            .iter()
            .map(|e| format!("  {}: {}", e.field, e.message))
            .collect();
        anyhow::anyhow!("{source} is invalid:\n{}", lines.join("\n"))
    })?;
    let mut out = String::new();
    if unknown_uid {
        out.push_str(
            "# ownerReferences[].uid is left empty: the API server assigns the VLLMService's UID.\n",
        );
    }
    for object in vllmservice_controller::reconcile::build::objects(&valid, prometheus_address) {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object)?);
    }
    Ok(out)
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::{EnvFilter, fmt};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    match format {
        LogFormat::Human => fmt().with_env_filter(filter).init(),
        LogFormat::Json => fmt().json().with_env_filter(filter).init(),
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format);
    let metrics = Arc::new(Metrics::default());
    let config = kube::Config::infer()
        .await
        .context("no Kubernetes configuration: set KUBECONFIG or run in a cluster")?;
    let client = vllmservice_controller::runtime::metrics::counting_client(config, metrics.clone())
        .context("building the Kubernetes client")?;
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding the metrics address {}", args.metrics_addr))?;
    let addr = listener.local_addr().unwrap_or(args.metrics_addr);
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    let health = Health::default();
    let role = Role::new(if args.leader_election_namespace.is_some() {
        Role::FOLLOWER
    } else {
        Role::SINGLE
    });
    let app = health_router(metrics.clone(), health.clone(), role.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let opts = runtime::Options {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds),
        status_settle: Duration::from_secs(args.status_settle_seconds),
        instance: args.instance.clone(),
        namespace: args.watch_namespace.clone(),
        // The RBAC of watch-namespace mode grants no cluster-wide pod or node reads.
        gpu_accounting: args.watch_namespace.is_none(),
        prometheus_address: args.prometheus_address.clone(),
        streaming_lists: args.streaming_lists,
        health,
        ..runtime::Options::default()
    };
    let Some(lease_namespace) = args.leader_election_namespace.clone() else {
        metrics.leader.set(1);
        tracing::info!("controller starting (no leader election)");
        runtime::run(client, metrics, opts, shutdown_signal()).await;
        tracing::info!("controller stopped");
        return Ok(());
    };
    run_as_leader(client, metrics, opts, &args, lease_namespace, role).await
}

/// Which part this replica plays, for `/readyz`.
#[derive(Clone)]
struct Role(Arc<AtomicU8>);

impl Role {
    /// No leader election: this replica reconciles.
    const SINGLE: u8 = 0;
    /// Waiting for the leader lease: ready (it can take over), not reconciling.
    const FOLLOWER: u8 = 1;
    /// Holds the lease and reconciles.
    const LEADER: u8 = 2;

    fn new(role: u8) -> Role {
        Role(Arc::new(AtomicU8::new(role)))
    }

    fn set(&self, role: u8) {
        self.0.store(role, Ordering::Release);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::Acquire)
    }
}

/// `/metrics`; `/healthz`: 200 "ok" unless the controller loop has stopped
/// (503); `/readyz`: 200 "ok" once the controller's caches hold their first
/// complete lists, 200 "ok: follower, …" on a replica waiting for the leader
/// lease, 503 with the reason otherwise.
fn health_router(metrics: Arc<Metrics>, health: Health, role: Role) -> Router {
    use axum::http::StatusCode;
    let healthz = {
        let health = health.clone();
        move || async move {
            if health.stopped() {
                (StatusCode::SERVICE_UNAVAILABLE, "controller loop stopped\n")
            } else {
                (StatusCode::OK, "ok\n")
            }
        }
    };
    let readyz = move || async move {
        if health.stopped() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller loop stopped\n",
            )
        } else if role.get() == Role::FOLLOWER {
            (
                StatusCode::OK,
                "ok: follower, waiting for the leader lease\n",
            )
        } else if !health.running() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller is starting\n",
            )
        } else if !health.caches_synced() {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: the controller's caches are not synced yet (waiting for the first list of every watched resource)\n",
            )
        } else {
            (StatusCode::OK, "ok\n")
        }
    };
    Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move { m.encode() }),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(metrics)
}

/// Waits for the leader Lease, then reconciles while holding it. Losing the
/// lease stops every write at once (the controller future is dropped) and ends
/// the process, so a stale leader can never write; SIGTERM releases the lease so
/// the next replica takes over without waiting for it to expire.
async fn run_as_leader(
    client: kube::Client,
    metrics: Arc<Metrics>,
    opts: runtime::Options,
    args: &RunArgs,
    namespace: String,
    role: Role,
) -> anyhow::Result<()> {
    let identity = args
        .instance
        .clone()
        .unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
    let manager = || async {
        kube_lease_manager::LeaseManagerBuilder::new(
            client.clone(),
            &args.leader_election_lease_name,
        )
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_field_manager(vllmservice_controller::reconcile::apply::FIELD_MANAGER)
        .with_duration(args.leader_election_lease_duration_seconds)
        .with_grace(args.leader_election_renew_grace_seconds)
        .build()
        .await
        .with_context(|| format!("setting up the leader Lease in namespace {namespace}"))
    };
    let (mut leading, mut lease_task) = manager().await?.watch().await;
    // kube-lease-manager lets a follower sleep until the lease it saw would expire;
    // a leader that stops releases the lease, and this watch sees that at once.
    let released = lease_released(&client, &namespace, &args.leader_election_lease_name);
    tokio::pin!(released);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    tracing::info!(
        identity,
        namespace,
        lease = args.leader_election_lease_name,
        "waiting for the leader lease"
    );
    let lost = loop {
        tokio::select! {
            _ = &mut shutdown => break false,
            changed = leading.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the leader lease task ended: {:?}", lease_task.await);
                }
            }
            Some(()) = released.next() => {
                if !*leading.borrow() {
                    // Compete now: a fresh manager tries to take a free lease first thing.
                    tracing::info!(identity, "the leader lease was released; competing for it");
                    lease_task.abort();
                    let _ = lease_task.await;
                    (leading, lease_task) = manager().await?.watch().await;
                }
                continue;
            }
        }
        if !*leading.borrow_and_update() {
            continue;
        }
        tracing::info!(identity, "became the leader; controller starting");
        metrics.leader.set(1);
        role.set(Role::LEADER);
        let controller = runtime::run(
            client.clone(),
            metrics.clone(),
            opts.clone(),
            std::future::pending(),
        );
        let lost_lease = async {
            while leading.changed().await.is_ok() {
                if !*leading.borrow_and_update() {
                    return;
                }
            }
        };
        tokio::select! {
            _ = controller => break false,
            _ = lost_lease => break true,
            _ = &mut shutdown => break false,
        }
    };
    metrics.leader.set(0);
    role.set(Role::FOLLOWER);
    // Closing the channel makes the lease task release the lease and end.
    drop(leading);
    match lease_task.await {
        Ok(Ok(_)) => {}
        other => {
            tracing::warn!(result = ?other.map(|r| r.map(|_| ())), "releasing the leader lease failed")
        }
    }
    if lost {
        anyhow::bail!(
            "lost the leader lease: stopped reconciling; exiting so that a fresh start can compete again"
        );
    }
    tracing::info!("stopped and released the leader lease");
    Ok(())
}

/// Yields whenever the Lease `name` is seen without a holder.
fn lease_released(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let api: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    watcher(api, config)
        .default_backoff()
        .applied_objects()
        .filter_map(|lease| {
            if let Err(e) = &lease {
                // E.g. a missing RBAC verb: the takeover then waits for the lease to expire.
                tracing::warn!(error = %e, "watching the leader Lease failed; retrying");
            }
            let free = lease.ok().is_some_and(|l| {
                l.spec
                    .and_then(|s| s.holder_identity)
                    .is_none_or(|h| h.is_empty())
            });
            std::future::ready(free.then_some(()))
        })
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "vllmservice-operator".into())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GET path` on `addr`: (status code, body).
    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let path = path.to_string();
        tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut stream = std::net::TcpStream::connect(addr).unwrap();
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).unwrap();
            let (head, body) = response.split_once("\r\n\r\n").unwrap();
            let code = head.split(' ').nth(1).unwrap().parse().unwrap();
            (code, body.to_string())
        })
        .await
        .unwrap()
    }

    async fn serve(health: Health, role: Role) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = health_router(Arc::new(Metrics::default()), health, role);
        tokio::spawn(async move { axum::serve(listener, app).await });
        addr
    }

    /// Waits (at most 10 s) until `check` holds.
    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A controller that cannot reach its API server runs but never syncs:
    /// not ready (503) yet healthy; once its loop has stopped, /healthz fails.
    #[tokio::test]
    async fn readyz_waits_for_the_caches_and_healthz_fails_once_the_loop_stops() {
        // Nothing listens on port 1: every request fails to connect.
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let health = Health::default();
        let addr = serve(health.clone(), Role::new(Role::SINGLE)).await;
        assert_eq!(
            get(addr, "/readyz").await.0,
            503,
            "before the controller starts"
        );

        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let opts = runtime::Options {
            namespace: Some("none".into()),
            gpu_accounting: false,
            health: health.clone(),
            ..runtime::Options::default()
        };
        let task = tokio::spawn(runtime::run(
            client,
            Arc::new(Metrics::default()),
            opts,
            async {
                let _ = stopped.await;
            },
        ));
        until("the controller runs", || health.running()).await;
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("not synced"), "{body}");
        assert_eq!(get(addr, "/healthz").await, (200, "ok\n".to_string()));

        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the controller stops")
            .unwrap();
        let (code, body) = get(addr, "/healthz").await;
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("stopped"), "{body}");
        assert_eq!(get(addr, "/readyz").await.0, 503);
    }

    #[tokio::test]
    async fn a_follower_is_ready_and_says_so() {
        let role = Role::new(Role::FOLLOWER);
        let addr = serve(Health::default(), role.clone()).await;
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!(code, 200);
        assert!(body.starts_with("ok: follower"), "{body}");
        assert_eq!(get(addr, "/healthz").await.0, 200);
        // Once it leads, it is ready only when its caches are synced.
        role.set(Role::LEADER);
        assert_eq!(get(addr, "/readyz").await.0, 503);
    }

    #[test]
    fn the_controller_runs_on_one_thread_unless_told_otherwise() {
        let run = |args: &[&str]| match Cli::try_parse_from(
            ["vllmservice-operator", "run"].iter().chain(args),
        ) {
            Ok(Cli {
                command: Command::Run(a),
            }) => Ok(a.worker_threads),
            Ok(_) => panic!("not run"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(run(&[]), Ok(1));
        assert_eq!(run(&["--worker-threads", "4"]), Ok(4));
        let refused = run(&["--worker-threads", "0"]).unwrap_err();
        assert!(refused.contains("--worker-threads"), "{refused}");
        assert!(refused.contains("1..=256"), "{refused}");

        use tokio::runtime::RuntimeFlavor;
        let flavor = |n| runtime(n).unwrap().handle().runtime_flavor();
        assert_eq!(flavor(1), RuntimeFlavor::CurrentThread);
        assert_eq!(flavor(2), RuntimeFlavor::MultiThread);
    }
}
