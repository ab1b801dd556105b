//! Properties of the generated CRD that the API server (or kubectl) relies on.

mod common;

use serde_json::Value;

/// Every schema node, with its path.
fn walk<'a>(path: String, node: &'a Value, out: &mut Vec<(String, &'a Value)>) {
    out.push((path.clone(), node));
    if let Some(properties) = node.get("properties").and_then(Value::as_object) {
        for (name, child) in properties {
            walk(format!("{path}.{name}"), child, out);
        }
    }
    if let Some(items) = node.get("items") {
        walk(format!("{path}[]"), items, out);
    }
    if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
        walk(format!("{path}.*"), values, out);
    }
}

fn nodes(schema: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    walk(String::new(), schema, &mut out);
    out
}

#[test]
fn schema_is_structural() {
    let schema = common::crd_schema();
    for (path, node) in nodes(&schema) {
        let object = node.as_object().unwrap();
        for keyword in [
            "$ref",
            "$schema",
            "$defs",
            "definitions",
            "oneOf",
            "anyOf",
            "allOf",
            "not",
        ] {
            assert!(!object.contains_key(keyword), "{path} has {keyword}");
        }
        let typed = object.contains_key("type")
            || object.contains_key("x-kubernetes-int-or-string")
            || object.contains_key("x-kubernetes-preserve-unknown-fields");
        assert!(typed, "{path} has no type");
        if object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
            assert!(
                object.contains_key("pattern"),
                "{path}: quantity without pattern"
            );
        }
    }
}

#[test]
fn every_field_is_described_for_kubectl_explain() {
    let schema = common::crd_schema();
    for (path, node) in nodes(&schema) {
        // List items and map values are described by their list or map.
        if path.is_empty() || path.ends_with("[]") || path.ends_with(".*") {
            continue;
        }
        let description = node.get("description").and_then(Value::as_str);
        assert!(
            description.is_some_and(|d| !d.trim().is_empty()),
            "{path} has no description"
        );
    }
}

#[test]
fn every_cel_rule_compiles_within_the_cost_budget() {
    let schema = common::crd_schema();
    let compiled = kube_cel::compile_schema(&schema);
    assert!(
        !compiled.has_errors(),
        "CEL compilation errors: {:?}",
        compiled.compilation_errors()
    );
    let mut rules = 0;
    for (path, node) in nodes(&schema) {
        let Some(list) = node
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let compiled = kube_cel::compile_schema(node);
        for rule in list {
            rules += 1;
            let message = rule["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "{path}: rule without message");
            let expression = rule["rule"].as_str().unwrap();
            let warnings = kube_cel::estimate_rule_cost(expression, &compiled);
            assert!(warnings.is_empty(), "{path}: {expression}: {warnings:?}");
        }
    }
    assert!(rules >= 20, "only {rules} CEL rules found");
}

#[test]
fn resource_features() {
    let crd = serde_json::to_value(vllmservice_api::crd()).unwrap();
    let spec = &crd["spec"];
    assert_eq!(spec["group"], "aiinfra.example.com");
    assert_eq!(spec["scope"], "Namespaced");
    assert_eq!(spec["names"]["kind"], "VLLMService");
    assert_eq!(spec["names"]["shortNames"], serde_json::json!(["vllm"]));
    assert!(spec["names"].get("categories").is_none());
    let version = &spec["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert_eq!(version["subresources"]["status"], serde_json::json!({}));
    assert_eq!(
        version["subresources"]["scale"],
        serde_json::json!({
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        })
    );
    let columns: Vec<(String, String, i64)> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["jsonPath"].as_str().unwrap().to_owned(),
                c["priority"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    let expected = [
        ("Phase", ".status.phase", 0),
        ("Ready", ".status.ready", 0),
        ("Model", ".spec.modelName", 0),
        ("Host", ".spec.gatewayRef.host", 1),
        ("MaxModelLen", ".status.engine.maxModelLen", 1),
        ("KVCacheTokens", ".status.engine.kvCacheTokens", 1),
        ("MinReplicas", ".spec.autoscaling.minReplicas", 1),
        ("MaxReplicas", ".spec.autoscaling.maxReplicas", 1),
        ("Age", ".metadata.creationTimestamp", 0),
    ];
    let expected: Vec<(String, String, i64)> = expected
        .iter()
        .map(|(n, p, pr)| (n.to_string(), p.to_string(), *pr))
        .collect();
    assert_eq!(columns, expected);
    let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    for field in [
        "observedGeneration",
        "conditions",
        "phase",
        "replicas",
        "readyReplicas",
        "ready",
        "selector",
        "deploymentName",
        "serviceName",
        "httpRouteName",
        "serviceMonitorName",
        "gatewayRefName",
        "gatewayRefNamespace",
        "message",
        "engine",
    ] {
        assert!(status.get(field).is_some(), "status.{field} missing");
    }
    let engine = &status["engine"]["properties"];
    for field in [
        "version",
        "maxModelLen",
        "kvCacheTokens",
        "maxConcurrency",
        "gpuBlocks",
        "tensorParallelSize",
        "revision",
    ] {
        assert!(engine.get(field).is_some(), "status.engine.{field} missing");
    }
    assert_eq!(engine["maxConcurrency"]["type"], "number");
    assert_eq!(
        status["phase"]["enum"],
        serde_json::json!(["Pending", "Running", "Failed"])
    );
}

#[test]
fn yaml_has_generated_header_and_parses_back() {
    let yaml = vllmservice_api::crd_yaml();
    assert!(yaml.starts_with("# Generated"));
    assert!(yaml.contains(vllmservice_api::CRD_REGENERATE_COMMAND));
    let parsed: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(
        parsed,
        serde_json::to_value(vllmservice_api::crd()).unwrap()
    );
}
