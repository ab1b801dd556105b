//! Static LoRA adapters (`--lora-modules`), loaded at start-up as vLLM 0.18 does: after the
//! engine is up, the API server's `init_static_loras` asks the engine core to `add_lora` each one
//! (`vllm/entrypoints/openai/models/serving.py`). The engine core reads `<path>/adapter_config.json`
//! (PEFT's), checks it (`PEFTHelper.validate_legal`: the rank against `--max-lora-rank`, DoRA,
//! `modules_to_save`) and looks for `adapter_model.safetensors` or `adapter_model.bin`.
//!
//! A failure is logged by the engine core (`Invocation of add_lora method failed` and its
//! traceback), the API server raises `ValueError(<the engine's message>)` and vLLM exits 1, for
//! example `ValueError: Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16.`
//! Without `--enable-lora` the worker refuses with `LoRA is not enabled. Use --enable-lora to enable LoRA.`
//! A success is logged as `Loaded new LoRA adapter: name '<name>', path '<path>'`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::args::LoraModule;

/// An adapter being served: `/v1/models` lists it, requests may name it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedLora {
    pub name: String,
    /// As given on the command line (vLLM's `root`).
    pub path: String,
    /// The base model's served name (`parent`).
    pub parent: String,
    pub rank: u64,
}

/// Why the engine core refused an adapter: the Python exception and its message.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraError {
    pub exception: &'static str,
    pub message: String,
    /// The engine-side frame that raised it (file under vllm/, line, function, source line).
    raised_at: (&'static str, u32, &'static str, &'static str),
}

const VLLM: &str = "/usr/local/lib/python3.12/dist-packages/vllm/";

/// `get_adapter_absolute_path` (vllm/lora/utils.py): absolute paths as they are, `~` expanded,
/// relative paths that exist made absolute. (vLLM would then try the Hugging Face Hub for a
/// relative path that does not exist; the simulator has no Hub, so the path stays as it is.)
fn absolute(path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    if let Some(rest) = path.strip_prefix('~') {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
        return PathBuf::from(format!("{home}{rest}"));
    }
    if p.exists()
        && let Ok(cwd) = std::env::current_dir()
    {
        return cwd.join(p);
    }
    p.to_path_buf()
}

/// Python's `repr(set_of_str)` for the missing-fields message (sorted, for a stable text).
fn py_set(items: &[&str]) -> String {
    let parts: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("{{{}}}", parts.join(", "))
}

/// `json.JSONDecodeError`'s message for a file that is not JSON (approximately: the position
/// is serde's).
fn json_error(e: &serde_json::Error, text: &str) -> String {
    let (line, col) = (e.line().max(1), e.column().max(1));
    let char_at: usize = text
        .lines()
        .take(line - 1)
        .map(|l| l.chars().count() + 1)
        .sum::<usize>()
        + col
        - 1;
    format!("Expecting value: line {line} column {col} (char {char_at})")
}

/// `add_lora` for one adapter.
pub fn load(
    m: &LoraModule,
    enable_lora: bool,
    max_lora_rank: u32,
    served_names: &[String],
) -> Result<ServedLora, LoraError> {
    if !enable_lora {
        return Err(LoraError {
            exception: "RuntimeError",
            message: "LoRA is not enabled. Use --enable-lora to enable LoRA.".into(),
            raised_at: (
                "v1/worker/lora_model_runner_mixin.py",
                56,
                "_ensure_lora_enabled",
                "raise RuntimeError(\"LoRA is not enabled. Use --enable-lora to enable LoRA.\")",
            ),
        });
    }
    let dir = absolute(&m.path);
    let not_found = || LoraError {
        exception: "ValueError",
        message: format!(
            "Loading lora {} failed: No adapter found for {}",
            m.name, m.path
        ),
        raised_at: (
            "lora/worker_manager.py",
            138,
            "_load_adapter",
            "raise ValueError(",
        ),
    };
    let text = std::fs::read_to_string(dir.join("adapter_config.json")).map_err(|_| not_found())?;
    let cfg: Value = serde_json::from_str(&text).map_err(|e| LoraError {
        exception: "json.decoder.JSONDecodeError",
        message: json_error(&e, &text),
        raised_at: (
            "/usr/lib/python3.12/json/decoder.py",
            356,
            "raw_decode",
            "raise JSONDecodeError(\"Expecting value\", s, err.value) from None",
        ),
    })?;
    let missing: Vec<&str> = ["lora_alpha", "r", "target_modules"]
        .into_iter()
        .filter(|k| cfg.get(*k).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(LoraError {
            exception: "ValueError",
            message: format!(
                "Missing required configuration fields: {}",
                py_set(&missing)
            ),
            raised_at: (
                "lora/peft_helper.py",
                97,
                "from_dict",
                "raise ValueError(f\"Missing required configuration fields: {missing_fields}\")",
            ),
        });
    }
    let rank = cfg.get("r").and_then(Value::as_u64).unwrap_or(0);
    let mut problems = Vec::new();
    let truthy = |v: Option<&Value>| match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    };
    if truthy(cfg.get("modules_to_save")) {
        problems.push("vLLM only supports modules_to_save being None.".to_string());
    }
    if truthy(cfg.get("use_dora")) {
        problems.push("vLLM does not yet support DoRA.".to_string());
    }
    if rank > u64::from(max_lora_rank) {
        problems.push(format!(
            "LoRA rank {rank} is greater than max_lora_rank {max_lora_rank}."
        ));
    }
    if cfg
        .get("bias")
        .and_then(Value::as_str)
        .is_some_and(|b| b != "none")
    {
        problems.push("Adapter bias cannot be used without bias_enabled.".to_string());
    }
    if !problems.is_empty() {
        return Err(LoraError {
            exception: "ValueError",
            message: problems.join(" "),
            raised_at: (
                "lora/peft_helper.py",
                130,
                "validate_legal",
                "raise ValueError(f\"{' '.join(error_msg)}\")",
            ),
        });
    }
    if !dir.join("adapter_model.safetensors").is_file() && !dir.join("adapter_model.bin").is_file()
    {
        return Err(LoraError {
            exception: "ValueError",
            message: format!("{} doesn't contain tensors", dir.display()),
            raised_at: (
                "lora/lora_model.py",
                238,
                "from_local_checkpoint",
                "raise ValueError(f\"{lora_dir} doesn't contain tensors\")",
            ),
        });
    }
    let parent = match &m.base_model_name {
        Some(b) if served_names.contains(b) => b.clone(),
        _ => served_names[0].clone(),
    };
    Ok(ServedLora {
        name: m.name.clone(),
        path: m.path.clone(),
        parent,
        rank,
    })
}

impl LoraError {
    /// The engine core's log of the failed utility call (logged at ERROR with its traceback).
    pub fn engine_log(&self) -> String {
        let f = |file: &str, line: u32, func: &str, code: &str| {
            let path = if file.starts_with('/') {
                file.to_string()
            } else {
                format!("{VLLM}{file}")
            };
            format!("  File \"{path}\", line {line}, in {func}\n    {code}\n")
        };
        let mut s = String::from(
            "Invocation of add_lora method failed\nTraceback (most recent call last):\n",
        );
        s.push_str(&f(
            "v1/engine/core.py",
            1118,
            "_handle_client_request",
            "result = method(*self._convert_msgspec_args(method, args))",
        ));
        s.push_str(&f(
            "v1/engine/core.py",
            554,
            "add_lora",
            "return self.model_executor.add_lora(lora_request)",
        ));
        s.push_str(&f(
            "v1/executor/abstract.py",
            226,
            "add_lora",
            "assert lora_request.lora_int_id > 0, \"lora_id must be greater than 0.\"",
        ));
        s.push_str(&f(
            "v1/worker/gpu_worker.py",
            641,
            "add_lora",
            "return self.model_runner.add_lora(lora_request)",
        ));
        s.push_str(&f(
            "v1/worker/lora_model_runner_mixin.py",
            200,
            "add_lora",
            "return self.lora_manager.add_adapter(lora_request)",
        ));
        if self.exception != "RuntimeError" {
            s.push_str(&f(
                "lora/worker_manager.py",
                248,
                "add_adapter",
                "lora = self._load_adapter(lora_request)",
            ));
        }
        let (file, line, func, code) = self.raised_at;
        s.push_str(&f(file, line, func, code));
        s.push_str(&format!("{}: {}", self.exception, self.message));
        s
    }

    /// What the API server's `ValueError` says (the engine's failure message).
    pub fn api_message(&self) -> String {
        format!("Call to add_lora method failed: {}", self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub_adapter(name: &str) -> String {
        format!("{}/hub/org/{name}/main", env!("CARGO_MANIFEST_DIR"))
    }

    fn module(name: &str, path: &str) -> LoraModule {
        LoraModule {
            name: name.into(),
            path: path.into(),
            base_model_name: None,
        }
    }

    #[test]
    fn fixture_adapters() {
        let names = vec!["qwen".to_string()];
        let ok = load(
            &module("sql-lora", &hub_adapter("sql-lora")),
            true,
            16,
            &names,
        )
        .unwrap();
        assert_eq!(ok.parent, "qwen");
        assert_eq!(ok.rank, 16);
        let big = load(&module("big", &hub_adapter("big-lora")), true, 16, &names).unwrap_err();
        assert_eq!(
            big.message,
            "LoRA rank 64 is greater than max_lora_rank 16."
        );
        assert_eq!(
            big.api_message(),
            "Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16."
        );
        assert!(load(&module("big", &hub_adapter("big-lora")), true, 64, &names).is_ok());
        let missing = load(&module("x", "/nonexistent/lora"), true, 16, &names).unwrap_err();
        assert_eq!(
            missing.message,
            "Loading lora x failed: No adapter found for /nonexistent/lora"
        );
        assert!(
            missing
                .engine_log()
                .starts_with("Invocation of add_lora method failed\nTraceback")
        );
        let off = load(
            &module("sql-lora", &hub_adapter("sql-lora")),
            false,
            16,
            &names,
        )
        .unwrap_err();
        assert_eq!(
            off.api_message(),
            "Call to add_lora method failed: LoRA is not enabled. Use --enable-lora to enable LoRA."
        );
    }
}
