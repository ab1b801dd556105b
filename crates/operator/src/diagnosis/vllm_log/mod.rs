//! What a vLLM container's log says, pure: why it did not start (a reason and
//! a message that names the spec field to change, with vLLM's numbers), how far
//! a load got, and what the engine settled on once it runs (version, max model
//! length, KV-cache size). The read step fetches the log (`read::logs`); this
//! module only reads text, so the same log always gives the same answer.
//!
//! vLLM's wording shifts between versions ("model's"/"models's", with or
//! without the estimated maximum length, "# GPU blocks"/"# cuda blocks"), so the
//! variable parts are matched loosely: a fixed phrase, then the numbers around it.
//! The fixtures under `tests/fixtures/vllm-logs/` are excerpts of real vLLM logs.

use crate::diagnosis::masking::{self, MAX_EVENT_NOTE_BYTES};

/// Why a vLLM container did not start, for `Degraded`'s reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnosis {
    /// KVCacheTooSmall, GPUMemoryInsufficient, ModelNotFound, TensorParallelNotDivisible,
    /// UnrecognizedArgument, StartupProbeTimeout, SharedMemoryTooSmall, OOMKilled or
    /// EngineStartFailed.
    pub reason: &'static str,
    /// What happened, with vLLM's numbers, and which spec field to change.
    pub message: String,
}

/// Every reason a diagnosis can have.
pub const REASONS: [&str; 13] = [
    "KVCacheTooSmall",
    "LoRARankTooLarge",
    "LoRAAdapterNotFound",
    "GPUMemoryInsufficient",
    "ModelNotFound",
    "MaxModelLenTooLarge",
    "TensorParallelNotDivisible",
    "EngineDied",
    "UnrecognizedArgument",
    "StartupProbeTimeout",
    "SharedMemoryTooSmall",
    "OOMKilled",
    "EngineStartFailed",
];

/// How the container instance whose log is read ended (or that it still runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Terminated with this exit code and the kubelet's reason (Error, OOMKilled,
    /// Completed); `ran_seconds` from its start to its end, when known.
    Exited {
        code: i32,
        reason: Option<String>,
        ran_seconds: Option<i64>,
    },
    /// Still running, not Ready, for this long.
    Running { for_seconds: i64 },
}

/// The spec values a message names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    pub model_path: String,
    /// The volume with the model, as messages name it: "PersistentVolumeClaim m
    /// (storage.pvcName)" or "image r (modelSource.image)".
    pub volume: String,
    pub mount_path: String,
    pub gpu_memory_utilization: String,
    pub shm_size: String,
    /// `resources.limits.memory`, if set.
    pub memory_limit: Option<String>,
    /// The startup probe's (initialDelaySeconds, periodSeconds, failureThreshold), if enabled.
    pub startup_probe: Option<(i32, i32, i32)>,
}

impl Facts {
    /// Seconds the startup probe allows before the kubelet restarts the container.
    pub fn startup_budget(&self) -> Option<i64> {
        self.startup_probe.map(|(delay, period, threshold)| {
            i64::from(delay) + i64::from(period) * i64::from(threshold)
        })
    }
}

/// The longest log line quoted in a message.
const MAX_QUOTED_BYTES: usize = 400;

/// Why the container instance that ended as `ended`, with `log` as its log
/// tail, did not start; None when nothing went wrong that the log or the
/// termination tells (a clean exit, or a slow load still within its budget).
pub fn diagnose(log: &str, ended: &Ended, facts: &Facts) -> Option<Diagnosis> {
    if let Ended::Exited {
        reason: Some(r),
        code,
        ..
    } = ended
        && r == "OOMKilled"
    {
        return Some(oom_killed(*code, facts));
    }
    let lines: Vec<&str> = log.lines().map(strip_prefix).collect();
    let classified = kv_cache_too_small(&lines, facts)
        .or_else(|| gpu_memory_insufficient(&lines, facts))
        .or_else(|| model_not_found(&lines, facts))
        .or_else(|| max_model_len_too_large(&lines))
        .or_else(|| tensor_parallel(&lines))
        .or_else(|| lora_adapter(&lines))
        .or_else(|| unrecognized_argument(&lines))
        .or_else(|| shared_memory(&lines, facts))
        .or_else(|| engine_died(&lines));
    if classified.is_some() {
        return classified;
    }
    let started = lines
        .iter()
        .any(|l| l.contains("Application startup complete"));
    // A SIGTERM while loading: vLLM's signal handler raises KeyboardInterrupt("terminated")
    // in the API server (0.18 `entrypoints/openai/api_server.py:544`, `signal_handler`; 0.34
    // `entrypoints/launchers/api_server/entry.py:171`, `_interrupt_init`); uncaught, it ends
    // the process with 130 (Python's exit for KeyboardInterrupt) and its traceback.
    let killed = lines
        .iter()
        .any(|l| l.contains("KeyboardInterrupt: terminated"));
    match ended {
        Ended::Exited {
            code, ran_seconds, ..
        } => {
            let over_budget = match (facts.startup_budget(), ran_seconds) {
                (Some(budget), Some(ran)) => *ran >= budget,
                _ => false,
            };
            // The exits of a stopped process: clean, KeyboardInterrupt, SIGKILL, SIGTERM.
            let stopped = matches!(code, 0 | 130 | 137 | 143);
            if !started && (killed || *code == 130 || (over_budget && stopped)) {
                return Some(startup_probe_timeout(&lines, *ran_seconds, facts));
            }
            if *code == 0 {
                // A clean exit, loaded or not (e.g. stopped by a rollout): nothing to report.
                return None;
            }
            Some(engine_start_failed(&lines, *code))
        }
        Ended::Running { for_seconds } => {
            // Running past its budget without being Ready: only an error in the
            // log is a finding; otherwise the load is just slow (see `progress`).
            let error = last_error_line(&lines)?;
            Some(Diagnosis {
                reason: "EngineStartFailed",
                message: format!(
                    "vLLM has run {for_seconds} s without becoming ready; its log's last error: {}",
                    quote(error)
                ),
            })
        }
    }
}

/// The engine core died while the server ran: vLLM logs "EngineCore
/// encountered a fatal error." with the traceback of the cause (0.18
/// `v1/engine/core.py:1101`, 0.34 `:1759`), then the API server's
/// `EngineDeadError` ("EngineCore encountered an issue. See stack trace
/// (above) for the root cause.", `v1/engine/exceptions.py`). Its watchdog then
/// stops the server, with exit code 0 (unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH
/// keeps it up answering 503), so the exit code alone says nothing.
fn engine_died(lines: &[&str]) -> Option<Diagnosis> {
    let fatal = lines
        .iter()
        .position(|l| l.contains("EngineCore encountered a fatal error"))?;
    let after = &lines[fatal..];
    let end = after
        .iter()
        .position(|l| l.contains("EngineDeadError") || l.contains("output_handler failed"))
        .unwrap_or(after.len());
    let cause = last_error_line(&after[..end]).unwrap_or("no error line");
    Some(Diagnosis {
        reason: "EngineDied",
        message: format!(
            "vLLM's engine died while serving ({}), and the server stopped; the container is \
             restarted. A CUDA error points at the GPU or its driver on that node",
            quote(cause)
        ),
    })
}

/// The container's memory limit was exceeded: no log needed.
fn oom_killed(code: i32, facts: &Facts) -> Diagnosis {
    let limit = facts
        .memory_limit
        .as_deref()
        .map(|l| format!("resources.limits.memory {l}"))
        .unwrap_or_else(|| "the node's memory (no resources.limits.memory set)".into());
    Diagnosis {
        reason: "OOMKilled",
        message: format!(
            "the container was killed for using more memory than {limit} (exit code {code}): \
             raise resources.limits.memory, or lower engineArgs.maxModelLen or engineArgs.maxNumSeqs"
        ),
    }
}

fn kv_cache_too_small(lines: &[&str], facts: &Facts) -> Option<Diagnosis> {
    let util = &facts.gpu_memory_utilization;
    for line in lines.iter().rev() {
        // V1 (0.8 and later): "To serve at least one request with the model's (models's)
        // max seq len (N), (X GiB KV cache is needed, which is larger than the available
        // KV cache memory (Y GiB). [Based on the available memory, the estimated maximum
        // model length is M.] Try increasing `gpu_memory_utilization` or ..."
        if line.contains("max seq len (") && line.contains("KV cache is needed") {
            let n = number_after(line, "max seq len (")?;
            let needed = number_after(line, "), (").map(|x| format!("{x} GiB"));
            let available = number_after(line, "KV cache memory (").map(|y| format!("{y} GiB"));
            let estimated = number_after(line, "maximum model length is ");
            let mut message = format!(
                "the KV cache does not fit one request of the max model length: {n} tokens need {}, \
                 {} are available",
                needed.as_deref().unwrap_or("more KV cache"),
                available.as_deref().unwrap_or("less")
            );
            match estimated {
                Some(m) => message.push_str(&format!(
                    "; vLLM estimates the maximum model length at {m}: set engineArgs.maxModelLen ≤ {m} \
                     or raise engineArgs.gpuMemoryUtilization (now {util})"
                )),
                None => message.push_str(&format!(
                    ": lower engineArgs.maxModelLen or raise engineArgs.gpuMemoryUtilization (now {util})"
                )),
            }
            return Some(Diagnosis {
                reason: "KVCacheTooSmall",
                message,
            });
        }
        // V0 (up to 0.7): "The model's max seq len (N) is larger than the maximum number of
        // tokens that can be stored in KV cache (M)."
        if line.contains("max seq len (") && line.contains("can be stored in KV cache (") {
            let n = number_after(line, "max seq len (")?;
            let m = number_after(line, "stored in KV cache (")?;
            return Some(Diagnosis {
                reason: "KVCacheTooSmall",
                message: format!(
                    "the KV cache holds {m} tokens, less than the max model length {n}: set \
                     engineArgs.maxModelLen ≤ {m} or raise engineArgs.gpuMemoryUtilization (now {util})"
                ),
            });
        }
        if line.contains("No available memory for the cache blocks") {
            return Some(Diagnosis {
                reason: "KVCacheTooSmall",
                message: format!(
                    "no GPU memory is left for the KV cache once the weights are loaded: raise \
                     engineArgs.gpuMemoryUtilization (now {util}), or spread the model over more GPUs \
                     (engineArgs.tensorParallelSize)"
                ),
            });
        }
    }
    None
}

fn gpu_memory_insufficient(lines: &[&str], facts: &Facts) -> Option<Diagnosis> {
    // "Free memory on device [cuda:0] (F/T GiB) on startup is less than desired GPU memory
    // utilization (U, G GiB)."
    let line = lines.iter().rev().find(|l| {
        l.contains("Free memory on device")
            && l.contains("less than desired GPU memory utilization")
    })?;
    let pair = text_between(line, "Free memory on device", " GiB)")?;
    let pair = pair.rsplit('(').next()?;
    let (free, total) = pair.split_once('/')?;
    let (free, total) = (free.trim(), total.trim());
    let wanted = text_between(line, "utilization (", ")")?;
    let (util, gib) = wanted.split_once(',').unwrap_or((wanted, ""));
    let gib = gib.trim().trim_end_matches("GiB").trim();
    let fits = match (free.parse::<f64>(), total.parse::<f64>()) {
        (Ok(f), Ok(t)) if t > 0.0 => {
            format!(" (at most {:.2} fits now)", (f / t * 100.0).floor() / 100.0)
        }
        _ => String::new(),
    };
    let asked = if gib.is_empty() {
        String::new()
    } else {
        format!(", {gib} GiB")
    };
    Some(Diagnosis {
        reason: "GPUMemoryInsufficient",
        message: format!(
            "the GPU has {free}/{total} GiB free at startup, less than engineArgs.gpuMemoryUtilization \
             {} asks for{asked}: lower gpuMemoryUtilization{fits} or free the GPU (another process \
             uses it)",
            util.trim()
        ),
    })
    .map(|mut d| {
        if facts.gpu_memory_utilization != util.trim() && !facts.gpu_memory_utilization.is_empty() {
            d.message.push_str(&format!(" (spec: {})", facts.gpu_memory_utilization));
        }
        d
    })
}

fn model_not_found(lines: &[&str], facts: &Facts) -> Option<Diagnosis> {
    let path = lines.iter().rev().find_map(|l| {
        text_between(
            l,
            "Invalid repository ID or local directory specified: '",
            "'",
        )
        .or_else(|| {
            text_between(
                l,
                "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '",
                "'",
            )
        })
    })?;
    let mount = facts.mount_path.trim_end_matches('/');
    let place = if path == mount || path.starts_with(&format!("{mount}/")) {
        format!(
            "it must be a directory with a config.json in {}, mounted at storage.mountPath \
             {mount}: check the path inside the volume",
            facts.volume
        )
    } else {
        format!(
            "it is not under storage.mountPath {mount}, where {} is mounted: set \
             spec.modelPath to {mount}/<model directory>",
            facts.volume
        )
    };
    Some(Diagnosis {
        reason: "ModelNotFound",
        message: format!("vLLM finds no model at '{path}' (spec.modelPath): {place}"),
    })
}

/// vLLM's model config check (vllm/config/model.py, `_get_and_verify_max_len`): "User-specified
/// max_model_len (N) is greater than the derived max_model_len (max_position_embeddings=M.0 or
/// model_max_length=None in model's config.json). To allow overriding ..."; raised as a
/// ValueError (0.18) or inside pydantic's ValidationError for ModelConfig (later releases), so
/// only the sentence is matched.
fn max_model_len_too_large(lines: &[&str]) -> Option<Diagnosis> {
    let line = lines.iter().rev().find(|l| {
        l.contains("User-specified max_model_len (") && l.contains("derived max_model_len")
    })?;
    let asked = number_after(line, "User-specified max_model_len (")?;
    let limit = text_between(line, "derived max_model_len (", ")").and_then(|inner| {
        inner.split(" or ").find_map(|part| {
            let (key, value) = part.split_once('=')?;
            let n = number_after(value, "")?;
            let n = n.split('.').next().unwrap_or_default().to_string();
            (!n.is_empty()).then(|| format!("{n} ({})", key.trim()))
        })
    });
    let limit = limit.map_or_else(
        || "the model's limit in its config.json".to_string(),
        |l| format!("the model's limit {l} in its config.json"),
    );
    Some(Diagnosis {
        reason: "MaxModelLenTooLarge",
        message: format!(
            "engineArgs.maxModelLen {asked} is larger than {limit}: lower engineArgs.maxModelLen \
             to the limit or leave it unset (vLLM then uses the model's); only if the model is \
             known to handle longer contexts (e.g. with RoPE scaling), set \
             VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in spec.env"
        ),
    })
}

fn tensor_parallel(lines: &[&str]) -> Option<Diagnosis> {
    let line = lines.iter().rev().find(|l| {
        l.contains("Total number of attention heads (")
            && l.contains("must be divisible by tensor parallel size (")
    })?;
    let heads = number_after(line, "attention heads (")?;
    let tp = number_after(line, "tensor parallel size (")?;
    let h: u64 = heads.parse().ok()?;
    let valid: Vec<String> = (1..=h)
        .filter(|d| h.is_multiple_of(*d))
        .map(|d| d.to_string())
        .collect();
    Some(Diagnosis {
        reason: "TensorParallelNotDivisible",
        message: format!(
            "the model has {heads} attention heads, which engineArgs.tensorParallelSize {tp} does not \
             divide: use one of {} (and as many GPUs in resources)",
            valid.join(", ")
        ),
    })
}

/// A static LoRA adapter (`--lora-modules`, from spec.loraAdapters) that vLLM could not load.
fn lora_adapter(lines: &[&str]) -> Option<Diagnosis> {
    if let Some(line) = lines
        .iter()
        .rev()
        .find(|l| l.contains("is greater than max_lora_rank"))
    {
        let rank = number_after(line, "LoRA rank ")?;
        let max = number_after(line, "max_lora_rank ")?;
        let r: u32 = rank.parse().ok()?;
        let fits = [1u32, 8, 16, 32, 64, 128, 256, 320, 512]
            .into_iter()
            .find(|&v| v >= r)
            .map(|v| format!("{v}"))
            .unwrap_or_else(|| "512".into());
        return Some(Diagnosis {
            reason: "LoRARankTooLarge",
            message: format!(
                "a LoRA adapter of spec.loraAdapters has rank {rank}, more than vLLM's \
                 max_lora_rank {max}: set spec.engineArgs.maxLoraRank to {fits} or more, or \
                 remove the adapter"
            ),
        });
    }
    let line = lines
        .iter()
        .rev()
        .find(|l| l.contains("failed: No adapter found for "))?;
    let path = line.split("No adapter found for ").nth(1)?.trim();
    let name = text_between(line, "Loading lora ", " failed").unwrap_or("an adapter");
    Some(Diagnosis {
        reason: "LoRAAdapterNotFound",
        message: format!(
            "vLLM finds no LoRA adapter {name} at '{path}' (spec.loraAdapters): the directory \
             must hold adapter_config.json and the adapter's weights; fix the path or the \
             volume's contents"
        ),
    })
}

fn unrecognized_argument(lines: &[&str]) -> Option<Diagnosis> {
    // argparse takes a unique prefix for a flag; one that several flags start with is refused:
    // "vllm serve: error: ambiguous option: --max could match --max-model-len, ...".
    if let Some(what) = lines
        .iter()
        .rev()
        .find_map(|l| l.split_once("ambiguous option: ").map(|(_, w)| w.trim()))
    {
        return Some(Diagnosis {
            reason: "UnrecognizedArgument",
            message: format!(
                "vLLM cannot tell which flag is meant ({}): spell it out in full in \
                 engineArgs.extraArgs",
                quote(what)
            ),
        });
    }
    let flags = lines.iter().rev().find_map(|l| {
        l.split_once("unrecognized arguments: ")
            .map(|(_, f)| f.trim())
    })?;
    let mut message = format!(
        "this vLLM does not know the arguments {}: remove them from engineArgs.extraArgs",
        quote(flags)
    );
    if flags
        .split_whitespace()
        .any(|f| f == "--shutdown-timeout" || f.starts_with("--shutdown-timeout="))
    {
        message = format!(
            "this vLLM does not know --shutdown-timeout ({}): it needs vLLM ≥ 0.18; use a newer image, \
             or set spec.shutdown.drainSeconds: 0 (and drop it from engineArgs.extraArgs)",
            quote(flags)
        );
    }
    Some(Diagnosis {
        reason: "UnrecognizedArgument",
        message,
    })
}

fn shared_memory(lines: &[&str], facts: &Facts) -> Option<Diagnosis> {
    let line = lines.iter().rev().find(|l| {
        let lower = l.to_ascii_lowercase();
        lower.contains("error while creating shared memory segment")
            || lower.contains("error while attaching to shared memory segment")
            || lower.contains("bus error")
            || (lower.contains("/dev/shm") && lower.contains("no space left on device"))
            || lower.contains("insufficient shared memory")
    })?;
    Some(Diagnosis {
        reason: "SharedMemoryTooSmall",
        message: format!(
            "vLLM ran out of shared memory (/dev/shm, spec.shmSize {}): {}: raise spec.shmSize",
            facts.shm_size,
            quote(line)
        ),
    })
}

fn startup_probe_timeout(lines: &[&str], ran: Option<i64>, facts: &Facts) -> Diagnosis {
    let budget = match facts.startup_probe {
        Some((delay, period, threshold)) => format!(
            "{} s (startupProbe initialDelaySeconds {delay} + periodSeconds {period} × failureThreshold \
             {threshold})",
            facts.startup_budget().unwrap_or_default()
        ),
        None => "its budget".into(),
    };
    let ran = ran.map(|s| format!(" after {s} s")).unwrap_or_default();
    let got = progress_of(lines)
        .map(|p| format!(", last step: {p}"))
        .unwrap_or_default();
    Diagnosis {
        reason: "StartupProbeTimeout",
        message: format!(
            "the startup probe restarted vLLM while it was still loading{ran}{got}; the probe allows \
             {budget}: raise startupProbe.failureThreshold"
        ),
    }
}

fn engine_start_failed(lines: &[&str], code: i32) -> Diagnosis {
    let last = last_error_line(lines)
        .or_else(|| lines.iter().rev().find(|l| !l.trim().is_empty()).copied());
    let message = match last {
        Some(line) => format!("vLLM exited with code {code}: {}", quote(line)),
        None => format!("vLLM exited with code {code} and logged nothing"),
    };
    Diagnosis {
        reason: "EngineStartFailed",
        message,
    }
}

/// The root cause among the log's error lines: the last `SomethingError: ...`
/// that is not the API server's "see root cause above" summary, else the last
/// ERROR line.
fn last_error_line<'a>(lines: &[&'a str]) -> Option<&'a str> {
    let exception = lines.iter().rev().find(|l| {
        let t = l.trim_start();
        let head = t.split(':').next().unwrap_or_default();
        !head.contains(' ')
            && (head.ends_with("Error") || head.ends_with("Exception"))
            && t.len() > head.len()
            && !t.contains("See root cause above")
    });
    exception
        .or_else(|| {
            lines
                .iter()
                .rev()
                .find(|l| l.contains("ERROR") || l.contains("Error"))
        })
        .map(|l| l.trim())
}

/// A log line in a message: trimmed and cut to a sensible length.
fn quote(line: &str) -> String {
    masking::truncate(line.trim(), MAX_QUOTED_BYTES.min(MAX_EVENT_NOTE_BYTES)).into_owned()
}

/// `line` without vLLM's process prefix (`(EngineCore_DP0 pid=7) `) and log
/// header (`ERROR 07-11 06:18:32 [core.py:708] `), which carry no meaning here.
pub(super) fn strip_prefix(line: &str) -> &str {
    let mut l = line.trim_end_matches('\r');
    if l.starts_with('(')
        && let Some(end) = l.find(") ")
        && l[..end].contains("pid=")
    {
        l = &l[end + 2..];
    }
    for level in ["INFO ", "WARNING ", "ERROR ", "DEBUG ", "CRITICAL "] {
        if let Some(rest) = l.strip_prefix(level)
            && let Some(close) = rest.find("] ")
            && rest[..close].contains('[')
        {
            return &rest[close + 2..];
        }
    }
    l
}

/// The text of `line` between `start` and the next `end` after it.
fn text_between<'a>(line: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = line.find(start)? + start.len();
    let len = line[from..].find(end)?;
    Some(&line[from..from + len])
}

/// The number (digits, `,` thousands separators and a decimal point) right after `start`.
pub(super) fn number_after(line: &str, start: &str) -> Option<String> {
    let from = line.find(start)? + start.len();
    let n: String = line[from..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .filter(|c| *c != ',')
        .collect();
    let n = n.trim_end_matches('.').to_string();
    (!n.is_empty()).then_some(n)
}

mod engine;
use engine::progress_of;
pub use engine::{EngineInfo, engine_info, progress};

#[cfg(test)]
mod tests;
