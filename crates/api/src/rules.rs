//! The rules of the CRD schema, as text: the CEL expressions, patterns, bounds and messages that
//! [`crate::schema`] puts into the generated CRD. The CRD is the one statement of each rule;
//! [`crate::validate`] evaluates it offline, so nothing here re-implements a rule in Rust. No
//! I/O.

use std::sync::LazyLock;

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
    /// `autoscaling.prometheus.serverAddress`, `huggingFace.endpoint`.
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

/// Every flag the operator sets itself on vLLM's command line (model, name, address, engine
/// arguments, tensor parallelism, shutdown).
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

    /// The CEL rule on the `extraArgs` list that rejects this flag.
    pub fn cel(&self) -> String {
        let tests: Vec<String> = self
            .spellings()
            .map(|s| format!("a == '{s}' || a.startsWith('{s}=')"))
            .collect();
        format!("!self.exists(a, {})", tests.join(" || "))
    }

    /// The error message for this flag.
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

/// The CEL rule on the keys of `resources.requests` and `resources.limits`. The three
/// standard names come first: `||` stops there, before `matches()`, whose regex the CEL
/// library compiles again on every evaluation (about 0.15 ms for this one, most of a
/// validation's cost).
pub fn resource_names_cel() -> String {
    format!(
        "self.all(k, k in ['cpu', 'memory', 'ephemeral-storage'] || \
         k.matches('{LABEL_KEY_RE}') && (k.contains('/') ? \
         (k.contains('kubernetes.io/') ? k.indexOf('/') <= {} : \
         !k.startsWith('requests.') && k.indexOf('/') <= {}) : \
         {HUGEPAGES_CEL}))",
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

/// `metadata.name`: a DNS-1035 label, because the Service is named after the VLLMService (a
/// root-level rule: only there can CEL see `metadata.name`).
pub const NAME_CEL: &str =
    "size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// `rollout`: a Surge rollout must be allowed to start or stop a pod.
pub const SURGE_PROGRESSES_CEL: &str = "!has(self.strategy) || self.strategy != 'Surge' || \
     (has(self.maxSurge) ? self.maxSurge : 1) + (has(self.maxUnavailable) ? self.maxUnavailable : 0) > 0";

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

/// `modelSource`: exactly one source.
pub const ONE_MODEL_SOURCE_CEL: &str = "has(self.huggingFace) != has(self.image)";

/// `loraAdapters[]`: exactly one of a path and a Hugging Face repository.
pub const ONE_LORA_SOURCE_CEL: &str = "has(self.path) != has(self.huggingFace)";

/// The spec: a model downloaded from Hugging Face goes to `modelPath`, which must be on the
/// volume (at or below `storage.mountPath`).
pub const DOWNLOAD_PATH_CEL: &str = "!has(self.modelSource) || !has(self.modelSource.huggingFace) \
     || self.modelPath == self.storage.mountPath || self.modelPath.startsWith(\
     self.storage.mountPath.endsWith('/') ? self.storage.mountPath : self.storage.mountPath + '/')";

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

/// The base URL of a Hugging Face Hub (`huggingFace.endpoint`): `http://` or `https://`, a
/// host, an optional path, and nothing that huggingface_hub could not append `/api/...` to
/// (no query, no fragment) or that would put a credential in the pod spec (no `user@`).
pub const HF_ENDPOINT_RE: &str = "^https?://[^/?#@[:space:]]+(/[^?#[:space:]]*)?$";

/// The CEL rule on `autoscaling.target`: greater than 0. A value that is not a decimal is
/// left to the field's pattern (`||` absorbs the error of `double()` on it).
pub fn positive_decimal_cel() -> String {
    format!("!self.matches('{DECIMAL_RE}') || double(self) > 0.0")
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

/// `autoscaling`: with metric kvCacheUsage (a fraction of the KV cache), target is at most 1.
pub fn kv_cache_target_cel() -> String {
    format!(
        "!has(self.metric) || self.metric != 'kvCacheUsage' || \
         !self.target.matches('{DECIMAL_RE}') || double(self.target) <= 1.0"
    )
}

/// The messages of the CEL rules, as the API server reports them.
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
    /// `loraAdapters[].path`.
    pub const LORA_PATH: &str = "loraAdapters[].path must be an absolute path (start with '/')";
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
    /// `autoscaling.target` above 1 with metric kvCacheUsage.
    pub const KV_CACHE_TARGET: &str = "autoscaling.target must be at most 1 with metric \
                                       kvCacheUsage: it is the fraction of the KV cache in use \
                                       per pod, e.g. \"0.8\" for 80%";
    /// The static message of the autoscaling range rule (for clients that ignore
    /// messageExpression).
    pub const AUTOSCALING_RANGE: &str =
        "autoscaling.maxReplicas must be at least autoscaling.minReplicas";

    /// `rollout` with strategy Surge.
    pub const SURGE_PROGRESSES: &str = "rollout.maxSurge and rollout.maxUnavailable must not \
                                        both be 0 with strategy Surge: no pod could be replaced";

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

/// Whether a resource is an extended resource (`EXTENDED_CEL`).
pub fn is_extended_resource(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/")
}

/// Whether `s` is empty or a URL `autoscaling.prometheus.serverAddress` accepts (the operator's
/// `--prometheus-address` takes the same): [`HTTP_URL_RE`] itself, as the schema's pattern.
pub fn is_http_url_or_empty(s: &str) -> bool {
    static PATTERN: LazyLock<regex::Regex> =
        LazyLock::new(|| regex::Regex::new(HTTP_URL_RE).expect("HTTP_URL_RE is a valid RE2"));
    PATTERN.is_match(s)
}
