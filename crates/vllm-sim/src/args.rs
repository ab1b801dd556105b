//! `vllm serve`'s command line, parsed the way the played release's argparse parser does, with
//! argparse's error wording (exit 2). Every option of the real parser is known (src/flags.rs),
//! abbreviations included; the simulator acts on a few and accepts the others; a token the real
//! parser does not know is an error, as in vLLM.

use crate::flags::{Lookup, Nargs, Table};
use crate::py;
use crate::release::Release;

/// argparse's usage line for `vllm serve` (vLLM sets it in `vllm/entrypoints/cli/serve.py`).
pub const USAGE: &str = "usage: vllm serve [model_tag] [options]";
/// argparse's `prog` for the serve subcommand: errors read `vllm serve: error: ...`.
pub const PROG: &str = "vllm serve";
/// vLLM's default `--model` (ModelConfig.model) when neither a model tag nor `--model` is given.
pub const DEFAULT_MODEL: &str = "Qwen/Qwen3-0.6B";

#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub model_tag: Option<String>,
    /// `--model` was used (vLLM warns that it should be a positional argument).
    pub model_via_option: bool,
    pub model: String,
    pub served_model_name: Option<Vec<String>>,
    pub host: Option<String>,
    pub port: u16,
    pub dtype: String,
    /// `None` (or `auto`/-1 on the command line): the model's own maximum.
    pub max_model_len: Option<u64>,
    pub gpu_memory_utilization: f64,
    pub max_num_seqs: u32,
    pub tensor_parallel_size: u32,
    /// 0 (default): abort in-flight requests on SIGTERM; N: drain for up to N seconds.
    pub shutdown_timeout: u64,
    pub shutdown_timeout_given: bool,
    pub enable_lora: bool,
    pub max_loras: u32,
    pub max_lora_rank: u32,
    /// `--lora-modules`, parsed as vLLM's `LoRAParserAction` does.
    pub lora_modules: Vec<LoraModule>,
    /// The tokens of real options the simulator does not act on (flags and their values).
    pub ignored: Vec<String>,
    /// Those options by name (their first spelling) with their values, in order.
    pub options: Vec<(&'static str, Vec<String>)>,
    /// The tokens of `--shutdown-timeout` as given (for the "old vLLM" emulation).
    pub shutdown_timeout_tokens: Vec<String>,
    /// Non-default arguments in vLLM's order, as (dest, Python repr of the value).
    pub non_default: Vec<(&'static str, String)>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            model_tag: None,
            model_via_option: false,
            model: DEFAULT_MODEL.to_string(),
            served_model_name: None,
            host: None,
            port: 8000,
            dtype: "auto".to_string(),
            max_model_len: None,
            gpu_memory_utilization: 0.9,
            max_num_seqs: 256,
            tensor_parallel_size: 1,
            shutdown_timeout: 0,
            shutdown_timeout_given: false,
            enable_lora: false,
            max_loras: 1,
            max_lora_rank: 16,
            lora_modules: Vec::new(),
            ignored: Vec::new(),
            options: Vec::new(),
            shutdown_timeout_tokens: Vec::new(),
            non_default: Vec::new(),
        }
    }
}

/// vLLM's `LoRAModulePath`: one `--lora-modules` entry, `name=path` or
/// `{"name": ..., "path": ..., "base_model_name": ...}`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraModule {
    pub name: String,
    pub path: String,
    pub base_model_name: Option<String>,
}

impl LoraModule {
    /// The dataclass's `repr`, as the non-default-args line shows it.
    pub fn repr(&self) -> String {
        format!(
            "LoRAModulePath(name={}, path={}, base_model_name={})",
            py::repr_str(&self.name),
            py::repr_str(&self.path),
            self.base_model_name
                .as_deref()
                .map(py::repr_str)
                .unwrap_or_else(|| "None".into())
        )
    }
}

/// `LoRAParserAction` (vllm/entrypoints/openai/cli_args.py): `name=path` when the item has a `=`
/// and no `,`, else JSON for `LoRAModulePath(**item)`; empty items are skipped.
pub fn parse_lora_modules(values: &[String]) -> Result<Vec<LoraModule>, Parsed> {
    let mut out = Vec::new();
    for item in values {
        if item.is_empty() {
            continue;
        }
        if item.contains('=') && !item.contains(',') {
            let parts: Vec<&str> = item.split('=').collect();
            if parts.len() != 2 {
                // `name, path = item.split("=")` in the action: an uncaught ValueError.
                return Err(Parsed::Crash(
                    "Traceback (most recent call last):\n  File \"/usr/local/bin/vllm\", line 10, in <module>\n    \
                     sys.exit(main())\n             ^^^^^^\n  File \"/usr/local/lib/python3.12/dist-packages/vllm/\
                     entrypoints/openai/cli_args.py\", line 46, in __call__\n    name, path = item.split(\"=\")\n    \
                     ^^^^^^^^^^\nValueError: too many values to unpack (expected 2)\n"
                    .to_string()));
            }
            out.push(LoraModule {
                name: parts[0].to_string(),
                path: parts[1].to_string(),
                base_model_name: None,
            });
            continue;
        }
        let fields_error = |why: String| {
            Parsed::Error(ArgError::serve(format!(
                "Invalid fields for --lora-modules: {item} - {why}"
            )))
        };
        let v: serde_json::Value = serde_json::from_str(item).map_err(|_| {
            Parsed::Error(ArgError::serve(format!(
                "Invalid JSON format for --lora-modules: {item}"
            )))
        })?;
        let serde_json::Value::Object(map) = v else {
            let kind = match v {
                serde_json::Value::Array(_) => "list",
                serde_json::Value::String(_) => "str",
                serde_json::Value::Bool(_) => "bool",
                serde_json::Value::Null => "NoneType",
                serde_json::Value::Number(n) if n.is_f64() => "float",
                _ => "int",
            };
            return Err(fields_error(format!(
                "vllm.entrypoints.openai.models.protocol.LoRAModulePath() argument after ** must be a mapping, \
                 not {kind}"
            )));
        };
        if let Some(k) = map
            .keys()
            .find(|k| !["name", "path", "base_model_name"].contains(&k.as_str()))
        {
            return Err(fields_error(format!(
                "LoRAModulePath.__init__() got an unexpected keyword argument '{k}'"
            )));
        }
        let missing: Vec<&str> = ["name", "path"]
            .into_iter()
            .filter(|k| !map.contains_key(*k))
            .collect();
        match missing.as_slice() {
            [] => {}
            [one] => {
                return Err(fields_error(format!(
                    "LoRAModulePath.__init__() missing 1 required positional argument: '{one}'"
                )));
            }
            _ => {
                return Err(fields_error(
                    "LoRAModulePath.__init__() missing 2 required positional arguments: 'name' and 'path'"
                        .into(),
                ));
            }
        }
        let text = |v: &serde_json::Value| match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        out.push(LoraModule {
            name: text(&map["name"]),
            path: text(&map["path"]),
            base_model_name: map
                .get("base_model_name")
                .filter(|v| !v.is_null())
                .map(text),
        });
    }
    Ok(out)
}

impl Args {
    /// The last value of an option the simulator does not act on (`Some("")` for a flag
    /// given without one), `None` when not given.
    pub fn option(&self, name: &str) -> Option<String> {
        self.options
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.last().cloned().unwrap_or_default())
    }

    /// Whether a boolean option the simulator does not act on is on (`--enable-x`, not
    /// `--disable-x`; the last one given wins).
    pub fn flag(&self, name: &str) -> bool {
        self.option(name).as_deref() == Some("true")
    }

    /// The names the model is served under (default: the `--model` value).
    pub fn served_names(&self) -> Vec<String> {
        match &self.served_model_name {
            Some(names) if !names.is_empty() => names.clone(),
            _ => vec![self.model.clone()],
        }
    }
}

#[derive(Debug, PartialEq)]
pub enum Parsed {
    Run(Box<Args>),
    Help,
    /// An argparse error (exit 2).
    Error(ArgError),
    /// An uncaught exception while parsing: the traceback (exit 1).
    Crash(String),
}

/// An argparse error, exit 2: the usage line of the parser that raised it, then
/// `<prog>: error: <message>`. The serve subparser raises most (`vllm serve: error: ...`); the
/// tokens no parser takes are reported by the top-level `vllm` parser.
#[derive(Debug, PartialEq)]
pub struct ArgError {
    pub message: String,
    usage: &'static str,
    prog: &'static str,
}

impl ArgError {
    pub fn serve(message: String) -> ArgError {
        ArgError {
            message,
            usage: USAGE,
            prog: PROG,
        }
    }

    pub fn top(release: Release, message: String) -> ArgError {
        ArgError {
            message,
            usage: release.top_usage(),
            prog: "vllm",
        }
    }

    pub fn render(&self) -> String {
        format!("{}\n{}: error: {}\n", self.usage, self.prog, self.message)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Str,
    StrList,
    Int,
    Float,
    HumanIntOrAuto,
    Choice(&'static [&'static str]),
    IntChoice(&'static [i64]),
    Bool,
}

struct Spec {
    names: &'static [&'static str],
    dest: &'static str,
    kind: Kind,
}

/// `ModelDType` in vLLM's config, in the sorted order argparse lists them.
pub const DTYPES: &[&str] = &["auto", "bfloat16", "float", "float16", "float32", "half"];
/// `MaxLoRARanks` in vLLM's LoRA config.
const LORA_RANKS: &[i64] = &[1, 8, 16, 32, 64, 128, 256, 320, 512];

const SPECS: &[Spec] = &[
    Spec {
        names: &["--model"],
        dest: "model",
        kind: Kind::Str,
    },
    Spec {
        names: &["--served-model-name"],
        dest: "served_model_name",
        kind: Kind::StrList,
    },
    Spec {
        names: &["--host"],
        dest: "host",
        kind: Kind::Str,
    },
    Spec {
        names: &["--port"],
        dest: "port",
        kind: Kind::Int,
    },
    Spec {
        names: &["--dtype"],
        dest: "dtype",
        kind: Kind::Choice(DTYPES),
    },
    Spec {
        names: &["--max-model-len"],
        dest: "max_model_len",
        kind: Kind::HumanIntOrAuto,
    },
    Spec {
        names: &["--gpu-memory-utilization"],
        dest: "gpu_memory_utilization",
        kind: Kind::Float,
    },
    Spec {
        names: &["--max-num-seqs"],
        dest: "max_num_seqs",
        kind: Kind::Int,
    },
    Spec {
        names: &["--tensor-parallel-size", "-tp"],
        dest: "tensor_parallel_size",
        kind: Kind::Int,
    },
    Spec {
        names: &["--shutdown-timeout"],
        dest: "shutdown_timeout",
        kind: Kind::Int,
    },
    Spec {
        names: &["--enable-lora", "--no-enable-lora"],
        dest: "enable_lora",
        kind: Kind::Bool,
    },
    Spec {
        names: &["--max-loras"],
        dest: "max_loras",
        kind: Kind::Int,
    },
    Spec {
        names: &["--max-lora-rank"],
        dest: "max_lora_rank",
        kind: Kind::IntChoice(LORA_RANKS),
    },
    Spec {
        names: &["--lora-modules"],
        dest: "lora_modules",
        kind: Kind::StrList,
    },
];

/// vLLM's order of the non-default-args log line (frontend args first, then engine args).
const NON_DEFAULT_ORDER: &[&str] = &[
    "model_tag",
    "host",
    "port",
    "lora_modules",
    "shutdown_timeout",
    "model",
    "dtype",
    "max_model_len",
    "served_model_name",
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "enable_lora",
    "max_loras",
    "max_lora_rank",
    "max_num_seqs",
];

/// The simulator's handling of an option, by the option's name (its first spelling).
fn find_spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.names[0] == name)
}

/// argparse treats `-5` and `-.5` as values (the parser has no option that looks like a number).
fn looks_like_negative_number(s: &str) -> bool {
    let rest = match s.strip_prefix('-') {
        Some(r) => r,
        None => return false,
    };
    if rest.is_empty() {
        return false;
    }
    let (int, frac) = match rest.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (rest, None),
    };
    int.chars().all(|c| c.is_ascii_digit())
        && match frac {
            Some(f) => !f.is_empty() && f.chars().all(|c| c.is_ascii_digit()),
            None => !int.is_empty(),
        }
}

fn is_option_like(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1 && !looks_like_negative_number(s)
}

/// vLLM's FlexibleArgumentParser: underscores in a `--flag_name` become dashes.
fn normalize(arg: &str) -> String {
    if let Some(rest) = arg.strip_prefix("--") {
        match rest.split_once('=') {
            Some((k, v)) => format!("--{}={v}", k.replace('_', "-")),
            None => format!("--{}", rest.replace('_', "-")),
        }
    } else {
        arg.to_string()
    }
}

/// Python's `int()` on a command-line string.
fn py_int(s: &str) -> Option<i64> {
    let t = s.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() || t.starts_with('_') || t.ends_with('_') || t.contains("__") {
        return None;
    }
    t.replace('_', "").parse::<i64>().ok()
}

fn py_float(s: &str) -> Option<f64> {
    let t = s.trim();
    if t.is_empty() || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    t.replace('_', "").parse::<f64>().ok()
}

/// vLLM's `human_readable_int_or_auto` (vllm/utils/argparse_utils.py): `-1`/`auto`, `4096`,
/// `1k` (10^3), `1K` (2^10), `25.6k`; decimals with binary suffixes are refused.
pub fn human_readable_int_or_auto(value: &str) -> Result<i64, ArgTypeError> {
    let v = value.trim();
    if v == "-1" || v.eq_ignore_ascii_case("auto") {
        return Ok(-1);
    }
    if let Some(suffix) = v.chars().last().filter(|c| "kKmMgGtT".contains(*c)) {
        let number = &v[..v.len() - 1];
        let valid = {
            let (i, f) = number.split_once('.').unwrap_or((number, "0"));
            !i.is_empty()
                && !f.is_empty()
                && i.chars().all(|c| c.is_ascii_digit())
                && f.chars().all(|c| c.is_ascii_digit())
        };
        if valid {
            if suffix.is_ascii_lowercase() {
                let mult = match suffix {
                    'k' => 1e3,
                    'm' => 1e6,
                    'g' => 1e9,
                    _ => 1e12,
                };
                let n: f64 = number.parse().map_err(|_| ArgTypeError::Invalid)?;
                return Ok((n * mult) as i64);
            }
            let shift = match suffix {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                _ => 40,
            };
            return match number.parse::<i64>() {
                Ok(n) => Ok(n << shift),
                Err(_) => Err(ArgTypeError::Message(format!(
                    "Decimals are not allowed with binary suffixes like {suffix}. Did you mean to \
                     use {number}{} instead?",
                    suffix.to_ascii_lowercase()
                ))),
            };
        }
    }
    py_int(v).ok_or(ArgTypeError::Invalid)
}

#[derive(Debug)]
pub enum ArgTypeError {
    /// A plain ValueError: argparse says `invalid <type name> value: '<v>'`.
    Invalid,
    /// An ArgumentTypeError: argparse prints its message.
    Message(String),
}

fn type_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Int | Kind::IntChoice(_) => "int",
        Kind::Float => "float",
        Kind::HumanIntOrAuto => "human_readable_int_or_auto",
        _ => "str",
    }
}

/// Parse `vllm serve`'s arguments (without the program name) as the played release's parser
/// does. A leading `serve` is accepted.
pub fn parse(raw: &[String], release: Release) -> Result<Parsed, ArgError> {
    let mut table = Table::parse(release.serve_flags());
    if !release.has_shutdown_timeout() {
        table = table.without("--shutdown-timeout");
    }
    let mut tokens: Vec<String> = raw.iter().map(|a| normalize(a)).collect();
    if tokens.first().map(String::as_str) == Some("serve") {
        tokens.remove(0);
    }
    let mut a = Args {
        gpu_memory_utilization: release.default_gpu_memory_utilization(),
        ..Args::default()
    };
    let mut set: Vec<&'static str> = Vec::new();
    let mut model_opt: Option<String> = None;
    // vLLM's parse_args moves the first `--model X` to the model tag's place (and warns), so
    // that X is the positional whatever comes before it.
    if let Some(at) = tokens
        .iter()
        .position(|t| t == "--model" || t.starts_with("--model="))
    {
        let tag = match tokens[at].strip_prefix("--model=") {
            Some(v) => Some(v.to_string()),
            None if at + 1 < tokens.len() => Some(tokens.remove(at + 1)),
            None => None,
        };
        if let Some(tag) = tag {
            tokens.remove(at);
            tokens.insert(0, tag);
            a.model_via_option = true;
        }
    }
    // Tokens argparse leaves over: reported together once parsing is done, as argparse does.
    let mut unrecognized: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let tok = tokens[i].clone();
        i += 1;
        if tok == "-h" || tok == "--help" || tok.starts_with("--help=") {
            return Ok(Parsed::Help);
        }
        if tok == "--" {
            unrecognized.extend(tokens[i..].iter().cloned());
            break;
        }
        if !is_option_like(&tok) {
            if a.model_tag.is_none() {
                a.model_tag = Some(tok);
                set.push("model_tag");
            } else {
                unrecognized.push(tok);
            }
            continue;
        }
        let (name, inline) = match tok.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (tok.clone(), None),
        };
        let (opt, spelling) = match table.lookup(&name) {
            Lookup::Found(opt, spelling) => (opt, spelling),
            Lookup::Ambiguous(matches) => {
                return Err(ArgError::serve(format!(
                    "ambiguous option: {tok} could match {}",
                    matches.join(", ")
                )));
            }
            Lookup::Unknown => {
                // argparse keeps it; the words after it are positionals like any other (the
                // model tag if none was given yet, else left over too).
                unrecognized.push(tok.clone());
                continue;
            }
        };
        if opt.name() == "--help" {
            return Ok(Parsed::Help);
        }
        let shown = opt.display();
        let start = i - 1;
        let values: Vec<String> = match opt.nargs {
            Nargs::Zero => {
                if let Some(v) = inline {
                    return Err(ArgError::serve(format!(
                        "argument {shown}: ignored explicit argument {}",
                        py::repr_str(&v)
                    )));
                }
                // `--enable-x` is true; `--no-enable-x`, `--disable-x` false.
                vec![(spelling == opt.name()).to_string()]
            }
            Nargs::OneOrMore | Nargs::Any => {
                let mut vs = Vec::new();
                if let Some(v) = inline {
                    vs.push(v);
                } else {
                    while i < tokens.len() && !is_option_like(&tokens[i]) {
                        vs.push(tokens[i].clone());
                        i += 1;
                    }
                }
                if vs.is_empty() && opt.nargs == Nargs::OneOrMore {
                    return Err(ArgError::serve(format!(
                        "argument {shown}: expected at least one argument"
                    )));
                }
                vs
            }
            Nargs::Optional => match inline {
                Some(v) => vec![v],
                None if i < tokens.len() && !is_option_like(&tokens[i]) => {
                    i += 1;
                    vec![tokens[i - 1].clone()]
                }
                None => Vec::new(),
            },
            Nargs::One => match inline {
                Some(v) => vec![v],
                None => {
                    if i < tokens.len() && !is_option_like(&tokens[i]) {
                        i += 1;
                        vec![tokens[i - 1].clone()]
                    } else {
                        return Err(ArgError::serve(format!(
                            "argument {shown}: expected one argument"
                        )));
                    }
                }
            },
        };
        let Some(spec) = find_spec(opt.name()) else {
            // A real option the simulator does not act on: kept, listed in one INFO line.
            a.ignored.extend(tokens[start..i].iter().cloned());
            a.options.push((opt.name(), values));
            continue;
        };
        if spec.dest == "shutdown_timeout" {
            a.shutdown_timeout_tokens = tokens[start..i].to_vec();
        }
        let v = values.first().cloned().unwrap_or_default();
        let bad = |e: ArgTypeError| -> ArgError {
            match e {
                ArgTypeError::Invalid => ArgError::serve(format!(
                    "argument {shown}: invalid {} value: {}",
                    type_name(spec.kind),
                    py::repr_str(&v)
                )),
                ArgTypeError::Message(m) => ArgError::serve(format!("argument {shown}: {m}")),
            }
        };
        let int = |s: &str| py_int(s).ok_or(ArgTypeError::Invalid);
        match spec.dest {
            "model" => model_opt = Some(v.clone()),
            "served_model_name" => a.served_model_name = Some(values.clone()),
            "host" => a.host = Some(v.clone()),
            "port" => {
                let p = int(&v).map_err(bad)?;
                a.port = u16::try_from(p).map_err(|_| {
                    ArgError::serve(format!(
                        "argument {shown}: invalid int value: {}",
                        py::repr_str(&v)
                    ))
                })?;
            }
            "dtype" => {
                if let Kind::Choice(choices) = spec.kind
                    && !choices.contains(&v.as_str())
                {
                    return Err(ArgError::serve(format!(
                        "argument {shown}: invalid choice: {} (choose from {})",
                        py::repr_str(&v),
                        choices.join(", ")
                    )));
                }
                a.dtype = v.clone();
            }
            "max_model_len" => {
                let n = human_readable_int_or_auto(&v).map_err(bad)?;
                a.max_model_len = if n < 0 { None } else { Some(n as u64) };
                if n == -1 {
                    continue;
                }
            }
            "gpu_memory_utilization" => {
                a.gpu_memory_utilization = match py_float(&v) {
                    Some(f) => f,
                    // vLLM 0.34's optional_type(float) raises its own ArgumentTypeError.
                    None if release.gpu_memory_utilization_is_optional() => {
                        return Err(bad(ArgTypeError::Message(format!(
                            "Value {v} cannot be converted to <class 'float'>."
                        ))));
                    }
                    None => return Err(bad(ArgTypeError::Invalid)),
                }
            }
            "max_num_seqs" => a.max_num_seqs = nonneg(int(&v).map_err(bad)?, &shown, &v)?,
            "tensor_parallel_size" => {
                a.tensor_parallel_size = nonneg(int(&v).map_err(bad)?, &shown, &v)?
            }
            "shutdown_timeout" => {
                a.shutdown_timeout = nonneg(int(&v).map_err(bad)?, &shown, &v)? as u64;
                a.shutdown_timeout_given = true;
            }
            "enable_lora" => a.enable_lora = v == "true",
            "max_loras" => a.max_loras = nonneg(int(&v).map_err(bad)?, &shown, &v)?,
            "max_lora_rank" => {
                let n = int(&v).map_err(bad)?;
                if let Kind::IntChoice(choices) = spec.kind
                    && !choices.contains(&n)
                {
                    let list: Vec<String> = choices.iter().map(|c| c.to_string()).collect();
                    return Err(ArgError::serve(format!(
                        "argument {shown}: invalid choice: {} (choose from {})",
                        py::repr_str(&n.to_string()),
                        list.join(", ")
                    )));
                }
                a.max_lora_rank = n as u32;
            }
            "lora_modules" => match parse_lora_modules(&values) {
                Ok(m) => a.lora_modules = m,
                Err(Parsed::Error(e)) => return Err(e),
                Err(other) => return Ok(other),
            },
            _ => unreachable!("every spec has a destination"),
        }
        if !set.contains(&spec.dest) {
            set.push(spec.dest);
        }
    }
    if !unrecognized.is_empty() {
        // The serve subparser leaves them to the top-level `vllm` parser, which reports them.
        return Err(ArgError::top(
            release,
            format!("unrecognized arguments: {}", unrecognized.join(" ")),
        ));
    }
    // A second `--model` sets vLLM's `model`, which the model tag overrides.
    if let Some(m) = model_opt
        && a.model_tag.is_none()
    {
        set.push("model_tag");
        a.model_tag = Some(m);
    }
    if let Some(tag) = &a.model_tag {
        a.model = tag.clone();
        set.push("model");
    }
    a.non_default = non_default(&a, &set, release);
    Ok(Parsed::Run(Box::new(a)))
}

fn nonneg(n: i64, shown: &str, v: &str) -> Result<u32, ArgError> {
    u32::try_from(n).map_err(|_| {
        ArgError::serve(format!(
            "argument {shown}: invalid int value: {}",
            py::repr_str(v)
        ))
    })
}

fn non_default(a: &Args, set: &[&'static str], release: Release) -> Vec<(&'static str, String)> {
    let d = Args {
        gpu_memory_utilization: release.default_gpu_memory_utilization(),
        ..Args::default()
    };
    let mut out = Vec::new();
    for &dest in NON_DEFAULT_ORDER {
        if !set.contains(&dest) {
            continue;
        }
        let repr = match dest {
            "model_tag" => py::repr_str(a.model_tag.as_deref().unwrap_or_default()),
            "model" => py::repr_str(&a.model),
            "host" => py::repr_str(a.host.as_deref().unwrap_or_default()),
            "port" if a.port != d.port => a.port.to_string(),
            "dtype" if a.dtype != d.dtype => py::repr_str(&a.dtype),
            "max_model_len" => a.max_model_len.map(|n| n.to_string()).unwrap_or_default(),
            "served_model_name" => {
                py::repr_list(a.served_model_name.as_deref().unwrap_or_default())
            }
            "tensor_parallel_size" if a.tensor_parallel_size != d.tensor_parallel_size => {
                a.tensor_parallel_size.to_string()
            }
            "gpu_memory_utilization" if a.gpu_memory_utilization != d.gpu_memory_utilization => {
                py::float(a.gpu_memory_utilization)
            }
            "max_num_seqs" if a.max_num_seqs != d.max_num_seqs => a.max_num_seqs.to_string(),
            "shutdown_timeout" if a.shutdown_timeout != d.shutdown_timeout => {
                a.shutdown_timeout.to_string()
            }
            "enable_lora" if a.enable_lora != d.enable_lora => py::bool(a.enable_lora),
            "max_loras" if a.max_loras != d.max_loras => a.max_loras.to_string(),
            "max_lora_rank" if a.max_lora_rank != d.max_lora_rank => a.max_lora_rank.to_string(),
            "lora_modules" => {
                let items: Vec<String> = a.lora_modules.iter().map(LoraModule::repr).collect();
                format!("[{}]", items.join(", "))
            }
            _ => continue,
        };
        if repr.is_empty() {
            continue;
        }
        out.push((dest, repr));
    }
    out
}

/// A short `--help` text (the real one is generated from vLLM's config classes).
pub fn help() -> String {
    let mut s = format!(
        "{USAGE}\n\nvllm-sim: a simulator of vLLM's OpenAI-compatible server (not vLLM).\n\noptions:\n"
    );
    for spec in SPECS {
        s.push_str(&format!("  {}\n", spec.names.join(", ")));
    }
    s.push_str("\nThe other options of vLLM's parser are accepted and ignored. See crates/vllm-sim/README.md.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Args, ArgError> {
        p_at(args, Release::DEFAULT)
    }

    fn p_at(args: &[&str], release: Release) -> Result<Args, ArgError> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse(&v, release)? {
            Parsed::Run(a) => Ok(*a),
            other => panic!("{other:?}"),
        }
    }

    fn err(args: &[&str]) -> String {
        p(args).expect_err("must fail").message
    }

    #[test]
    fn operator_flags_both_forms() {
        let a = p(&[
            "--model",
            "/models/m",
            "--served-model-name=qwen",
            "--host",
            "0.0.0.0",
            "--port=8001",
            "--dtype",
            "auto",
            "--max-model-len",
            "4096",
            "--gpu-memory-utilization=0.75",
            "--max-num-seqs",
            "8",
            "--tensor-parallel-size=2",
            "--shutdown-timeout",
            "30",
        ])
        .unwrap();
        assert_eq!(a.model, "/models/m");
        assert!(a.model_via_option);
        assert_eq!(a.served_names(), vec!["qwen".to_string()]);
        assert_eq!(a.port, 8001);
        assert_eq!(a.max_model_len, Some(4096));
        assert_eq!(a.gpu_memory_utilization, 0.75);
        assert_eq!(a.max_num_seqs, 8);
        assert_eq!(a.tensor_parallel_size, 2);
        assert_eq!(a.shutdown_timeout, 30);
        assert!(a.ignored.is_empty());
    }

    #[test]
    fn serve_and_positional_model_and_underscores() {
        let a = p(&["serve", "/models/x", "--max_model_len", "2k", "-tp", "4"]).unwrap();
        assert_eq!(a.model, "/models/x");
        assert!(!a.model_via_option);
        assert_eq!(a.max_model_len, Some(2000));
        assert_eq!(a.tensor_parallel_size, 4);
        assert_eq!(a.served_names(), vec!["/models/x".to_string()]);
    }

    #[test]
    fn human_readable_lengths() {
        assert_eq!(human_readable_int_or_auto("1K").unwrap(), 1024);
        assert_eq!(human_readable_int_or_auto("25.6k").unwrap(), 25600);
        assert_eq!(human_readable_int_or_auto("auto").unwrap(), -1);
        assert_eq!(human_readable_int_or_auto(" 4096 ").unwrap(), 4096);
        assert_eq!(
            p(&["m", "--max-model-len", "-1"]).unwrap().max_model_len,
            None
        );
    }

    #[test]
    fn argparse_messages() {
        assert_eq!(
            err(&["m", "--max-model-len", "abc"]),
            "argument --max-model-len: invalid human_readable_int_or_auto value: 'abc'"
        );
        assert_eq!(
            err(&["m", "--max-model-len=1.5K"]),
            "argument --max-model-len: Decimals are not allowed with binary suffixes like K. Did \
             you mean to use 1.5k instead?"
        );
        assert_eq!(
            err(&["m", "--max-num-seqs", "x"]),
            "argument --max-num-seqs: invalid int value: 'x'"
        );
        assert_eq!(
            err(&["m", "--tensor-parallel-size", "two"]),
            "argument --tensor-parallel-size/-tp: invalid int value: 'two'"
        );
        assert_eq!(
            err(&["m", "--dtype", "int4"]),
            "argument --dtype: invalid choice: 'int4' (choose from auto, bfloat16, float, float16, float32, half)"
        );
        assert_eq!(
            err(&["m", "--port"]),
            "argument --port: expected one argument"
        );
        assert_eq!(
            err(&["m", "--port", "--dtype", "auto"]),
            "argument --port: expected one argument"
        );
        assert_eq!(
            err(&["m", "--served-model-name"]),
            "argument --served-model-name: expected at least one argument"
        );
        assert_eq!(
            err(&["m", "--max-lora-rank", "7"]),
            "argument --max-lora-rank: invalid choice: '7' (choose from 1, 8, 16, 32, 64, 128, 256, 320, 512)"
        );
        assert_eq!(
            err(&["m", "--enable-lora=yes"]),
            "argument --enable-lora/--disable-lora: ignored explicit argument 'yes'"
        );
        assert_eq!(
            p_at(&["m", "--enable-lora=yes"], Release::V0_18_0)
                .unwrap_err()
                .message,
            "argument --enable-lora/--no-enable-lora: ignored explicit argument 'yes'"
        );
        assert_eq!(
            err(&["m", "--gpu-memory-utilization", "most"]),
            "argument --gpu-memory-utilization/--device-memory-utilization: Value most cannot be converted \
             to <class 'float'>."
        );
        assert_eq!(
            p_at(&["m", "--gpu-memory-utilization", "most"], Release::V0_18_0)
                .unwrap_err()
                .message,
            "argument --gpu-memory-utilization: invalid float value: 'most'"
        );
        assert_eq!(
            ArgError::serve("x".into()).render(),
            "usage: vllm serve [model_tag] [options]\nvllm serve: error: x\n"
        );
    }

    #[test]
    fn unrecognized_arguments_are_the_top_level_parsers_error() {
        let e = p(&["/m", "--no-such-flag", "1", "--port", "1", "--zz"]).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --no-such-flag 1 --zz");
        assert_eq!(
            e.render(),
            "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,download-kernels,\
             preload,run-batch,snapshot}\n            ...\nvllm: error: unrecognized arguments: --no-such-flag 1 --zz\n"
        );
        let e = p_at(&["/m", "--disable-lora"], Release::V0_18_0).unwrap_err();
        assert_eq!(
            e.render(),
            "usage: vllm [-h] [-v]\n            {chat,complete,serve,launch,bench,collect-env,run-batch} ...\n\
             vllm: error: unrecognized arguments: --disable-lora\n"
        );
        assert_eq!(
            p(&["/m", "extra"]).unwrap_err().message,
            "unrecognized arguments: extra"
        );
    }

    #[test]
    fn words_after_an_unknown_flag_are_positionals() {
        // As vLLM 0.34's parser: the model tag, or left over when there is one.
        let e = p(&["--no-such", "/m"]).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --no-such");
        let e = p(&["--model", "/m", "--no-such", "1"]).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --no-such 1");
        let e = p(&["/m", "extra1", "--port", "1", "extra2"]).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: extra1 extra2");
        let e = p(&["/m", "--nope=3"]).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --nope=3");
        assert_eq!(
            err(&["/m", "--enable-prefix-caching=1"]),
            "argument --enable-prefix-caching/--disable-prefix-caching: ignored explicit argument '1'"
        );
        // `--model` anywhere is the model tag.
        let a = p(&["--port", "1", "--model=/x"]).unwrap();
        assert_eq!(a.model, "/x");
        assert!(a.model_via_option);
    }

    #[test]
    fn abbreviations_and_ambiguity() {
        let a = p(&["/m", "--max-num-seq", "4", "--gpu-mem=0.5", "--enable-lor"]).unwrap();
        assert_eq!(a.max_num_seqs, 4);
        assert_eq!(a.gpu_memory_utilization, 0.5);
        assert!(a.enable_lora);
        let e = err(&["/m", "--max=4"]);
        assert!(
            e.starts_with("ambiguous option: --max=4 could match --max-log-len, --max-model-len, "),
            "{e}"
        );
        assert_eq!(
            err(&["/m", "--headl"]),
            "ambiguous option: --headl could match --headless, --headless-client-handshake-address"
        );
    }

    #[test]
    fn lora_switches_per_release() {
        assert!(
            !p(&["/m", "--enable-lora", "--disable-lora"])
                .unwrap()
                .enable_lora
        );
        assert!(
            !p(&["/m", "--enable-lora", "--no-enable-lora"])
                .unwrap()
                .enable_lora
        );
        assert!(
            p(&["/m", "--disable-lora", "--enable-lora"])
                .unwrap()
                .enable_lora
        );
        assert!(
            !p_at(
                &["/m", "--enable-lora", "--no-enable-lora"],
                Release::V0_18_0
            )
            .unwrap()
            .enable_lora
        );
    }

    #[test]
    fn defaults_per_release() {
        assert_eq!(p(&["/m"]).unwrap().gpu_memory_utilization, 0.92);
        assert_eq!(
            p_at(&["/m"], Release::V0_18_0)
                .unwrap()
                .gpu_memory_utilization,
            0.9
        );
        // 0.9 is not 0.34's default: it is a non-default argument there.
        let a = p(&["/m", "--gpu-memory-utilization", "0.9"]).unwrap();
        assert!(
            a.non_default
                .iter()
                .any(|(k, _)| *k == "gpu_memory_utilization")
        );
        let a = p(&["/m", "--gpu-memory-utilization", "0.92"]).unwrap();
        assert!(
            !a.non_default
                .iter()
                .any(|(k, _)| *k == "gpu_memory_utilization")
        );
    }

    #[test]
    fn real_options_the_simulator_ignores_are_kept() {
        let a = p(&[
            "/m",
            "--enable-prefix-caching",
            "--max-num-batched-tokens",
            "8192",
            "--kv-cache-dtype=fp8",
            "--max-num-seqs",
            "4",
            "--headless",
            "--nnodes",
            "2",
            "-r",
            "1",
        ])
        .unwrap();
        assert_eq!(
            a.ignored,
            vec![
                "--enable-prefix-caching",
                "--max-num-batched-tokens",
                "8192",
                "--kv-cache-dtype=fp8",
                "--headless",
                "--nnodes",
                "2",
                "-r",
                "1"
            ]
        );
        assert_eq!(a.max_num_seqs, 4);
        assert!(a.flag("--headless"));
        assert!(a.flag("--enable-prefix-caching"));
        assert_eq!(a.option("--node-rank").as_deref(), Some("1"));
        assert_eq!(a.option("--nnodes").as_deref(), Some("2"));
        assert_eq!(a.option("--master-addr"), None);
        assert!(
            !p(&["/m", "--no-enable-prefix-caching"])
                .unwrap()
                .flag("--enable-prefix-caching")
        );
    }

    #[test]
    fn lora_flags() {
        let a = p(&[
            "/m",
            "--enable-lora",
            "--max-loras",
            "2",
            "--max-lora-rank",
            "64",
            "--lora-modules",
            "a=/l/a",
            "b=/l/b",
        ])
        .unwrap();
        assert!(a.enable_lora);
        assert_eq!(a.max_loras, 2);
        assert_eq!(a.max_lora_rank, 64);
        let names: Vec<(&str, &str)> = a
            .lora_modules
            .iter()
            .map(|m| (m.name.as_str(), m.path.as_str()))
            .collect();
        assert_eq!(names, vec![("a", "/l/a"), ("b", "/l/b")]);
        assert!(!p(&["/m", "--no-enable-lora"]).unwrap().enable_lora);
        let a = p(&[
            "/m",
            "--lora-modules",
            r#"{"name": "sql", "path": "/l/sql", "base_model_name": "qwen"}"#,
        ])
        .unwrap();
        assert_eq!(
            a.lora_modules,
            vec![LoraModule {
                name: "sql".into(),
                path: "/l/sql".into(),
                base_model_name: Some("qwen".into())
            }]
        );
        assert_eq!(
            a.non_default,
            vec![
                ("model_tag", "'/m'".to_string()),
                (
                    "lora_modules",
                    "[LoRAModulePath(name='sql', path='/l/sql', base_model_name='qwen')]"
                        .to_string()
                ),
                ("model", "'/m'".to_string()),
            ]
        );
        assert_eq!(
            err(&["/m", "--lora-modules", "sql-lora"]),
            "Invalid JSON format for --lora-modules: sql-lora"
        );
        assert_eq!(
            err(&["/m", "--lora-modules", r#"{"name": "x", "paht": "/p"}"#]),
            "Invalid fields for --lora-modules: {\"name\": \"x\", \"paht\": \"/p\"} - LoRAModulePath.__init__() got an \
             unexpected keyword argument 'paht'"
        );
        assert_eq!(
            err(&["/m", "--lora-modules", r#"{"name": "x"}"#]),
            "Invalid fields for --lora-modules: {\"name\": \"x\"} - LoRAModulePath.__init__() missing 1 required \
             positional argument: 'path'"
        );
        let v: Vec<String> = ["/m", "--lora-modules", "a=b=c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(
            matches!(parse(&v, Release::DEFAULT), Ok(Parsed::Crash(t)) if t.ends_with("ValueError: too many values to unpack (expected 2)\n"))
        );
    }

    #[test]
    fn vllm_0_17_rejects_shutdown_timeout() {
        let old = Release::V0_17_1;
        let e = p_at(&["/m", "--shutdown-timeout", "30", "--port", "1"], old).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --shutdown-timeout 30");
        assert!(e.render().contains("\nvllm: error: "));
        let e = p_at(&["/m", "--shutdown-timeout=5"], old).unwrap_err();
        assert_eq!(e.message, "unrecognized arguments: --shutdown-timeout=5");
        assert!(p_at(&["/m"], old).is_ok());
        assert_eq!(
            p_at(&["/m", "--shutdown-timeout", "30"], Release::V0_18_0)
                .unwrap()
                .shutdown_timeout,
            30
        );
    }

    #[test]
    fn non_default_args_line() {
        let a = p(&[
            "--model",
            "/m",
            "--served-model-name",
            "q",
            "--max-model-len",
            "4096",
            "--gpu-memory-utilization",
            "0.75",
            "--dtype",
            "auto",
        ])
        .unwrap();
        let rendered: Vec<String> = a
            .non_default
            .iter()
            .map(|(k, v)| format!("'{k}': {v}"))
            .collect();
        assert_eq!(
            rendered.join(", "),
            "'model_tag': '/m', 'model': '/m', 'max_model_len': 4096, 'served_model_name': ['q'], 'gpu_memory_utilization': 0.75"
        );
    }
}
