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
pub const REASONS: [&str; 11] = [
    "KVCacheTooSmall",
    "LoRARankTooLarge",
    "LoRAAdapterNotFound",
    "GPUMemoryInsufficient",
    "ModelNotFound",
    "TensorParallelNotDivisible",
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
    if let Some(d) = kv_cache_too_small(&lines, facts) {
        return Some(d);
    }
    if let Some(d) = gpu_memory_insufficient(&lines, facts) {
        return Some(d);
    }
    if let Some(d) = model_not_found(&lines, facts) {
        return Some(d);
    }
    if let Some(d) = tensor_parallel(&lines) {
        return Some(d);
    }
    if let Some(d) = lora_adapter(&lines) {
        return Some(d);
    }
    if let Some(d) = unrecognized_argument(&lines) {
        return Some(d);
    }
    if let Some(d) = shared_memory(&lines, facts) {
        return Some(d);
    }
    let started = lines
        .iter()
        .any(|l| l.contains("Application startup complete"));
    let killed = lines.iter().any(|l| {
        l.contains("KeyboardInterrupt: terminated")
            || l.contains("shutdown triggered signal=SIGTERM")
    });
    match ended {
        Ended::Exited {
            code, ran_seconds, ..
        } => {
            let over_budget = match (facts.startup_budget(), ran_seconds) {
                (Some(budget), Some(ran)) => *ran >= budget,
                _ => false,
            };
            if !started && (killed || (over_budget && matches!(code, 0 | 137 | 143))) {
                return Some(startup_probe_timeout(&lines, *ran_seconds, facts));
            }
            if *code == 0 && !started {
                // Stopped (e.g. a rollout) before it loaded: nothing to report.
                return None;
            }
            if *code == 0 {
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
fn strip_prefix(line: &str) -> &str {
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
fn number_after(line: &str, start: &str) -> Option<String> {
    let from = line.find(start)? + start.len();
    let n: String = line[from..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',' || *c == '.')
        .filter(|c| *c != ',')
        .collect();
    let n = n.trim_end_matches('.').to_string();
    (!n.is_empty()).then_some(n)
}

/// How far a load got, from the last milestone in `log` ("loading weights (5/9
/// shards)", "capturing CUDA graphs"), for a status message while a pod starts.
pub fn progress(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(strip_prefix).collect();
    progress_of(&lines)
}

fn progress_of(lines: &[&str]) -> Option<String> {
    lines.iter().rev().find_map(|l| {
        if l.contains("Application startup complete") || l.contains("Starting vLLM API server") {
            Some("starting the API server".to_string())
        } else if l.contains("Graph capturing finished") {
            Some("CUDA graphs captured".to_string())
        } else if l.contains("Capturing CUDA graph") || l.contains("Capturing cudagraphs") {
            Some("capturing CUDA graphs".to_string())
        } else if l.contains("GPU KV cache size") || l.contains("Available KV cache memory") {
            Some("KV cache allocated".to_string())
        } else if l.contains("Model loading took") || l.contains("Loading weights took") {
            Some("weights loaded".to_string())
        } else if let Some(rest) = l.split_once("checkpoint shards:").map(|(_, r)| r) {
            let done = rest
                .split('|')
                .nth(1)
                .map(|s| s.split_whitespace().next().unwrap_or_default().to_string())
                .filter(|s| s.contains('/'));
            Some(match done {
                Some(d) => format!("loading weights ({d} shards)"),
                None => "loading weights".to_string(),
            })
        } else if l.contains("Starting to load model") {
            Some("loading the model".to_string())
        } else {
            None
        }
    })
}

/// What vLLM reports about itself in its start-up lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineInfo {
    pub version: Option<String>,
    pub max_model_len: Option<i64>,
    pub kv_cache_tokens: Option<i64>,
    pub max_concurrency: Option<f64>,
    pub gpu_blocks: Option<i64>,
    pub tensor_parallel_size: Option<i64>,
}

impl EngineInfo {
    pub fn is_empty(&self) -> bool {
        *self == EngineInfo::default()
    }
}

/// The engine configuration in a start-up log (the first lines of a running container).
pub fn engine_info(log: &str) -> EngineInfo {
    let mut info = EngineInfo::default();
    let int = |s: Option<String>| s.and_then(|n| n.split('.').next().and_then(|n| n.parse().ok()));
    for line in log.lines().map(strip_prefix) {
        if info.version.is_none() {
            info.version = ["vLLM API server version ", "LLM engine (v"]
                .iter()
                .find_map(|start| {
                    let from = line.find(start)? + start.len();
                    let v: String = line[from..]
                        .chars()
                        .take_while(|c| !c.is_whitespace() && *c != ')')
                        .collect();
                    (!v.is_empty()).then_some(v)
                });
        }
        if let Some(n) = int(number_after(line, "max_seq_len=")) {
            info.max_model_len = Some(n);
        } else if let Some(n) = int(number_after(line, "Using max model len ")) {
            info.max_model_len = Some(n);
        }
        if let Some(n) = int(number_after(line, "tensor_parallel_size=")) {
            info.tensor_parallel_size = Some(n);
        }
        if let Some(n) = int(number_after(line, "GPU KV cache size: ")) {
            info.kv_cache_tokens = Some(n);
        }
        if line.contains("Maximum concurrency for ")
            && let Some(c) = number_after(line, "tokens per request: ").and_then(|c| c.parse().ok())
        {
            info.max_concurrency = Some(c);
        }
        for start in ["# GPU blocks: ", "# cuda blocks: ", "# CUDA blocks: "] {
            if let Some(n) = int(number_after(line, start)) {
                info.gpu_blocks = Some(n);
            }
        }
    }
    info
}

#[cfg(test)]
mod tests {
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
            include_str!(concat!("../../tests/fixtures/vllm-logs/", $name))
        };
    }

    fn check(log: &str, ended: &Ended, reason: &str, parts: &[&str]) {
        let d =
            diagnose(log, ended, &facts()).unwrap_or_else(|| panic!("no diagnosis for:\n{log}"));
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
                "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.18.0\n",
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
}
