//! Alerts for one service on vLLM's own metrics: a PrometheusRule scoped to this
//! service's pods through the labels its ServiceMonitor gives them (namespace,
//! service). Metric names checked against vLLM's metrics documentation (v0.32.0):
//! `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` (gauges, the latter
//! a fraction 0–1), `vllm:time_to_first_token_seconds` and
//! `vllm:e2e_request_latency_seconds` (histograms).
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vllmservice_api::Valid;

use super::{promql, servicemonitor::monitoring_labels};
use crate::{
    kinds::prometheus::{PrometheusRule, PrometheusRuleSpec, Rule, RuleGroup},
    names,
};

struct Alert {
    name: &'static str,
    expr: String,
    for_: &'static str,
    severity: String,
    summary: String,
    description: String,
}

/// The matchers of this service's series, as its ServiceMonitor has the
/// Prometheus Operator label them: the namespace and the Service.
pub fn service_matchers(vs: &Valid<'_>) -> String {
    let (ns, name) = (vs.namespace().unwrap_or_default(), names::child_name(vs));
    promql::matchers(&[("namespace", &ns), ("service", &name)])
}

/// The PrometheusRule for `vs`, or None when monitoring or its alerts are off.
pub fn prometheusrule(vs: &Valid<'_>) -> Option<PrometheusRule> {
    let m = &vs.spec.monitoring;
    if !m.enabled || !m.alerts.enabled {
        return None;
    }
    let a = &m.alerts;
    let (ns, name) = (vs.namespace().unwrap_or_default(), vs.name_any());
    let sel = service_matchers(vs);
    let deployment = promql::matchers(&[("namespace", &ns), ("deployment", &name)]);
    let id = format!("VLLMService {ns}/{name}");
    let p95 = |metric: &str| {
        format!("histogram_quantile(0.95, sum by (le) (rate({metric}_bucket{{{sel}}}[5m])))")
    };
    let alerts = [
        Alert {
            name: "VLLMServiceDown",
            expr: format!("(sum(up{{{sel}}}) or vector(0)) == 0"),
            for_: "5m",
            severity: a.critical_severity.clone(),
            summary: format!("{id} has no scrapeable pod"),
            description: format!(
                "No pod of {id} has answered a metrics scrape for 5 minutes. Check \
                 `kubectl -n {ns} describe vllm {name}` (conditions Degraded and \
                 DeploymentReady), then the pods' events and logs."
            ),
        },
        Alert {
            name: "VLLMServiceReplicasMissing",
            expr: format!(
                "kube_deployment_status_replicas_ready{{{deployment}}} \
                 < kube_deployment_spec_replicas{{{deployment}}}"
            ),
            for_: "15m",
            severity: a.critical_severity.clone(),
            summary: format!("{id} has fewer ready replicas than desired"),
            description: format!(
                "For 15 minutes fewer pods of {id} have been ready than spec.replicas asks \
                 (needs kube-state-metrics). `kubectl -n {ns} describe vllm {name}` names the \
                 cause: Unschedulable (GPUs), ImagePullBackOff, CrashLoopBackOff (e.g. OOMKilled)."
            ),
        },
        Alert {
            name: "VLLMRequestsQueued",
            expr: format!(
                "sum(vllm:num_requests_waiting{{{sel}}}) > {}",
                a.requests_waiting
            ),
            for_: "5m",
            severity: a.warning_severity.clone(),
            summary: format!("{id} has more than {} requests waiting", a.requests_waiting),
            description: format!(
                "Requests have queued in vLLM for 5 minutes: the service is saturated. Scale \
                 it (`kubectl -n {ns} scale vllm {name} --replicas=N`), or raise \
                 engineArgs.maxNumSeqs if GPU memory allows."
            ),
        },
        Alert {
            name: "VLLMKVCacheNearlyFull",
            expr: format!(
                "max(vllm:kv_cache_usage_perc{{{sel}}}) > {}",
                f64::from(a.kv_cache_usage_percent) / 100.0
            ),
            for_: "10m",
            severity: a.warning_severity.clone(),
            summary: format!("{id} KV cache above {}%", a.kv_cache_usage_percent),
            description: format!(
                "The KV cache of a {id} pod has been above {}% for 10 minutes; vLLM will \
                 preempt requests. Add replicas, lower engineArgs.maxNumSeqs or \
                 maxModelLen, or raise gpuMemoryUtilization.",
                a.kv_cache_usage_percent
            ),
        },
        Alert {
            name: "VLLMTimeToFirstTokenHigh",
            expr: format!(
                "{} > {}",
                p95("vllm:time_to_first_token_seconds"),
                seconds(a.time_to_first_token_p95_ms)
            ),
            for_: "10m",
            severity: a.warning_severity.clone(),
            summary: format!(
                "{id} p95 time to first token above {} ms",
                a.time_to_first_token_p95_ms
            ),
            description: format!(
                "Prompts wait long before the first token: look at VLLMRequestsQueued and the \
                 KV-cache usage of {id}; long prompts need more replicas or prefix caching."
            ),
        },
        Alert {
            name: "VLLMEndToEndLatencyHigh",
            expr: format!(
                "{} > {}",
                p95("vllm:e2e_request_latency_seconds"),
                seconds(a.e2e_latency_p95_ms)
            ),
            for_: "10m",
            severity: a.warning_severity.clone(),
            summary: format!("{id} p95 request latency above {} ms", a.e2e_latency_p95_ms),
            description: format!(
                "Whole requests of {id} take long: check the queue (VLLMRequestsQueued), \
                 output lengths (max_tokens) and GPU saturation; scale out if the queue grows."
            ),
        },
    ];
    let rules = alerts
        .into_iter()
        .map(|alert| Rule {
            alert: Some(alert.name.into()),
            expr: IntOrString::String(alert.expr),
            r#for: Some(alert.for_.into()),
            labels: Some(BTreeMap::from([
                ("severity".to_string(), alert.severity),
                ("vllmservice".to_string(), name.clone()),
            ])),
            annotations: Some(BTreeMap::from([
                ("summary".to_string(), alert.summary),
                ("description".to_string(), alert.description),
            ])),
        })
        .collect();
    let mut metadata = names::child_meta(vs);
    metadata.labels = Some(monitoring_labels(vs));
    Some(PrometheusRule {
        metadata,
        spec: PrometheusRuleSpec {
            groups: Some(vec![RuleGroup {
                name: format!("vllmservice.{ns}.{name}"),
                rules: Some(rules),
            }]),
        },
    })
}

/// Milliseconds as a PromQL seconds literal.
fn seconds(ms: i32) -> String {
    format!("{}", f64::from(ms) / 1000.0)
}
