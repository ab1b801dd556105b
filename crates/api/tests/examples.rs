//! The examples under examples/: they parse, validate, keep every field through a round trip,
//! serialize no nulls, and get the same defaults from serde as from the API server.

mod common;

use serde_json::Value;
use vllmservice_api::{
    Dtype, VLLMService, VLLMServiceSpec, VLLMServiceStatus, validate, validate_spec,
};

fn parse(relative: &str) -> VLLMService {
    serde_json::from_value(common::read_yaml(relative))
        .unwrap_or_else(|e| panic!("{relative} does not parse: {e}"))
}

fn nulls(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Null => out.push(path.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                nulls(item, &format!("{path}[{i}]"), out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                nulls(item, &format!("{path}.{key}"), out);
            }
        }
        _ => {}
    }
}

fn assert_no_nulls(value: &Value) {
    let mut found = Vec::new();
    nulls(value, "", &mut found);
    assert!(found.is_empty(), "null serialized at {found:?}");
}

#[test]
fn examples_parse_and_validate() {
    for example in common::EXAMPLES {
        let vllm = parse(example);
        if let Err(e) = validate(&vllm) {
            panic!("{example}: {e}");
        }
    }
}

/// The API server fills in the schema's defaults; the controller reading the same YAML without
/// the API server (render, tests) gets serde's. Both must give the same object.
#[test]
fn serde_defaults_equal_schema_defaults() {
    let schema = common::crd_schema();
    for example in common::EXAMPLES {
        let raw = common::read_yaml(example);
        let as_stored = kube_cel::apply_defaults(&schema, &raw);
        let round_tripped = serde_json::to_value(parse(example)).unwrap();
        assert_eq!(round_tripped, as_stored, "{example}");
        // What the API server stores parses to the same value again.
        let reparsed: VLLMService = serde_json::from_value(as_stored).unwrap();
        assert_eq!(reparsed, parse(example), "{example}");
    }
}

#[test]
fn nothing_serializes_as_null() {
    for example in common::EXAMPLES {
        assert_no_nulls(&serde_json::to_value(parse(example)).unwrap());
    }
    let minimal: VLLMServiceSpec = serde_json::from_value(serde_json::json!({
        "image": "i", "modelPath": "/m", "modelName": "m",
        "storage": {"pvcName": "p", "mountPath": "/data"},
    }))
    .unwrap();
    let json = serde_json::to_value(&minimal).unwrap();
    assert_no_nulls(&json);
    for unset in [
        "runtimeClassName",
        "schedulerName",
        "nodeSelector",
        "labels",
        "resources",
        "gatewayRef",
        "env",
        "imagePullSecrets",
        "tolerations",
        "affinity",
        "serviceAccountName",
        "podAnnotations",
        "shmSize",
    ] {
        assert!(json.get(unset).is_none(), "{unset} serialized while unset");
    }
    assert!(json["storage"].get("subPath").is_none());
    assert!(json["engineArgs"].get("tensorParallelSize").is_none());
    assert!(json["engineArgs"].get("extraArgs").is_none());
    assert!(json["startupProbe"].get("enabled").is_none());
    assert_eq!(
        serde_json::to_value(VLLMServiceStatus::default()).unwrap(),
        serde_json::json!({})
    );
}

#[test]
fn qwen_demo_gets_the_spec_defaults() {
    let spec = parse("examples/qwen-demo.yaml").spec;
    let minimal = serde_json::json!({
        "image": "i", "modelPath": "/m", "modelName": "m",
        "storage": {"pvcName": "p", "mountPath": "/data"},
    });
    let minimal: VLLMServiceSpec = serde_json::from_value(minimal).unwrap();
    assert_eq!(minimal.replicas, 1);
    assert_eq!(minimal.port, 8000);
    assert!(!minimal.host_ipc);
    assert!(minimal.storage.read_only);
    assert_eq!(spec.engine_args, minimal.engine_args);
    assert_eq!(minimal.engine_args.dtype, Dtype::Auto);
    assert_eq!(minimal.engine_args.max_model_len, 4096);
    assert_eq!(minimal.engine_args.gpu_memory_utilization, "0.75");
    assert_eq!(minimal.engine_args.max_num_seqs, 8);
    let probes = [
        (
            &minimal.startup_probe.path,
            minimal.startup_probe.initial_delay_seconds,
            minimal.startup_probe.period_seconds,
            minimal.startup_probe.timeout_seconds,
            minimal.startup_probe.failure_threshold,
        ),
        (
            &minimal.liveness_probe.path,
            minimal.liveness_probe.initial_delay_seconds,
            minimal.liveness_probe.period_seconds,
            minimal.liveness_probe.timeout_seconds,
            minimal.liveness_probe.failure_threshold,
        ),
        (
            &minimal.readiness_probe.path,
            minimal.readiness_probe.initial_delay_seconds,
            minimal.readiness_probe.period_seconds,
            minimal.readiness_probe.timeout_seconds,
            minimal.readiness_probe.failure_threshold,
        ),
    ];
    let health = "/health".to_owned();
    assert_eq!(
        probes,
        [
            (&health, 30, 10, 5, 60),
            (&health, 30, 30, 5, 3),
            (&health, 30, 30, 5, 3)
        ]
    );
    assert!(minimal.startup_probe.is_enabled());
    assert!(!minimal.liveness_probe.is_enabled());
    assert!(minimal.readiness_probe.is_enabled());
    assert!(!minimal.monitoring.enabled);
    assert_eq!(minimal.monitoring.path, "/metrics");
    assert_eq!(minimal.monitoring.interval, "30s");
    assert!(validate_spec(&minimal).is_ok());
}

/// examples/full.yaml is the documentation of every field: keep it complete.
#[test]
fn full_example_sets_every_field() {
    fn missing(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            let child = format!("{path}.{name}");
            match value.get(name) {
                None => out.push(child),
                // Descend into our own objects, not into the Kubernetes types.
                Some(inner)
                    if name != "resources"
                        && property.get("x-kubernetes-validations").is_some()
                        || ["storage", "gatewayRef", "engineArgs", "monitoring"]
                            .contains(&name.as_str())
                        || name.ends_with("Probe") =>
                {
                    missing(property, inner, &child, out)
                }
                Some(_) => {}
            }
        }
    }
    let schema = common::crd_schema();
    let full = common::read_yaml("examples/full.yaml");
    let mut out = Vec::new();
    missing(
        &schema["properties"]["spec"],
        &full["spec"],
        "spec",
        &mut out,
    );
    // The other of two exclusive choices, shown by its own example.
    let alternatives = [("spec.modelSource.image", "examples/model-image.yaml")];
    for (field, file) in alternatives {
        let example = common::read_yaml(file);
        let set = field
            .split('.')
            .try_fold(&example, |v, step| v.get(step))
            .is_some();
        assert!(set, "{file} does not set {field}");
        out.retain(|f| f != field);
    }
    assert!(out.is_empty(), "examples/full.yaml does not set {out:?}");
}

#[test]
fn status_round_trips() {
    let status = serde_json::json!({
        "observedGeneration": 3,
        "conditions": [{
            "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
            "message": "1/1 replicas ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 3,
        }],
        "phase": "Running",
        "replicas": 1,
        "readyReplicas": 1,
        "ready": "1/1",
        "selector": "app.kubernetes.io/instance=qwen-demo,app.kubernetes.io/name=vllmservice",
        "deploymentName": "qwen-demo",
        "serviceName": "qwen-demo",
        "httpRouteName": "qwen-demo",
        "serviceMonitorName": "qwen-demo",
        "gatewayRefName": "llm-gateway",
        "gatewayRefNamespace": "ai-demo",
        "message": "serving",
    });
    let parsed: VLLMServiceStatus = serde_json::from_value(status.clone()).unwrap();
    assert_eq!(parsed.phase, Some(vllmservice_api::Phase::Running));
    assert_eq!(serde_json::to_value(&parsed).unwrap(), status);
}
