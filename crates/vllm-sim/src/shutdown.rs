//! SIGTERM/SIGINT once serving, as vLLM ≥ 0.18's launcher handles them: the HTTP server keeps
//! running while the engine shuts down (its listener stays open: `/health` answers, and a request
//! that arrives is answered at once with `finish_reason: "abort"`, the engine core's answer to a
//! request added during shutdown). `--shutdown-timeout 0` aborts the in-flight requests at once;
//! N lets them finish for up to N seconds, then the engine core is killed and the requests that
//! are left are cut. Further signals are ignored meanwhile. Then uvicorn stops and the process
//! exits 0.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::log;
use crate::release::Release;
use crate::server::App;

pub type ServerTask = JoinHandle<std::io::Result<()>>;

/// Runs the shutdown after the first signal; returns the exit code.
pub async fn run(
    app: Arc<App>,
    release: Release,
    timeout: u64,
    signals: &mut crate::Signals,
    stop: tokio::sync::oneshot::Sender<()>,
    server: ServerTask,
) -> u8 {
    let say = release.shutdown_log();
    say.triggered();
    // From now on the engine core answers new requests with an abort.
    app.begin_shutdown();
    say.engine_start(timeout, app.in_flight());
    let drained = if timeout == 0 {
        // Aborted: their connections end when the process does.
        true
    } else {
        let deadline = tokio::time::sleep(Duration::from_secs(timeout));
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        loop {
            tokio::select! {
                _ = &mut deadline => break false,
                // vLLM's handler returns at once once shutdown was triggered.
                _ = signals.recv() => {}
                _ = tick.tick() => if app.in_flight() == 0 { break true },
            }
        }
    };
    if drained {
        say.engine_done();
    } else {
        say.timed_out(app.in_flight());
    }
    say.api_done();
    let _ = stop.send(());
    log::uvicorn("Shutting down");
    if timeout > 0 && drained {
        // The last responses are written before the connections close.
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
    }
    log::uvicorn("Waiting for application shutdown.");
    log::uvicorn("Application shutdown complete.");
    log::uvicorn(&format!("Finished server process [{}]", std::process::id()));
    0
}

/// uvicorn's end when vLLM's watchdog (`watchdog_loop`, every 5 s) finds the engine dead and
/// sets `should_exit`: a graceful stop, so the process exits 0 (vLLM issue #48966).
pub fn after_engine_death() -> u8 {
    log::uvicorn("Shutting down");
    log::uvicorn("Waiting for application shutdown.");
    log::uvicorn("Application shutdown complete.");
    log::uvicorn(&format!("Finished server process [{}]", std::process::id()));
    0
}
