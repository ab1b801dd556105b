//! vllmservice-operator: run the controller, print the CRD.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use axum::{Router, extract::State, routing::get};
use clap::{Parser, Subcommand, ValueEnum};
use vllmservice_controller::{controller, metrics::Metrics};

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
    /// Re-check every VLLMService this often even without events, in seconds.
    #[arg(long, env = "VLLM_OPERATOR_RESYNC_SECONDS", default_value_t = 300)]
    resync_seconds: u64,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "VLLM_OPERATOR_NAMESPACE")]
    watch_namespace: Option<String>,
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
    /// This replica's name (the pod name in a cluster), reported with events.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crd => {
            print!("{}", vllmservice_api::crd_yaml());
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
    let client = vllmservice_controller::metrics::counting_client(config, metrics.clone())
        .context("building the Kubernetes client")?;
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding the metrics address {}", args.metrics_addr))?;
    tracing::info!(addr = %args.metrics_addr, "serving /metrics, /healthz, /readyz");
    let app = Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move { m.encode() }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .with_state(metrics.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let opts = controller::Options {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds),
        instance: args.instance,
        namespace: args.watch_namespace,
        ..controller::Options::default()
    };
    metrics.leader.set(1);
    tracing::info!("controller starting");
    controller::run(client, metrics, opts, shutdown_signal()).await;
    tracing::info!("controller stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}
