//! `vllm-sim`: a simulator of vLLM's OpenAI-compatible server (`vllm serve`), for test clusters
//! without GPUs. It is not vLLM: it accepts vLLM's flags, reads the model's config.json, sizes a
//! simulated GPU the way vLLM does, fails with vLLM's messages, logs vLLM's start-up lines, serves
//! vLLM's endpoints and metrics with deterministic text, and shuts down as vLLM does. It plays
//! vLLM 0.34.0, or 0.18.0 / 0.17.1 (`VLLM_SIM_VLLM_VERSION`, src/release.rs). See README.md.

mod args;
mod flags;
mod headless;
mod log;
mod lora;
mod metrics;
mod model;
mod py;
mod release;
mod server;
mod shutdown;

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::Parsed;
use crate::log::Proc;
use crate::model::{GIB, Gpu, ModelConfig, SimError};
use crate::release::Release;

/// Failures forced with `VLLM_SIM_FAIL`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fail {
    KvCacheTooSmall,
    InsufficientGpuMemory,
    ModelNotFound,
    TensorParallelMismatch,
    OutOfMemory,
    UnrecognizedArguments,
    GatedRepo,
    EngineDeadAfterStart,
    SharedMemoryTooSmall,
}

impl Fail {
    const ALL: &[(&str, Fail)] = &[
        ("KVCacheTooSmall", Fail::KvCacheTooSmall),
        ("InsufficientGPUMemory", Fail::InsufficientGpuMemory),
        ("ModelNotFound", Fail::ModelNotFound),
        ("TensorParallelMismatch", Fail::TensorParallelMismatch),
        ("OutOfMemory", Fail::OutOfMemory),
        ("UnrecognizedArguments", Fail::UnrecognizedArguments),
        ("GatedRepo", Fail::GatedRepo),
        ("EngineDeadAfterStart", Fail::EngineDeadAfterStart),
        ("SharedMemoryTooSmall", Fail::SharedMemoryTooSmall),
    ];
}

/// The simulator's environment. Values are never logged (the environment may hold secrets).
struct Env {
    gpu_gib: f64,
    free_fraction: f64,
    load_seconds: f64,
    token_delay_ms: f64,
    dead_after_seconds: f64,
    fail: Option<Fail>,
    release: Release,
    allow_long_max_model_len: bool,
    /// `VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1`: vLLM's watchdog leaves the server up.
    keep_alive_on_engine_death: bool,
    /// `VLLM_DISABLE_LOG_LOGO=1`: one line instead of the logo.
    disable_log_logo: bool,
}

fn env_flag(name: &str) -> bool {
    matches!(
        std::env::var(name)
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Ok("1" | "true" | "yes")
    )
}

fn env_num(name: &str, default: f64, min: f64) -> Result<f64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) if v.trim().is_empty() => Ok(default),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(n) if n.is_finite() && n >= min => Ok(n),
            _ => Err(format!("vllm-sim: {name} must be a number >= {min}")),
        },
    }
}

impl Env {
    fn read(release: Release) -> Result<Env, String> {
        let fail = match std::env::var("VLLM_SIM_FAIL") {
            Err(_) => None,
            Ok(v) if v.trim().is_empty() => None,
            Ok(v) => match Fail::ALL
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(v.trim()))
            {
                Some((_, f)) => Some(*f),
                None => {
                    let names: Vec<&str> = Fail::ALL.iter().map(|(n, _)| *n).collect();
                    return Err(format!(
                        "vllm-sim: VLLM_SIM_FAIL must be one of {}",
                        names.join(", ")
                    ));
                }
            },
        };
        Ok(Env {
            gpu_gib: env_num("VLLM_SIM_GPU_MEMORY_GIB", 24.0, 0.0)?,
            free_fraction: env_num("VLLM_SIM_GPU_FREE_FRACTION", 1.0, 0.0)?.min(1.0),
            load_seconds: env_num("VLLM_SIM_LOAD_SECONDS", 3.0, 0.0)?,
            token_delay_ms: env_num("VLLM_SIM_TOKEN_DELAY_MS", 10.0, 0.0)?,
            dead_after_seconds: env_num("VLLM_SIM_ENGINE_DEAD_AFTER_SECONDS", 2.0, 0.0)?,
            fail,
            release,
            allow_long_max_model_len: env_flag("VLLM_ALLOW_LONG_MAX_MODEL_LEN"),
            keep_alive_on_engine_death: env_flag("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH"),
            disable_log_logo: env_flag("VLLM_DISABLE_LOG_LOGO"),
        })
    }
}

fn main() -> ExitCode {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let release = match Release::from_env() {
        Ok(r) => r,
        Err(msg) => {
            log::stderr(&format!("{msg}\n"));
            return ExitCode::from(2);
        }
    };
    let env = match Env::read(release) {
        Ok(e) => e,
        Err(msg) => {
            log::stderr(&format!("{msg}\n"));
            return ExitCode::from(1);
        }
    };
    let parsed = match args::parse(&raw, release) {
        Ok(p) => p,
        Err(e) => {
            log::stderr(&e.render());
            return ExitCode::from(2);
        }
    };
    let a = match parsed {
        Parsed::Help => {
            print!("{}", args::help());
            return ExitCode::SUCCESS;
        }
        Parsed::Error(e) => {
            log::stderr(&e.render());
            return ExitCode::from(2);
        }
        Parsed::Crash(traceback) => {
            log::stderr(&traceback);
            return ExitCode::from(1);
        }
        Parsed::Run(a) => a,
    };
    if env.fail == Some(Fail::UnrecognizedArguments) {
        // An older vLLM that does not know a flag the operator emits.
        let tokens = if !a.shutdown_timeout_tokens.is_empty() {
            a.shutdown_timeout_tokens.join(" ")
        } else {
            "--shutdown-timeout".to_string()
        };
        log::stderr(
            &args::ArgError::top(release, format!("unrecognized arguments: {tokens}")).render(),
        );
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            log::stderr(&format!("vllm-sim: cannot start the runtime: {e}\n"));
            return ExitCode::from(1);
        }
    };
    let code = rt.block_on(run(*a, env));
    rt.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}

pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    pub async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Sleeps for the simulated work; a signal meanwhile ends the process as it ends vLLM's: the
/// handler raises `KeyboardInterrupt("terminated")` in the API server, which Python reports on
/// stderr and exits 130 for.
async fn work(seconds: f64, signals: &mut Signals, release: Release) -> Result<(), u8> {
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_secs_f64(seconds)) => Ok(()),
        _ = signals.recv() => {
            let (file, line, func) = release.interrupt_frame();
            log::stderr(&format!(
                "Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/{file}\", \
                 line {line}, in {func}\n    raise KeyboardInterrupt(\"terminated\")\nKeyboardInterrupt: terminated\n",
            ));
            Err(130)
        }
    }
}

/// The weight load, in vLLM's progress lines (`Loading safetensors checkpoint shards: ...`,
/// written by tqdm to stderr), one per shard.
async fn load_shards(seconds: f64, signals: &mut Signals, release: Release) -> Result<(), u8> {
    const SHARDS: u32 = 4;
    let started = Instant::now();
    let bar = |done: u32| {
        let elapsed = started.elapsed().as_secs();
        log::stderr(&format!(
            "Loading safetensors checkpoint shards: {:3}% Completed | {done}/{SHARDS} [{:02}:{:02}<?, ?it/s]\n",
            done * 100 / SHARDS,
            elapsed / 60,
            elapsed % 60
        ));
    };
    bar(0);
    for done in 1..=SHARDS {
        work(seconds / f64::from(SHARDS), signals, release).await?;
        bar(done);
    }
    Ok(())
}

/// Prints a start-up failure as vLLM does: the engine core logs its traceback, the API server's
/// traceback ends with the exception on stderr. Returns the exit code (1).
fn fail(e: &SimError) -> u8 {
    let frames = "Traceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 10, in <module>\n    \
                  sys.exit(main())\n             ^^^^^^\n";
    let exception = |e: &SimError| {
        let mut text = String::new();
        if let Some(cause) = &e.cause {
            text.push_str(frames);
            text.push_str(&format!("{}: {}\n\nThe above exception was the direct cause of the following exception:\n\n", cause.exception, cause.message));
        }
        text.push_str(frames);
        text.push_str(&format!("{}: {}\n", e.exception, e.message));
        text
    };
    if e.in_engine {
        log::error(
            Proc::Engine,
            "core.py:708",
            &format!("EngineCore failed to start.\n{}", exception(e).trim_end()),
        );
        log::stderr(&format!(
            "{frames}RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {{}}\n"
        ));
    } else {
        log::stderr(&exception(e));
    }
    1
}

/// NCCL's failure to create its shared-memory segment in a too small /dev/shm, as the
/// workers of a tensor-parallel vLLM report it. Returns the exit code (1).
fn shared_memory_error(tp: u32) -> u8 {
    let pid = std::process::id();
    log::info(Proc::Engine, "pynccl.py:69", "vLLM is using nccl==2.21.5");
    log::stderr(&format!(
        "vllm-sim:{pid}:{pid} [1] include/alloc.h:194 NCCL WARN Error while creating shared memory segment \
         /dev/shm/nccl-v5MYcN (size 7340384)\nvllm-sim:{pid}:{pid} [1] NCCL INFO transport/shm.cc:114 -> 2\n"
    ));
    log::error(
        Proc::Engine,
        "multiproc_executor.py:597",
        &format!(
            "WorkerProc failed to start (tensor_parallel_size={tp}).\ntorch.distributed.DistBackendError: NCCL error \
             in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error (run with \
             NCCL_DEBUG=INFO for details), NCCL version 2.21.5\nncclSystemError: System call (e.g. socket, malloc) \
             or external library call failed or device error."
        ),
    );
    log::stderr(
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n",
    );
    1
}

/// A static LoRA adapter that the engine core refused: its log, then the API server's
/// traceback (`init_static_loras` raises the engine's message as a ValueError). Exit code 1.
fn lora_failure(e: &lora::LoraError) -> u8 {
    log::error(Proc::Engine, "core.py:1124", &e.engine_log());
    let api = "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/openai/api_server.py";
    log::stderr(&format!(
        "Traceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 10, in <module>\n    sys.exit(main())\n\
         \x20            ^^^^^^\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/main.py\", line 73, \
         in main\n    args.dispatch_function(args)\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/\
         serve.py\", line 111, in cmd\n    uvloop.run(run_server(args))\n  File \"/usr/local/lib/python3.12/dist-packages/\
         uvloop/__init__.py\", line 96, in run\n    return __asyncio.run(\n           ^^^^^^^^^^^^^^\n  File \"{api}\", \
         line 1949, in run_server\n    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)\n  File \
         \"{api}\", line 1979, in run_server_worker\n    await init_app_state(engine_client, app.state, args, \
         supported_tasks)\n  File \"{api}\", line 1733, in init_app_state\n    await \
         state.openai_serving_models.init_static_loras()\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/\
         entrypoints/openai/models/serving.py\", line 132, in init_static_loras\n    raise \
         ValueError(load_result.error.message)\nValueError: {}\n",
        e.api_message()
    ));
    1
}

fn gib(bytes: f64) -> String {
    py::round2(bytes / GIB)
}

/// A tensor-parallel size that does not divide the heads (for a forced mismatch).
fn mismatched_tp(heads: u64, tp: u32) -> u64 {
    if tp > 0 && !heads.is_multiple_of(tp as u64) {
        return tp as u64;
    }
    (2..=heads + 1)
        .find(|t| !heads.is_multiple_of(*t))
        .unwrap_or(heads + 1)
}

async fn run(a: args::Args, env: Env) -> u8 {
    let started = Instant::now();
    let mut signals = match Signals::new() {
        Ok(s) => s,
        Err(e) => {
            log::stderr(&format!("vllm-sim: cannot install signal handlers: {e}\n"));
            return 1;
        }
    };
    let release = env.release;
    let version = release.version();
    if a.model_via_option {
        // Logged while parsing, before the API server names its process: no prefix.
        log::warn(
            Proc::Main,
            "argparse_utils.py:217",
            "With `vllm serve`, you should provide the model as a positional argument or in a config file \
             instead of via the `--model` option. The `--model` option will be removed in a future version.",
        );
    }
    if a.flag("--headless") {
        // run_headless: no API server, so no banner, no non-default args, no prefix.
        return headless::run(&a, release, &mut signals).await;
    }
    banner(release, &a.model, env.disable_log_logo);
    let nd: Vec<String> = a
        .non_default
        .iter()
        .map(|(k, v)| format!("'{k}': {v}"))
        .collect();
    log::info(
        Proc::Api,
        "utils.py:233",
        &format!("non-default args: {{{}}}", nd.join(", ")),
    );
    if !a.ignored.is_empty() {
        log::info(
            Proc::Api,
            "vllm_sim",
            &format!(
                "Arguments the simulator does not implement, accepted and ignored: {}",
                py::repr_list(&a.ignored)
            ),
        );
    }

    // The model's configuration (API server process).
    match env.fail {
        Some(Fail::ModelNotFound) => {
            return fail(&SimError::value(model::invalid_repo_message(&a.model)));
        }
        Some(Fail::GatedRepo) => {
            let repo =
                if a.model.starts_with('/') || a.model.starts_with('.') || !a.model.contains('/') {
                    "meta-llama/Llama-3.1-8B-Instruct"
                } else {
                    a.model.as_str()
                };
            return fail(&model::gated_repo_error(repo));
        }
        _ => {}
    }
    let cfg = match ModelConfig::load(&a.model) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let arch = cfg
        .architectures
        .first()
        .cloned()
        .unwrap_or_else(|| "LlamaForCausalLM".into());
    log::info(
        Proc::Api,
        "model.py:547",
        &format!("Resolved architecture: {arch}"),
    );
    let max_model_len =
        match model::resolve_max_model_len(&cfg, a.max_model_len, env.allow_long_max_model_len) {
            Ok(n) => n,
            Err(e) => return fail(&e),
        };
    log::info(
        Proc::Api,
        "model.py:1510",
        &format!("Using max model len {max_model_len}"),
    );
    if env.fail == Some(Fail::TensorParallelMismatch) {
        return fail(&model::tp_error(
            cfg.num_attention_heads,
            mismatched_tp(cfg.num_attention_heads, a.tensor_parallel_size),
        ));
    }
    if let Err(e) = model::check_tensor_parallel(&cfg, a.tensor_parallel_size) {
        return fail(&e);
    }
    let names = a.served_names();
    let dtype = model::torch_dtype(&a.dtype, &cfg.torch_dtype);
    log::info(
        Proc::Engine,
        "core.py:93",
        &format!(
            "Initializing a V1 LLM engine (v{version}) with config: model={m}, speculative_config=None, \
             tokenizer={m}, skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, \
             trust_remote_code=False, dtype={dtype}, max_seq_len={max_model_len}, download_dir=None, \
             load_format=auto, tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1, \
             disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, \
             device_config=cuda, seed=0, served_model_name={name}, enable_prefix_caching=True, \
             enable_chunked_prefill=True",
            m = py::repr_str(&a.model),
            tp = a.tensor_parallel_size,
            name = names[0],
        ),
    );

    // The simulated GPU (engine core process).
    let total = env.gpu_gib * GIB;
    let gpu = Gpu {
        total_bytes: total,
        free_bytes: total * env.free_fraction,
    };
    let util = a.gpu_memory_utilization;
    if env.fail == Some(Fail::InsufficientGpuMemory) {
        let g = Gpu {
            total_bytes: total,
            free_bytes: (total * util * 0.5).min(gpu.free_bytes),
        };
        return fail(&model::free_memory_error(g, util));
    }
    if let Err(e) = model::check_free_memory(gpu, util) {
        return fail(&e);
    }
    let (at, msg) = release.model_load_start(&a.model);
    log::info(Proc::Engine, at, &msg);
    let load_started = Instant::now();
    if env.fail == Some(Fail::SharedMemoryTooSmall) {
        return shared_memory_error(a.tensor_parallel_size.max(2));
    }
    if let Err(code) = load_shards(env.load_seconds * 0.7, &mut signals, release).await {
        return code;
    }
    let weights = model::weights_bytes(&cfg, &a.dtype, a.tensor_parallel_size);
    if env.fail == Some(Fail::OutOfMemory) {
        return fail(&model::oom_error(
            gpu,
            (weights * 0.25).max(0.5 * GIB),
            total - 0.02 * GIB,
        ));
    }
    if weights > total * util {
        return fail(&model::oom_error(gpu, weights - total * util, total * util));
    }
    let loaded = load_started.elapsed().as_secs_f64();
    log::info(
        Proc::Engine,
        "default_loader.py:267",
        &format!("Loading weights took {loaded:.2} seconds"),
    );
    log::info(
        Proc::Engine,
        release.model_loaded_at(),
        &format!(
            "Model loading took {:.4} GiB memory and {:.6} seconds",
            weights / GIB,
            loaded
        ),
    );
    if let Err(code) = work(env.load_seconds * 0.3, &mut signals, release).await {
        return code;
    }
    let kv_per_token = model::kv_bytes_per_token(&cfg, &a.dtype, a.tensor_parallel_size);
    if env.fail == Some(Fail::KvCacheTooSmall) {
        let needed = model::kv_needed_bytes(kv_per_token, max_model_len) as f64;
        let available = needed * 0.6;
        let estimated = (available / (model::BLOCK_SIZE * kv_per_token) as f64).floor() as u64
            * model::BLOCK_SIZE;
        return fail(&model::kv_too_small_error(
            max_model_len,
            needed,
            available,
            estimated,
        ));
    }
    let mem = match model::size_kv_cache(gpu, util, weights, kv_per_token, max_model_len) {
        Ok(m) => m,
        Err(e) => return fail(&e),
    };
    log::info(
        Proc::Engine,
        "gpu_worker.py:298",
        &format!(
            "Available KV cache memory: {} GiB",
            gib(mem.available_kv_bytes)
        ),
    );
    let size = format!(
        "GPU KV cache size: {} tokens",
        py::thousands(mem.kv_tokens())
    );
    let concurrency = format!(
        "Maximum concurrency for {} tokens per request: {:.2}x",
        py::thousands(max_model_len),
        mem.max_concurrency(max_model_len)
    );
    if release.kv_cache_on_one_line() {
        log::info(
            Proc::Engine,
            "kv_cache_utils.py:1169",
            &format!("{size}, {concurrency}"),
        );
    } else {
        log::info(Proc::Engine, "kv_cache_utils.py:1316", &size);
        log::info(Proc::Engine, "kv_cache_utils.py:1322", &concurrency);
    }
    log::info(
        Proc::Engine,
        "core.py:459",
        &format!(
            "init engine (profile, create kv cache, warmup model) took {:.2} {}",
            started.elapsed().as_secs_f64(),
            release.init_engine_unit()
        ),
    );

    // The HTTP server: the port opens only now, as with vLLM.
    let host = a.host.clone().unwrap_or_else(|| "0.0.0.0".into());
    let listener = match tokio::net::TcpListener::bind((host.as_str(), a.port)).await {
        Ok(l) => l,
        Err(e) => {
            log::error(
                Proc::Api,
                "launcher.py:80",
                &format!(
                    "[Errno {}] error while attempting to bind on address ('{host}', {}): {e}",
                    e.raw_os_error().unwrap_or(0),
                    a.port
                ),
            );
            return 1;
        }
    };
    log::info(Proc::Api, "entry.py:135", "Supported tasks: ('generate',)");
    // init_app_state: the static LoRA adapters, each loaded by the engine core.
    let mut loras = Vec::new();
    for m in &a.lora_modules {
        match lora::load(m, a.enable_lora, a.max_lora_rank, &names) {
            Ok(l) => {
                log::info(
                    Proc::Api,
                    "serving.py:208",
                    &format!(
                        "Loaded new LoRA adapter: name '{}', path '{}'",
                        l.name, l.path
                    ),
                );
                loras.push(l);
            }
            Err(e) => return lora_failure(&e),
        }
    }
    let app = server::App::new(
        server::Served {
            names: names.clone(),
            model_path: a.model.clone(),
            max_model_len,
            loras,
            version: version.to_string(),
            token_delay: Duration::from_secs_f64(env.token_delay_ms / 1000.0),
            num_gpu_blocks: mem.num_gpu_blocks,
            gpu_memory_utilization: util,
            release,
            load_tracking: a.flag("--enable-server-load-tracking"),
        },
        a.max_num_seqs,
    );
    // vLLM's listen address: an empty host is shown as 0.0.0.0.
    let shown_host = if host.is_empty() { "0.0.0.0" } else { &host };
    log::info(
        Proc::Api,
        "entry.py:139",
        &format!("Starting vLLM server on http://{shown_host}:{}", a.port),
    );
    log::info(Proc::Api, "launcher.py:37", "Available routes are:");
    for (path, methods) in server::ROUTES {
        log::info(
            Proc::Api,
            "launcher.py:45",
            &format!("Route: {path}, Methods: {methods}"),
        );
    }
    let pid = std::process::id();
    log::uvicorn(&format!("Started server process [{pid}]"));
    log::uvicorn("Waiting for application startup.");
    log::uvicorn("Application startup complete.");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serve =
        axum::serve(listener, server::router(app.clone())).with_graceful_shutdown(async move {
            let _ = stop_rx.await;
        });
    let mut server_task: shutdown::ServerTask = tokio::spawn(async move { serve.await });
    let serving = Instant::now();
    tokio::spawn(server::log_stats(app.clone()));
    let (dead_tx, dead_rx) = tokio::sync::oneshot::channel::<()>();
    if env.fail == Some(Fail::EngineDeadAfterStart) {
        let app = app.clone();
        let after = env.dead_after_seconds;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(after)).await;
            app.dead.store(true, Ordering::SeqCst);
            log::error(
                Proc::Engine,
                "core.py:776",
                "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n  File \
                 \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", line 767, in run_engine_core\n    \
                 engine_core.run_busy_loop()\nRuntimeError: CUDA error: an illegal memory access was encountered",
            );
            log::error(
                Proc::Api,
                "async_llm.py:485",
                "AsyncLLM output_handler failed.\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore \
                 encountered an issue. See stack trace (above) for the root cause.",
            );
            let _ = dead_tx.send(());
        });
    }
    // vLLM's watchdog looks every 5 s (from the start of serving) and, unless told to keep the
    // server alive, stops uvicorn once the engine is dead.
    let watchdog = async move {
        if dead_rx.await.is_err() || env.keep_alive_on_engine_death {
            return std::future::pending::<()>().await;
        }
        let ticks = (serving.elapsed().as_secs_f64() / WATCHDOG_SECONDS).floor() + 1.0;
        let next = serving + Duration::from_secs_f64(ticks * WATCHDOG_SECONDS);
        tokio::time::sleep_until(next.into()).await;
    };

    tokio::select! {
        _ = signals.recv() => {}
        _ = watchdog => return shutdown::after_engine_death(),
        r = &mut server_task => {
            log::error(Proc::Api, "launcher.py:120", &format!("The HTTP server stopped: {r:?}"));
            return 1;
        }
    };
    let timeout = if release.has_shutdown_timeout() {
        a.shutdown_timeout
    } else {
        0
    };
    shutdown::run(app, release, timeout, &mut signals, stop_tx, server_task).await
}

/// vLLM's `VLLM_WATCHDOG_TIME_S`.
const WATCHDOG_SECONDS: f64 = 5.0;

/// `log_version_and_model`: the monochrome logo (a pod's log has no terminal) with the version
/// and the model, or one line with `VLLM_DISABLE_LOG_LOGO=1`.
fn banner(release: Release, model: &str, no_logo: bool) {
    let version = release.version();
    let msg = if no_logo {
        format!("vLLM server version {version}, serving model {model}")
    } else {
        format!(
            "\n       █     █     █▄   ▄█\n ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}\n  █▄█▀ █     █     █     █  model   {model}\n   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n"
        )
    };
    log::info(Proc::Api, release.banner_at(), &msg);
}
