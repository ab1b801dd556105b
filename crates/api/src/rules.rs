//! The validation rules shared by the CRD schema (as CEL) and by
//! [`crate::validate::validate`] (as Rust).
//!
//! Each format has its CEL expression and its Rust predicate side by side, so the two cannot
//! drift apart unnoticed; the api crate's tests evaluate both on the same inputs.

/// Upper bounds on strings, lists and maps. The API server estimates the cost of every CEL
/// rule from these bounds and rejects the CRD when a rule could exceed its budget, so every
/// value that a rule looks at is bounded.
pub mod limits {
    /// Kubernetes label values and the name part of label keys.
    pub const LABEL_NAME: usize = 63;
    /// DNS subdomains: label key prefixes, object names, hostnames.
    pub const DNS_SUBDOMAIN: usize = 253;
    /// Entries in `labels`, `nodeSelector`, `podAnnotations` and `monitoring.labels`.
    pub const MAP_ENTRIES: usize = 64;
    /// Entries in `engineArgs.extraArgs`.
    pub const EXTRA_ARGS: usize = 128;
    /// Length of one `engineArgs.extraArgs` entry (JSON-valued vLLM flags can be long).
    pub const EXTRA_ARG: usize = 4096;
    /// Filesystem and HTTP paths.
    pub const PATH: usize = 4096;
    /// `engineArgs.gpuMemoryUtilization`.
    pub const DECIMAL: usize = 32;
    /// `monitoring.interval`.
    pub const DURATION: usize = 64;
}

/// A vLLM flag that the operator sets from a typed field, so `engineArgs.extraArgs` must not
/// repeat it: vLLM would take whichever comes last, silently overriding the typed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReservedFlag {
    /// The flag, e.g. `--port`.
    pub flag: &'static str,
    /// Other spellings vLLM accepts for the same option (underscore form, short alias).
    pub aliases: &'static [&'static str],
    /// What to use instead, as it appears in the error message.
    pub instead: &'static str,
}

/// Every flag the operator sets itself (SPEC section 3's argument list plus tensor parallelism).
pub const RESERVED_FLAGS: &[ReservedFlag] = &[
    ReservedFlag {
        flag: "--model",
        aliases: &[],
        instead: "use spec.modelPath",
    },
    ReservedFlag {
        flag: "--served-model-name",
        aliases: &["--served_model_name"],
        instead: "use spec.modelName",
    },
    ReservedFlag {
        flag: "--host",
        aliases: &[],
        instead: "the operator always listens on 0.0.0.0",
    },
    ReservedFlag {
        flag: "--port",
        aliases: &[],
        instead: "use spec.port",
    },
    ReservedFlag {
        flag: "--dtype",
        aliases: &[],
        instead: "use spec.engineArgs.dtype",
    },
    ReservedFlag {
        flag: "--max-model-len",
        aliases: &["--max_model_len"],
        instead: "use spec.engineArgs.maxModelLen",
    },
    ReservedFlag {
        flag: "--gpu-memory-utilization",
        aliases: &["--gpu_memory_utilization"],
        instead: "use spec.engineArgs.gpuMemoryUtilization",
    },
    ReservedFlag {
        flag: "--max-num-seqs",
        aliases: &["--max_num_seqs"],
        instead: "use spec.engineArgs.maxNumSeqs",
    },
    ReservedFlag {
        flag: "--tensor-parallel-size",
        aliases: &["--tensor_parallel_size", "-tp"],
        instead: "use spec.engineArgs.tensorParallelSize",
    },
];

impl ReservedFlag {
    /// Every spelling of this flag.
    pub fn spellings(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.flag).chain(self.aliases.iter().copied())
    }

    /// Whether one command-line argument sets this flag (`--port` or `--port=8080`).
    pub fn is_set_by(&self, arg: &str) -> bool {
        self.spellings().any(|spelling| {
            arg.strip_prefix(spelling)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        })
    }

    /// The CEL rule on the `extraArgs` list that rejects this flag.
    pub fn cel(&self) -> String {
        let tests: Vec<String> = self
            .spellings()
            .map(|s| format!("a == '{s}' || a.startsWith('{s}=')"))
            .collect();
        format!("!self.exists(a, {})", tests.join(" || "))
    }

    /// The error message for this flag, the same in the API server and in the controller.
    pub fn message(&self) -> String {
        format!(
            "engineArgs.extraArgs must not set {}: the operator sets it; {}",
            self.flag, self.instead
        )
    }
}

// RE2 syntax as the API server's CEL `matches` uses it. `[.]` rather than `\.` keeps the
// patterns free of backslashes, which CEL string literals would otherwise need escaped.

/// Gateway API `Hostname`: a lowercase DNS name, optionally with a `*.` wildcard prefix.
pub const HOSTNAME_RE: &str =
    "^([*][.])?[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A Kubernetes label value (the length limit is a separate `maxLength`).
pub const LABEL_VALUE_RE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$";

/// A Kubernetes qualified name (label and annotation keys): an optional lowercase DNS
/// subdomain prefix and `/`, then a name of at most 63 characters. The prefix's own limit of
/// 253 characters is checked separately.
pub const LABEL_KEY_RE: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// Annotation keys are checked like label keys after lower-casing, so their prefix may also
/// contain capitals.
pub const ANNOTATION_KEY_RE: &str = "^([A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?([.][A-Za-z0-9]([-A-Za-z0-9]*[A-Za-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A Prometheus duration such as `30s` or `1m30s` (units in decreasing order, each at most once).
pub const DURATION_RE: &str =
    "^(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?$";

/// A plain decimal number such as `0.9`, `1` or `.5`.
pub const DECIMAL_RE: &str = "^([0-9]+([.][0-9]*)?|[.][0-9]+)$";

/// A resource quantity such as `16Gi`, `500m` or `1e3`: the pattern Kubebuilder puts on
/// `resource.Quantity` fields, which the k8s-openapi schema lacks.
pub const QUANTITY_RE: &str = "^[+-]?(([0-9]+([.][0-9]*)?)|([.][0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+([.][0-9]*)?)|([.][0-9]+))))?$";

/// [`QUANTITY_RE`] without a sign, for sizes.
pub const SIZE_RE: &str = "^(([0-9]+([.][0-9]*)?)|([.][0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+([.][0-9]*)?)|([.][0-9]+))))?$";

/// The CEL rule on a label map's keys.
pub fn label_keys_cel() -> String {
    format!(
        "self.all(k, k.matches('{LABEL_KEY_RE}') && k.indexOf('/') <= {})",
        limits::DNS_SUBDOMAIN
    )
}

/// The CEL rule on an annotation map's keys.
pub fn annotation_keys_cel() -> String {
    format!(
        "self.all(k, k.matches('{ANNOTATION_KEY_RE}') && k.indexOf('/') <= {})",
        limits::DNS_SUBDOMAIN
    )
}

/// The CEL rule on `engineArgs.gpuMemoryUtilization`. `&&` in CEL absorbs the error from
/// `double()` on a non-number when the pattern check is false.
pub fn fraction_cel() -> String {
    format!("self.matches('{DECIMAL_RE}') && double(self) > 0.0 && double(self) <= 1.0")
}

/// The CEL rule on `monitoring.interval`.
pub fn duration_cel() -> String {
    format!("self != '' && self.matches('{DURATION_RE}')")
}

/// The CEL rule on `gatewayRef.host`.
pub fn hostname_cel() -> String {
    format!("self.matches('{HOSTNAME_RE}')")
}

/// The CEL rule on `storage.subPath`: relative, and never climbing out of the volume.
pub const RELATIVE_PATH_CEL: &str = "!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.endsWith('/..') && !self.contains('/../')";

/// The CEL rule for absolute paths (mount paths, HTTP paths).
pub const ABSOLUTE_PATH_CEL: &str = "self.startsWith('/')";

/// The messages of the CEL rules; [`crate::validate::validate`] reports the same words.
pub mod messages {
    /// `storage.mountPath`.
    pub const MOUNT_PATH: &str = "storage.mountPath must be an absolute path (start with '/')";
    /// `storage.subPath`.
    pub const SUB_PATH: &str = "storage.subPath must be a relative path that does not contain '..'";
    /// `gatewayRef.host`.
    pub const HOST: &str = "gatewayRef.host must be a lowercase DNS hostname such as \
                            llm.example.com, optionally starting with '*.'";
    /// `engineArgs.gpuMemoryUtilization`.
    pub const GPU_MEMORY_UTILIZATION: &str = "engineArgs.gpuMemoryUtilization must be a decimal \
                                              number greater than 0 and at most 1, such as \"0.9\"";
    /// `monitoring.interval`.
    pub const INTERVAL: &str =
        "monitoring.interval must be a Prometheus duration such as 30s, 1m or 1m30s";
    /// `monitoring.path`.
    pub const MONITORING_PATH: &str = "monitoring.path must start with '/'";

    /// A probe's `path`; `field` is e.g. `startupProbe`.
    pub fn probe_path(field: &str) -> String {
        format!("{field}.path must start with '/'")
    }

    /// The keys of a label map; `field` is e.g. `labels`.
    pub fn label_keys(field: &str) -> String {
        format!(
            "{field} keys must be valid label keys: an optional DNS subdomain prefix of at most \
             253 characters and '/', then at most 63 alphanumerics, '-', '_' or '.', starting \
             and ending with an alphanumeric"
        )
    }

    /// The keys of an annotation map; `field` is e.g. `podAnnotations`.
    pub fn annotation_keys(field: &str) -> String {
        format!(
            "{field} keys must be valid annotation keys: an optional DNS subdomain prefix of at \
             most 253 characters and '/', then at most 63 alphanumerics, '-', '_' or '.', \
             starting and ending with an alphanumeric"
        )
    }
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// A run of characters `first ([-...]* last)?`: starts and ends with `edge`, `middle` between.
fn is_delimited(s: &str, edge: impl Fn(char) -> bool, middle: impl Fn(char) -> bool) -> bool {
    let mut chars = s.chars();
    match (chars.next(), chars.next_back()) {
        (None, _) => false,
        (Some(first), None) => edge(first),
        (Some(first), Some(last)) => edge(first) && edge(last) && chars.all(middle),
    }
}

/// One DNS label as the patterns above spell it: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label(s: &str, edge: fn(char) -> bool) -> bool {
    is_delimited(s, edge, |c| edge(c) || c == '-')
}

/// Rust twin of [`HOSTNAME_RE`] plus the 253-character limit.
pub fn is_hostname(s: &str) -> bool {
    let name = s.strip_prefix("*.").unwrap_or(s);
    s.len() <= limits::DNS_SUBDOMAIN && name.split('.').all(|l| is_dns_label(l, is_lower_alnum))
}

/// Rust twin of [`LABEL_VALUE_RE`] plus the 63-character limit.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_label_name(s)
}

fn is_label_name(s: &str) -> bool {
    s.len() <= limits::LABEL_NAME
        && is_delimited(s, is_alnum, |c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

fn is_qualified_name(s: &str, prefix_edge: fn(char) -> bool) -> bool {
    match s.split_once('/') {
        None => is_label_name(s),
        Some((prefix, name)) => {
            prefix.len() <= limits::DNS_SUBDOMAIN
                && prefix.split('.').all(|l| is_dns_label(l, prefix_edge))
                && is_label_name(name)
        }
    }
}

/// Rust twin of [`label_keys_cel`] for one key.
pub fn is_label_key(s: &str) -> bool {
    is_qualified_name(s, is_lower_alnum)
}

/// Rust twin of [`annotation_keys_cel`] for one key.
pub fn is_annotation_key(s: &str) -> bool {
    is_qualified_name(s, is_alnum)
}

/// Rust twin of [`duration_cel`].
pub fn is_duration(s: &str) -> bool {
    const UNITS: [&str; 7] = ["y", "w", "d", "h", "m", "s", "ms"];
    let mut rest = s;
    let mut next_unit = 0;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        // `ms` is tried before `m`: a lone `m` followed by `s` could never match, since
        // every unit needs digits in front of it.
        let unit = if rest.starts_with("ms") {
            "ms"
        } else {
            match rest.get(..1) {
                Some(u) => u,
                None => return false,
            }
        };
        match UNITS[next_unit..].iter().position(|u| *u == unit) {
            Some(i) => next_unit += i + 1,
            None => return false,
        }
        rest = &rest[unit.len()..];
    }
    true
}

/// Rust twin of [`fraction_cel`]: a decimal in (0, 1].
pub fn is_fraction(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    let syntax_ok = digits(int) && digits(frac) && (!int.is_empty() || !frac.is_empty());
    syntax_ok && s.parse::<f64>().is_ok_and(|v| v > 0.0 && v <= 1.0)
}

/// Rust twin of [`QUANTITY_RE`].
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (number, suffix) = split_number(s);
    !number.is_empty()
        && match suffix {
            "" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
            "n" | "u" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
            _ => suffix
                .strip_prefix(['e', 'E'])
                .map(|exp| exp.strip_prefix(['+', '-']).unwrap_or(exp))
                .is_some_and(|exp| {
                    let (number, rest) = split_number(exp);
                    !number.is_empty() && rest.is_empty()
                }),
        }
}

/// Rust twin of [`SIZE_RE`].
pub fn is_size(s: &str) -> bool {
    !s.starts_with(['+', '-']) && is_quantity(s)
}

/// Splits `([0-9]+([.][0-9]*)?)|([.][0-9]+)` off the front of `s`; the number is empty when
/// `s` does not start with one.
fn split_number(s: &str) -> (&str, &str) {
    let int = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let mut end = int;
    if s[end..].starts_with('.') {
        let frac = s[end + 1..].len()
            - s[end + 1..]
                .trim_start_matches(|c: char| c.is_ascii_digit())
                .len();
        if int > 0 || frac > 0 {
            end += 1 + frac;
        }
    }
    s.split_at(end)
}

/// Rust twin of [`RELATIVE_PATH_CEL`].
pub fn is_relative_path(s: &str) -> bool {
    !s.starts_with('/')
        && s != ".."
        && !s.starts_with("../")
        && !s.ends_with("/..")
        && !s.contains("/../")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for ok in ["30s", "1m30s", "5ms", "1y2w3d4h5m6s7ms", "0s", "10m"] {
            assert!(is_duration(ok), "{ok}");
        }
        for bad in [
            "", "30", "s", "1s1m", "1ms1s", "1.5s", "30S", "1h 5m", "1mm", "-1s",
        ] {
            assert!(!is_duration(bad), "{bad}");
        }
    }

    #[test]
    fn fractions() {
        for ok in ["0.75", "1", "1.0", ".5", "0.000001", "1.", "01"] {
            assert!(is_fraction(ok), "{ok}");
        }
        for bad in [
            "0", "0.0", "1.01", "2", "", ".", "-0.5", "0.5e0", " 0.5", "abc", "1..0",
        ] {
            assert!(!is_fraction(bad), "{bad}");
        }
    }

    #[test]
    fn quantities() {
        for ok in [
            "1", "16Gi", "500m", "1.5", ".5", "1.", "1e3", "1E-3", "+1k", "-2Mi", "1.5e+2",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "", "lots", "1GB", "Gi", ".", "1e", "1.2.3", "1 Gi", "1ki", "e3", "1e3Gi",
        ] {
            assert!(!is_quantity(bad), "{bad}");
        }
    }

    #[test]
    fn hostnames() {
        for ok in ["llm.example.local", "*.example.com", "a", "a-b.c0"] {
            assert!(is_hostname(ok), "{ok}");
        }
        for bad in [
            "",
            "LLM.example.com",
            "-a.com",
            "a..b",
            "a.",
            "*.",
            "*",
            "a_b.com",
            "a.*.b",
        ] {
            assert!(!is_hostname(bad), "{bad}");
        }
        assert!(!is_hostname(&"a".repeat(254)));
    }

    #[test]
    fn label_keys_and_values() {
        for ok in ["app", "kubernetes.io/hostname", "a.b/C_d-e.f", "x"] {
            assert!(is_label_key(ok), "{ok}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "A.b/c",
            "a/b/c",
            "-a",
            "a-",
            &"a".repeat(64),
        ] {
            assert!(!is_label_key(bad), "{bad}");
        }
        assert!(is_annotation_key("Example.COM/key"));
        assert!(is_label_value(""));
        assert!(is_label_value("v1.2_x-y"));
        assert!(!is_label_value("has space"));
        assert!(!is_label_value(&"a".repeat(64)));
    }

    #[test]
    fn reserved_flags() {
        let port = RESERVED_FLAGS.iter().find(|f| f.flag == "--port").unwrap();
        assert!(port.is_set_by("--port"));
        assert!(port.is_set_by("--port=9000"));
        assert!(!port.is_set_by("--ports"));
        let tp = RESERVED_FLAGS
            .iter()
            .find(|f| f.flag == "--tensor-parallel-size")
            .unwrap();
        assert!(tp.is_set_by("-tp"));
        assert!(tp.is_set_by("--tensor_parallel_size=2"));
        let model = RESERVED_FLAGS.iter().find(|f| f.flag == "--model").unwrap();
        assert!(!model.is_set_by("--model-impl=vllm"));
    }
}
