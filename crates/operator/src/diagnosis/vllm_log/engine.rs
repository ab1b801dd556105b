//! What a running vLLM's start-up lines say: how far a load got and the
//! settings the engine chose. Pure.

use super::{number_after, strip_prefix};

/// How far a load got, from the last milestone in `log` ("loading weights (5/9
/// shards)", "capturing CUDA graphs"), for a status message while a pod starts.
pub fn progress(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().map(strip_prefix).collect();
    progress_of(&lines)
}

pub(super) fn progress_of(lines: &[&str]) -> Option<String> {
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
