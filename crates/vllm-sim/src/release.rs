//! The vLLM release the simulator plays (`VLLM_SIM_VLLM_VERSION`), and each difference between
//! the releases it can play, named as a method. Behaviour that the three releases share (checked
//! in their sources) is not here: the HTTP listener stays open while `--shutdown-timeout` drains
//! and new requests are aborted (`launcher.py` awaits the engine's shutdown before it stops
//! uvicorn, and the engine core answers a request added during shutdown with an abort), and the
//! API server's watchdog ends the process once the engine is dead unless
//! `VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1`.

use crate::log::Proc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Before `--shutdown-timeout` (vLLM PR #36666).
    V0_17_1,
    V0_18_0,
    V0_34_0,
}

/// The environment variable that picks the release.
pub const ENV: &str = "VLLM_SIM_VLLM_VERSION";

impl Release {
    pub const DEFAULT: Release = Release::V0_34_0;
    const ALL: [Release; 3] = [Release::V0_34_0, Release::V0_18_0, Release::V0_17_1];

    /// `VLLM_SIM_VLLM_VERSION` (unset or empty: the default); an unknown value is an error.
    pub fn from_env() -> Result<Release, String> {
        match std::env::var(ENV) {
            Err(_) => Ok(Release::DEFAULT),
            Ok(v) if v.trim().is_empty() => Ok(Release::DEFAULT),
            Ok(v) => Release::parse(v.trim()).ok_or_else(|| {
                let known: Vec<&str> = Release::ALL.iter().map(|r| r.version()).collect();
                format!(
                    "vllm-sim: {ENV} must be one of {} (the vLLM versions the simulator plays)",
                    known.join(", ")
                )
            }),
        }
    }

    pub fn parse(v: &str) -> Option<Release> {
        Release::ALL.into_iter().find(|r| r.version() == v)
    }

    /// What `/version` and the start-up lines report.
    pub fn version(self) -> &'static str {
        match self {
            Release::V0_17_1 => "0.17.1",
            Release::V0_18_0 => "0.18.0",
            Release::V0_34_0 => "0.34.0",
        }
    }

    /// Every `vllm serve` option of the release, from its own parser (tools/serve-flags.py).
    /// 0.17.1 is 0.18.0 without `--shutdown-timeout` (the simulator's approximation).
    pub fn serve_flags(self) -> &'static str {
        match self {
            Release::V0_34_0 => include_str!("serve_flags_0.34.0.txt"),
            Release::V0_18_0 | Release::V0_17_1 => include_str!("serve_flags_0.18.0.txt"),
        }
    }

    pub fn has_shutdown_timeout(self) -> bool {
        self != Release::V0_17_1
    }

    /// The top-level `vllm` parser's usage, which argparse prints for unrecognized arguments
    /// (wrapped at the 80 columns it assumes without a terminal). The subcommands are those of
    /// `vllm/entrypoints/cli/main.py`.
    pub fn top_usage(self) -> &'static str {
        match self {
            Release::V0_34_0 => {
                "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,download-kernels,preload,run-batch,snapshot}\n            ..."
            }
            _ => {
                "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,run-batch} ..."
            }
        }
    }

    /// `--gpu-memory-utilization` when not given. 0.34's CacheConfig leaves it unset and
    /// resolves it to 0.92 (DEFAULT_GPU_MEMORY_UTILIZATION) without its extensible KV cache.
    pub fn default_gpu_memory_utilization(self) -> f64 {
        match self {
            Release::V0_34_0 => 0.92,
            _ => 0.9,
        }
    }

    /// 0.34 parses `--gpu-memory-utilization` with `optional_type(float)`, whose error is
    /// `Value x cannot be converted to <class 'float'>.` (0.18: argparse's `invalid float value`).
    pub fn gpu_memory_utilization_is_optional(self) -> bool {
        self == Release::V0_34_0
    }

    /// 0.34 logs the KV-cache size and the maximum concurrency in one line
    /// (`update_kv_cache_capacity`); 0.18 in two.
    pub fn kv_cache_on_one_line(self) -> bool {
        self == Release::V0_34_0
    }

    /// The engine's line when the weights start loading.
    pub fn model_load_start(self, model: &str) -> (&'static str, String) {
        match self {
            Release::V0_34_0 => (
                "model_runner.py:412",
                "Loading model from scratch...".to_string(),
            ),
            _ => (
                "gpu_model_runner.py:4482",
                format!("Starting to load model {model}..."),
            ),
        }
    }

    /// Where the engine logs `Model loading took ...` (0.34: the V2 model runner).
    pub fn model_loaded_at(self) -> &'static str {
        match self {
            Release::V0_34_0 => "model_runner.py:442",
            _ => "gpu_model_runner.py:4567",
        }
    }

    /// `init engine (profile, create kv cache, warmup model) took 1.23 s` (0.34) / `seconds`.
    pub fn init_engine_unit(self) -> &'static str {
        match self {
            Release::V0_34_0 => "s",
            _ => "seconds",
        }
    }

    /// Where `log_version_and_model` lives (file:line of the banner).
    pub fn banner_at(self) -> &'static str {
        match self {
            Release::V0_34_0 => "startup.py:38",
            _ => "utils.py:299",
        }
    }

    /// The file:line of `raise KeyboardInterrupt("terminated")`, the handler that ends a load
    /// interrupted by SIGTERM.
    pub fn interrupt_frame(self) -> (&'static str, u32, &'static str) {
        match self {
            Release::V0_34_0 => (
                "vllm/entrypoints/launchers/api_server/entry.py",
                171,
                "_interrupt_init",
            ),
            _ => (
                "vllm/entrypoints/openai/api_server.py",
                544,
                "signal_handler",
            ),
        }
    }

    /// The shutdown lines, which moved from the engine core (0.18: `Shutdown initiated ...`) to
    /// `[shutdown] <component>: ...` lines of every component (0.34).
    pub fn shutdown_log(self) -> ShutdownLog {
        ShutdownLog(self)
    }
}

/// The log lines of a shutdown, per release (0.34: launcher.py, core.py, core_client.py;
/// 0.18: core.py and launcher.py).
pub struct ShutdownLog(Release);

impl ShutdownLog {
    fn new_style(&self) -> bool {
        self.0 == Release::V0_34_0
    }

    /// 0.17.1's engine core has no shutdown handling of its own (it came with
    /// `--shutdown-timeout`), so it logs nothing of it.
    fn engine_logs(&self) -> bool {
        self.0.has_shutdown_timeout()
    }

    /// The first SIGTERM or SIGINT (0.18's handler logs nothing).
    pub fn triggered(&self) {
        if self.new_style() {
            crate::log::info(
                Proc::Api,
                "launcher.py:256",
                "[shutdown] API server: shutdown triggered",
            );
        }
    }

    /// The API server hands the shutdown to the engine, which aborts (timeout 0) or drains.
    pub fn engine_start(&self, timeout: u64, in_flight: u64) {
        if !self.engine_logs() {
            return;
        }
        let mode = if timeout == 0 { "abort" } else { "drain" };
        if self.new_style() {
            crate::log::info(
                Proc::Api,
                "launcher.py:269",
                &format!(
                    "[shutdown] API server: stopping engine client mode={mode} timeout={timeout}s"
                ),
            );
            crate::log::info(
                Proc::Api,
                "core_client.py:822",
                &format!("[shutdown] MPClient: start timeout={timeout}s"),
            );
            crate::log::info(
                Proc::Api,
                "core_client.py:824",
                "[shutdown] MPClient: stopping engine manager",
            );
            crate::log::info(
                Proc::Api,
                "utils.py:628",
                "[shutdown] Process manager: send sigterm to process EngineCore_DP0",
            );
            // The engine core gets its SIGTERM from the API server's process manager.
            crate::log::info(
                Proc::Engine,
                "core.py:1699",
                "[shutdown] EngineCore: trigger received signal=SIGTERM",
            );
            crate::log::info(
                Proc::Engine,
                "core.py:1890",
                &format!("[shutdown] EngineCore: start mode={mode} timeout={timeout}s"),
            );
            if in_flight > 0 {
                let msg = if timeout == 0 {
                    format!("[shutdown] EngineCore: aborting in-flight requests count={in_flight}")
                } else {
                    format!(
                        "[shutdown] EngineCore: draining in-flight requests count={in_flight} timeout={timeout}s"
                    )
                };
                crate::log::info(Proc::Engine, "core.py:1899", &msg);
            }
        } else {
            crate::log::info(
                Proc::Engine,
                "core.py:1201",
                &format!("Shutdown initiated (timeout={timeout})"),
            );
            if in_flight > 0 {
                let msg = if timeout == 0 {
                    format!("Aborting {in_flight} requests")
                } else {
                    format!("Draining {in_flight} in-flight requests (timeout={timeout}s)")
                };
                crate::log::info(Proc::Engine, "core.py:1215", &msg);
            }
        }
    }

    /// A request that arrived during the drain, answered with an abort by the engine core.
    pub fn rejected(&self, request_id: &str) {
        // 0.34 logs this at DEBUG only.
        if !self.new_style() && self.engine_logs() {
            crate::log::info(
                Proc::Engine,
                "core.py:1266",
                &format!("Rejecting request {request_id} (server shutting down)"),
            );
        }
    }

    /// The drain's timeout passed with requests still running: the engine core is killed.
    pub fn timed_out(&self, in_flight: u64) {
        if self.new_style() {
            crate::log::warn(
                Proc::Api,
                "utils.py:647",
                "[shutdown] Process manager: force killing remaining processes count=1",
            );
            crate::log::warn(
                Proc::Api,
                "utils.py:652",
                &format!(
                    "[shutdown] Process manager: force killing remaining process EngineCore_DP0 pid {}",
                    std::process::id()
                ),
            );
        } else {
            // 0.18's process manager kills the engine without a line; the simulator says why
            // the requests ended.
            crate::log::warn(
                Proc::Api,
                "vllm_sim",
                &format!("Shutdown timeout reached, {in_flight} in-flight requests aborted"),
            );
        }
    }

    /// The engine has no work left (drained or aborted).
    pub fn engine_done(&self) {
        if !self.engine_logs() {
            return;
        }
        if self.new_style() {
            crate::log::info(
                Proc::Engine,
                "core.py:1921",
                "[shutdown] EngineCore: request processing complete; starting resource teardown",
            );
        } else {
            crate::log::info(Proc::Engine, "core.py:1224", "Shutdown complete");
        }
    }

    /// The API server's own end, before uvicorn's lines.
    pub fn api_done(&self) {
        if self.new_style() {
            for (at, msg) in [
                (
                    "core_client.py:826",
                    "[shutdown] MPClient: engine manager stopped",
                ),
                (
                    "core_client.py:827",
                    "[shutdown] MPClient: cleaning up background resources",
                ),
                ("core_client.py:829", "[shutdown] MPClient: complete"),
                (
                    "launcher.py:278",
                    "[shutdown] API server: engine client stopped",
                ),
                (
                    "launcher.py:281",
                    "[shutdown] API server: signalling HTTP server shutdown",
                ),
                (
                    "launcher.py:304",
                    "[shutdown] API server: shutting down FastAPI HTTP server",
                ),
            ] {
                crate::log::info(Proc::Api, at, msg);
            }
        } else {
            crate::log::info(
                Proc::Api,
                "launcher.py:137",
                "Shutting down FastAPI HTTP server.",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_round_trip_and_differ_where_they_should() {
        for r in Release::ALL {
            assert_eq!(Release::parse(r.version()), Some(r));
        }
        assert_eq!(Release::parse("0.19.0"), None);
        assert_eq!(Release::DEFAULT.version(), "0.34.0");
        assert!(!Release::V0_17_1.has_shutdown_timeout());
        assert!(Release::V0_18_0.has_shutdown_timeout());
        assert!(Release::V0_34_0.kv_cache_on_one_line());
        assert!(!Release::V0_18_0.kv_cache_on_one_line());
        assert_eq!(Release::V0_34_0.default_gpu_memory_utilization(), 0.92);
        assert_eq!(Release::V0_18_0.default_gpu_memory_utilization(), 0.9);
        assert!(Release::V0_34_0.top_usage().contains("download-kernels"));
        assert!(!Release::V0_18_0.top_usage().contains("download-kernels"));
        assert!(Release::V0_34_0.serve_flags().contains("vLLM 0.34.0"));
        assert!(Release::V0_17_1.serve_flags().contains("vLLM 0.18.0"));
    }
}
