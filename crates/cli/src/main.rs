//! vllmservice-operator: the command line. `run` starts the controller (with
//! its HTTP endpoints and, if asked, leader election); `crd`, `rbac` and
//! `render` print YAML offline.
//!
//! The commands' parts live in their own modules: [`print`] (the offline
//! commands' text), [`server`] (/metrics, /healthz, /readyz), [`leader`]
//! (the leader Lease); what this file does is parse the arguments, build the
//! async runtime and the controller's options, start the controller, and
//! print. Only this file builds and starts the controller
//! (`runtime::Options`, `controller::run`): `leader` is handed it as a
//! closure.

#[cfg(feature = "jemalloc")]
mod alloc;
mod fence;
mod leader;
mod print;
mod server;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use vllmservice_controller::{
    runtime,
    runtime::{health::Health, metrics::Metrics},
};

use crate::leader::Role;

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
        /// What the operator's flags put into the objects (as `run` takes them).
        #[command(flatten)]
        defaults: BuildArgs,
    },
    /// Print the operator's RBAC as YAML: the ClusterRole and the leader-election
    /// Role; with `--watch-namespace NS[,NS…]`, instead every Role, ClusterRole
    /// and binding for `run --watch-namespace NS[,NS…]` (no cluster-wide rights
    /// but list/watch of CRDs), to apply in place of deploy/install.yaml's RBAC.
    Rbac {
        /// The operator's own namespace, where the leader-election Role grants Leases
        /// (and where its ServiceAccount is).
        #[arg(long, default_value = vllmservice_controller::rbac::DEFAULT_NAMESPACE)]
        namespace: String,
        /// Grant the operator's rights in these namespaces only (a Role and
        /// RoleBinding in each; comma-separated or repeated).
        #[arg(long, conflicts_with = "user_roles", value_delimiter = ',')]
        watch_namespace: Vec<String>,
        /// Print instead the ClusterRoles for people: reading VLLMServices
        /// aggregated into Kubernetes' view, edit and admin roles, writing them
        /// into edit and admin.
        #[arg(long, conflicts_with = "gpu_accounting")]
        user_roles: bool,
        /// Print instead the ClusterRole and binding that `run --gpu-accounting`
        /// needs besides the cluster-wide RBAC (list/watch of nodes).
        #[arg(long, conflicts_with = "watch_namespace")]
        gpu_accounting: bool,
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
    /// least CPU: no threads to wake and park); more spread reconciles and
    /// watch parsing over that many threads.
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
    /// Watch only these namespaces (comma-separated or repeated; default:
    /// all). With more than one, each kind is watched once per namespace, so
    /// the operator needs rights in those namespaces only (`rbac
    /// --watch-namespace` prints them).
    #[arg(long, env = "VLLM_OPERATOR_NAMESPACE", value_delimiter = ',')]
    watch_namespace: Vec<String>,
    /// Count the free GPUs of the cluster: watch every node and every pod, so
    /// that rollout strategy Auto picks a surge or in-place replacement before
    /// the rollout and a blocked rollout shows the numbers. Needs the nodes
    /// rule of `rbac --gpu-accounting` (chart: gpuAccounting). Off by default:
    /// the operator then watches only its own pods, and Auto replaces in place
    /// once a surge pod has stayed unschedulable for --surge-unschedulable-seconds.
    #[arg(
        long,
        env = "VLLM_OPERATOR_GPU_ACCOUNTING",
        conflicts_with = "watch_namespace"
    )]
    gpu_accounting: bool,
    #[command(flatten)]
    defaults: BuildArgs,
    /// Fill the watch caches from streamed lists (Kubernetes' WatchList,
    /// `sendInitialEvents`) where the API server offers them, instead of
    /// lists in pages of 25: a lower memory peak at start, since objects
    /// arrive one at a time rather than a page at once.
    #[arg(long, env = "VLLM_OPERATOR_STREAMING_LISTS")]
    streaming_lists: bool,
    /// Address of /healthz and /readyz (plain HTTP, for the kubelet's probes).
    #[arg(
        long,
        env = "VLLM_OPERATOR_HEALTH_ADDR",
        default_value = "0.0.0.0:8081"
    )]
    health_addr: SocketAddr,
    /// Address of /metrics, over HTTPS: a scraper sends a bearer token that the
    /// API server accepts (TokenReview) and allows to get /metrics
    /// (SubjectAccessReview; the ClusterRole vllmservice-operator-metrics-reader).
    #[arg(
        long,
        env = "VLLM_OPERATOR_METRICS_ADDR",
        default_value = "0.0.0.0:8443"
    )]
    metrics_addr: SocketAddr,
    /// Serve /metrics over plain HTTP to anyone, without TLS or a token: for
    /// local development only, never on a network others reach.
    #[arg(long, env = "VLLM_OPERATOR_METRICS_INSECURE")]
    metrics_insecure: bool,
    /// Directory with tls.crt and tls.key for /metrics (e.g. a mounted
    /// cert-manager Secret). Unset: a self-signed certificate made at start.
    #[arg(
        long,
        env = "VLLM_OPERATOR_METRICS_CERT_DIR",
        conflicts_with = "metrics_insecure"
    )]
    metrics_cert_dir: Option<std::path::PathBuf>,
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

/// The flags of `run` (and `render`) that go into the objects the operator builds.
#[derive(clap::Args, Debug, Clone)]
struct BuildArgs {
    /// The Prometheus HTTP API that KEDA queries for a VLLMService's autoscaling
    /// metric, unless its spec.autoscaling.prometheus.serverAddress says otherwise.
    #[arg(
        long,
        env = "VLLM_OPERATOR_PROMETHEUS_ADDRESS",
        default_value = vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS,
        value_parser = prometheus_address
    )]
    prometheus_address: String,
    /// How long a model download Job may run before Kubernetes stops it (its
    /// activeDeadlineSeconds); ModelReady then says the deadline passed. Raise
    /// it for models of several hundred GB on a slow link.
    #[arg(
        long,
        env = "VLLM_OPERATOR_DOWNLOAD_DEADLINE_SECONDS",
        default_value_t = vllmservice_controller::reconcile::build::DEFAULT_DOWNLOAD_DEADLINE_SECONDS,
        value_parser = clap::value_parser!(i64).range(60..)
    )]
    download_deadline_seconds: i64,
    /// How long rollout strategy Auto waits for a surge pod that the scheduler
    /// cannot place (no free GPU beside the old pods) before it replaces the
    /// pods in place, one at a time, saying so in the Progressing condition.
    #[arg(
        long,
        env = "VLLM_OPERATOR_SURGE_UNSCHEDULABLE_SECONDS",
        default_value_t = vllmservice_controller::reconcile::build::DEFAULT_SURGE_UNSCHEDULABLE_SECONDS,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    surge_unschedulable_seconds: u64,
}

impl BuildArgs {
    fn defaults(&self) -> vllmservice_controller::reconcile::build::Defaults {
        vllmservice_controller::reconcile::build::Defaults {
            prometheus_address: self.prometheus_address.clone(),
            download_deadline_seconds: self.download_deadline_seconds,
            surge_unschedulable_seconds: self.surge_unschedulable_seconds,
        }
    }
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
/// wait for the API server, so on several workers much of its CPU goes to
/// waking and parking threads (futexes, context switches) rather than to the
/// work; one thread does the same work with less CPU, no slower.
/// `--worker-threads N` spreads the work over N threads.
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
            print!("{}", print::crd_yaml());
            Ok(())
        }
        Command::Rbac {
            user_roles: true, ..
        } => {
            print!("{}", print::user_roles_yaml()?);
            Ok(())
        }
        Command::Rbac {
            namespace,
            gpu_accounting: true,
            ..
        } => {
            print!("{}", print::gpu_accounting_rbac_yaml(&namespace)?);
            Ok(())
        }
        Command::Rbac {
            namespace,
            watch_namespace,
            ..
        } if watched_namespaces(&watch_namespace).is_empty() => {
            print!("{}", print::rbac_yaml(&namespace)?);
            Ok(())
        }
        Command::Rbac {
            namespace,
            watch_namespace,
            ..
        } => {
            print!(
                "{}",
                print::watch_namespace_rbac_yaml(
                    &namespace,
                    &watched_namespaces(&watch_namespace)
                )?
            );
            Ok(())
        }
        Command::Render {
            file,
            filename,
            namespace,
            defaults,
        } => {
            let file = file.or(filename).expect("clap requires one of them");
            print!(
                "{}",
                print::render(&file, &namespace, &defaults.defaults())?
            );
            Ok(())
        }
        Command::Run(args) => run(args).await,
    }
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
    let client =
        vllmservice_controller::runtime::metrics::counting_client(config.clone(), metrics.clone())
            .context("building the Kubernetes client")?;
    let health = Health::default();
    let role = Role::new(if args.leader_election_namespace.is_some() {
        Role::FOLLOWER
    } else {
        Role::SINGLE
    });
    let serving = if args.metrics_insecure {
        server::MetricsServing::Insecure
    } else {
        server::MetricsServing::Secure {
            cert_dir: args.metrics_cert_dir.clone(),
            // Not the counted client: reviews are not the operator's writes.
            authorizer: vllmservice_controller::runtime::metrics_auth::Authorizer::new(
                kube::Client::try_from(config.clone()).context("building the Kubernetes client")?,
            ),
        }
    };
    server::start(
        args.health_addr,
        args.metrics_addr,
        serving,
        metrics.clone(),
        health.clone(),
        role.clone(),
    )
    .await?;

    let opts = controller_options(&args, health);
    let Some(lease_namespace) = args.leader_election_namespace.clone() else {
        metrics.leader.set(1);
        tracing::info!("controller starting (no leader election)");
        runtime::run(client, metrics, opts, shutdown_signal()).await?;
        tracing::info!("controller stopped");
        return Ok(());
    };
    let lease = leader::Lease {
        namespace: lease_namespace,
        name: args.leader_election_lease_name.clone(),
        instance: args.instance.clone(),
        duration_seconds: args.leader_election_lease_duration_seconds,
        renew_grace_seconds: args.leader_election_renew_grace_seconds,
    };
    // The controller writes through the fence; the lease's own renewals do not.
    let fence = fence::Fence::default();
    let fenced = kube::client::ClientBuilder::try_from(config)
        .context("building the Kubernetes client")?
        .with_layer(&vllmservice_controller::runtime::metrics::count_writes(
            metrics.clone(),
        ))
        .with_layer(&fence.layer())
        .build();
    let controller = || {
        runtime::run(
            fenced.clone(),
            metrics.clone(),
            opts.clone(),
            std::future::pending(),
        )
    };
    leader::run_as_leader(
        client.clone(),
        metrics.clone(),
        lease,
        role,
        fence,
        shutdown_signal(),
        controller,
    )
    .await
}

/// The controller's options from `run`'s flags.
fn controller_options(args: &RunArgs, health: Health) -> runtime::Options {
    runtime::Options {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds),
        status_settle: Duration::from_secs(args.status_settle_seconds),
        instance: args.instance.clone(),
        namespaces: watched_namespaces(&args.watch_namespace),
        gpu_accounting: args.gpu_accounting,
        defaults: args.defaults.defaults(),
        streaming_lists: args.streaming_lists,
        health,
        ..runtime::Options::default()
    }
}

/// The namespaces of `--watch-namespace`, each once, in the order given
/// (`a,,b` and `a,a` are `a,b`: an empty entry or a repeat is no namespace more).
fn watched_namespaces(given: &[String]) -> Vec<String> {
    let mut watched: Vec<String> = Vec::new();
    for ns in given.iter().map(|ns| ns.trim()).filter(|ns| !ns.is_empty()) {
        if !watched.iter().any(|w| w == ns) {
            watched.push(ns.to_string());
        }
    }
    watched
}

/// Resolves on SIGTERM or Ctrl-C.
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

    #[test]
    fn watched_namespaces_are_a_list_each_once() {
        let watched = |args: &[&str]| match Cli::try_parse_from(
            ["vllmservice-operator", "run"].iter().chain(args),
        ) {
            Ok(Cli {
                command: Command::Run(a),
            }) => watched_namespaces(&a.watch_namespace),
            _ => panic!("not run"),
        };
        assert!(watched(&[]).is_empty());
        assert_eq!(watched(&["--watch-namespace", "a"]), ["a"]);
        assert_eq!(
            watched(&["--watch-namespace", "a,b,", "--watch-namespace", "a, c"]),
            ["a", "b", "c"]
        );
        // A gpu count sees every namespace: not with a list.
        assert!(
            Cli::try_parse_from([
                "vllmservice-operator",
                "run",
                "--watch-namespace",
                "a,b",
                "--gpu-accounting"
            ])
            .is_err()
        );
    }
}
