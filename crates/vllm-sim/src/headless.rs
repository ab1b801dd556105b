//! `vllm serve --headless`: a node of a multi-node deployment that runs no API server.

use crate::Signals;
use crate::args::Args;
use crate::log::{self, Proc};
use crate::release::Release;

/// `vllm serve --headless`: no API server, only this node's engine (vLLM's `run_headless`):
/// a worker node of a multi-node deployment (`--node-rank` > 0) runs the multiproc executor
/// that joins the head node's torch.distributed group; rank 0 runs data-parallel engines.
/// Both wait for SIGTERM/SIGINT (SystemExit: exit 0).
pub async fn run(a: &Args, release: Release, signals: &mut Signals) -> u8 {
    let opt = |name: &str, default: &str| a.option(name).unwrap_or_else(|| default.to_string());
    let node_rank: u64 = opt("--node-rank", "0").parse().unwrap_or(0);
    if node_rank > 0 {
        log::info(
            Proc::Main,
            "serve.py:224",
            &format!(
                "Launching vLLM (v{}) headless multiproc executor, with head node address {}:{} for \
                 torch.distributed process group.",
                release.version(),
                opt("--master-addr", "127.0.0.1"),
                opt("--master-port", "29501")
            ),
        );
        signals.recv().await;
        return 0;
    }
    let engines: u64 = a
        .option("--data-parallel-size-local")
        .or_else(|| a.option("--data-parallel-size"))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    log::info(
        Proc::Main,
        "serve.py:240",
        &format!(
            "Launching {engines} data parallel engine(s) in headless mode, with head node address \
             tcp://{}:{}.",
            opt("--data-parallel-address", "127.0.0.1"),
            opt("--data-parallel-rpc-port", "29550")
        ),
    );
    signals.recv().await;
    log::info(
        Proc::Main,
        "serve.py:268",
        &format!(
            "Waiting up to {} seconds for processes to exit",
            a.shutdown_timeout
        ),
    );
    log::info(Proc::Main, "serve.py:270", "Shutting down.");
    0
}
