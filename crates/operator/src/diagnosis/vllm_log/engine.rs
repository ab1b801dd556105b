//! What a running vLLM's start-up lines say: how far a load got and the
//! settings the engine chose. Pure.

use super::{number_after, strip_prefix};
use crate::diagnosis::without_colours;

/// How far a load got, from the last milestone in `log` ("loading weights (5/9
/// shards)", "capturing CUDA graphs"), for a status message while a pod starts.
pub fn progress(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(strip_prefix).collect();
    progress_of(&lines)
}

/// Each milestone's words, as vLLM logs them (the files are vLLM's, at the
/// release named; a pattern that only older releases print says so):
/// - "Starting vLLM server on": 0.18 `entrypoints/openai/api_server.py:580`,
///   0.34 `entrypoints/launchers/api_server/entry.py:139`; "Starting vLLM API
///   server" up to 0.17 (`api_server.py`); "Application startup complete":
///   uvicorn, every release;
/// - "Graph capturing finished": 0.34 `v1/worker/gpu/model_runner.py:1217`;
///   "Capturing CUDA graphs": the progress bar (0.34 `cudagraph_utils.py:459`),
///   "Capturing cudagraphs" before;
/// - "KV cache size" / "Available KV cache memory": 0.18
///   `v1/core/kv_cache_utils.py:1316`, 0.34 `:1169` (one line with the
///   concurrency), `v1/worker/gpu_worker.py:796`;
/// - "Model loading took" (0.34 `v1/worker/gpu/model_runner.py:442`),
///   "Loading weights took" (`model_loader/default_loader.py:544`);
/// - "checkpoint shards:": transformers' safetensors progress bar;
/// - "Starting to load model" (0.18 `v1/worker/gpu_model_runner.py:4482`),
///   "Loading model from scratch" (0.34 `v1/worker/gpu/model_runner.py:412`).
pub(super) fn progress_of(lines: &[&str]) -> Option<String> {
    lines.iter().rev().find_map(|l| {
        if [
            "Application startup complete",
            "Starting vLLM server on",
            "Starting vLLM API server",
        ]
        .iter()
        .any(|m| l.contains(m))
        {
            Some("starting the API server".to_string())
        } else if l.contains("Graph capturing finished") {
            Some("CUDA graphs captured".to_string())
        } else if l.contains("Capturing CUDA graph") || l.contains("Capturing cudagraphs") {
            Some("capturing CUDA graphs".to_string())
        } else if l.contains("KV cache size: ") || l.contains("Available KV cache memory") {
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
        } else if l.contains("Starting to load model") || l.contains("Loading model from scratch") {
            Some("loading the model".to_string())
        } else {
            None
        }
    })
}

/// Where vLLM names its version, and what follows it: the start-up banner
/// (0.18 `entrypoints/utils.py:277`, 0.34 `entrypoints/common/startup.py:18`),
/// whose logo row reads "… █ ▀▄▀ █  version 0.34.0" (bold when the log is
/// coloured) and whose plain form, with `VLLM_DISABLE_LOG_LOGO=1`, "vLLM server
/// version 0.34.0, serving model …"; the engine's config line (0.18
/// `v1/engine/core.py:104`, 0.34 `:154`: "Initializing a V1 LLM engine
/// (v0.34.0) with config"); up to 0.17, "vLLM API server version 0.8.4".
fn version_in(line: &str) -> Option<String> {
    let logo_row = line.contains("▀▄▀");
    let starts: &[&str] = match logo_row {
        true => &["  version "],
        false => &[
            "vLLM server version ",
            "LLM engine (v",
            "vLLM API server version ",
        ],
    };
    starts.iter().find_map(|start| {
        let from = line.find(start)? + start.len();
        let v: String = without_colours(&line[from..])
            .trim_start()
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != ')' && *c != ',')
            .collect();
        (!v.is_empty()).then_some(v)
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
            info.version = version_in(line);
        }
        if let Some(n) = int(number_after(line, "max_seq_len=")) {
            info.max_model_len = Some(n);
        } else if let Some(n) = int(number_after(line, "Using max model len ")) {
            info.max_model_len = Some(n);
        }
        if let Some(n) = int(number_after(line, "tensor_parallel_size=")) {
            info.tensor_parallel_size = Some(n);
        }
        if let Some(n) = int(number_after(line, "KV cache size: ")) {
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
