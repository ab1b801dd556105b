//! The model (its `config.json`) and the simulated GPU: weight size, KV-cache bytes per token and
//! vLLM's start-up checks, with vLLM's messages.
//!
//! Formulas (the simulator's choice, close to vLLM's own accounting for dense decoder models):
//! - dtype bytes: `--dtype` half/float16/bfloat16 = 2, float/float32 = 4; `auto` = 2 (vLLM serves
//!   float32 checkpoints in 16 bits under `auto`).
//! - parameters: `vllm_sim_num_parameters` if config.json has it; otherwise per layer
//!   `hidden*(hidden + 2*kv_heads*head_dim) + hidden*hidden` (attention) plus
//!   `3*hidden*intermediate_size` (gated MLP; `8*hidden^2` without `intermediate_size`), plus
//!   `vocab_size*hidden` embeddings (twice unless `tie_word_embeddings`).
//! - weights per GPU = parameters * dtype bytes / tensor-parallel size.
//! - KV bytes per token per GPU = 2 (K and V) * layers * max(1, kv_heads / tp) * head_dim * dtype bytes,
//!   allocated in blocks of 16 tokens (vLLM's default block size).
//! - KV-cache memory = total * gpu_memory_utilization - weights - activation overhead (0.75 GiB).

use std::path::Path;

use serde_json::Value;

use crate::py;

pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
pub const BLOCK_SIZE: u64 = 16;
/// Activation peak and non-torch memory the simulated profile run reserves.
pub const ACTIVATION_OVERHEAD_BYTES: f64 = 0.75 * GIB;
const DOCS: &str =
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.";

/// A start-up failure, printed as the last line of a Python traceback (`<exception>: <message>`).
#[derive(Debug, Clone, PartialEq)]
pub struct SimError {
    /// The Python exception type, e.g. `ValueError`, `torch.OutOfMemoryError`.
    pub exception: &'static str,
    pub message: String,
    /// Where it is raised: the engine core process (true) or the API server process.
    pub in_engine: bool,
    /// An exception this one was raised from (`The above exception was the direct cause ...`).
    pub cause: Option<Box<SimError>>,
}

impl SimError {
    pub fn value(message: String) -> Self {
        SimError {
            exception: "ValueError",
            message,
            in_engine: false,
            cause: None,
        }
    }

    pub fn engine(mut self) -> Self {
        self.in_engine = true;
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architectures: Vec<String>,
    pub model_type: String,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub num_hidden_layers: u64,
    pub max_position_embeddings: u64,
    pub torch_dtype: String,
    pub head_dim: u64,
    pub intermediate_size: Option<u64>,
    pub vocab_size: Option<u64>,
    pub tie_word_embeddings: bool,
    pub num_parameters: Option<u64>,
}

/// vLLM's message for a model that is neither a Hugging Face repository it can reach nor a local
/// directory with a config file (`vllm/transformers_utils/config.py`, `get_config`).
pub fn invalid_repo_message(model: &str) -> String {
    format!(
        "Invalid repository ID or local directory specified: '{model}'.\nPlease verify the following \
         requirements:\n1. Provide a valid Hugging Face repository ID.\n2. Specify a local directory \
         that contains a recognized configuration file.\n   - For Hugging Face models: ensure the \
         presence of a 'config.json'.\n   - For Mistral models: ensure the presence of a \
         'params.json'.\n3. For GGUF: pass the local path of the GGUF checkpoint.\n   Loading GGUF \
         from a remote repo directly is not yet supported.\n"
    )
}

fn num(v: &Value, key: &str) -> Option<u64> {
    v.get(key)
        .and_then(|x| x.as_u64().or_else(|| x.as_f64().map(|f| f as u64)))
}

impl ModelConfig {
    /// Reads `<dir>/config.json`.
    pub fn load(model: &str) -> Result<ModelConfig, SimError> {
        let path = Path::new(model).join("config.json");
        if !Path::new(model).is_dir() || !path.is_file() {
            return Err(SimError::value(invalid_repo_message(model)));
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|_| SimError::value(invalid_repo_message(model)))?;
        let json: Value = serde_json::from_str(&text).map_err(|_| SimError {
            exception: "OSError",
            message: format!(
                "It looks like the config file at '{}' is not a valid JSON file.",
                path.display()
            ),
            in_engine: false,
            cause: None,
        })?;
        Self::from_json(&json)
    }

    pub fn from_json(json: &Value) -> Result<ModelConfig, SimError> {
        // Multimodal configs keep the language model's fields under text_config.
        let v = json
            .get("text_config")
            .filter(|t| t.get("hidden_size").is_some())
            .unwrap_or(json);
        let need = |key: &str| {
            num(v, key).filter(|n| *n > 0).ok_or_else(|| {
                SimError::value(format!(
                    "config.json has no positive integer '{key}' (required by the simulator)"
                ))
            })
        };
        let hidden_size = need("hidden_size")?;
        let num_attention_heads = need("num_attention_heads")?;
        let num_hidden_layers = need("num_hidden_layers")?;
        let num_key_value_heads = num(v, "num_key_value_heads")
            .filter(|n| *n > 0)
            .unwrap_or(num_attention_heads);
        let max_position_embeddings = num(v, "max_position_embeddings").unwrap_or(2048);
        let torch_dtype = v
            .get("torch_dtype")
            .or_else(|| v.get("dtype"))
            .or_else(|| json.get("torch_dtype"))
            .and_then(Value::as_str)
            .unwrap_or("float32")
            .to_string();
        let architectures = json
            .get("architectures")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ModelConfig {
            architectures,
            model_type: json
                .get("model_type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            hidden_size,
            num_attention_heads,
            num_key_value_heads,
            num_hidden_layers,
            max_position_embeddings,
            torch_dtype,
            head_dim: num(v, "head_dim")
                .filter(|n| *n > 0)
                .unwrap_or(hidden_size / num_attention_heads),
            intermediate_size: num(v, "intermediate_size"),
            vocab_size: num(v, "vocab_size"),
            tie_word_embeddings: json
                .get("tie_word_embeddings")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            num_parameters: num(json, "vllm_sim_num_parameters"),
        })
    }

    pub fn num_parameters(&self) -> u64 {
        if let Some(n) = self.num_parameters {
            return n;
        }
        let h = self.hidden_size;
        let attention = h * (h + 2 * self.num_key_value_heads * self.head_dim) + h * h;
        let mlp = match self.intermediate_size {
            Some(i) => 3 * h * i,
            None => 8 * h * h,
        };
        let embeddings =
            self.vocab_size.unwrap_or(0) * h * if self.tie_word_embeddings { 1 } else { 2 };
        self.num_hidden_layers * (attention + mlp) + embeddings
    }
}

/// Bytes per element of the weights and the KV cache for `--dtype`.
pub fn dtype_bytes(dtype: &str) -> u64 {
    match dtype {
        "float" | "float32" => 4,
        _ => 2,
    }
}

/// The torch dtype vLLM resolves `--dtype` to, for the engine config log line.
pub fn torch_dtype(dtype: &str, config_dtype: &str) -> &'static str {
    match dtype {
        "half" | "float16" => "torch.float16",
        "bfloat16" => "torch.bfloat16",
        "float" | "float32" => "torch.float32",
        _ => match config_dtype {
            "float16" => "torch.float16",
            _ => "torch.bfloat16",
        },
    }
}

/// vLLM's check in `ModelConfig.verify_with_parallel_config` (vllm/config/model.py).
pub fn check_tensor_parallel(cfg: &ModelConfig, tp: u32) -> Result<(), SimError> {
    let heads = cfg.num_attention_heads;
    if tp == 0 || !heads.is_multiple_of(tp as u64) {
        return Err(tp_error(heads, tp as u64));
    }
    Ok(())
}

pub fn tp_error(heads: u64, tp: u64) -> SimError {
    SimError::value(format!(
        "Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."
    ))
}

/// vLLM's `max_model_len` derivation and check (`get_and_verify_max_len`, vllm/config/model.py).
pub fn resolve_max_model_len(
    cfg: &ModelConfig,
    requested: Option<u64>,
    allow_long: bool,
) -> Result<u64, SimError> {
    let derived = cfg.max_position_embeddings;
    match requested {
        None => Ok(derived),
        Some(n) if n > derived && !allow_long => Err(SimError::value(format!(
            "User-specified max_model_len ({n}) is greater than the derived max_model_len \
             (max_position_embeddings={} or model_max_length=None in model's config.json). To allow \
             overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. \
             VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses \
             relative position encoding (RoPE), positions exceeding derived_max_model_len lead to \
             nan. If the model uses absolute position encoding, positions exceeding \
             derived_max_model_len will cause a CUDA array out-of-bounds error.",
            py::float(derived as f64)
        ))),
        Some(n) => Ok(n),
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    pub total_bytes: f64,
    pub free_bytes: f64,
}

/// vLLM's start-up memory check (`request_memory`, vllm/v1/worker/utils.py; before that in
/// gpu_worker.py): free memory must cover `total * gpu_memory_utilization`.
pub fn check_free_memory(gpu: Gpu, util: f64) -> Result<(), SimError> {
    let requested = gpu.total_bytes * util;
    if gpu.free_bytes < requested {
        return Err(free_memory_error(gpu, util));
    }
    Ok(())
}

pub fn free_memory_error(gpu: Gpu, util: f64) -> SimError {
    SimError::value(format!(
        "Free memory on device cuda:0 ({}/{} GiB) on startup is less than desired GPU memory \
         utilization ({}, {} GiB). Decrease GPU memory utilization or reduce GPU memory used by \
         other processes.",
        py::round2(gpu.free_bytes / GIB),
        py::round2(gpu.total_bytes / GIB),
        py::float(util),
        py::round2(gpu.total_bytes * util / GIB)
    ))
    .engine()
}

/// What the simulated engine sized.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Memory {
    pub weights_bytes: f64,
    pub kv_bytes_per_token: u64,
    pub available_kv_bytes: f64,
    pub num_gpu_blocks: u64,
}

impl Memory {
    pub fn kv_tokens(&self) -> u64 {
        self.num_gpu_blocks * BLOCK_SIZE
    }

    /// vLLM's "Maximum concurrency for N tokens per request".
    pub fn max_concurrency(&self, max_model_len: u64) -> f64 {
        self.num_gpu_blocks as f64 / max_model_len.div_ceil(BLOCK_SIZE).max(1) as f64
    }
}

pub fn weights_bytes(cfg: &ModelConfig, dtype: &str, tp: u32) -> f64 {
    (cfg.num_parameters() * dtype_bytes(dtype)) as f64 / tp.max(1) as f64
}

pub fn kv_bytes_per_token(cfg: &ModelConfig, dtype: &str, tp: u32) -> u64 {
    let kv_heads_per_gpu = (cfg.num_key_value_heads / tp.max(1) as u64).max(1);
    2 * cfg.num_hidden_layers * kv_heads_per_gpu * cfg.head_dim * dtype_bytes(dtype)
}

/// The KV cache for one request of `max_model_len` tokens, in whole blocks (vLLM's
/// `max_memory_usage_bytes` for full attention).
pub fn kv_needed_bytes(kv_bytes_per_token: u64, max_model_len: u64) -> u64 {
    max_model_len.div_ceil(BLOCK_SIZE) * BLOCK_SIZE * kv_bytes_per_token
}

/// Sizes the KV cache and applies vLLM's `_check_enough_kv_cache_memory`
/// (vllm/v1/core/kv_cache_utils.py).
pub fn size_kv_cache(
    gpu: Gpu,
    util: f64,
    weights: f64,
    kv_bytes_per_token: u64,
    max_model_len: u64,
) -> Result<Memory, SimError> {
    let available = gpu.total_bytes * util - weights - ACTIVATION_OVERHEAD_BYTES;
    if available <= 0.0 {
        return Err(no_memory_error());
    }
    let block_bytes = (BLOCK_SIZE * kv_bytes_per_token) as f64;
    let num_gpu_blocks = (available / block_bytes).floor() as u64;
    let needed = kv_needed_bytes(kv_bytes_per_token, max_model_len);
    if needed as f64 > available {
        return Err(kv_too_small_error(
            max_model_len,
            needed as f64,
            available,
            num_gpu_blocks * BLOCK_SIZE,
        ));
    }
    Ok(Memory {
        weights_bytes: weights,
        kv_bytes_per_token,
        available_kv_bytes: available,
        num_gpu_blocks,
    })
}

pub fn no_memory_error() -> SimError {
    SimError::value(format!(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when \
         initializing the engine. {DOCS}"
    ))
    .engine()
}

pub fn kv_too_small_error(
    max_model_len: u64,
    needed: f64,
    available: f64,
    estimated: u64,
) -> SimError {
    let estimated_msg = if estimated > 0 {
        format!(
            "Based on the available memory, the estimated maximum model length is {estimated}. "
        )
    } else {
        String::new()
    };
    SimError::value(format!(
        "To serve at least one request with the model's max seq len ({max_model_len}), ({} GiB KV \
         cache is needed, which is larger than the available KV cache memory ({} GiB). \
         {estimated_msg}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when \
         initializing the engine. {DOCS}",
        py::round2(needed / GIB),
        py::round2(available / GIB)
    ))
    .engine()
}

/// torch's CUDA out-of-memory message (`torch.OutOfMemoryError`).
pub fn oom_error(gpu: Gpu, tried: f64, in_use: f64) -> SimError {
    let free_mib = ((gpu.total_bytes - in_use).max(0.0) / (1024.0 * 1024.0)).min(20.0);
    SimError {
        exception: "torch.OutOfMemoryError",
        message: format!(
            "CUDA out of memory. Tried to allocate {:.2} GiB. GPU 0 has a total capacity of {:.2} GiB \
             of which {:.2} MiB is free. Including non-PyTorch memory, this process has {:.2} GiB \
             memory in use. Of the allocated memory {:.2} GiB is allocated by PyTorch, and {:.2} MiB \
             is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try \
             setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See \
             documentation for Memory Management  \
             (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
            tried / GIB,
            gpu.total_bytes / GIB,
            free_mib,
            in_use / GIB,
            (in_use - 0.5 * GIB).max(0.0) / GIB,
            212.0
        ),
        in_engine: true,
        cause: None,
    }
}

/// huggingface_hub's `GatedRepoError`, which vLLM re-raises as its invalid-repository error.
pub fn gated_repo_error(repo: &str) -> SimError {
    let gated = SimError {
        exception: "huggingface_hub.errors.GatedRepoError",
        message: format!(
            "401 Client Error. (Request ID: Root=1-00000000-0000000000000000vllmsim)\n\nCannot access \
             gated repo for url https://huggingface.co/{repo}/resolve/main/config.json.\nAccess to \
             model {repo} is restricted. You must have access to it and be authenticated to access \
             it. Please log in."
        ),
        in_engine: false,
        cause: None,
    };
    let mut e = SimError::value(invalid_repo_message(repo));
    e.cause = Some(Box::new(gated));
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen() -> ModelConfig {
        let text = include_str!("../../../config/samples/fake-model/config.json");
        ModelConfig::from_json(&serde_json::from_str(text).unwrap()).unwrap()
    }

    fn gpu(gib: f64) -> Gpu {
        Gpu {
            total_bytes: gib * GIB,
            free_bytes: gib * GIB,
        }
    }

    #[test]
    fn qwen_sizes() {
        let c = qwen();
        assert_eq!(c.head_dim, 128);
        // Qwen2.5-1.5B has 1.54e9 parameters.
        let p = c.num_parameters() as f64;
        assert!((1.5e9..1.6e9).contains(&p), "{p}");
        assert_eq!(kv_bytes_per_token(&c, "auto", 1), 2 * 28 * 2 * 128 * 2);
        assert_eq!(kv_bytes_per_token(&c, "float32", 2), 2 * 28 * 128 * 4);
        let w = weights_bytes(&c, "auto", 1);
        assert!((2.8 * GIB..2.95 * GIB).contains(&w), "{}", w / GIB);
    }

    #[test]
    fn operator_defaults_fit() {
        let c = qwen();
        let w = weights_bytes(&c, "auto", 1);
        let kv = kv_bytes_per_token(&c, "auto", 1);
        let m = size_kv_cache(gpu(24.0), 0.75, w, kv, 4096).unwrap();
        let expect = ((24.0 * 0.75 * GIB - w - ACTIVATION_OVERHEAD_BYTES) / (16.0 * kv as f64))
            .floor() as u64;
        assert_eq!(m.num_gpu_blocks, expect);
        assert_eq!(m.kv_tokens(), expect * 16);
        assert!((m.max_concurrency(4096) - expect as f64 / 256.0).abs() < 1e-9);
    }

    #[test]
    fn kv_cache_too_small_message() {
        let c = qwen();
        let kv = kv_bytes_per_token(&c, "auto", 1);
        // 4 GiB at 0.9 leaves 3.6 - 2.87 - 0.75 < 0: nothing for the cache.
        let e = size_kv_cache(gpu(4.0), 0.9, weights_bytes(&c, "auto", 1), kv, 4096).unwrap_err();
        assert!(
            e.message
                .starts_with("No available memory for the cache blocks."),
            "{}",
            e.message
        );
        // A fixed 1 GiB budget: 1 GiB / (16 * 28672) = 2340 blocks = 37440 tokens.
        let w = 6.0 * GIB - 0.75 * GIB - GIB;
        let e = size_kv_cache(gpu(6.0), 1.0, w, kv, 32768 + 16384).unwrap_err();
        assert_eq!(
            e.message,
            "To serve at least one request with the model's max seq len (49152), (1.31 GiB KV cache \
             is needed, which is larger than the available KV cache memory (1.0 GiB). Based on the \
             available memory, the estimated maximum model length is 37440. Try increasing \
             `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine. \
             See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
        );
        assert!(e.in_engine);
        assert!(size_kv_cache(gpu(6.0), 1.0, w, kv, 37440).is_ok());
        assert!(size_kv_cache(gpu(6.0), 1.0, w, kv, 37441).is_err());
    }

    #[test]
    fn free_memory_message() {
        let g = Gpu {
            total_bytes: 24.0 * GIB,
            free_bytes: 12.0 * GIB,
        };
        assert!(check_free_memory(g, 0.5).is_ok());
        assert_eq!(
            check_free_memory(g, 0.75).unwrap_err().message,
            "Free memory on device cuda:0 (12.0/24.0 GiB) on startup is less than desired GPU memory \
             utilization (0.75, 18.0 GiB). Decrease GPU memory utilization or reduce GPU memory used \
             by other processes."
        );
    }

    #[test]
    fn tensor_parallel_and_max_len() {
        let c = qwen();
        assert!(check_tensor_parallel(&c, 4).is_ok());
        assert_eq!(
            check_tensor_parallel(&c, 5).unwrap_err().message,
            "Total number of attention heads (12) must be divisible by tensor parallel size (5)."
        );
        assert_eq!(resolve_max_model_len(&c, None, false).unwrap(), 32768);
        assert_eq!(resolve_max_model_len(&c, Some(4096), false).unwrap(), 4096);
        let e = resolve_max_model_len(&c, Some(65536), false).unwrap_err();
        assert!(e.message.starts_with(
            "User-specified max_model_len (65536) is greater than the derived max_model_len \
             (max_position_embeddings=32768.0 or model_max_length=None in model's config.json)."
        ));
        assert_eq!(resolve_max_model_len(&c, Some(65536), true).unwrap(), 65536);
    }

    #[test]
    fn config_errors() {
        let dir = std::env::temp_dir().join(format!("vllm-sim-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().unwrap().to_string();
        let missing = ModelConfig::load(&d).unwrap_err();
        assert_eq!(missing.exception, "ValueError");
        assert!(missing.message.starts_with(&format!(
            "Invalid repository ID or local directory specified: '{d}'.\n"
        )));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            ModelConfig::load(&d)
                .unwrap_err()
                .message
                .starts_with("Invalid repository ID")
        );
        std::fs::write(dir.join("config.json"), "{not json").unwrap();
        let e = ModelConfig::load(&d).unwrap_err();
        assert_eq!(e.exception, "OSError");
        assert!(e.message.contains("is not a valid JSON file"));
        std::fs::write(dir.join("config.json"), r#"{"hidden_size": 64}"#).unwrap();
        assert!(
            ModelConfig::load(&d)
                .unwrap_err()
                .message
                .contains("'num_attention_heads'")
        );
        std::fs::write(
            dir.join("config.json"),
            r#"{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vllm_sim_num_parameters": 1000}"#,
        )
        .unwrap();
        let c = ModelConfig::load(&d).unwrap();
        assert_eq!(c.num_parameters(), 1000);
        assert_eq!(c.num_key_value_heads, 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
