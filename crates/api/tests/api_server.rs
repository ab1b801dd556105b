//! The checked-in CRD (`config/crd/vllmservice.yaml`) in a real API server (the local control
//! plane of `testkit`): the examples are accepted and defaulted, every case of
//! `tests/cases/invalid.yaml` is rejected with an error naming its field, and the kubectl UX
//! (`explain`, `scale`, printer columns) works.

mod common;

use std::time::Duration;

use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
};
use serde_json::{Value, json};
use testkit::TestNamespace;

const GROUP: &str = "aiinfra.example.com";
const VERSION: &str = "v1alpha1";
const KIND: &str = "VLLMService";
const PLURAL: &str = "vllmservices";

fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// Installs the CRD and creates a fresh namespace; returns the namespace and the VLLMService API
/// in it.
async fn setup(prefix: &str) -> (TestNamespace, Api<DynamicObject>) {
    testkit::install_crds();
    let client = testkit::client().await;
    let ns = TestNamespace::new(&client, prefix).await;
    let api = Api::namespaced_with(client.clone(), &ns.name, &api_resource());
    (ns, api)
}

/// An object (as JSON) placed in namespace `ns`.
fn in_namespace(mut object: Value, ns: &str) -> DynamicObject {
    object["metadata"]["namespace"] = Value::String(ns.to_string());
    serde_json::from_value(object).expect("a Kubernetes object")
}

/// Creates `object` for real and returns what the API server stored, as JSON.
async fn create(api: &Api<DynamicObject>, object: &DynamicObject, what: &str) -> Value {
    api.create(&PostParams::default(), object)
        .await
        .unwrap_or_else(|e| panic!("the API server rejected {what}: {e}"));
    let name = object.metadata.name.as_deref().expect("a name");
    let stored = api
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("reading back {what}: {e}"));
    serde_json::to_value(stored).expect("JSON")
}

/// The defaults the API server applies (structural schema defaults), as JSON pointers.
fn expected_defaults() -> Vec<(String, Value)> {
    let mut expected = vec![
        ("/spec/replicas", json!(1)),
        ("/spec/port", json!(8000)),
        ("/spec/storage/readOnly", json!(true)),
        ("/spec/engineArgs/dtype", json!("auto")),
        ("/spec/engineArgs/maxModelLen", json!(4096)),
        ("/spec/engineArgs/gpuMemoryUtilization", json!("0.75")),
        ("/spec/engineArgs/maxNumSeqs", json!(8)),
        ("/spec/monitoring/path", json!("/metrics")),
        ("/spec/monitoring/interval", json!("30s")),
    ]
    .into_iter()
    .map(|(pointer, value)| (pointer.to_string(), value))
    .collect::<Vec<_>>();
    // path, initialDelaySeconds, periodSeconds, timeoutSeconds, failureThreshold
    let probes: [(&str, [i64; 4]); 3] = [
        ("startupProbe", [30, 10, 5, 60]),
        ("livenessProbe", [30, 30, 5, 3]),
        ("readinessProbe", [30, 30, 5, 3]),
    ];
    for (probe, [delay, period, timeout, failures]) in probes {
        let values = [
            ("path", json!("/health")),
            ("initialDelaySeconds", json!(delay)),
            ("periodSeconds", json!(period)),
            ("timeoutSeconds", json!(timeout)),
            ("failureThreshold", json!(failures)),
        ];
        for (field, value) in values {
            expected.push((format!("/spec/{probe}/{field}"), value));
        }
    }
    expected
}

/// Mismatches between the values at `expected` pointers and `stored`.
fn check_values<P: AsRef<str>>(what: &str, stored: &Value, expected: &[(P, Value)]) -> Vec<String> {
    expected
        .iter()
        .map(|(pointer, value)| (pointer.as_ref(), value))
        .filter(|(pointer, value)| stored.pointer(pointer) != Some(value))
        .map(|(pointer, value)| {
            format!(
                "{what}: {pointer} is {}, expected {value}",
                stored
                    .pointer(pointer)
                    .map_or("missing".to_string(), Value::to_string)
            )
        })
        .collect()
}

/// Mismatches where `actual` does not contain everything `expected` sets (same values, same
/// list lengths; `actual` may have more keys, e.g. defaults).
fn check_contains(path: &str, actual: &Value, expected: &Value, out: &mut Vec<String>) {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => {
            for (key, value) in expected {
                let path = format!("{path}.{key}");
                match actual.get(key) {
                    Some(actual) => check_contains(&path, actual, value, out),
                    None => out.push(format!("{path}: missing, expected {value}")),
                }
            }
        }
        (Value::Array(actual), Value::Array(expected)) if actual.len() == expected.len() => {
            for (i, (actual, expected)) in actual.iter().zip(expected).enumerate() {
                check_contains(&format!("{path}[{i}]"), actual, expected, out);
            }
        }
        (actual, expected) if actual == expected => {}
        (actual, expected) => out.push(format!("{path}: is {actual}, expected {expected}")),
    }
}

#[tokio::test]
async fn examples_are_accepted_and_defaulted_by_the_api_server() {
    let (ns, api) = setup("api-examples").await;
    let mut failures = Vec::new();

    // The smallest example: one model from a PersistentVolumeClaim.
    let demo = common::read_yaml("examples/qwen-demo.yaml");
    let stored = create(
        &api,
        &in_namespace(demo.clone(), &ns.name),
        "qwen-demo.yaml",
    )
    .await;
    failures.extend(check_values("qwen-demo", &stored, &expected_defaults()));
    check_contains(
        "qwen-demo: spec",
        &stored["spec"],
        &demo["spec"],
        &mut failures,
    );

    // The same example without the fields it sets to their default values, so that the API
    // server has to fill in every default of the list.
    let mut minimal = demo.clone();
    minimal["metadata"]["name"] = json!("qwen-demo-minimal");
    common::merge_patch(
        &mut minimal["spec"],
        &json!({"replicas": null, "port": null, "storage": {"readOnly": null}}),
    );
    let stored = create(&api, &in_namespace(minimal, &ns.name), "qwen-demo minimal").await;
    failures.extend(check_values(
        "qwen-demo-minimal",
        &stored,
        &expected_defaults(),
    ));

    // The example that sets every field: everything it sets survives unchanged.
    let full = common::read_yaml("examples/full.yaml");
    let stored = create(&api, &in_namespace(full.clone(), &ns.name), "full.yaml").await;
    check_contains("full: spec", &stored["spec"], &full["spec"], &mut failures);
    // Spot checks of values that differ from the defaults.
    failures.extend(check_values(
        "full",
        &stored,
        &[
            ("/spec/replicas", json!(2)),
            ("/spec/port", json!(8080)),
            ("/spec/engineArgs/dtype", json!("bfloat16")),
            ("/spec/engineArgs/maxModelLen", json!(8192)),
            ("/spec/engineArgs/gpuMemoryUtilization", json!("0.9")),
            ("/spec/engineArgs/maxNumSeqs", json!(64)),
            ("/spec/engineArgs/tensorParallelSize", json!(2)),
            ("/spec/startupProbe/failureThreshold", json!(90)),
            ("/spec/livenessProbe/initialDelaySeconds", json!(0)),
            ("/spec/livenessProbe/periodSeconds", json!(20)),
            ("/spec/readinessProbe/timeoutSeconds", json!(3)),
            ("/spec/monitoring/interval", json!("15s")),
            ("/spec/monitoring/enabled", json!(true)),
            ("/spec/shmSize", json!("16Gi")),
            ("/spec/serviceAccountName", json!("vllm")),
            ("/spec/gatewayRef/host", json!("qwen.llm.example.com")),
        ],
    ));

    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[tokio::test]
async fn every_invalid_case_is_rejected_by_the_api_server_naming_its_field() {
    let (ns, api) = setup("api-invalid").await;
    let cases = common::invalid_cases();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in &cases {
        let object = in_namespace(case.object(), &ns.name);
        checked += 1;
        match api.create(&dry_run, &object).await {
            Ok(_) => failures.push(format!(
                "{}: accepted, expected an error on {}",
                case.name, case.field
            )),
            Err(kube::Error::Api(status)) => {
                // The API server reports field errors as `<path>: <type>: <detail>`.
                if !status.message.contains(&format!("{}:", case.field)) {
                    failures.push(format!(
                        "{}: rejected ({}), but the error does not name {}: {}",
                        case.name, status.code, case.field, status.message
                    ));
                }
            }
            Err(e) => panic!("{}: request failed: {e}", case.name),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} invalid cases were not rejected as expected:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 25, "only {checked} invalid cases checked");
}

#[tokio::test]
async fn a_name_that_cannot_name_the_service_is_rejected_at_create_with_the_rule() {
    let (ns, api) = setup("api-name").await;
    let example = common::read_yaml("examples/qwen-demo.yaml");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    // A valid object name (DNS subdomain) that is not a DNS-1035 label.
    for bad in ["qwen2.5-instruct", "1-qwen", "qwen.demo"] {
        let mut object = example.clone();
        object["metadata"]["name"] = json!(bad);
        match api.create(&dry_run, &in_namespace(object, &ns.name)).await {
            Ok(_) => panic!("{bad}: accepted, but a Service cannot be named so"),
            Err(kube::Error::Api(status)) => assert!(
                status
                    .message
                    .contains("metadata.name must be a DNS-1035 label"),
                "{bad}: rejected without naming the rule: {}",
                status.message
            ),
            Err(e) => panic!("{bad}: request failed: {e}"),
        }
    }
    let mut object = example;
    object["metadata"]["name"] = json!("qwen2-5-instruct");
    api.create(&dry_run, &in_namespace(object, &ns.name))
        .await
        .expect("a DNS-1035 label is accepted");
}

/// A spec's fields the operator copies into the Deployment and the HTTPRoute: edge cases
/// around every rule that keeps the CRD from accepting what those refuse, and the quantity
/// spellings kube-cel cannot judge offline (`KUBE_CEL_GAPS`).
fn child_field_cases() -> Vec<Value> {
    let resources = |requests: Value, limits: Value| json!({"resources": {"requests": requests, "limits": limits}});
    let env = |var: Value| json!({ "env": [var] });
    let secret = |name: &str, key: &str| json!({"name": "T", "valueFrom": {"secretKeyRef": {"name": name, "key": key}}});
    let long_prefix = |n: usize| format!("{}.io/x", "a".repeat(n - 3));
    let mut cases = vec![
        resources(
            json!({"cpu": "2", "memory": "8Gi"}),
            json!({"cpu": "4", "memory": "16Gi"}),
        ),
        resources(json!({"cpu": 2}), json!({"cpu": "2000m"})),
        resources(json!({"cpu": "2.0001"}), json!({"cpu": "2"})),
        resources(json!({"memory": "1Gi"}), json!({"memory": "1073741824"})),
        resources(json!({"memory": "2Gi"}), json!({"memory": "2G"})),
        resources(json!({"memory": "99999999999999999999Ti"}), json!({})),
        resources(
            json!({"memory": "99999999999999999999Ti"}),
            json!({"memory": "8Ei"}),
        ),
        resources(json!({"cpu": "0.0000000001"}), json!({"cpu": "1n"})),
        resources(json!({"cpu": "+1"}), json!({})),
        resources(json!({"cpu": "1e1.5"}), json!({})),
        resources(json!({"cpu": "1e3"}), json!({"cpu": "1k"})),
        resources(json!({}), json!({"nvidia.com/gpu": "1"})),
        resources(json!({}), json!({"nvidia.com/gpu": 2})),
        resources(
            json!({"nvidia.com/gpu": "1"}),
            json!({"nvidia.com/gpu": "1"}),
        ),
        resources(json!({"nvidia.com/gpu": "1"}), json!({})),
        resources(
            json!({"nvidia.com/gpu": "1"}),
            json!({"nvidia.com/gpu": "2"}),
        ),
        resources(
            json!({"nvidia.com/gpu": "1"}),
            json!({"nvidia.com/gpu": "1000m"}),
        ),
        resources(json!({}), json!({"nvidia.com/gpu": "1.0"})),
        resources(json!({}), json!({"nvidia.com/gpu": "0.5"})),
        resources(json!({}), json!({"nvidia.com/gpu": "1k"})),
        resources(json!({}), json!({"nvidia.com/gpu": "1Ki"})),
        resources(json!({}), json!({"nvidia.com/gpu": "1Ei"})),
        resources(json!({}), json!({"nvidia.com/gpu": "1234567890123456789"})),
        resources(json!({}), json!({"nvidia.com/gpu": "0"})),
        resources(json!({"example.kubernetes.io/x": "0.5"}), json!({})),
        resources(json!({"fookubernetes.io/x": "0.5"}), json!({})),
        resources(json!({}), json!({ long_prefix(244): "1" })),
        resources(json!({}), json!({ long_prefix(245): "1" })),
        resources(json!({}), json!({"requests.example.com/x": "1"})),
        resources(json!({}), json!({"gpu": "1"})),
        resources(json!({}), json!({"pods": "1"})),
        resources(json!({}), json!({"cpu": "1", "hugepages-2Mi": "4Mi"})),
        resources(
            json!({"hugepages-2Mi": "4Mi"}),
            json!({"memory": "1Gi", "hugepages-2Mi": "4Mi"}),
        ),
        resources(json!({}), json!({"cpu": "1", "hugepages-2Mi": "4194304"})),
        resources(json!({}), json!({"cpu": "1", "hugepages-2Mi": "3Mi"})),
        resources(json!({}), json!({"cpu": "1", "hugepages-1Gi": "2Gi"})),
        resources(json!({}), json!({"hugepages-2Mi": "4Mi"})),
        resources(json!({"hugepages-2Mi": "4Mi"}), json!({"cpu": "1"})),
        resources(json!({}), json!({"cpu": "1", "hugepages-x": "1"})),
        resources(json!({}), json!({"cpu": "1", "hugepages-0": "0"})),
        json!({"resources": {"claims": [{"name": "gpu"}]}}),
        env(json!({"name": "HF_TOKEN", "value": "x"})),
        env(json!({"name": "A B.c-1", "value": "x"})),
        env(json!({"name": "A=B", "value": "x"})),
        env(json!({"name": "É", "value": "x"})),
        env(json!({"name": "", "value": "x"})),
        env(secret("hf-token", "token")),
        env(secret("hf.token", ".x")),
        env(secret("bad-", "token")),
        env(secret("hf", "..x")),
        env(secret("hf", ".")),
        env(secret("hf", "a/b")),
        env(
            json!({"name": "T", "value": "", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        ),
        env(
            json!({"name": "T", "value": "v", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}),
        ),
        env(json!({"name": "T", "valueFrom": {}})),
        env(json!({"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})),
        env(json!({"name": "T", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}})),
        env(json!({"name": "T", "valueFrom": {"configMapKeyRef": {"name": "C", "key": "k"}}})),
        env(
            json!({"name": "T", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"},
                                               "secretKeyRef": {"name": "s", "key": "k"}}}),
        ),
        env(
            json!({"name": "T", "valueFrom": {"fileKeyRef": {"volumeName": "dshm", "path": "p", "key": "K"}}}),
        ),
        json!({"runtimeClassName": ""}),
        json!({"runtimeClassName": "nvidia.v2"}),
        json!({"runtimeClassName": "bad-"}),
        json!({"serviceAccountName": "vllm-sa"}),
        json!({"serviceAccountName": "VLLM"}),
        json!({"image": "vllm/vllm-openai:latest "}),
        json!({"image": "\u{a0}vllm"}),
        json!({"storage": {"mountPath": "/dev/shm"}}),
        json!({"storage": {"mountPath": "/dev/shm/models"}}),
        json!({"gatewayRef": {"sectionName": "https.internal"}}),
        json!({"gatewayRef": {"sectionName": "HTTP"}}),
        json!({"gatewayRef": {"namespace": "gateway-system"}}),
        json!({"gatewayRef": {"namespace": "gateway.system"}}),
        json!({"shmSize": "1e1.5"}),
    ];
    // Where kube-cel judges otherwise: the API server's own verdict is checked.
    for gap in vllmservice_api::validate::KUBE_CEL_GAPS {
        cases.push(resources(
            serde_json::from_str(gap.requests).unwrap(),
            serde_json::from_str(gap.limits).unwrap(),
        ));
    }
    // The example's own resources are replaced, not merged into.
    for case in &mut cases {
        if let Some(resources) = case.get_mut("resources") {
            resources["replace"] = json!(true);
        }
    }
    cases
}

/// The Deployment and HTTPRoute the operator would make for `spec`, reduced to what the rules
/// are about (the builders live in the operator crate; the fault suite checks them end to end).
fn children_of(name: &str, ns: &str, spec: &Value) -> Vec<(&'static str, Value)> {
    let set = |field: &str| spec.get(field).filter(|v| *v != &json!(""));
    let mut pod = json!({
        "containers": [{
            "name": "vllm",
            "image": spec["image"],
            "resources": spec.get("resources").cloned().unwrap_or(json!({})),
            "env": spec.get("env").cloned().unwrap_or(json!([])),
            "volumeMounts": [
                {"name": "model-storage", "mountPath": spec["storage"]["mountPath"]},
                {"name": "dshm", "mountPath": "/dev/shm"},
            ],
        }],
        "volumes": [
            {"name": "model-storage",
             "persistentVolumeClaim": {"claimName": spec["storage"]["pvcName"]}},
            {"name": "dshm", "emptyDir": {"medium": "Memory",
                                          "sizeLimit": spec.get("shmSize").cloned().unwrap_or(json!("2Gi"))}},
        ],
    });
    for field in ["runtimeClassName", "serviceAccountName"] {
        if let Some(value) = set(field) {
            pod[field] = value.clone();
        }
    }
    let labels = json!({"app": name});
    let mut children = vec![(
        "Deployment",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": pod}},
        }),
    )];
    if let Some(gateway) = spec.get("gatewayRef") {
        children.push((
            "HTTPRoute",
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": name, "namespace": ns},
                "spec": {
                    "parentRefs": [{"name": gateway["name"],
                                    "namespace": gateway.get("namespace").cloned().unwrap_or(json!(ns)),
                                    "sectionName": gateway["sectionName"]}],
                    "hostnames": [gateway["host"]],
                    "rules": [{"backendRefs": [{"name": name, "port": spec.get("port").cloned().unwrap_or(json!(8000))}]}],
                },
            }),
        ));
    }
    children
}

/// Whether a dry-run create of `object` is accepted; 4xx is a refusal, anything else a failure.
async fn accepted(api: &Api<DynamicObject>, object: &Value) -> Result<(), String> {
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match api.create(&dry_run, &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if (400..500).contains(&status.code) => Err(status.message),
        Err(e) => panic!("request failed: {e}"),
    }
}

#[tokio::test]
async fn what_the_crd_accepts_the_children_accept_and_validate_agrees() {
    let (ns, api) = setup("api-children").await;
    testkit::install_gateway_api_crds();
    let client = testkit::client().await;
    let deployments = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    let routes = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns.name,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute"),
            "httproutes",
        ),
    );
    let mut failures = Vec::new();
    let (mut refused, mut allowed) = (0, 0);
    for (i, mut patch) in child_field_cases().into_iter().enumerate() {
        let name = format!("case-{i}");
        let mut object = common::read_yaml("examples/qwen-demo.yaml");
        object["metadata"]["name"] = json!(name);
        object["metadata"]["namespace"] = json!(ns.name);
        if patch
            .get_mut("resources")
            .and_then(|r| r.as_object_mut())
            .and_then(|r| r.remove("replace"))
            .is_some()
        {
            object["spec"]["resources"] = json!({});
        }
        common::merge_patch(&mut object["spec"], &patch);
        let crd = accepted(&api, &object).await;
        let rust = serde_json::from_value::<vllmservice_api::VLLMService>(object.clone())
            .map_err(|e| e.to_string())
            .and_then(|vllm| {
                vllmservice_api::validate(&vllm)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        let gap = vllmservice_api::validate::KUBE_CEL_GAPS.iter().find(|gap| {
            patch.get("resources").is_some_and(|r| {
                r["requests"] == serde_json::from_str::<Value>(gap.requests).unwrap()
                    && r["limits"] == serde_json::from_str::<Value>(gap.limits).unwrap()
            })
        });
        match (&crd, &rust, gap) {
            // validate() cannot judge these offline: the API server's verdict is the documented one.
            (crd, rust, Some(gap)) => {
                if crd.is_ok() != gap.api_server_accepts || rust.is_ok() == gap.api_server_accepts {
                    failures.push(format!(
                        "{patch}: documented as {gap:?}, but the CRD says {crd:?}, validate() \
                         says {rust:?}"
                    ));
                }
            }
            (Ok(()), Ok(()), None) => allowed += 1,
            (Err(_), Err(_), None) => refused += 1,
            _ => failures.push(format!(
                "{patch}: the CRD says {crd:?}, validate() says {rust:?}"
            )),
        }
        if crd.is_err() {
            continue;
        }
        for (kind, child) in children_of(&name, &ns.name, &object["spec"]) {
            let api = if kind == "Deployment" {
                &deployments
            } else {
                &routes
            };
            if let Err(message) = accepted(api, &child).await {
                failures.push(format!(
                    "{patch}: the CRD accepts it, the {kind} is refused: {message}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        refused + allowed + failures.len(),
        failures.join("\n")
    );
    assert!(
        refused >= 30 && allowed >= 25,
        "{refused} refused, {allowed} accepted"
    );
}

/// `s` with every run of whitespace replaced by one space.
fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn kubectl_explain_documents_a_field() {
    testkit::install_crds();
    let crd = common::read_yaml("config/crd/vllmservice.yaml");
    let description = crd
        .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/spec")
        .and_then(|spec| spec.pointer("/properties/gatewayRef/properties/host/description"))
        .and_then(Value::as_str)
        .expect("the CRD describes spec.gatewayRef.host");
    let description = squash(description);
    assert!(!description.is_empty());

    // The published OpenAPI document may lag a CRD update by a few seconds.
    let args = ["explain", "vllmservice.spec.gatewayRef.host"];
    let mut last = String::new();
    for _ in 0..60 {
        let out = testkit::kubectl(&args);
        last = format!(
            "exit {}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success()
            && squash(&String::from_utf8_lossy(&out.stdout)).contains(&description)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!(
        "kubectl {} does not print the description {description:?}:\n{last}",
        args.join(" ")
    );
}

#[tokio::test]
async fn kubectl_scale_changes_spec_replicas() {
    let (ns, api) = setup("api-scale").await;
    let demo = common::read_yaml("examples/qwen-demo.yaml");
    create(&api, &in_namespace(demo, &ns.name), "qwen-demo.yaml").await;

    testkit::kubectl_ok(&[
        "scale",
        "vllmservice",
        "qwen-demo",
        "--replicas=3",
        "-n",
        &ns.name,
    ]);

    let stored = serde_json::to_value(api.get("qwen-demo").await.expect("get")).unwrap();
    assert_eq!(
        stored["spec"]["replicas"],
        json!(3),
        "spec after kubectl scale: {stored}"
    );

    let path = format!(
        "/apis/{GROUP}/{VERSION}/namespaces/{}/{PLURAL}/qwen-demo/scale",
        ns.name
    );
    let scale: Value = serde_json::from_str(&testkit::kubectl_ok(&["get", "--raw", &path]))
        .expect("the scale subresource is JSON");
    assert_eq!(scale["kind"], json!("Scale"), "{scale}");
    assert_eq!(scale["spec"]["replicas"], json!(3), "{scale}");
}

/// The header kubectl prints for the CRD's printer columns (`wide`: with priority > 0 too).
fn crd_headers(wide: bool) -> Vec<String> {
    let crd = common::read_yaml("config/crd/vllmservice.yaml");
    let columns = crd
        .pointer("/spec/versions/0/additionalPrinterColumns")
        .and_then(Value::as_array)
        .expect("the CRD has printer columns");
    std::iter::once("NAME".to_string())
        .chain(
            columns
                .iter()
                .filter(|c| wide || c["priority"].as_i64().unwrap_or(0) == 0)
                .map(|c| c["name"].as_str().expect("a column name").to_uppercase()),
        )
        .collect()
}

fn header_and_row(output: &str) -> (Vec<String>, String) {
    let mut lines = output.lines();
    let header = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    (header, lines.next().unwrap_or_default().to_string())
}

#[tokio::test]
async fn kubectl_get_shows_the_printer_columns() {
    let (ns, api) = setup("api-columns").await;
    let demo = common::read_yaml("examples/qwen-demo.yaml");
    create(&api, &in_namespace(demo, &ns.name), "qwen-demo.yaml").await;

    let output = testkit::kubectl_ok(&["get", "vllm", "-n", &ns.name]);
    let (header, row) = header_and_row(&output);
    assert_eq!(
        header,
        ["NAME", "PHASE", "READY", "MODEL", "AGE"],
        "{output}"
    );
    assert_eq!(header, crd_headers(false), "{output}");
    assert!(row.starts_with("qwen-demo "), "{output}");
    assert!(row.contains("qwen2.5-1.5b-instruct"), "{output}");
    assert!(!row.contains("llm.example.local"), "{output}");

    let output = testkit::kubectl_ok(&["get", "vllm", "-n", &ns.name, "-o", "wide"]);
    let (header, row) = header_and_row(&output);
    assert_eq!(
        header,
        [
            "NAME",
            "PHASE",
            "READY",
            "MODEL",
            "HOST",
            "MAXMODELLEN",
            "KVCACHETOKENS",
            "MINREPLICAS",
            "MAXREPLICAS",
            "AGE"
        ],
        "{output}"
    );
    assert_eq!(header, crd_headers(true), "{output}");
    assert!(row.contains("qwen2.5-1.5b-instruct"), "{output}");
    assert!(row.contains("llm.example.local"), "{output}");

    // The autoscaling range, in the wide columns.
    let mut scaled = common::read_yaml("examples/qwen-demo.yaml");
    scaled["metadata"]["name"] = json!("scaled");
    scaled["spec"]["autoscaling"] = json!({"minReplicas": 2, "maxReplicas": 7, "target": "5"});
    create(&api, &in_namespace(scaled, &ns.name), "with autoscaling").await;
    let output = testkit::kubectl_ok(&["get", "vllm", "scaled", "-n", &ns.name, "-o", "wide"]);
    let (header, row) = header_and_row(&output);
    let cells: Vec<&str> = row.split_whitespace().collect();
    let cell = |name: &str| {
        let i = header.iter().position(|h| h == name).unwrap();
        // Cells before it may be empty ("<none>" counts as one).
        cells[cells.len() - (header.len() - i)]
    };
    assert_eq!(
        (cell("MINREPLICAS"), cell("MAXREPLICAS")),
        ("2", "7"),
        "{output}"
    );
}
