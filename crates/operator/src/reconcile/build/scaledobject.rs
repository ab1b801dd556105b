//! The KEDA ScaledObject that scales a VLLMService through its scale
//! subresource on vLLM's own metrics in Prometheus, built only when
//! `spec.autoscaling` is set. KEDA makes (and owns) the HorizontalPodAutoscaler;
//! the operator never writes `spec.replicas`.
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};
use kube::{Resource, ResourceExt};
use vllmservice_api::{Autoscaling, AutoscalingMetric, VLLMService, Valid};

use super::{prometheusrule::service_matchers, promql};
use crate::{
    kinds::keda::{
        Advanced, HorizontalPodAutoscalerConfig, ScaleTargetRef, ScaledObject, ScaledObjectSpec,
        Trigger,
    },
    names,
};

/// Where KEDA queries Prometheus unless `spec.autoscaling.prometheus.serverAddress`
/// says otherwise (the default of the operator's `--prometheus-address`).
pub const DEFAULT_PROMETHEUS_ADDRESS: &str = "http://prometheus.monitoring.svc:9090";

/// How often KEDA queries the triggers, in seconds.
pub const POLLING_INTERVAL_SECONDS: i32 = 15;

/// The trigger on the load metric.
pub const LOAD_TRIGGER: &str = "load";
/// The trigger on `activationQuery` (scale to zero only).
pub const ACTIVATION_TRIGGER: &str = "activation";
/// The trigger on running and waiting requests (scale to zero only).
pub const IN_FLIGHT_TRIGGER: &str = "in-flight";

/// KEDA copies the ScaledObject's labels to its HPA except those named here:
/// the HPA is KEDA's, not this operator's.
const HPA_EXCLUDED_LABELS_ANNOTATION: &str = "scaledobject.keda.sh/hpa-excluded-labels";

/// Whether the ScaledObject of `vs` scales it to zero: minReplicas 0 with an
/// activation signal (without one, nothing could bring it back, so it keeps 1).
pub fn scales_to_zero(a: &Autoscaling) -> bool {
    a.min_replicas == 0 && a.activation_query().is_some()
}

/// The series of `metric` for this service's pods, as the built-in query sums it.
pub fn metric_series(metric: AutoscalingMetric) -> &'static str {
    match metric {
        AutoscalingMetric::RequestsWaiting => "vllm:num_requests_waiting",
        AutoscalingMetric::RequestsRunning => "vllm:num_requests_running",
        AutoscalingMetric::KvCacheUsage => "vllm:kv_cache_usage_perc",
    }
}

/// The selector of this service's series of its base model: namespace,
/// Service and vLLM's `model_name` label (`spec.modelName`).
fn selector(vs: &Valid<'_>) -> String {
    format!(
        "{},{}",
        service_matchers(vs),
        promql::matchers(&[("model_name", &vs.spec.model_name)])
    )
}

/// The query of the load trigger: `prometheus.query`, or the sum of `metric`
/// over the service's pods (KEDA's HPA divides it by the pods: AverageValue).
pub fn load_query(vs: &Valid<'_>, a: &Autoscaling) -> String {
    match a.query() {
        Some(q) => q.to_string(),
        None => format!("sum({}{{{}}})", metric_series(a.metric), selector(vs)),
    }
}

/// The ScaledObject for `vs`, or None without `spec.autoscaling`;
/// `default_address` is the operator's Prometheus address.
pub fn scaledobject(vs: &Valid<'_>, default_address: &str) -> Option<ScaledObject> {
    let a = vs.spec.autoscaling.as_ref()?;
    let address = a.server_address().unwrap_or(default_address);
    let trigger = |name: &str, query: String, threshold: String| Trigger {
        name: Some(name.into()),
        r#type: "prometheus".into(),
        metric_type: Some("AverageValue".into()),
        metadata: BTreeMap::from([
            ("serverAddress".to_string(), address.to_string()),
            ("query".to_string(), query),
            ("threshold".to_string(), threshold),
            ("activationThreshold".to_string(), "0".to_string()),
        ]),
    };
    let mut triggers = vec![trigger(LOAD_TRIGGER, load_query(vs, a), a.target.clone())];
    let to_zero = scales_to_zero(a);
    if let Some(activation) = a.activation_query().filter(|_| to_zero) {
        triggers.push(trigger(
            ACTIVATION_TRIGGER,
            activation.to_string(),
            a.target.clone(),
        ));
    }
    if to_zero {
        // The load metric alone may be 0 while requests run (nothing waits):
        // the service must not go to zero under them.
        let sel = selector(vs);
        triggers.push(trigger(
            IN_FLIGHT_TRIGGER,
            format!(
                "sum(vllm:num_requests_running{{{sel}}}) + sum(vllm:num_requests_waiting{{{sel}}})"
            ),
            vs.spec.engine_args.max_num_seqs.to_string(),
        ));
    }
    let mut metadata = names::child_meta(vs);
    metadata.annotations = Some(BTreeMap::from([(
        HPA_EXCLUDED_LABELS_ANNOTATION.to_string(),
        names::MANAGED_BY_LABEL.to_string(),
    )]));
    let hpa = names::hpa_name(vs);
    Some(ScaledObject {
        metadata,
        spec: ScaledObjectSpec {
            scale_target_ref: ScaleTargetRef {
                api_version: Some(VLLMService::api_version(&()).into()),
                kind: Some(VLLMService::kind(&()).into()),
                name: vs.name_any(),
            },
            min_replica_count: Some(if a.min_replicas == 0 && !to_zero {
                1
            } else {
                a.min_replicas
            }),
            max_replica_count: Some(a.max_replicas),
            polling_interval: Some(POLLING_INTERVAL_SECONDS),
            cooldown_period: Some(a.scale_down_stabilization_seconds),
            initial_cooldown_period: Some(a.initial_cooldown_seconds),
            advanced: Some(Advanced {
                horizontal_pod_autoscaler_config: Some(HorizontalPodAutoscalerConfig {
                    name: (hpa != names::default_hpa_name(vs)).then_some(hpa),
                    behavior: Some(HorizontalPodAutoscalerBehavior {
                        scale_down: Some(HPAScalingRules {
                            stabilization_window_seconds: Some(a.scale_down_stabilization_seconds),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                }),
            }),
            triggers,
        },
        status: None,
    })
}
