//! The checked-in Prometheus Operator and KEDA types (`src/prometheus/`,
//! `src/keda/`) are exactly what `hack/gen-types.sh` generates from the pinned
//! CRDs with the pinned kopium.

use std::{path::Path, process::Command};

#[test]
fn generated_types_match_the_pinned_crds() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("hack/gen-types.sh");
    let out = Command::new(&script)
        .arg("--check")
        .current_dir(&repo)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "hack/gen-types.sh --check failed (run hack/gen-types.sh to regenerate):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn generated_types_round_trip_a_service_monitor_and_a_prometheus_rule() {
    use kube::Resource;
    use vllmservice_controller::prometheus::{
        prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor,
    };

    assert_eq!(ServiceMonitor::api_version(&()), "monitoring.coreos.com/v1");
    assert_eq!(PrometheusRule::kind(&()), "PrometheusRule");
    let sm: ServiceMonitor = serde_json::from_value(serde_json::json!({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "x"}},
                 "endpoints": [{"port": "http", "path": "/metrics", "interval": "30s"}]}
    }))
    .expect("a ServiceMonitor parses");
    assert_eq!(sm.spec.endpoints[0].port.as_deref(), Some("http"));
    let back = serde_json::to_value(&sm).unwrap();
    assert_eq!(back["spec"]["endpoints"][0]["interval"], "30s");
}

#[test]
fn generated_types_round_trip_a_scaled_object_with_kedas_status() {
    use kube::Resource;
    use vllmservice_controller::keda::scaledobjects::ScaledObject;

    assert_eq!(ScaledObject::api_version(&()), "keda.sh/v1alpha1");
    assert_eq!(ScaledObject::plural(&()), "scaledobjects");
    let so: ScaledObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"scaleTargetRef": {"apiVersion": "aiinfra.example.com/v1alpha1",
                                    "kind": "VLLMService", "name": "s"},
                 "minReplicaCount": 0, "maxReplicaCount": 3,
                 "triggers": [{"type": "prometheus", "name": "load", "metricType": "AverageValue",
                               "metadata": {"query": "sum(x)", "threshold": "2"}}]},
        "status": {"hpaName": "keda-hpa-s", "conditions": [
            {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ok"}]}
    }))
    .expect("a ScaledObject parses");
    assert_eq!(so.spec.triggers[0].metadata["threshold"], "2");
    let status = so.status.as_ref().unwrap();
    assert_eq!(status.conditions.as_ref().unwrap()[0].r#type, "Ready");
    let back = serde_json::to_value(&so).unwrap();
    assert_eq!(back["spec"]["minReplicaCount"], 0);
    assert_eq!(back["spec"]["triggers"][0]["metricType"], "AverageValue");
}
