//! The ServiceMonitor that has the Prometheus Operator scrape vLLM's metrics
//! (the Service's `http` port, path `/metrics`), built only when `spec.monitoring.enabled`.
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use vllmservice_api::{VLLMService, Valid};

use super::deployment::PORT_NAME;
use crate::{
    kinds::prometheus::{Endpoint, NamespaceSelector, ServiceMonitor, ServiceMonitorSpec},
    names,
};

/// Labels of the monitoring objects: `spec.labels`, then `monitoring.labels`
/// (which select the Prometheus that picks them up, so they win over the
/// general labels), then the operator's own keys, which win over both.
pub fn monitoring_labels(vs: &VLLMService) -> BTreeMap<String, String> {
    let mut labels = vs.spec.labels.clone();
    labels.extend(vs.spec.monitoring.labels.clone());
    labels.extend(names::operator_labels(vs));
    labels
}

/// The ServiceMonitor for `vs`, or None when monitoring is off.
pub fn servicemonitor(vs: &Valid<'_>) -> Option<ServiceMonitor> {
    let m = &vs.spec.monitoring;
    if !m.enabled {
        return None;
    }
    let mut metadata = names::child_meta(vs);
    metadata.labels = Some(monitoring_labels(vs));
    Some(ServiceMonitor {
        metadata,
        spec: ServiceMonitorSpec {
            endpoints: vec![Endpoint {
                port: Some(PORT_NAME.into()),
                path: Some(m.path.clone()),
                interval: Some(m.interval.clone()),
            }],
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(vs)),
                ..LabelSelector::default()
            },
            namespace_selector: Some(NamespaceSelector {
                match_names: Some(vec![vs.metadata.namespace.clone().unwrap_or_default()]),
            }),
        },
    })
}
