//! Unit tests of the parent module.

use super::*;

fn facts() -> Facts {
    Facts {
        model_path: "/data/models/Qwen2.5-1.5B-Instruct".into(),
        volume: "PersistentVolumeClaim models (storage.pvcName)".into(),
        mount_path: "/data/models".into(),
        gpu_memory_utilization: "0.9".into(),
        shm_size: "2Gi".into(),
        memory_limit: Some("16Gi".into()),
        startup_probe: Some((30, 10, 60)),
    }
}

fn failed(code: i32) -> Ended {
    Ended::Exited {
        code,
        reason: Some("Error".into()),
        ran_seconds: Some(40),
    }
}

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../tests/fixtures/vllm-logs/", $name))
    };
}

fn check(log: &str, ended: &Ended, reason: &str, parts: &[&str]) {
    let d = diagnose(log, ended, &facts()).unwrap_or_else(|| panic!("no diagnosis for:\n{log}"));
    assert_eq!(d.reason, reason, "{}", d.message);
    for p in parts {
        assert!(d.message.contains(p), "{p:?} missing in: {}", d.message);
    }
}

#[test]
fn kv_cache_too_small_in_every_wording() {
    // 0.10 and later: "model's", with the estimate.
    check(
        fixture!("kv-cache-v0.11.log"),
        &failed(1),
        "KVCacheTooSmall",
        &[
            "100000 tokens need 4.26 GiB",
            "4.25 GiB are available",
            "engineArgs.maxModelLen ≤ 99760",
            "now 0.9",
        ],
    );
    // 0.9–0.15: "models's" and the estimate.
    check(
        fixture!("kv-cache-v0.15.log"),
        &failed(1),
        "KVCacheTooSmall",
        &[
            "262144 tokens need 24.0 GiB",
            "3.18 GiB are available",
            "≤ 34736",
        ],
    );
    // 0.8: no estimate yet.
    check(
        fixture!("kv-cache-v0.8.log"),
        &failed(1),
        "KVCacheTooSmall",
        &[
            "1048576 tokens need 24.00 GiB",
            "9.97 GiB are available",
            "lower engineArgs.maxModelLen",
        ],
    );
    // V0 (0.4–0.7).
    check(
        fixture!("kv-cache-v0.4.log"),
        &failed(1),
        "KVCacheTooSmall",
        &["holds 7344 tokens", "max model length 32768", "≤ 7344"],
    );
    check(
        fixture!("no-cache-blocks.log"),
        &failed(1),
        "KVCacheTooSmall",
        &["no GPU memory is left", "gpuMemoryUtilization (now 0.9)"],
    );
}

#[test]
fn gpu_memory_insufficient_with_and_without_the_device_name() {
    check(
        fixture!("free-memory-v0.9.log"),
        &failed(1),
        "GPUMemoryInsufficient",
        &[
            "59.32/79.15 GiB free",
            "gpuMemoryUtilization 0.9 asks for, 71.24 GiB",
            "at most 0.74",
        ],
    );
    check(
        fixture!("free-memory-v0.16.log"),
        &failed(1),
        "GPUMemoryInsufficient",
        &["19.77/22.05 GiB free", "0.9 asks for, 19.84 GiB"],
    );
}

#[test]
fn model_not_found_names_path_pvc_and_mount() {
    let mut f = facts();
    let log = fixture!("model-not-found-v0.8.log");
    let d = diagnose(log, &failed(1), &f).unwrap();
    assert_eq!(d.reason, "ModelNotFound");
    assert!(
        d.message.contains("'/data/models/Qwen2.5-7B'"),
        "{}",
        d.message
    );
    assert!(
        d.message
            .contains("PersistentVolumeClaim models (storage.pvcName)"),
        "{}",
        d.message
    );
    assert!(
        d.message.contains("check the path inside the volume"),
        "{}",
        d.message
    );
    f.mount_path = "/models".into();
    let d = diagnose(log, &failed(1), &f).unwrap();
    assert!(
        d.message.contains("not under storage.mountPath /models"),
        "{}",
        d.message
    );
    check(
        fixture!("model-not-found-v0.7.log"),
        &failed(1),
        "ModelNotFound",
        &["'/home/Models/Qwen2.5-7B-Instruct-GPTQ-Int4/'"],
    );
}

#[test]
fn tensor_parallel_lists_the_valid_sizes() {
    check(
        fixture!("tp-heads-v0.5.log"),
        &failed(1),
        "TensorParallelNotDivisible",
        &[
            "28 attention heads",
            "tensorParallelSize 8",
            "1, 2, 4, 7, 14, 28",
        ],
    );
    check(
        fixture!("tp-heads-v0.11.log"),
        &failed(1),
        "TensorParallelNotDivisible",
        &[
            "64 attention heads",
            "tensorParallelSize 3",
            "1, 2, 4, 8, 16, 32, 64",
        ],
    );
}

#[test]
fn unrecognized_shutdown_timeout_says_which_vllm_or_the_drain_field() {
    check(
        fixture!("unrecognized-shutdown-timeout.log"),
        &failed(2),
        "UnrecognizedArgument",
        &[
            "--shutdown-timeout 30",
            "vLLM ≥ 0.18",
            "spec.shutdown.drainSeconds: 0",
        ],
    );
    check(
        "usage: vllm serve [model_tag] [options]\nvllm serve: error: unrecognized arguments: --max-lora-rnk=64\n",
        &failed(2),
        "UnrecognizedArgument",
        &["--max-lora-rnk=64", "engineArgs.extraArgs"],
    );
}

#[test]
fn startup_probe_kill_while_loading() {
    let ended = Ended::Exited {
        code: 0,
        reason: Some("Completed".into()),
        ran_seconds: Some(631),
    };
    check(
        fixture!("startup-probe-killed.log"),
        &ended,
        "StartupProbeTimeout",
        &[
            "after 631 s",
            "loading weights (5/9 shards)",
            "630 s (startupProbe initialDelaySeconds 30 + periodSeconds 10 × failureThreshold 60)",
            "raise startupProbe.failureThreshold",
        ],
    );
}

#[test]
fn lora_adapters_that_do_not_load_say_which_and_the_fix() {
    let ended = Ended::Exited {
        code: 1,
        reason: Some("Error".into()),
        ran_seconds: Some(3),
    };
    check(
        fixture!("lora-rank-v0.18.log"),
        &ended,
        "LoRARankTooLarge",
        &["rank 64", "max_lora_rank 16", "maxLoraRank to 64"],
    );
    check(
        fixture!("lora-not-found-v0.18.log"),
        &ended,
        "LoRAAdapterNotFound",
        &["nope", "'/data/models/loras/nope'", "adapter_config.json"],
    );
}

#[test]
fn shared_memory_and_oom_and_the_rest() {
    check(
        fixture!("nccl-shm.log"),
        &failed(1),
        "SharedMemoryTooSmall",
        &[
            "Error while creating shared memory segment /dev/shm/nccl-",
            "spec.shmSize 2Gi",
        ],
    );
    let oom = Ended::Exited {
        code: 137,
        reason: Some("OOMKilled".into()),
        ran_seconds: Some(12),
    };
    check(
        "",
        &oom,
        "OOMKilled",
        &[
            "resources.limits.memory 16Gi",
            "exit code 137",
            "maxModelLen",
        ],
    );
    check(
        fixture!("cuda-oom.log"),
        &failed(1),
        "EngineStartFailed",
        &[
            "exited with code 1",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        ],
    );
    // A clean exit of a server that never started is no finding (e.g. a rollout stopped it early).
    assert_eq!(
        diagnose(
            "INFO 01-01 00:00:00 [utils.py:297] vLLM server version 0.18.0, serving model m\n",
            &Ended::Exited {
                code: 0,
                reason: Some("Completed".into()),
                ran_seconds: Some(3)
            },
            &facts()
        ),
        None
    );
}

#[test]
fn a_long_last_line_is_cut() {
    let log = format!("ValueError: {}\n", "x".repeat(5000));
    let d = diagnose(&log, &failed(1), &facts()).unwrap();
    assert_eq!(d.reason, "EngineStartFailed");
    assert!(d.message.len() < 600, "{}", d.message.len());
    assert!(d.message.ends_with('…'));
}

#[test]
fn engine_info_from_start_up_lines_of_several_versions() {
    let v18 = engine_info(fixture!("startup-v0.18.log"));
    assert_eq!(
        v18,
        EngineInfo {
            version: Some("0.18.0".into()),
            max_model_len: Some(32768),
            kv_cache_tokens: Some(123456),
            max_concurrency: Some(3.77),
            gpu_blocks: None,
            tensor_parallel_size: Some(2),
        }
    );
    // 0.34: the plain banner (VLLM_DISABLE_LOG_LOGO=1), the KV cache on one line.
    assert_eq!(
        engine_info(fixture!("startup-v0.34.log")),
        EngineInfo {
            version: Some("0.34.0".into()),
            ..v18
        }
    );
    // The logo coloured (a log read from a terminal-like stream).
    let coloured = " \u{1b}[93m▄▄\u{1b}[0m \u{1b}[94m▄█\u{1b}[0m \u{1b}[1m█     █     █ ▀▄▀ █\u{1b}[0m  \
                    version \u{1b}[1m0.34.0\u{1b}[0m\n";
    assert_eq!(engine_info(coloured).version.as_deref(), Some("0.34.0"));
    // Only the logo's row: a model named "version 9" is not a version.
    let model_row = "  █▄█▀ █     █     █     █  model   /m/version 9\n";
    assert_eq!(engine_info(model_row).version, None);
    let v08 = engine_info(fixture!("model-not-found-v0.8.log"));
    assert_eq!(v08.version.as_deref(), Some("0.8.4"));
    let v06 = engine_info(fixture!("startup-v0.6.log"));
    assert_eq!(v06.version.as_deref(), Some("0.6.1.dev238+ge2c6e0a82"));
    assert_eq!(v06.max_model_len, Some(131072));
    assert_eq!(v06.gpu_blocks, Some(4109));
    assert_eq!(v06.tensor_parallel_size, Some(1));
    assert_eq!(v06.max_concurrency, Some(0.5));
}

#[test]
fn progress_names_the_last_step() {
    assert_eq!(
        progress(fixture!("startup-probe-killed.log")).as_deref(),
        Some("loading weights (5/9 shards)")
    );
    assert_eq!(
        progress(
            "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  61%|██████    | 41/67\n"
        )
        .as_deref(),
        Some("capturing CUDA graphs")
    );
    assert_eq!(progress("nothing yet\n"), None);
    // Each release's own words for the same steps.
    for (log, step) in [
        (fixture!("startup-v0.18.log"), "starting the API server"),
        (fixture!("startup-v0.34.log"), "starting the API server"),
        (
            "(EngineCore pid=2) INFO 11-30 10:00:09 [model_runner.py:412] Loading model from scratch...\n",
            "loading the model",
        ),
        (
            "(EngineCore_DP0 pid=2) INFO 03-20 09:00:09 [gpu_model_runner.py:4482] Starting to load model /m...\n",
            "loading the model",
        ),
        (
            "(EngineCore pid=2) INFO 11-30 10:01:20 [kv_cache_utils.py:1169] GPU KV cache size: 1,024 \
             tokens, Maximum concurrency for 512 tokens per request: 2.00x\n",
            "KV cache allocated",
        ),
    ] {
        assert_eq!(progress(log).as_deref(), Some(step), "{log}");
    }
}

#[test]
fn prefixes_are_stripped() {
    assert_eq!(
        strip_prefix(
            "(EngineCore_DP0 pid=7) ERROR 07-11 06:18:32 [core.py:708] EngineCore failed to start."
        ),
        "EngineCore failed to start."
    );
    assert_eq!(
        strip_prefix("(APIServer pid=1) KeyboardInterrupt: terminated"),
        "KeyboardInterrupt: terminated"
    );
    assert_eq!(
        strip_prefix("INFO 04-03 14:16:17 gpu_executor.py:122] # GPU blocks: 1"),
        "INFO 04-03 14:16:17 gpu_executor.py:122] # GPU blocks: 1"
    );
}

#[test]
fn a_max_model_len_above_the_model_limit_names_both_numbers() {
    // vLLM 0.18: a ValueError; later releases raise it inside pydantic's ValidationError.
    let v18 = "ValueError: User-specified max_model_len (65536) is greater than the derived \
               max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's \
               config.json). To allow overriding this maximum, set the env var \
               VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.\n";
    let pydantic = "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n  \
                    Value error, User-specified max_model_len (65536) is greater than the derived \
                    max_model_len (max_position_embeddings=32768.0 or model_max_length=None in \
                    model's config.json). To allow overriding this maximum, set the env var \
                    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. [type=value_error, input_value=ArgsKwargs((), \
                    {'model': '/data/models/m'}), input_type=ArgsKwargs]\n";
    for log in [v18, pydantic] {
        check(
            log,
            &failed(1),
            "MaxModelLenTooLarge",
            &[
                "engineArgs.maxModelLen 65536",
                "limit 32768 (max_position_embeddings)",
                "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in spec.env",
            ],
        );
    }
}

#[test]
fn a_load_ended_by_keyboard_interrupt_is_a_probe_kill_by_its_exit_code_too() {
    // The traceback may be cut off the tail that was read: exit code 130 alone tells.
    let log =
        "Loading safetensors checkpoint shards:  56% Completed | 5/9 [00:13<00:11,  2.87s/it]\n";
    let ended = Ended::Exited {
        code: 130,
        reason: Some("Error".into()),
        ran_seconds: Some(640),
    };
    check(
        log,
        &ended,
        "StartupProbeTimeout",
        &["after 640 s", "loading weights (5/9 shards)"],
    );
    // The same exit after the server started is no probe kill.
    let served = format!("{log}INFO:     Application startup complete.\n");
    let d = diagnose(&served, &ended, &facts()).unwrap();
    assert_eq!(d.reason, "EngineStartFailed", "{}", d.message);
}

#[test]
fn an_engine_that_died_while_serving_names_the_cause_whatever_the_exit_code() {
    // As vLLM 0.34 logs it (v1/engine/core.py, async_llm.py); the watchdog's exit is clean.
    let log = "(APIServer pid=1) INFO:     Application startup complete.\n\
        (EngineCore pid=212) ERROR 11-30 10:05:00 [core.py:1759] EngineCore encountered a fatal error.\n\
        Traceback (most recent call last):\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py\", \
        line 1750, in run_engine_core\n    engine_core.run_busy_loop()\n\
        RuntimeError: CUDA error: an illegal memory access was encountered\n\
        (APIServer pid=1) ERROR 11-30 10:05:00 [async_llm.py:957] AsyncLLM output_handler failed.\n\
        vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) \
        for the root cause.\n\
        (APIServer pid=1) INFO:     Shutting down\n";
    for code in [0, 1] {
        let d = diagnose(log, &failed(code), &facts()).expect("a finding");
        assert_eq!(d.reason, "EngineDied");
        assert!(
            d.message
                .contains("RuntimeError: CUDA error: an illegal memory access was encountered"),
            "{}",
            d.message
        );
    }
    // Without the engine's own line, a clean exit is still nothing to report.
    assert_eq!(
        diagnose(
            "(APIServer pid=1) INFO:     Application startup complete.\n",
            &failed(0),
            &facts()
        ),
        None
    );
}

#[test]
fn an_ambiguous_abbreviation_names_the_candidates() {
    // vLLM 0.34's argparse (allow_abbrev) for a prefix of several flags.
    let log = "usage: vllm serve [model_tag] [options]\n\
               vllm serve: error: ambiguous option: --max-num could match --max-num-seqs, \
               --max-num-batched-tokens, --max-num-partial-prefills\n";
    let d = diagnose(log, &failed(2), &facts()).unwrap();
    assert_eq!(d.reason, "UnrecognizedArgument");
    assert!(
        d.message.contains("--max-num could match --max-num-seqs") && d.message.contains("in full"),
        "{}",
        d.message
    );
}
