//! `aiinfra.example.com/v1alpha1` `VLLMService`: one object that describes a vLLM
//! OpenAI-compatible inference service.
//!
//! The field names, types and defaults are those of the reference Go operator, so its YAML
//! works unchanged. Defaults live in two places that must agree: serde (for
//! objects read without the API server, e.g. the offline `render` command) and the schema
//! (so the API server stores them and `kubectl get -o yaml` shows them). Both come from the
//! same `Default` impls and `default_*` functions below. Plain data: no I/O.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements,
    SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rules::{self, limits, messages};
use crate::schema;

/// The condition types the controller reports in `status.conditions`.
pub mod condition_types {
    /// The Deployment exists, is ours, and has its desired number of ready replicas.
    pub const DEPLOYMENT_READY: &str = "DeploymentReady";
    /// The model PersistentVolumeClaim exists and is Bound.
    pub const STORAGE_READY: &str = "StorageReady";
    /// The HTTPRoute is accepted by its Gateway (True with reason RouteNotRequired when
    /// `spec.gatewayRef` is unset).
    pub const ROUTE_READY: &str = "RouteReady";
    /// The ServiceMonitor is in place (or monitoring is off).
    pub const MONITORING_READY: &str = "MonitoringReady";
    /// A rollout is in progress.
    pub const PROGRESSING: &str = "Progressing";
    /// Something needs the user's attention; the message says what.
    pub const DEGRADED: &str = "Degraded";
    /// KEDA scales the service as `spec.autoscaling` asks (True with reason
    /// AutoscalingNotRequired when it is unset).
    pub const AUTOSCALING_READY: &str = "AutoscalingReady";
    /// The model (and the LoRA adapters) that `spec.modelSource` and `spec.loraAdapters`
    /// download are on the volume; absent when nothing is downloaded.
    pub const MODEL_READY: &str = "ModelReady";
    /// Summary: the service answers requests. Agrees with `status.phase`.
    pub const AVAILABLE: &str = "Available";
}

/// The desired state of a vLLM inference service.
// Clippy reads each `printcolumn(type_ = ...)` below as a repeat of the first.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "aiinfra.example.com",
    version = "v1alpha1",
    kind = "VLLMService",
    namespaced,
    status = "VLLMServiceStatus",
    shortname = "vllm",
    derive = "PartialEq",
    doc = "A vLLM OpenAI-compatible inference service: the operator runs it as a Deployment \
           behind a Service, and optionally exposes it through a Gateway API HTTPRoute and \
           scrapes it with a Prometheus ServiceMonitor.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Running or Failed"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.ready",
        description = "Ready replicas / desired replicas"
    ),
    printcolumn(
        name = "Model",
        type_ = "string",
        json_path = ".spec.modelName",
        description = "The model name clients request"
    ),
    printcolumn(
        name = "Host",
        type_ = "string",
        json_path = ".spec.gatewayRef.host",
        description = "The hostname routed to this service through the Gateway",
        priority = 1
    ),
    printcolumn(
        name = "MaxModelLen",
        type_ = "integer",
        json_path = ".status.engine.maxModelLen",
        description = "The max model length vLLM settled on",
        priority = 1
    ),
    printcolumn(
        name = "KVCacheTokens",
        type_ = "integer",
        json_path = ".status.engine.kvCacheTokens",
        description = "Tokens of KV cache vLLM allocated",
        priority = 1
    ),
    printcolumn(
        name = "MinReplicas",
        type_ = "integer",
        json_path = ".spec.autoscaling.minReplicas",
        description = "The fewest replicas the autoscaler keeps",
        priority = 1
    ),
    printcolumn(
        name = "MaxReplicas",
        type_ = "integer",
        json_path = ".spec.autoscaling.maxReplicas",
        description = "The most replicas the autoscaler starts",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
#[schemars(transform = schema::grace_period_rule)]
#[schemars(transform = schema::model_rules)]
pub struct VLLMServiceSpec {
    /// Container image that runs vLLM's OpenAI-compatible server, e.g.
    /// vllm/vllm-openai:latest.
    #[schemars(length(min = 1, max = limits::IMAGE))]
    #[schemars(transform = schema::cel(rules::IMAGE_CEL.into(), messages::IMAGE.into()))]
    pub image: String,

    /// Path of the model inside the container, passed as --model. Usually a directory under
    /// storage.mountPath (where modelSource.huggingFace downloads it).
    #[schemars(length(min = 1, max = limits::PATH))]
    pub model_path: String,

    /// Name clients use in the OpenAI API's "model" field, passed as --served-model-name.
    #[schemars(length(min = 1))]
    pub model_name: String,

    /// Number of vLLM pods. 0 scales the service to zero. Also set by kubectl scale and
    /// autoscalers through the scale subresource. With spec.autoscaling, KEDA's
    /// HorizontalPodAutoscaler sets it: omit it from applied manifests, or every apply
    /// resets it.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0))]
    pub replicas: i32,

    /// Port vLLM listens on, exposed as the container port and Service port named http.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// RuntimeClass for the pods, e.g. nvidia. Unset or empty uses the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::optional_dns_subdomain_cel(),
        messages::RUNTIME_CLASS_NAME.into(),
    ))]
    pub runtime_class_name: Option<String>,

    /// Scheduler for the pods, e.g. volcano. Unset or empty means default-scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,

    /// Node labels the pods must be scheduled onto.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = schema::label_map("nodeSelector"))]
    pub node_selector: BTreeMap<String, String>,

    /// Extra labels for the Deployment, its pods and the Service. The operator's own
    /// app.kubernetes.io/name, instance and managed-by labels take precedence.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = schema::label_map("labels"))]
    pub labels: BTreeMap<String, String>,

    /// Run the pods in the host's IPC namespace. Not needed for tensor parallelism: the
    /// operator mounts a memory-backed /dev/shm (see shmSize).
    #[serde(default, rename = "hostIPC")]
    pub host_ipc: bool,

    /// Compute resources of the vLLM container, passed through unchanged: CPU, memory, GPUs
    /// (nvidia.com/gpu) or any extended resource (e.g. volcano.sh/vgpu-number). Extended
    /// resources are whole numbers, and a request of one needs a limit of the same quantity
    /// (or set only the limit); other requests must not exceed their limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::resources)]
    pub resources: Option<ResourceRequirements>,

    /// The volume that holds the model files: a PersistentVolumeClaim (pvcName), or the OCI
    /// image of modelSource.image, mounted at mountPath.
    pub storage: Storage,

    /// Where the operator fetches the model from. Unset: the files are already on the
    /// PersistentVolumeClaim at modelPath. huggingFace downloads the repository to modelPath
    /// with a Job before any pod starts; image mounts an OCI image at storage.mountPath
    /// instead of a claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_source: Option<ModelSource>,

    /// LoRA adapters vLLM serves beside the base model (--enable-lora --lora-modules); each
    /// is requested by its name as the "model". An adapter from Hugging Face is downloaded to
    /// <storage.mountPath>/loras/<name>. Adding or removing one replaces the pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::LORA_ADAPTERS))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub lora_adapters: Vec<LoraAdapter>,

    /// Expose the service through a Gateway API Gateway listener with an HTTPRoute. Unset
    /// means no HTTPRoute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_ref: Option<GatewayRef>,

    /// vLLM engine settings the operator turns into command-line flags.
    #[serde(default)]
    pub engine_args: EngineArgs,

    /// HTTP startup probe. On unless enabled is false; it gives the model time to load
    /// before the liveness probe starts.
    #[serde(default)]
    pub startup_probe: Probe<Startup>,

    /// HTTP liveness probe. Off unless enabled is true.
    #[serde(default)]
    pub liveness_probe: Probe<Liveness>,

    /// HTTP readiness probe. On unless enabled is false; it keeps a loading pod out of the
    /// Service.
    #[serde(default)]
    pub readiness_probe: Probe<Readiness>,

    /// Prometheus Operator ServiceMonitor for vLLM's metrics endpoint.
    #[serde(default)]
    pub monitoring: Monitoring,

    /// Extra environment variables for the vLLM container (e.g. HF_TOKEN from a Secret).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::env)]
    pub env: Vec<EnvVar>,

    /// Secrets for pulling the image from a private registry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,

    /// Tolerations for the pods, e.g. for tainted GPU nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity rules for the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// ServiceAccount the pods run as. Unset or empty uses the namespace's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::optional_dns_subdomain_cel(),
        messages::SERVICE_ACCOUNT_NAME.into(),
    ))]
    pub service_account_name: Option<String>,

    /// Extra annotations for the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = schema::annotation_map("podAnnotations"))]
    pub pod_annotations: BTreeMap<String, String>,

    /// Size limit of the memory-backed /dev/shm volume that vLLM uses for tensor parallelism
    /// and its workers. Unset lets the operator choose; the memory counts against the pod's
    /// memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::size)]
    pub shm_size: Option<Quantity>,

    /// Security settings of the vLLM pods, e.g. runAsNonRoot, runAsUser and fsGroup for an
    /// image that runs vLLM as a non-root user. Unless set here, the operator uses the
    /// RuntimeDefault seccomp profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,

    /// Security settings of the vllm container. The operator's defaults, which pass the
    /// baseline and restricted Pod Security Standards: allowPrivilegeEscalation false and all
    /// capabilities dropped; a field set here wins over its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,

    /// How a pod stops without cutting off requests: it keeps serving while the Service
    /// stops sending it new ones (preStopSeconds), then vLLM lets in-flight requests
    /// finish (drainSeconds).
    #[serde(default)]
    pub shutdown: Shutdown,

    /// Seconds Kubernetes waits for a stopping pod before it kills it. Unset:
    /// shutdown.preStopSeconds + shutdown.drainSeconds + 10. A value below that sum is
    /// refused: vLLM would be killed while it drains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub termination_grace_period_seconds: Option<i64>,

    /// How pods are replaced when the spec changes.
    #[serde(default)]
    pub rollout: Rollout,

    /// A PodDisruptionBudget that lets voluntary disruptions (node drains, evictions) stop
    /// at most one pod at a time, made when replicas > 1.
    #[serde(default)]
    pub disruption_budget: DisruptionBudget,

    /// Scale the service between minReplicas and maxReplicas on vLLM's own load, read from
    /// Prometheus by a KEDA ScaledObject the operator makes (KEDA must be installed). KEDA's
    /// HorizontalPodAutoscaler then sets spec.replicas. Unset: spec.replicas is the number of
    /// pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<Autoscaling>,
}

fn default_min_replicas() -> i32 {
    1
}

fn default_scale_down_stabilization_seconds() -> i32 {
    300
}

fn default_initial_cooldown_seconds() -> i32 {
    600
}

/// Autoscaling through KEDA on vLLM's metrics, as Prometheus scrapes them from this
/// service's pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
#[schemars(transform = schema::autoscaling_rules)]
pub struct Autoscaling {
    /// The fewest pods. Defaults to 1. 0 scales an idle service to zero, which needs
    /// activationQuery: vLLM exports no metrics without pods, so nothing else could bring it
    /// back (until it is set, the service scales down to 1).
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,

    /// The most pods; at least minReplicas.
    #[schemars(range(min = 1))]
    pub max_replicas: i32,

    /// The load signal, per pod: requestsWaiting (vllm:num_requests_waiting, the default),
    /// requestsRunning (vllm:num_requests_running) or kvCacheUsage (vllm:kv_cache_usage_perc,
    /// 0 to 1).
    #[serde(default)]
    pub metric: AutoscalingMetric,

    /// The metric's target value per pod, as a decimal string greater than 0: e.g. "5"
    /// requests waiting or running, or "0.8" (80%) KV-cache usage (at most 1). KEDA adds pods
    /// while the mean per pod is above it and removes them while it is below.
    #[schemars(length(min = 1, max = limits::DECIMAL), regex(pattern = rules::DECIMAL_RE))]
    #[schemars(transform = schema::cel(
        rules::positive_decimal_cel(),
        messages::AUTOSCALING_TARGET.into(),
    ))]
    pub target: String,

    /// Where KEDA reads the metric, and how.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<AutoscalingPrometheus>,

    /// PromQL for a signal that exists while the service has no pods (e.g. requests waiting
    /// in a gateway or a queue in front of it): above 0, it scales the service from 0 to 1.
    /// Needed for minReplicas 0. Unset or empty: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::QUERY))]
    pub activation_query: Option<String>,

    /// How long the load must stay low before pods are removed (the HPA's scale-down
    /// stabilization window, and KEDA's cooldown before scaling to zero), in seconds. 0 to
    /// 3600; defaults to 300.
    #[serde(default = "default_scale_down_stabilization_seconds")]
    #[schemars(range(min = 0, max = limits::STABILIZATION_SECONDS))]
    pub scale_down_stabilization_seconds: i32,

    /// Seconds after the ScaledObject is made before KEDA may scale the service to zero
    /// while no trigger has been active yet (time for the model to load and its metrics to
    /// appear). Defaults to 600.
    #[serde(default = "default_initial_cooldown_seconds")]
    #[schemars(range(min = 0))]
    pub initial_cooldown_seconds: i32,
}

impl Autoscaling {
    /// `activationQuery`, unless unset or empty.
    pub fn activation_query(&self) -> Option<&str> {
        self.activation_query.as_deref().filter(|q| !q.is_empty())
    }

    /// `prometheus.serverAddress`, unless unset or empty.
    pub fn server_address(&self) -> Option<&str> {
        self.prometheus
            .as_ref()
            .and_then(|p| p.server_address.as_deref())
            .filter(|a| !a.is_empty())
    }

    /// `prometheus.query`, unless unset or empty.
    pub fn query(&self) -> Option<&str> {
        self.prometheus
            .as_ref()
            .and_then(|p| p.query.as_deref())
            .filter(|q| !q.is_empty())
    }
}

/// The load signal autoscaling follows.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum AutoscalingMetric {
    /// Requests waiting in vLLM's queue (vllm:num_requests_waiting).
    #[default]
    RequestsWaiting,
    /// Requests vLLM is running (vllm:num_requests_running).
    RequestsRunning,
    /// The fraction of the KV cache in use (vllm:kv_cache_usage_perc).
    KvCacheUsage,
}

impl AutoscalingMetric {
    /// The value as it is serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoscalingMetric::RequestsWaiting => "requestsWaiting",
            AutoscalingMetric::RequestsRunning => "requestsRunning",
            AutoscalingMetric::KvCacheUsage => "kvCacheUsage",
        }
    }
}

impl fmt::Display for AutoscalingMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The Prometheus server KEDA queries, and the query.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct AutoscalingPrometheus {
    /// URL of the Prometheus HTTP API, e.g. http://prometheus.monitoring.svc:9090. Unset or
    /// empty: the operator's default (its --prometheus-address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::URL), regex(pattern = rules::HTTP_URL_RE))]
    pub server_address: Option<String>,

    /// PromQL that replaces the built-in query of metric. KEDA divides its value by the
    /// number of pods and compares that with target, so it should sum over the service's
    /// pods. Unset or empty: the built-in query, e.g.
    /// sum(vllm:num_requests_waiting{namespace="...",service="...",model_name="..."}).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::QUERY))]
    pub query: Option<String>,
}

/// How a pod stops (SIGTERM handling).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct Shutdown {
    /// Seconds vLLM lets in-flight requests finish after SIGTERM (--shutdown-timeout, vLLM
    /// 0.18 or later). 0 aborts them at once, vLLM's own default. Defaults to 30.
    #[schemars(range(min = 0, max = limits::DRAIN_SECONDS))]
    pub drain_seconds: i32,

    /// Seconds a stopping pod keeps serving before vLLM gets SIGTERM (a preStop sleep), so
    /// that Services and Gateways stop sending it requests first. 0: no preStop hook.
    /// Defaults to 10.
    #[schemars(range(min = 0, max = limits::PRE_STOP_SECONDS))]
    pub pre_stop_seconds: i32,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self {
            drain_seconds: 30,
            pre_stop_seconds: 10,
        }
    }
}

impl Shutdown {
    /// Seconds a stopping vLLM needs after its drain (to exit).
    pub const EXIT_SECONDS: i64 = 10;

    /// The smallest terminationGracePeriodSeconds that lets a pod drain:
    /// preStop + drain + [`Shutdown::EXIT_SECONDS`].
    pub fn grace_period_seconds(&self) -> i64 {
        i64::from(self.pre_stop_seconds) + i64::from(self.drain_seconds) + Self::EXIT_SECONDS
    }
}

/// How pods are replaced when the spec changes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum RolloutStrategy {
    /// Surge when a new pod fits beside the old ones (free GPUs on nodes the pods may run
    /// on), else replace one pod at a time.
    #[default]
    Auto,
    /// Start up to maxSurge new pods before stopping old ones (needs spare GPUs).
    Surge,
    /// Stop one old pod, then start its replacement: no spare GPU needed; with one replica
    /// the service is down until the new pod is ready.
    OneAtATime,
    /// Stop every old pod, then start the new ones.
    Recreate,
}

impl RolloutStrategy {
    /// The value as it is serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            RolloutStrategy::Auto => "Auto",
            RolloutStrategy::Surge => "Surge",
            RolloutStrategy::OneAtATime => "OneAtATime",
            RolloutStrategy::Recreate => "Recreate",
        }
    }
}

impl fmt::Display for RolloutStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How pods are replaced when the spec changes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
#[schemars(transform = schema::cel(rules::SURGE_PROGRESSES_CEL.into(), messages::SURGE_PROGRESSES.into()))]
pub struct Rollout {
    /// Auto, Surge, OneAtATime or Recreate. Defaults to Auto.
    pub strategy: RolloutStrategy,

    /// With Surge: how many new pods may start before old ones stop. Defaults to 1.
    #[schemars(range(min = 0))]
    pub max_surge: i32,

    /// With Surge: how many pods may be unavailable during the rollout. Defaults to 0.
    #[schemars(range(min = 0))]
    pub max_unavailable: i32,
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            strategy: RolloutStrategy::Auto,
            max_surge: 1,
            max_unavailable: 0,
        }
    }
}

/// The PodDisruptionBudget of the pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct DisruptionBudget {
    /// Make a PodDisruptionBudget (maxUnavailable 1) when replicas > 1. Defaults to true.
    pub enabled: bool,
}

impl Default for DisruptionBudget {
    fn default() -> Self {
        Self { enabled: true }
    }
}

fn default_replicas() -> i32 {
    1
}

fn default_port() -> i32 {
    8000
}

fn default_true() -> bool {
    true
}

/// Where the model files come from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct Storage {
    /// Name of a PersistentVolumeClaim in the VLLMService's namespace. Required unless
    /// modelSource.image provides the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    pub pvc_name: Option<String>,

    /// Absolute path where the claim is mounted in the container, e.g. /data/models.
    #[schemars(length(min = 1, max = limits::PATH))]
    #[schemars(transform = schema::cel(
        rules::ABSOLUTE_PATH_CEL.into(),
        messages::MOUNT_PATH.into(),
    ))]
    #[schemars(transform = schema::cel(
        rules::NOT_SHM_CEL.into(),
        messages::MOUNT_PATH_SHM.into(),
    ))]
    pub mount_path: String,

    /// Mount the claim read-only (volume and mount). Defaults to true.
    #[serde(default = "default_true")]
    pub read_only: bool,

    /// Sub-path of the claim to mount instead of its root. Relative, without '..'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::PATH))]
    #[schemars(transform = schema::cel(
        rules::RELATIVE_PATH_CEL.into(),
        messages::SUB_PATH.into(),
    ))]
    pub sub_path: Option<String>,
}

/// A Gateway API Gateway listener to attach the HTTPRoute to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct GatewayRef {
    /// Name of the Gateway.
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    pub name: String,

    /// Namespace of the Gateway. Unset means the VLLMService's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::LABEL_NAME))]
    #[schemars(transform = schema::cel(
        rules::dns_label_cel(),
        messages::GATEWAY_NAMESPACE.into(),
    ))]
    pub namespace: Option<String>,

    /// Name of the Gateway listener (its sectionName) to attach to, e.g. http.
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::dns_subdomain_cel(),
        messages::SECTION_NAME.into(),
    ))]
    pub section_name: String,

    /// Hostname the HTTPRoute matches, e.g. llm.example.com. A leading '*.' wildcard is
    /// allowed, as in Gateway API.
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::hostname_cel(),
        messages::HOST.into(),
    ))]
    pub host: String,
}

/// The numeric type vLLM loads the model weights in (--dtype).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Let vLLM pick from the model's config.
    #[default]
    Auto,
    /// FP16.
    Half,
    /// FP16.
    Float16,
    /// BF16.
    Bfloat16,
    /// FP32.
    Float,
    /// FP32.
    Float32,
}

impl Dtype {
    /// The value as vLLM's --dtype flag spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Auto => "auto",
            Dtype::Half => "half",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float => "float",
            Dtype::Float32 => "float32",
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// vLLM engine settings.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct EngineArgs {
    /// Weight dtype (--dtype): auto, half, float16, bfloat16, float or float32.
    pub dtype: Dtype,

    /// Maximum context length in tokens (--max-model-len).
    #[schemars(range(min = 1))]
    pub max_model_len: i32,

    /// Fraction of GPU memory vLLM may use (--gpu-memory-utilization), a decimal string
    /// greater than 0 and at most 1, e.g. "0.9".
    #[schemars(length(min = 1, max = limits::DECIMAL))]
    #[schemars(transform = schema::cel(
        rules::fraction_cel(),
        messages::GPU_MEMORY_UTILIZATION.into(),
    ))]
    pub gpu_memory_utilization: String,

    /// Maximum number of sequences processed concurrently (--max-num-seqs).
    #[schemars(range(min = 1))]
    pub max_num_seqs: i32,

    /// Number of GPUs to shard the model across (--tensor-parallel-size). Unset leaves it to
    /// vLLM (1). Request as many GPUs in resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub tensor_parallel_size: Option<i32>,

    /// How many LoRA adapters one batch may use at once (--max-loras; vLLM's default is 1).
    /// Used with loraAdapters.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_loras: Option<i32>,

    /// The highest LoRA rank served (--max-lora-rank; vLLM's default is 16): one of 1, 8,
    /// 16, 32, 64, 128, 256, 320 or 512. Used with loraAdapters.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(transform = schema::cel(rules::lora_rank_cel(), messages::LORA_RANK.into()))]
    pub max_lora_rank: Option<i32>,

    /// Further vLLM command-line arguments, appended after the ones the operator sets, e.g.
    /// ["--enable-prefix-caching", "--max-lora-rank=64"]. Must not repeat a flag the operator
    /// sets from a typed field (--model, --served-model-name, --host, --port, --dtype,
    /// --max-model-len, --gpu-memory-utilization, --max-num-seqs, --tensor-parallel-size).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = limits::EXTRA_ARGS), inner(length(max = limits::EXTRA_ARG)))]
    #[schemars(transform = schema::extra_args)]
    pub extra_args: Vec<String>,
}

impl Default for EngineArgs {
    fn default() -> Self {
        Self {
            dtype: Dtype::Auto,
            max_model_len: 4096,
            gpu_memory_utilization: "0.75".into(),
            max_num_seqs: 8,
            tensor_parallel_size: None,
            max_loras: None,
            max_lora_rank: None,
            extra_args: Vec::new(),
        }
    }
}

/// The defaults of one probe (the reference operator's: startup probes wait longer than
/// liveness and readiness probes); each probe field of the spec has its own kind.
pub trait ProbeKind {
    /// The spec field that holds this probe, for messages.
    const FIELD: &'static str;
    /// Whether the probe is injected when `enabled` is unset.
    const ENABLED_BY_DEFAULT: bool;
    /// Default HTTP path.
    const PATH: &'static str = "/health";
    /// Default initialDelaySeconds.
    const INITIAL_DELAY_SECONDS: i32 = 30;
    /// Default periodSeconds.
    const PERIOD_SECONDS: i32;
    /// Default timeoutSeconds.
    const TIMEOUT_SECONDS: i32 = 5;
    /// Default failureThreshold.
    const FAILURE_THRESHOLD: i32;
}

/// Marks [`Probe`] as the startup probe: on by default, 60 failures × 10 s to load the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Startup;

/// Marks [`Probe`] as the liveness probe: off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Liveness;

/// Marks [`Probe`] as the readiness probe: on by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Readiness;

impl ProbeKind for Startup {
    const FIELD: &'static str = "startupProbe";
    const ENABLED_BY_DEFAULT: bool = true;
    const PERIOD_SECONDS: i32 = 10;
    const FAILURE_THRESHOLD: i32 = 60;
}

impl ProbeKind for Liveness {
    const FIELD: &'static str = "livenessProbe";
    const ENABLED_BY_DEFAULT: bool = false;
    const PERIOD_SECONDS: i32 = 30;
    const FAILURE_THRESHOLD: i32 = 3;
}

impl ProbeKind for Readiness {
    const FIELD: &'static str = "readinessProbe";
    const ENABLED_BY_DEFAULT: bool = true;
    const PERIOD_SECONDS: i32 = 30;
    const FAILURE_THRESHOLD: i32 = 3;
}

/// The spec's startup probe.
pub type StartupProbe = Probe<Startup>;
/// The spec's liveness probe.
pub type LivenessProbe = Probe<Liveness>;
/// The spec's readiness probe.
pub type ReadinessProbe = Probe<Readiness>;

/// An HTTP GET probe on the container port named http.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct Probe<K: ProbeKind> {
    /// Inject this probe. Unset means the probe's default: startup and readiness on,
    /// liveness off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,

    /// HTTP path to GET; must start with '/'. Defaults to /health, which vLLM answers with
    /// 200 once the model is loaded.
    #[schemars(length(min = 1, max = limits::PATH))]
    #[schemars(transform = schema::cel(
        rules::ABSOLUTE_PATH_CEL.into(),
        messages::probe_path(K::FIELD),
    ))]
    pub path: String,

    /// Seconds after container start before the first probe. Defaults to 30.
    #[schemars(range(min = 0))]
    pub initial_delay_seconds: i32,

    /// Seconds between probes. Defaults to 10 for startupProbe, 30 otherwise.
    #[schemars(range(min = 1))]
    pub period_seconds: i32,

    /// Seconds before a probe times out. Defaults to 5.
    #[schemars(range(min = 1))]
    pub timeout_seconds: i32,

    /// Consecutive failures before the probe fails. Defaults to 60 for startupProbe (10
    /// minutes to load the model), 3 otherwise.
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,

    /// Which probe this is; holds no data. Public so that struct update syntax
    /// (`Probe { enabled: Some(true), ..Default::default() }`) works.
    #[serde(skip)]
    pub kind: PhantomData<K>,
}

impl<K: ProbeKind> Default for Probe<K> {
    fn default() -> Self {
        Self {
            enabled: None,
            path: K::PATH.into(),
            initial_delay_seconds: K::INITIAL_DELAY_SECONDS,
            period_seconds: K::PERIOD_SECONDS,
            timeout_seconds: K::TIMEOUT_SECONDS,
            failure_threshold: K::FAILURE_THRESHOLD,
            kind: PhantomData,
        }
    }
}

impl<K: ProbeKind> Probe<K> {
    /// Whether the probe is injected: `enabled` if set, else the probe's default.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(K::ENABLED_BY_DEFAULT)
    }
}

/// Prometheus Operator scraping of vLLM's /metrics.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct Monitoring {
    /// Create a ServiceMonitor. Defaults to false.
    pub enabled: bool,

    /// HTTP path of the metrics endpoint; must start with '/'. Defaults to /metrics.
    #[schemars(length(min = 1, max = limits::PATH))]
    #[schemars(transform = schema::cel(
        rules::ABSOLUTE_PATH_CEL.into(),
        messages::MONITORING_PATH.into(),
    ))]
    pub path: String,

    /// Scrape interval as a Prometheus duration, e.g. 30s or 1m. Defaults to 30s.
    #[schemars(length(min = 1, max = limits::DURATION))]
    #[schemars(transform = schema::cel(
        rules::duration_cel(),
        messages::INTERVAL.into(),
    ))]
    pub interval: String,

    /// Labels for the ServiceMonitor and PrometheusRule, e.g. the release label a Prometheus
    /// selects on.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = schema::label_map("monitoring.labels"))]
    pub labels: BTreeMap<String, String>,

    /// Alerting rules on vLLM's own metrics (a PrometheusRule), made when monitoring is
    /// enabled.
    pub alerts: Alerts,
}

impl Default for Monitoring {
    fn default() -> Self {
        Self {
            enabled: false,
            path: "/metrics".into(),
            interval: "30s".into(),
            labels: BTreeMap::new(),
            alerts: Alerts::default(),
        }
    }
}

/// Thresholds and severities of the per-service alerts. Every alert is scoped to this
/// service's pods.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct Alerts {
    /// Create the PrometheusRule when monitoring is enabled. Defaults to true.
    pub enabled: bool,

    /// Alert when more requests than this wait in vLLM's queue (vllm:num_requests_waiting)
    /// for 5 minutes. Defaults to 10.
    #[schemars(range(min = 1))]
    pub requests_waiting: i32,

    /// Alert when the KV cache is fuller than this percentage (vllm:kv_cache_usage_perc)
    /// for 10 minutes. 1 to 100; defaults to 90.
    #[schemars(range(min = 1, max = 100))]
    pub kv_cache_usage_percent: i32,

    /// Alert when the 95th percentile time to first token
    /// (vllm:time_to_first_token_seconds) exceeds this many milliseconds for 10 minutes.
    /// Defaults to 2000.
    #[schemars(range(min = 1))]
    pub time_to_first_token_p95_ms: i32,

    /// Alert when the 95th percentile end-to-end request latency
    /// (vllm:e2e_request_latency_seconds) exceeds this many milliseconds for 10 minutes.
    /// Defaults to 30000.
    #[schemars(range(min = 1))]
    pub e2e_latency_p95_ms: i32,

    /// Severity label of the service-down and missing-replicas alerts. Defaults to critical.
    #[schemars(length(min = 1, max = limits::LABEL_NAME), regex(pattern = rules::LABEL_VALUE_RE))]
    pub critical_severity: String,

    /// Severity label of the queue, cache and latency alerts. Defaults to warning.
    #[schemars(length(min = 1, max = limits::LABEL_NAME), regex(pattern = rules::LABEL_VALUE_RE))]
    pub warning_severity: String,
}

impl Default for Alerts {
    fn default() -> Self {
        Self {
            enabled: true,
            requests_waiting: 10,
            kv_cache_usage_percent: 90,
            time_to_first_token_p95_ms: 2000,
            e2e_latency_p95_ms: 30000,
            critical_severity: "critical".into(),
            warning_severity: "warning".into(),
        }
    }
}

/// Summary state: Pending, Running or Failed; agrees with the Available condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Not serving yet: rolling out, loading the model, or waiting for storage.
    Pending,
    /// Serving: the Available condition is True.
    Running,
    /// Not serving and not going to without a change: see the conditions and message.
    Failed,
}

impl Phase {
    /// The phase as it is serialized.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Failed => "Failed",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of a VLLMService, written by the operator.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct VLLMServiceStatus {
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions: DeploymentReady, StorageReady, RouteReady, MonitoringReady,
    /// AutoscalingReady, Progressing, Degraded and the summary Available (ModelReady when the
    /// operator downloads the model).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = schema::conditions)]
    pub conditions: Vec<Condition>,

    /// Summary state: Pending, Running or Failed; agrees with the Available condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Pods of the Deployment (the scale subresource's status replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,

    /// Pods of the Deployment that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Ready pods over desired pods, e.g. "1/1", for the Ready column of kubectl get.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,

    /// Label selector of the pods in string form, for the scale subresource (and so for
    /// HorizontalPodAutoscalers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,

    /// Name of the Deployment that runs vLLM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,

    /// Name of the Service in front of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,

    /// Name of the HTTPRoute, when spec.gatewayRef is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_route_name: Option<String>,

    /// Name of the ServiceMonitor, when monitoring is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor_name: Option<String>,

    /// Name of the Gateway the HTTPRoute attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_ref_name: Option<String>,

    /// Namespace of the Gateway the HTTPRoute attaches to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_ref_namespace: Option<String>,

    /// Name of the PodDisruptionBudget, when there is one (disruptionBudget.enabled and
    /// replicas > 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_budget_name: Option<String>,

    /// How many pods the PodDisruptionBudget lets voluntary disruptions stop now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruptions_allowed: Option<i32>,

    /// How the last rollout replaces pods: Surge, OneAtATime or Recreate (what Auto chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_strategy: Option<String>,

    /// A human-readable summary of what is wrong or what is being waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The LoRA adapters the pods serve: those of spec.loraAdapters once every pod runs
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora_adapters: Vec<String>,

    /// What vLLM reports about itself, read from the start-up log of a Ready pod of the
    /// current revision (once per revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineStatus>,
}

/// The configuration vLLM settled on, from its start-up log lines. A field vLLM did not
/// log is absent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct EngineStatus {
    /// The vLLM version its start-up log names (the banner's "version", or "LLM engine (v...)").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// The max model length in tokens vLLM runs with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<i64>,

    /// Tokens the KV cache holds ("GPU KV cache size: N tokens").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_tokens: Option<i64>,

    /// How many requests of the max model length fit in the KV cache at once ("Maximum
    /// concurrency for T tokens per request: Cx").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<f64>,

    /// KV-cache blocks on the GPU ("# GPU blocks: N"; vLLM's V1 engine does not log it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_blocks: Option<i64>,

    /// GPUs the model is sharded across.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<i64>,

    /// The pod-template-hash of the pods this was read from: read again when it changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// Where the operator fetches the model from: exactly one of huggingFace and image.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
#[schemars(transform = schema::cel(
    rules::ONE_MODEL_SOURCE_CEL.into(),
    messages::ONE_MODEL_SOURCE.into(),
))]
pub struct ModelSource {
    /// Download a Hugging Face repository to modelPath on the PersistentVolumeClaim, once
    /// per claim, path, repository and revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugging_face: Option<HuggingFace>,

    /// Mount an OCI image that holds the model files at storage.mountPath, read-only (the
    /// Kubernetes image volume; the node's container runtime must support it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<ModelImage>,
}

fn default_revision() -> String {
    "main".into()
}

/// A Hugging Face repository at a revision.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct HuggingFace {
    /// The repository id, e.g. Qwen/Qwen2.5-1.5B-Instruct.
    #[schemars(length(min = 1, max = limits::HF_REPO), regex(pattern = rules::HF_REPO_RE))]
    pub repo: String,

    /// A branch, tag or commit id. Defaults to main. Changing it downloads again.
    #[serde(default = "default_revision")]
    #[schemars(length(min = 1, max = limits::HF_REVISION), regex(pattern = rules::HF_REVISION_RE))]
    pub revision: String,

    /// The Secret key that holds a Hugging Face access token, for gated and private
    /// repositories. The download gets it as the environment variable HF_TOKEN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<SecretKeyRef>,

    /// The base URL of the Hub to download from, for a mirror or an air-gapped Hub, e.g.
    /// https://hf-mirror.example.com. The download gets it as the environment variable
    /// HF_ENDPOINT. Unset: huggingface_hub's default, https://huggingface.co. http:// or
    /// https://, no credentials (use tokenSecretRef), no query. Changing it downloads again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::URL), regex(pattern = rules::HF_ENDPOINT_RE))]
    pub endpoint: Option<String>,

    /// The image that runs the download (`hf download`). Unset: spec.image, since vLLM's
    /// images ship the hf command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::IMAGE))]
    #[schemars(transform = schema::cel(rules::IMAGE_CEL.into(), messages::IMAGE.into()))]
    pub downloader_image: Option<String>,
}

/// A key of a Secret in the VLLMService's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::dns_subdomain_cel(),
        messages::TOKEN_SECRET_NAME.into(),
    ))]
    pub name: String,

    /// The key in the Secret.
    #[schemars(length(min = 1, max = limits::DNS_SUBDOMAIN))]
    #[schemars(transform = schema::cel(
        rules::config_key_cel(),
        messages::TOKEN_SECRET_KEY.into(),
    ))]
    pub key: String,
}

/// When the kubelet pulls an image.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    /// The value as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// An OCI image (artifact) that holds the model files.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
pub struct ModelImage {
    /// The image reference, e.g. registry.example.com/models/qwen2.5-1.5b:1.
    #[schemars(length(min = 1, max = limits::IMAGE))]
    #[schemars(transform = schema::cel(rules::IMAGE_CEL.into(), messages::IMAGE.into()))]
    pub reference: String,

    /// Always, IfNotPresent or Never. Unset: Kubernetes' default (Always for :latest,
    /// IfNotPresent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
}

/// A LoRA adapter: exactly one of path and huggingFace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = schema::unwrap_doc_lines)]
#[schemars(transform = schema::cel(
    rules::ONE_LORA_SOURCE_CEL.into(),
    messages::ONE_LORA_SOURCE.into(),
))]
pub struct LoraAdapter {
    /// The name clients request as the "model", e.g. sql-lora.
    #[schemars(length(min = 1, max = limits::LABEL_NAME), regex(pattern = rules::LORA_NAME_RE))]
    pub name: String,

    /// The adapter's directory in the container (with adapter_config.json), e.g.
    /// /data/models/loras/sql.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::PATH))]
    #[schemars(transform = schema::cel(
        rules::ABSOLUTE_PATH_CEL.into(),
        messages::LORA_PATH.into(),
    ))]
    pub path: Option<String>,

    /// Download the adapter from Hugging Face to <storage.mountPath>/loras/<name>.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugging_face: Option<HuggingFace>,
}

impl LoraAdapter {
    /// Where vLLM finds the adapter: its path, or where the operator downloads it.
    pub fn served_path(&self, mount_path: &str) -> String {
        match &self.path {
            Some(p) => p.clone(),
            None => format!("{}/loras/{}", mount_path.trim_end_matches('/'), self.name),
        }
    }
}
