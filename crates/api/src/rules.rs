//! The validation rules shared by the CRD schema (as CEL) and by
//! [`crate::validate::validate`] (as Rust).
//!
//! Each format has its CEL expression and its Rust predicate side by side, so the two cannot
//! drift apart unnoticed; the api crate's tests evaluate both on the same inputs.

use std::cmp::Ordering;

use crate::quantity::ParsedQuantity;

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
    /// `image`.
    pub const IMAGE: usize = 4096;
    /// Entries in `resources.requests` and in `resources.limits`.
    pub const RESOURCES: usize = 16;
    /// Length of one quantity in `resources` (`99999999999999999999Ti` is 22).
    pub const QUANTITY: usize = 64;
    /// Entries in `loraAdapters`.
    pub const LORA_ADAPTERS: usize = 64;
    /// Hugging Face repository ids (`org/name`, each part at most 96 characters).
    pub const HF_REPO: usize = 200;
    /// Hugging Face revisions.
    pub const HF_REVISION: usize = 255;
    /// Entries in `env`.
    pub const ENV: usize = 128;
    /// Length of an `env[].name`.
    pub const ENV_NAME: usize = 256;
    /// `shutdown.drainSeconds`: an hour.
    pub const DRAIN_SECONDS: i32 = 3600;
    /// `shutdown.preStopSeconds`: ten minutes.
    pub const PRE_STOP_SECONDS: i32 = 600;
    /// `autoscaling.scaleDownStabilizationSeconds`: an hour, the HPA's own limit.
    pub const STABILIZATION_SECONDS: i32 = 3600;
    /// `autoscaling.prometheus.serverAddress`.
    pub const URL: usize = 2048;
    /// PromQL queries (`autoscaling.prometheus.query`, `autoscaling.activationQuery`).
    pub const QUERY: usize = 4096;
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
    ReservedFlag {
        flag: "--shutdown-timeout",
        aliases: &["--shutdown_timeout"],
        instead: "use spec.shutdown.drainSeconds",
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

/// A resource quantity such as `16Gi`, `500m` or `1e3`, exactly as the API server's
/// `resource.ParseQuantity` reads it (the k8s-openapi schema has no pattern). Kubebuilder's
/// pattern also allows a fractional exponent (`1e1.5`), which the API server refuses in the
/// Deployment; the exponent here is an integer of at most 9 digits, so that it always fits the
/// API server's 32-bit exponent.
pub const QUANTITY_RE: &str =
    "^[+-]?(([0-9]+([.][0-9]*)?)|([.][0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]{1,9}))?$";

/// [`QUANTITY_RE`] without a sign, for sizes and compute resources.
pub const SIZE_RE: &str =
    "^(([0-9]+([.][0-9]*)?)|([.][0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]{1,9}))?$";

/// A lowercase RFC 1123 DNS subdomain (object names such as Secrets, ServiceAccounts and
/// RuntimeClasses; Gateway API section names); the 253-character limit is a `maxLength`.
pub const DNS_SUBDOMAIN_RE: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A lowercase RFC 1123 DNS label (namespace names); the 63-character limit is a `maxLength`.
pub const DNS_LABEL_RE: &str = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// An environment variable name as the API server has checked it since Kubernetes 1.34
/// (`RelaxedEnvironmentVariableValidation`): printable ASCII (space to `~`) except `=`.
pub const ENV_NAME_RE: &str = "^[ -<>-~]+$";

/// A ConfigMap or Secret key: alphanumerics, `-`, `_` and `.` (besides the rule against `.`
/// and a leading `..` in [`config_key_cel`]).
pub const CONFIG_KEY_RE: &str = "^[-._a-zA-Z0-9]+$";

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

/// The CEL rule on `gatewayRef.sectionName` and on Secret and ConfigMap names.
pub fn dns_subdomain_cel() -> String {
    format!("self.matches('{DNS_SUBDOMAIN_RE}')")
}

/// The CEL rule on `runtimeClassName` and `serviceAccountName`, where empty means unset.
pub fn optional_dns_subdomain_cel() -> String {
    format!("self == '' || self.matches('{DNS_SUBDOMAIN_RE}')")
}

/// The CEL rule on `gatewayRef.namespace`.
pub fn dns_label_cel() -> String {
    format!("self.matches('{DNS_LABEL_RE}')")
}

/// The CEL rule on `env[].name`.
pub fn env_name_cel() -> String {
    format!("self.matches('{ENV_NAME_RE}')")
}

/// The CEL rule on Secret and ConfigMap keys (`IsConfigMapKey`).
pub fn config_key_cel() -> String {
    format!("self.matches('{CONFIG_KEY_RE}') && self != '.' && !self.startsWith('..')")
}

/// The CEL rule on `image`: the API server refuses leading and trailing whitespace.
pub const IMAGE_CEL: &str = "self == self.trim()";

/// The CEL rule on `storage.mountPath`: `/dev/shm` is taken by the shared-memory volume, and
/// the API server refuses two mounts at one path.
pub const NOT_SHM_CEL: &str = "self != '/dev/shm'";

/// The CEL rule on an `env` item (reported at its `valueFrom`).
pub const ENV_VALUE_FROM_WITH_VALUE_CEL: &str =
    "!has(self.valueFrom) || !has(self.value) || size(self.value) == 0";

/// The CEL rule on `env[].valueFrom`: exactly one source.
pub const ENV_SOURCES_CEL: &str = "(has(self.fieldRef) ? 1 : 0) + (has(self.resourceFieldRef) ? 1 : 0) + (has(self.configMapKeyRef) ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) == 1";

/// The CEL rule on `env[].valueFrom` (reported at its `fileKeyRef`): the file would have to be
/// in an emptyDir volume before vLLM starts, and the pods have no init container to write it.
pub const ENV_NO_FILE_KEY_REF_CEL: &str = "!has(self.fileKeyRef)";

/// The CEL rule on `resources.claims`: the pods have no `resourceClaims` to name.
pub const NO_CLAIMS_CEL: &str = "size(self) == 0";

// The resource rules below follow the API server's `validateResourceRequirements` (v1.36) for
// one container, with `k` a resource name. Quantities are `string(...)` because the values are
// int-or-string; a value that is not a quantity fails the schema's pattern instead.

/// CEL: `k` is an extended resource (a qualified name outside `kubernetes.io/`), which must be
/// a whole number and needs a limit equal to its request.
const EXTENDED_CEL: &str = "(k.contains('/') && !k.contains('kubernetes.io/'))";

/// CEL: `k` is hugepages of some page size.
const HUGEPAGES_CEL: &str = "k.startsWith('hugepages-')";

/// The prefix of hugepages resource names (`hugepages-2Mi`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";

/// The CEL rule on the keys of `resources.requests` and `resources.limits`.
pub fn resource_names_cel() -> String {
    format!(
        "self.all(k, k.matches('{LABEL_KEY_RE}') && (k.contains('/') ? \
         (k.contains('kubernetes.io/') ? k.indexOf('/') <= {} : \
         !k.startsWith('requests.') && k.indexOf('/') <= {}) : \
         (k in ['cpu', 'memory', 'ephemeral-storage'] || {HUGEPAGES_CEL})))",
        limits::DNS_SUBDOMAIN,
        EXTENDED_RESOURCE_PREFIX,
    )
}

/// The longest prefix of an extended resource name: the API server checks
/// `requests.<name>`, the name a ResourceQuota would use, as a qualified name.
pub const EXTENDED_RESOURCE_PREFIX: usize = limits::DNS_SUBDOMAIN - "requests.".len();

/// The CEL rule on the values of `resources.requests` and `resources.limits`: extended
/// resources are whole numbers.
pub fn resource_integers_cel() -> String {
    format!(
        "self.all(k, !{EXTENDED_CEL} || !isQuantity(string(self[k])) || \
         quantity(string(self[k])).isInteger())"
    )
}

/// The CEL rule on the values of `resources.requests` and `resources.limits`: hugepages are a
/// whole multiple of the page size their name gives.
pub fn resource_hugepages_cel() -> String {
    let page = "k.substring(10)";
    let value = "quantity(string(self[k]))";
    format!(
        "self.all(k, !{HUGEPAGES_CEL} || !isQuantity(string(self[k])) || \
         (isQuantity({page}) && quantity({page}).isInteger() && quantity({page}).asInteger() > 0 \
         && {value}.isInteger() && {value}.asInteger() % quantity({page}).asInteger() == 0))"
    )
}

/// The CEL rule on `resources` (reported at `requests`): a request of a resource that may be
/// overcommitted is at most its limit.
pub fn requests_within_limits_cel() -> String {
    let request = "string(self.requests[k])";
    let limit = "string(self.limits[k])";
    format!(
        "!has(self.requests) || !has(self.limits) || self.requests.all(k, \
         !(k in self.limits) || {EXTENDED_CEL} || {HUGEPAGES_CEL} || \
         !isQuantity({request}) || !isQuantity({limit}) || \
         quantity({request}).compareTo(quantity({limit})) <= 0)"
    )
}

/// The CEL rule on `resources` (reported at `requests`): a request of an extended resource or
/// of hugepages needs a limit, and the same quantity in both. (Only a limit is fine: the
/// request defaults to it.)
pub fn requests_equal_limits_cel() -> String {
    let request = "string(self.requests[k])";
    let limit = "string(self.limits[k])";
    format!(
        "!has(self.requests) || self.requests.all(k, !({EXTENDED_CEL} || {HUGEPAGES_CEL}) || \
         (has(self.limits) && k in self.limits && (!isQuantity({request}) || \
         !isQuantity({limit}) || quantity({request}).compareTo(quantity({limit})) == 0)))"
    )
}

/// The CEL rule on `resources`: hugepages need cpu or memory too.
pub fn hugepages_need_cpu_or_memory_cel() -> String {
    format!(
        "!((has(self.requests) && self.requests.exists(k, {HUGEPAGES_CEL})) || \
         (has(self.limits) && self.limits.exists(k, {HUGEPAGES_CEL}))) || \
         (has(self.requests) && ('cpu' in self.requests || 'memory' in self.requests)) || \
         (has(self.limits) && ('cpu' in self.limits || 'memory' in self.limits))"
    )
}

/// The CEL rule on `storage.subPath`: relative, and never climbing out of the volume.
pub const RELATIVE_PATH_CEL: &str = "!self.startsWith('/') && self != '..' && !self.startsWith('../') && !self.endsWith('/..') && !self.contains('/../')";

/// The CEL rule for absolute paths (mount paths, HTTP paths).
pub const ABSOLUTE_PATH_CEL: &str = "self.startsWith('/')";

/// The messages of the CEL rules; [`crate::validate::validate`] reports the same words.
/// `metadata.name`: a DNS-1035 label, because the Service is named after the VLLMService (a
/// root-level rule: only there can CEL see `metadata.name`).
pub const NAME_CEL: &str =
    "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// `rollout`: a Surge rollout must be allowed to start or stop a pod.
pub const SURGE_PROGRESSES_CEL: &str = "!has(self.strategy) || self.strategy != 'Surge' || \
     (has(self.maxSurge) ? self.maxSurge : 1) + (has(self.maxUnavailable) ? self.maxUnavailable : 0) > 0";

/// Rust twin of [`SURGE_PROGRESSES_CEL`].
pub fn surge_progresses(strategy_is_surge: bool, max_surge: i32, max_unavailable: i32) -> bool {
    !strategy_is_surge || i64::from(max_surge) + i64::from(max_unavailable) > 0
}

/// The CEL of `shutdown.preStopSeconds` and `shutdown.drainSeconds` with their defaults, on
/// the spec.
const PRE_STOP_SECONDS_CEL: &str =
    "(has(self.shutdown) && has(self.shutdown.preStopSeconds) ? self.shutdown.preStopSeconds : 10)";
const DRAIN_SECONDS_CEL: &str =
    "(has(self.shutdown) && has(self.shutdown.drainSeconds) ? self.shutdown.drainSeconds : 30)";

/// The spec: `terminationGracePeriodSeconds`, when set, covers preStop + drain + exit.
pub fn grace_period_cel() -> String {
    format!(
        "!has(self.terminationGracePeriodSeconds) || self.terminationGracePeriodSeconds >= \
         {PRE_STOP_SECONDS_CEL} + {DRAIN_SECONDS_CEL} + 10"
    )
}

/// The message of [`grace_period_cel`] as a CEL messageExpression, giving the three numbers.
pub fn grace_period_message_cel() -> String {
    // `format`, not `+ string(...)`: the API server's cost estimate of string(int) is unbounded.
    format!(
        "'terminationGracePeriodSeconds (%d) must be at least shutdown.preStopSeconds (%d) + \
         shutdown.drainSeconds (%d) + 10 seconds for vLLM to exit = %d, or vLLM is killed while \
         it drains'.format([self.terminationGracePeriodSeconds, {PRE_STOP_SECONDS_CEL}, \
         {DRAIN_SECONDS_CEL}, {PRE_STOP_SECONDS_CEL} + {DRAIN_SECONDS_CEL} + 10])"
    )
}

/// Rust twin of [`grace_period_cel`].
pub fn grace_period_covers_shutdown(grace: Option<i64>, pre_stop: i32, drain: i32) -> bool {
    grace.is_none_or(|g| g >= i64::from(pre_stop) + i64::from(drain) + 10)
}

/// Hugging Face repository ids: `name` or `org/name`, alphanumerics, `-`, `_` and `.`.
pub const HF_REPO_RE: &str = "^[A-Za-z0-9][-A-Za-z0-9_.]*(/[A-Za-z0-9][-A-Za-z0-9_.]*)?$";
/// A Hugging Face revision: a branch, tag or commit id (branches may contain `/`).
pub const HF_REVISION_RE: &str = "^[A-Za-z0-9][-A-Za-z0-9_./]*$";
/// A LoRA adapter's name: what clients send as `model`, and a directory name under
/// `<mountPath>/loras/` when the operator downloads it.
pub const LORA_NAME_RE: &str = "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
/// The ranks vLLM accepts for `--max-lora-rank` (`MaxLoRARanks` in vLLM's LoRA config).
pub const LORA_RANKS: &[i32] = &[1, 8, 16, 32, 64, 128, 256, 320, 512];

/// The flags the operator sets when the spec has LoRA adapters: `extraArgs` must not repeat
/// them then (without adapters they are the user's).
pub const LORA_FLAGS: &[ReservedFlag] = &[
    ReservedFlag {
        flag: "--enable-lora",
        aliases: &["--enable_lora"],
        instead: "the operator enables LoRA for spec.loraAdapters",
    },
    ReservedFlag {
        flag: "--no-enable-lora",
        aliases: &["--no_enable_lora"],
        instead: "remove spec.loraAdapters to serve without LoRA",
    },
    ReservedFlag {
        flag: "--max-loras",
        aliases: &["--max_loras"],
        instead: "use spec.engineArgs.maxLoras",
    },
    ReservedFlag {
        flag: "--max-lora-rank",
        aliases: &["--max_lora_rank"],
        instead: "use spec.engineArgs.maxLoraRank",
    },
    ReservedFlag {
        flag: "--lora-modules",
        aliases: &["--lora_modules"],
        instead: "use spec.loraAdapters",
    },
];

impl ReservedFlag {
    /// The CEL rule on the spec that rejects this LoRA flag in `extraArgs` when
    /// `loraAdapters` is not empty.
    pub fn lora_cel(&self) -> String {
        let tests: Vec<String> = self
            .spellings()
            .map(|s| format!("a == '{s}' || a.startsWith('{s}=')"))
            .collect();
        format!(
            "!has(self.loraAdapters) || size(self.loraAdapters) == 0 || !has(self.engineArgs) || \
             !has(self.engineArgs.extraArgs) || !self.engineArgs.extraArgs.exists(a, {})",
            tests.join(" || ")
        )
    }

    /// The error message for a LoRA flag in `extraArgs` next to `loraAdapters`.
    pub fn lora_message(&self) -> String {
        format!(
            "engineArgs.extraArgs must not set {} when loraAdapters is set: the operator sets \
             it; {}",
            self.flag, self.instead
        )
    }
}

/// The spec: the model comes from exactly one of a PVC and an OCI image.
pub const ONE_MODEL_VOLUME_CEL: &str = "has(self.storage.pvcName) != \
     (has(self.modelSource) && has(self.modelSource.image))";

/// Rust twin of [`ONE_MODEL_VOLUME_CEL`].
pub fn one_model_volume(has_pvc: bool, has_image: bool) -> bool {
    has_pvc != has_image
}

/// `modelSource`: exactly one source.
pub const ONE_MODEL_SOURCE_CEL: &str = "has(self.huggingFace) != has(self.image)";

/// `loraAdapters[]`: exactly one of a path and a Hugging Face repository.
pub const ONE_LORA_SOURCE_CEL: &str = "has(self.path) != has(self.huggingFace)";

/// The spec: a model downloaded from Hugging Face goes to `modelPath`, which must be on the
/// volume (at or below `storage.mountPath`).
pub const DOWNLOAD_PATH_CEL: &str = "!has(self.modelSource) || !has(self.modelSource.huggingFace) \
     || self.modelPath == self.storage.mountPath || self.modelPath.startsWith(\
     self.storage.mountPath.endsWith('/') ? self.storage.mountPath : self.storage.mountPath + '/')";

/// Rust twin of [`DOWNLOAD_PATH_CEL`] (for a spec with a Hugging Face model).
pub fn is_on_volume(model_path: &str, mount_path: &str) -> bool {
    let dir = if mount_path.ends_with('/') {
        mount_path.to_string()
    } else {
        format!("{mount_path}/")
    };
    model_path == mount_path || model_path.starts_with(&dir)
}

/// The spec: adapters from Hugging Face are downloaded onto the PVC, so they need one.
pub const LORA_DOWNLOAD_NEEDS_PVC_CEL: &str = "!has(self.loraAdapters) || \
     !self.loraAdapters.exists(a, has(a.huggingFace)) || has(self.storage.pvcName)";

/// The spec: an adapter's name is not the base model's.
pub const LORA_NAME_NOT_MODEL_CEL: &str =
    "!has(self.loraAdapters) || !self.loraAdapters.exists(a, a.name == self.modelName)";

/// `engineArgs.maxLoraRank`.
pub fn lora_rank_cel() -> String {
    let ranks: Vec<String> = LORA_RANKS.iter().map(i32::to_string).collect();
    format!("self in [{}]", ranks.join(", "))
}

/// An `http://` or `https://` URL with a host and no whitespace, or empty (unset):
/// `autoscaling.prometheus.serverAddress`.
pub const HTTP_URL_RE: &str = "^(https?://[^/?#[:space:]]+([/?#][^[:space:]]*)?)?$";

/// Rust twin of [`HTTP_URL_RE`].
pub fn is_http_url_or_empty(s: &str) -> bool {
    // RE2's [:space:] is [\t\n\v\f\r ].
    let space = |c: char| matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r');
    if s.is_empty() {
        return true;
    }
    let Some(rest) = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
    else {
        return false;
    };
    let host_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    host_end > 0 && !rest.contains(space)
}

/// Rust twin of [`DECIMAL_RE`].
pub fn is_decimal(s: &str) -> bool {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.chars().all(|c| c.is_ascii_digit());
    digits(int) && digits(frac) && (!int.is_empty() || !frac.is_empty())
}

/// The CEL rule on `autoscaling.target`: greater than 0. A value that is not a decimal is
/// left to the field's pattern (`||` absorbs the error of `double()` on it).
pub fn positive_decimal_cel() -> String {
    format!("!self.matches('{DECIMAL_RE}') || double(self) > 0.0")
}

/// Rust twin of [`positive_decimal_cel`] (for a decimal).
pub fn is_positive_decimal(s: &str) -> bool {
    !is_decimal(s) || s.parse::<f64>().is_ok_and(|v| v > 0.0)
}

/// The value of `autoscaling.minReplicas` in CEL on the `autoscaling` object.
const MIN_REPLICAS_CEL: &str = "(has(self.minReplicas) ? self.minReplicas : 1)";

/// `autoscaling`: maxReplicas is at least minReplicas.
pub fn autoscaling_range_cel() -> String {
    format!("self.maxReplicas >= {MIN_REPLICAS_CEL}")
}

/// The message of [`autoscaling_range_cel`] as a CEL messageExpression, with both numbers.
pub fn autoscaling_range_message_cel() -> String {
    format!(
        "'autoscaling.maxReplicas (%d) must be at least autoscaling.minReplicas (%d)'\
         .format([self.maxReplicas, {MIN_REPLICAS_CEL}])"
    )
}

/// Rust twin of [`autoscaling_range_cel`].
pub fn autoscaling_range_ok(min_replicas: i32, max_replicas: i32) -> bool {
    max_replicas >= min_replicas
}

/// `autoscaling`: with metric kvCacheUsage (a fraction of the KV cache), target is at most 1.
pub fn kv_cache_target_cel() -> String {
    format!(
        "!has(self.metric) || self.metric != 'kvCacheUsage' || \
         !self.target.matches('{DECIMAL_RE}') || double(self.target) <= 1.0"
    )
}

/// Rust twin of [`kv_cache_target_cel`], given whether the metric is kvCacheUsage.
pub fn kv_cache_target_ok(is_kv_cache_usage: bool, target: &str) -> bool {
    !is_kv_cache_usage || !is_decimal(target) || target.parse::<f64>().is_ok_and(|v| v <= 1.0)
}

/// Rust twin of [`HF_REPO_RE`].
pub fn is_hf_repo(s: &str) -> bool {
    let part = |p: &str| {
        p.chars().next().is_some_and(is_alnum)
            && p.chars()
                .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
    };
    match s.split_once('/') {
        Some((org, name)) => part(org) && part(name),
        None => part(s),
    }
}

/// Rust twin of [`HF_REVISION_RE`].
pub fn is_hf_revision(s: &str) -> bool {
    s.chars().next().is_some_and(is_alnum)
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.' | '/'))
}

/// Rust twin of [`LORA_NAME_RE`].
pub fn is_lora_name(s: &str) -> bool {
    is_delimited(s, is_alnum, |c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
}

pub mod messages {
    /// `storage.pvcName` and `modelSource.image` both set or both unset.
    pub const ONE_MODEL_VOLUME: &str = "exactly one of storage.pvcName and modelSource.image \
                                        must be set: the model comes from a \
                                        PersistentVolumeClaim or from an OCI image";
    /// `modelSource` without exactly one source.
    pub const ONE_MODEL_SOURCE: &str = "modelSource must set exactly one of huggingFace and image";
    /// `loraAdapters[]` without exactly one source.
    pub const ONE_LORA_SOURCE: &str = "loraAdapters[] must set exactly one of path and huggingFace";
    /// `modelPath` outside the volume a Hugging Face model is downloaded to.
    pub const DOWNLOAD_PATH: &str = "modelPath must be storage.mountPath or a path below it: \
                                     the model is downloaded there, onto the \
                                     PersistentVolumeClaim";
    /// A Hugging Face adapter without a PVC.
    pub const LORA_DOWNLOAD_NEEDS_PVC: &str = "loraAdapters[].huggingFace needs \
                                               storage.pvcName: adapters are downloaded onto \
                                               the PersistentVolumeClaim (an image volume is \
                                               read-only)";
    /// An adapter named like the model.
    pub const LORA_NAME_NOT_MODEL: &str =
        "loraAdapters[].name must differ from modelName: both are names clients request";
    /// `loraAdapters[].name`.
    pub const LORA_NAME: &str = "loraAdapters[].name must be alphanumerics, '-', '_' or '.', \
                                 starting and ending with an alphanumeric";
    /// `loraAdapters[].path`.
    pub const LORA_PATH: &str = "loraAdapters[].path must be an absolute path (start with '/')";
    /// A Hugging Face repository id.
    pub const HF_REPO: &str = "huggingFace.repo must be a Hugging Face repository id such as \
                               Qwen/Qwen2.5-1.5B-Instruct";
    /// A Hugging Face revision.
    pub const HF_REVISION: &str = "huggingFace.revision must be a branch, tag or commit id \
                                   such as main (alphanumerics, '-', '_', '.' and '/')";
    /// `engineArgs.maxLoraRank`.
    pub const LORA_RANK: &str = "engineArgs.maxLoraRank must be one of vLLM's ranks: 1, 8, 16, \
                                 32, 64, 128, 256, 320 or 512";
    /// A Secret name in `tokenSecretRef`.
    pub const TOKEN_SECRET_NAME: &str =
        "tokenSecretRef.name must be a Secret name: a lowercase DNS subdomain such as hf-token";
    /// A Secret key in `tokenSecretRef`.
    pub const TOKEN_SECRET_KEY: &str = "tokenSecretRef.key must be alphanumerics, '-', '_' or \
                                        '.', not '.' and not starting with '..'";
    /// `autoscaling.target` at most 0.
    pub const AUTOSCALING_TARGET: &str = "autoscaling.target must be a decimal number greater \
                                          than 0, such as \"5\" or \"0.8\"";
    /// `autoscaling.target` not a decimal (the pattern's meaning, for validate()).
    pub const AUTOSCALING_TARGET_DECIMAL: &str =
        "autoscaling.target must be a decimal number such as \"5\" or \"0.8\"";
    /// `autoscaling.target` above 1 with metric kvCacheUsage.
    pub const KV_CACHE_TARGET: &str = "autoscaling.target must be at most 1 with metric \
                                       kvCacheUsage: it is the fraction of the KV cache in use \
                                       per pod, e.g. \"0.8\" for 80%";
    /// The static message of the autoscaling range rule (for clients that ignore
    /// messageExpression).
    pub const AUTOSCALING_RANGE: &str =
        "autoscaling.maxReplicas must be at least autoscaling.minReplicas";
    /// `autoscaling.prometheus.serverAddress`.
    pub const SERVER_ADDRESS: &str = "autoscaling.prometheus.serverAddress must be an http:// \
                                      or https:// URL such as \
                                      http://prometheus.monitoring.svc:9090";

    /// maxReplicas below minReplicas (what [`super::autoscaling_range_message_cel`] evaluates
    /// to).
    pub fn autoscaling_range(min_replicas: i32, max_replicas: i32) -> String {
        format!(
            "autoscaling.maxReplicas ({max_replicas}) must be at least autoscaling.minReplicas \
             ({min_replicas})"
        )
    }

    /// `rollout` with strategy Surge.
    pub const SURGE_PROGRESSES: &str = "rollout.maxSurge and rollout.maxUnavailable must not \
                                        both be 0 with strategy Surge: no pod could be replaced";

    /// `terminationGracePeriodSeconds` below preStop + drain + exit (what
    /// [`super::grace_period_message_cel`] evaluates to).
    pub fn grace_period(grace: i64, pre_stop: i32, drain: i32) -> String {
        format!(
            "terminationGracePeriodSeconds ({grace}) must be at least shutdown.preStopSeconds \
             ({pre_stop}) + shutdown.drainSeconds ({drain}) + 10 seconds for vLLM to exit = {}, \
             or vLLM is killed while it drains",
            i64::from(pre_stop) + i64::from(drain) + 10
        )
    }

    /// The static message of the grace-period rule (for clients that ignore messageExpression).
    pub const GRACE_PERIOD: &str = "terminationGracePeriodSeconds must be at least \
                                    shutdown.preStopSeconds + shutdown.drainSeconds + 10";

    /// `metadata.name`.
    pub const NAME: &str = "metadata.name must be a DNS-1035 label (at most 63 lowercase \
                            letters, digits and '-', starting with a letter and ending with a \
                            letter or digit), because the Service is named after the VLLMService";
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
    /// `image`.
    pub const IMAGE: &str = "image must not have leading or trailing whitespace";
    /// `storage.mountPath` at `/dev/shm`.
    pub const MOUNT_PATH_SHM: &str =
        "storage.mountPath must not be /dev/shm: the operator mounts shared memory there";
    /// `runtimeClassName`.
    pub const RUNTIME_CLASS_NAME: &str = "runtimeClassName must be a RuntimeClass name: a \
                                          lowercase DNS subdomain such as nvidia (or empty)";
    /// `serviceAccountName`.
    pub const SERVICE_ACCOUNT_NAME: &str = "serviceAccountName must be a ServiceAccount name: a \
                                            lowercase DNS subdomain such as vllm (or empty)";
    /// `gatewayRef.sectionName`.
    pub const SECTION_NAME: &str = "gatewayRef.sectionName must be a listener name: a \
                                    lowercase DNS subdomain such as http";
    /// `gatewayRef.namespace`.
    pub const GATEWAY_NAMESPACE: &str = "gatewayRef.namespace must be a namespace name: \
                                         lowercase letters, digits and '-', starting and ending \
                                         with a letter or digit";
    /// `env[].name`.
    pub const ENV_NAME: &str = "env[].name must be printable ASCII characters other than '='";
    /// `env[].valueFrom` next to a `value`.
    pub const ENV_VALUE_FROM_WITH_VALUE: &str =
        "env[].valueFrom must not be set when env[].value is not empty";
    /// `env[].valueFrom` without exactly one source.
    pub const ENV_SOURCES: &str = "env[].valueFrom must set exactly one of fieldRef, \
                                   resourceFieldRef, configMapKeyRef or secretKeyRef";
    /// `env[].valueFrom.fileKeyRef`.
    pub const ENV_FILE_KEY_REF: &str = "env[].valueFrom.fileKeyRef is not supported: the pods \
                                        have no init container to write such a file";
    /// `resources.claims`.
    pub const CLAIMS: &str = "resources.claims must be empty: the pods have no resourceClaims";
    /// `resources.requests` above `resources.limits`.
    pub const REQUESTS_WITHIN_LIMITS: &str =
        "resources.requests must not exceed resources.limits of the same resource";
    /// `resources.requests` of extended resources and hugepages without an equal limit.
    pub const REQUESTS_EQUAL_LIMITS: &str = "resources.requests of extended resources such as \
                                             nvidia.com/gpu and of hugepages need a limit of the \
                                             same quantity: set both to it, or only the limit";
    /// hugepages without cpu or memory.
    pub const HUGEPAGES_NEED_CPU_OR_MEMORY: &str =
        "resources with hugepages must also request or limit cpu or memory";

    /// The keys of `resources.requests` or `resources.limits`; `list` is `requests` or
    /// `limits`.
    pub fn resource_names(list: &str) -> String {
        format!(
            "resources.{list} keys must be cpu, memory, ephemeral-storage, hugepages-<page \
             size> or an extended resource name such as nvidia.com/gpu"
        )
    }

    /// Extended resources in `resources.requests` or `resources.limits`.
    pub fn resource_integers(list: &str) -> String {
        format!(
            "resources.{list} of extended resources such as nvidia.com/gpu must be whole \
             numbers such as 1 (not 1.0 or 1000m)"
        )
    }

    /// Hugepages in `resources.requests` or `resources.limits`.
    pub fn resource_hugepages(list: &str) -> String {
        format!(
            "resources.{list} of hugepages-<page size> must be whole multiples of a page size \
             such as 2Mi, e.g. hugepages-2Mi: 512Mi"
        )
    }

    /// A Secret or ConfigMap name in `env[].valueFrom`; `source` is e.g. `secretKeyRef`.
    pub fn env_source_name(source: &str) -> String {
        format!("env[].valueFrom.{source}.name must be a lowercase DNS subdomain such as hf-token")
    }

    /// A Secret or ConfigMap key in `env[].valueFrom`; `source` is e.g. `secretKeyRef`.
    pub fn env_source_key(source: &str) -> String {
        format!(
            "env[].valueFrom.{source}.key must be alphanumerics, '-', '_' or '.', not '.' and \
             not starting with '..'"
        )
    }

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
fn is_dns_label_with(s: &str, edge: fn(char) -> bool) -> bool {
    is_delimited(s, edge, |c| edge(c) || c == '-')
}

/// Rust twin of [`HOSTNAME_RE`] plus the 253-character limit.
pub fn is_hostname(s: &str) -> bool {
    let name = s.strip_prefix("*.").unwrap_or(s);
    s.len() <= limits::DNS_SUBDOMAIN
        && name
            .split('.')
            .all(|l| is_dns_label_with(l, is_lower_alnum))
}

/// Rust twin of [`DNS_SUBDOMAIN_RE`] plus the 253-character limit.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= limits::DNS_SUBDOMAIN && s.split('.').all(|l| is_dns_label_with(l, is_lower_alnum))
}

/// Rust twin of [`DNS_LABEL_RE`] plus the 63-character limit.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= limits::LABEL_NAME && is_dns_label_with(s, is_lower_alnum)
}

/// Rust twin of [`env_name_cel`].
pub fn is_env_var_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| (' '..='~').contains(&c) && c != '=')
}

/// Rust twin of [`config_key_cel`] plus the 253-character limit.
pub fn is_config_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= limits::DNS_SUBDOMAIN
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s != "."
        && !s.starts_with("..")
}

/// Rust twin of [`IMAGE_CEL`]: CEL's `trim()`, like the API server's `strings.TrimSpace`,
/// trims Unicode White_Space, as `str::trim` does.
pub fn is_trimmed(s: &str) -> bool {
    s.trim() == s
}

/// Whether a resource is an extended resource (`EXTENDED_CEL`).
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// Whether a resource is hugepages (`HUGEPAGES_CEL`).
pub fn is_hugepages(name: &str) -> bool {
    name.starts_with(HUGEPAGES_PREFIX)
}

/// Rust twin of [`resource_names_cel`] for one name.
pub fn is_resource_name(name: &str) -> bool {
    is_label_key(name)
        && match name.split_once('/') {
            Some((prefix, _)) if name.contains("kubernetes.io/") => {
                prefix.len() <= limits::DNS_SUBDOMAIN
            }
            Some((prefix, _)) => {
                !name.starts_with("requests.") && prefix.len() <= EXTENDED_RESOURCE_PREFIX
            }
            None => matches!(name, "cpu" | "memory" | "ephemeral-storage") || is_hugepages(name),
        }
}

/// Rust twin of [`resource_integers_cel`] for one entry.
pub fn is_resource_integer_ok(name: &str, value: &str) -> bool {
    !is_extended_resource(name) || ParsedQuantity::parse(value).is_none_or(|q| q.is_integer())
}

/// Rust twin of [`resource_hugepages_cel`] for one entry.
pub fn is_hugepages_value_ok(name: &str, value: &str) -> bool {
    let Some(page) = name.strip_prefix(HUGEPAGES_PREFIX) else {
        return true;
    };
    let Some(value) = ParsedQuantity::parse(value) else {
        return true;
    };
    let page = ParsedQuantity::parse(page)
        .and_then(|p| p.as_integer())
        .filter(|p| *p > 0);
    match (page, value.as_integer()) {
        (Some(page), Some(value)) => value % page == 0,
        _ => false,
    }
}

/// Rust twin of [`requests_within_limits_cel`] for one request with a limit.
pub fn is_request_within_limit(name: &str, request: &str, limit: &str) -> bool {
    if is_extended_resource(name) || is_hugepages(name) {
        return true;
    }
    match (ParsedQuantity::parse(request), ParsedQuantity::parse(limit)) {
        (Some(request), Some(limit)) => request.compare(&limit) != Ordering::Greater,
        _ => true,
    }
}

/// Rust twin of [`requests_equal_limits_cel`] for one request and its limit, if any.
pub fn is_request_equal_to_limit(name: &str, request: &str, limit: Option<&str>) -> bool {
    if !(is_extended_resource(name) || is_hugepages(name)) {
        return true;
    }
    let Some(limit) = limit else {
        return false;
    };
    match (ParsedQuantity::parse(request), ParsedQuantity::parse(limit)) {
        (Some(request), Some(limit)) => request.compare(&limit) == Ordering::Equal,
        _ => true,
    }
}

/// Rust twin of [`hugepages_need_cpu_or_memory_cel`], given the resource names of the
/// requests and of the limits.
pub fn hugepages_have_cpu_or_memory<'a>(names: impl IntoIterator<Item = &'a str> + Clone) -> bool {
    !names.clone().into_iter().any(is_hugepages)
        || names
            .into_iter()
            .any(|name| matches!(name, "cpu" | "memory"))
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
                && prefix.split('.').all(|l| is_dns_label_with(l, prefix_edge))
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
    is_decimal(s) && s.parse::<f64>().is_ok_and(|v| v > 0.0 && v <= 1.0)
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
                    (1..=9).contains(&exp.len()) && exp.bytes().all(|c| c.is_ascii_digit())
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
    fn autoscaling_targets() {
        for ok in ["5", "0.8", ".5", "1.", "100", "0.000001"] {
            assert!(is_decimal(ok) && is_positive_decimal(ok), "{ok}");
        }
        for zero in ["0", "0.0", ".0", "000"] {
            assert!(is_decimal(zero) && !is_positive_decimal(zero), "{zero}");
        }
        for not_a_number in ["", ".", "abc", "-1", "1e3", " 5", "5%", "1..0", "+1"] {
            assert!(!is_decimal(not_a_number), "{not_a_number}");
            // Left to the pattern.
            assert!(is_positive_decimal(not_a_number), "{not_a_number}");
        }
        assert!(kv_cache_target_ok(true, "1"));
        assert!(kv_cache_target_ok(true, "0.8"));
        assert!(!kv_cache_target_ok(true, "1.01"));
        assert!(!kv_cache_target_ok(true, "5"));
        assert!(kv_cache_target_ok(false, "5"));
        assert!(kv_cache_target_ok(true, "lots"), "left to the pattern");
        assert!(autoscaling_range_ok(0, 1));
        assert!(autoscaling_range_ok(3, 3));
        assert!(!autoscaling_range_ok(3, 2));
    }

    #[test]
    fn http_urls() {
        for ok in [
            "",
            "http://prometheus.monitoring.svc:9090",
            "https://prom.example.com/prometheus",
            "http://127.0.0.1:9090",
            "http://[::1]:9090/",
            "http://h?x=1",
        ] {
            assert!(is_http_url_or_empty(ok), "{ok}");
        }
        for bad in [
            "prometheus:9090",
            "ftp://prom",
            "http://",
            "http:///path",
            "HTTP://prom",
            "http://prom :9090",
            "http://prom/a b",
            "http://prom\t",
            " http://prom",
        ] {
            assert!(!is_http_url_or_empty(bad), "{bad:?}");
        }
    }

    #[test]
    fn quantities() {
        for ok in [
            "1",
            "16Gi",
            "500m",
            "1.5",
            ".5",
            "1.",
            "1e3",
            "1E-3",
            "+1k",
            "-2Mi",
            "1.5e+2",
            "1e123456789",
        ] {
            assert!(is_quantity(ok), "{ok}");
        }
        for bad in [
            "",
            "lots",
            "1GB",
            "Gi",
            ".",
            "1e",
            "1.2.3",
            "1 Gi",
            "1ki",
            "e3",
            "1e3Gi",
            "1e1.5",
            "1e.5",
            "1e1234567890",
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
    fn object_names() {
        for ok in ["a", "nvidia", "hf-token", "a.b-c.d", "0", &"a".repeat(253)] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "bad-",
            "-a",
            "A",
            "a_b",
            "a..b",
            "a.",
            ".a",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
        assert!(is_dns_label("gateway-system"));
        assert!(!is_dns_label("gateway.system"));
        assert!(!is_dns_label(&"a".repeat(64)));
    }

    #[test]
    fn env_names_and_keys() {
        for ok in ["HF_TOKEN", "a", "my.var-1", "A B", "~!@#$%^&*()"] {
            assert!(is_env_var_name(ok), "{ok}");
        }
        for bad in ["", "A=B", "é", "TAB\t", "\u{7f}"] {
            assert!(!is_env_var_name(bad), "{bad:?}");
        }
        for ok in ["token", "a.b", "_x", "-", ".x", "a..b", "A-Z_0.9"] {
            assert!(is_config_key(ok), "{ok}");
        }
        for bad in ["", ".", "..", "..x", "a/b", "a b", &"a".repeat(254)] {
            assert!(!is_config_key(bad), "{bad}");
        }
        assert!(is_trimmed("vllm/vllm-openai:latest"));
        assert!(!is_trimmed(" vllm"));
        assert!(!is_trimmed("vllm\u{a0}"));
    }

    #[test]
    fn resource_names() {
        for ok in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "hugepages-2Mi",
            "nvidia.com/gpu",
            "volcano.sh/vgpu-number",
            "example.kubernetes.io/thing",
            &format!("{}/x", "a".repeat(244)),
            &format!("{}.kubernetes.io/x", "a".repeat(239)),
        ] {
            assert!(is_resource_name(ok), "{ok}");
        }
        for bad in [
            "",
            "gpu",
            "pods",
            "requests.cpu",
            "requests.example.com/x",
            "Example.com/gpu",
            "a/b/c",
            "nvidia.com/",
            &format!("{}/x", "a".repeat(245)),
        ] {
            assert!(!is_resource_name(bad), "{bad}");
        }
    }

    #[test]
    fn resource_values() {
        assert!(is_resource_integer_ok("nvidia.com/gpu", "2"));
        assert!(is_resource_integer_ok("nvidia.com/gpu", "1k"));
        assert!(!is_resource_integer_ok("nvidia.com/gpu", "0.5"));
        assert!(!is_resource_integer_ok("nvidia.com/gpu", "1000m"));
        assert!(is_resource_integer_ok("cpu", "0.5"));
        assert!(is_resource_integer_ok("example.kubernetes.io/x", "0.5"));
        // Not a quantity: the pattern refuses it, not this rule.
        assert!(is_resource_integer_ok("nvidia.com/gpu", "lots"));

        assert!(is_hugepages_value_ok("hugepages-2Mi", "4Mi"));
        assert!(is_hugepages_value_ok("hugepages-2Mi", "0"));
        assert!(!is_hugepages_value_ok("hugepages-2Mi", "3Mi"));
        assert!(!is_hugepages_value_ok("hugepages-0", "0"));
        assert!(!is_hugepages_value_ok("hugepages-x", "1"));
        assert!(is_hugepages_value_ok("memory", "3Mi"));

        assert!(is_request_within_limit("cpu", "500m", "1"));
        assert!(is_request_within_limit("cpu", "1", "1000m"));
        assert!(!is_request_within_limit("memory", "2Gi", "2G"));
        assert!(is_request_within_limit("nvidia.com/gpu", "2", "1"));

        assert!(is_request_equal_to_limit("nvidia.com/gpu", "1", Some("1")));
        assert!(!is_request_equal_to_limit("nvidia.com/gpu", "1", Some("2")));
        assert!(!is_request_equal_to_limit("nvidia.com/gpu", "1", None));
        assert!(!is_request_equal_to_limit("hugepages-2Mi", "2Mi", None));
        assert!(is_request_equal_to_limit("cpu", "1", None));
        assert!(is_request_equal_to_limit("kubernetes.io/x", "1", None));

        assert!(hugepages_have_cpu_or_memory(["cpu", "nvidia.com/gpu"]));
        assert!(hugepages_have_cpu_or_memory(["hugepages-2Mi", "memory"]));
        assert!(!hugepages_have_cpu_or_memory([
            "hugepages-2Mi",
            "nvidia.com/gpu"
        ]));
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
