//! The PodDisruptionBudget: voluntary disruptions (node drains, evictions)
//! stop at most one vLLM pod at a time. Made when replicas > 1; with one
//! replica a budget would only block node drains.
//! Pure.

use k8s_openapi::{
    api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec},
    apimachinery::pkg::{apis::meta::v1::LabelSelector, util::intstr::IntOrString},
};
use vllmservice_api::Valid;

use crate::names;

/// The budget for `vs`, or None when it should have none.
pub fn disruption_budget(vs: &Valid<'_>) -> Option<PodDisruptionBudget> {
    (vs.spec.disruption_budget.enabled && vs.spec.replicas > 1).then(|| PodDisruptionBudget {
        metadata: names::child_meta(vs),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(names::selector_labels(vs)),
                ..LabelSelector::default()
            }),
            // A crash-looping pod serves nothing: evicting it never costs availability,
            // and refusing would block node drains.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    })
}
