//! validate(): the generated CRD's schema and CEL rules, evaluated offline, reject each invalid
//! spec naming the field and the rule's message, accept the valid ones, and never panic.

mod common;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use serde_json::{Value, json};
use vllmservice_api::rules::{self, RESERVED_FLAGS, messages};
use vllmservice_api::{FieldError, VLLMService, VLLMServiceSpec, validate, validate_spec};

fn errors_of(object: &Value) -> Result<Vec<FieldError>, serde_json::Error> {
    let vllm: VLLMService = serde_json::from_value(object.clone())?;
    Ok(validate(&vllm).err().map(|e| e.errors).unwrap_or_default())
}

#[test]
fn every_invalid_case_is_rejected_naming_its_field() {
    let cases = common::invalid_cases();
    assert!(cases.len() >= 25);
    let mut report = BTreeMap::new();
    for case in &cases {
        match errors_of(&case.object()) {
            Err(e) => {
                assert!(case.decode, "{}: does not deserialize: {e}", case.name);
                report.insert(case.name.clone(), format!("decode error: {e}"));
            }
            Ok(errors) => {
                assert!(!case.decode, "{}: deserialized", case.name);
                assert!(
                    errors.iter().any(|e| e.field == case.field),
                    "{}: expected an error on {}, got {errors:?}",
                    case.name,
                    case.field
                );
                let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
                report.insert(case.name.clone(), text.join("\n"));
            }
        }
    }
    insta::assert_yaml_snapshot!("invalid_case_errors", report);
}

/// qwen-demo with `patch` merged into its spec (null removes a key).
fn demo_with(patch: &Value) -> Value {
    let mut object = common::read_yaml("examples/qwen-demo.yaml");
    common::merge_patch(&mut object["spec"], patch);
    object
}

/// qwen-demo with its `resources` replaced.
fn demo_with_resources(requests: Value, limits: Value) -> Value {
    let mut object = demo_with(&json!({}));
    object["spec"]["resources"] = json!({"requests": requests, "limits": limits});
    object
}

/// One table row: a spec patch, and `None` when valid or the (field, message) it must report.
type Row = (Value, Option<(&'static str, String)>);

fn rows(
    patch: impl Fn(&str) -> Value,
    ok: &[&str],
    bad: &[&str],
    field: &'static str,
    message: &str,
) -> Vec<Row> {
    let ok = ok.iter().map(|s| (patch(s), None));
    let bad = bad
        .iter()
        .map(|s| (patch(s), Some((field, message.to_string()))));
    ok.chain(bad).collect()
}

/// The formats and relations of the rules, case by case: what each accepts and refuses.
fn table() -> Vec<Row> {
    let pattern = |re: &str| format!("should match '{re}'");
    let mut table = Vec::new();
    table.extend(rows(
        |s| json!({"monitoring": {"interval": s}}),
        &["30s", "1m30s", "5ms", "1y2w3d4h5m6s7ms", "0s", "10m"],
        &[
            "30", "s", "1s1m", "1ms1s", "1.5s", "30S", "1h 5m", "1mm", "-1s",
        ],
        "spec.monitoring.interval",
        messages::INTERVAL,
    ));
    table.extend(rows(
        |s| json!({"engineArgs": {"gpuMemoryUtilization": s}}),
        &["0.75", "1", "1.0", ".5", "0.000001", "1.", "01"],
        &[
            "0", "0.0", "1.01", "2", ".", "-0.5", "0.5e0", " 0.5", "abc", "1..0",
        ],
        "spec.engineArgs.gpuMemoryUtilization",
        messages::GPU_MEMORY_UTILIZATION,
    ));
    let target = |s: &str| json!({"autoscaling": {"maxReplicas": 2, "target": s}});
    table.extend(rows(
        target,
        &["5", "0.8", ".5", "1.", "100", "0.000001"],
        &["0", "0.0", ".0", "000"],
        "spec.autoscaling.target",
        messages::AUTOSCALING_TARGET,
    ));
    table.extend(rows(
        target,
        &[],
        &[".", "abc", "-1", "1e3", " 5", "5%", "1..0", "+1"],
        "spec.autoscaling.target",
        &pattern(rules::DECIMAL_RE),
    ));
    table.extend(rows(
        |s| json!({"autoscaling": {"maxReplicas": 2, "metric": "kvCacheUsage", "target": s}}),
        &["1", "0.8"],
        &["1.01", "5"],
        "spec.autoscaling.target",
        messages::KV_CACHE_TARGET,
    ));
    table.push((
        json!({"autoscaling": {"minReplicas": 3, "maxReplicas": 2, "target": "5"}}),
        Some((
            "spec.autoscaling.maxReplicas",
            "autoscaling.maxReplicas (2) must be at least autoscaling.minReplicas (3)".into(),
        )),
    ));
    table.push((
        json!({"autoscaling": {"minReplicas": 3, "maxReplicas": 3, "target": "5"}}),
        None,
    ));
    table.extend(rows(
        |s| json!({"autoscaling": {"maxReplicas": 2, "target": "5", "prometheus": {"serverAddress": s}}}),
        &[
            "",
            "http://prometheus.monitoring.svc:9090",
            "https://prom.example.com/prometheus",
            "http://127.0.0.1:9090",
            "http://[::1]:9090/",
            "http://h?x=1",
        ],
        &[
            "prometheus:9090",
            "ftp://prom",
            "http://",
            "http:///path",
            "HTTP://prom",
            "http://prom :9090",
            "http://prom/a b",
            "http://prom\t",
            " http://prom",
        ],
        "spec.autoscaling.prometheus.serverAddress",
        &pattern(rules::HTTP_URL_RE),
    ));
    table.extend(rows(
        |s| {
            json!({"storage": {"readOnly": false}, "modelSource": {"huggingFace": {
                "repo": "Qwen/Qwen2.5-1.5B-Instruct", "endpoint": s}}})
        },
        &[
            "https://huggingface.co",
            "http://hub.models.svc:8080",
            "https://hf-mirror.example.com/hub/",
            "http://[::1]:8080",
        ],
        &[
            "",
            "hf-mirror.example.com",
            "ftp://hub",
            "https://user:secret@hub.example.com",
            "https://hub.example.com/?x=1",
            "https://hub.example.com#top",
            "https://hub example.com",
        ],
        "spec.modelSource.huggingFace.endpoint",
        &pattern(rules::HF_ENDPOINT_RE),
    ));
    table.extend(rows(
        |s| json!({"shmSize": s}),
        &[
            "1",
            "16Gi",
            "500m",
            "1.5",
            ".5",
            "1.",
            "1e3",
            "1E-3",
            "1.5e+2",
            "1e123456789",
        ],
        &[
            "lots",
            "1GB",
            "Gi",
            ".",
            "1e",
            "1.2.3",
            "1 Gi",
            "1ki",
            "e3",
            "1e3Gi",
            "1e1.5",
            "1e.5",
            "1e1234567890",
            "+1k",
            "-2Mi",
        ],
        "spec.shmSize",
        &pattern(rules::SIZE_RE),
    ));
    let divisor = |s: &str| json!({"env": [{"name": "C", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": s}}}]});
    table.extend(rows(
        divisor,
        &["1", "+1k", "-2Mi", "1m"],
        &["lots", "1e1.5"],
        "spec.env[0].valueFrom.resourceFieldRef.divisor",
        &pattern(rules::QUANTITY_RE),
    ));
    let long = "a".repeat(254);
    table.extend(rows(
        |s| json!({"gatewayRef": {"host": s}}),
        &["llm.example.local", "*.example.com", "a", "a-b.c0"],
        &[
            "LLM.example.com",
            "-a.com",
            "a..b",
            "a.",
            "*.",
            "*",
            "a_b.com",
            "a.*.b",
        ],
        "spec.gatewayRef.host",
        messages::HOST,
    ));
    table.push((
        json!({"gatewayRef": {"host": long}}),
        Some((
            "spec.gatewayRef.host",
            "Too long: may not be more than 253 bytes".into(),
        )),
    ));
    let label_key = |s: &str| json!({"labels": {s: "v"}});
    table.extend(rows(
        label_key,
        &["app", "kubernetes.io/hostname", "a.b/C_d-e.f", "x"],
        &["/a", "a/", "A.b/c", "a/b/c", "-a", "a-", &"a".repeat(64)],
        "spec.labels",
        &messages::label_keys("labels"),
    ));
    table.extend(rows(
        |s| json!({"podAnnotations": {s: "v"}}),
        &["Example.COM/key", "a"],
        &["a/b/c", "-a"],
        "spec.podAnnotations",
        &messages::annotation_keys("podAnnotations"),
    ));
    table.extend(rows(
        |s| json!({"labels": {"team": s}}),
        &["", "v1.2_x-y"],
        &["has space", "-a"],
        "spec.labels.team",
        &pattern(rules::LABEL_VALUE_RE),
    ));
    table.extend(rows(
        |s| json!({"runtimeClassName": s}),
        &["", "nvidia", "a.b-c.d", "0", &"a".repeat(253)],
        &["bad-", "-a", "A", "a_b", "a..b", "a.", ".a"],
        "spec.runtimeClassName",
        messages::RUNTIME_CLASS_NAME,
    ));
    table.extend(rows(
        |s| json!({"gatewayRef": {"namespace": s}}),
        &["gateway-system"],
        &["gateway.system", "Gateway"],
        "spec.gatewayRef.namespace",
        messages::GATEWAY_NAMESPACE,
    ));
    table.extend(rows(
        |s| json!({"env": [{"name": s, "value": "x"}]}),
        &["HF_TOKEN", "a", "my.var-1", "A B", "~!@#$%^&*()"],
        &["A=B", "é", "TAB\t", "\u{7f}"],
        "spec.env[0].name",
        messages::ENV_NAME,
    ));
    table.extend(rows(
        |s| json!({"env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": s}}}]}),
        &["token", "a.b", "_x", "-", ".x", "a..b", "A-Z_0.9"],
        &["", ".", "..", "..x", "a/b", "a b"],
        "spec.env[0].valueFrom.secretKeyRef.key",
        &messages::env_source_key("secretKeyRef"),
    ));
    table.extend(rows(
        |s| json!({"image": s}),
        &["vllm/vllm-openai:latest"],
        &[" vllm", "vllm\u{a0}", "vllm\n"],
        "spec.image",
        messages::IMAGE,
    ));
    table.extend(rows(
        |s| json!({"storage": {"subPath": s}}),
        &["qwen", "a/b", "a..b", "..a/b"],
        &["/qwen", "..", "../x", "a/..", "a/../b"],
        "spec.storage.subPath",
        messages::SUB_PATH,
    ));
    let port = RESERVED_FLAGS.iter().find(|f| f.flag == "--port").unwrap();
    let tp = RESERVED_FLAGS
        .iter()
        .find(|f| f.flag == "--tensor-parallel-size")
        .unwrap();
    let args = |s: &str| json!({"engineArgs": {"extraArgs": [s]}});
    table.extend(rows(
        args,
        &["--ports", "--model-impl=vllm", "--enable-lora"],
        &["--port", "--port=9000"],
        "spec.engineArgs.extraArgs",
        &port.message(),
    ));
    table.extend(rows(
        args,
        &[],
        &["-tp", "--tensor_parallel_size=2"],
        "spec.engineArgs.extraArgs",
        &tp.message(),
    ));
    // Resources: names, whole extended resources, hugepages, requests against limits.
    let limits_named = |name: &str| demo_resources(json!({}), json!({"cpu": "1", name: "1"}));
    for name in [
        "nvidia.com/gpu",
        "volcano.sh/vgpu-number",
        "example.kubernetes.io/thing",
        &format!("{}/x", "a".repeat(244)),
        &format!("{}.kubernetes.io/x", "a".repeat(239)),
    ] {
        table.push((limits_named(name), None));
    }
    for name in [
        "gpu",
        "pods",
        "requests.example.com/x",
        "Example.com/gpu",
        "a/b/c",
        &format!("{}/x", "a".repeat(245)),
    ] {
        table.push((
            limits_named(name),
            Some(("spec.resources.limits", messages::resource_names("limits"))),
        ));
    }
    let limits = |q: Value| demo_resources(json!({}), q);
    let integers = || {
        Some((
            "spec.resources.limits",
            messages::resource_integers("limits"),
        ))
    };
    let hugepages = || {
        Some((
            "spec.resources.limits",
            messages::resource_hugepages("limits"),
        ))
    };
    table.extend([
        (limits(json!({"nvidia.com/gpu": "2"})), None),
        (limits(json!({"nvidia.com/gpu": "1k"})), None),
        (limits(json!({"nvidia.com/gpu": 2})), None),
        (limits(json!({"nvidia.com/gpu": "0.5"})), integers()),
        (limits(json!({"cpu": "0.5"})), None),
        (limits(json!({"example.kubernetes.io/x": "0.5"})), None),
        (limits(json!({"cpu": "1", "hugepages-2Mi": "4Mi"})), None),
        (limits(json!({"cpu": "1", "hugepages-2Mi": "0"})), None),
        (
            limits(json!({"cpu": "1", "hugepages-2Mi": "3Mi"})),
            hugepages(),
        ),
        (limits(json!({"cpu": "1", "hugepages-0": "0"})), hugepages()),
        (limits(json!({"cpu": "1", "hugepages-x": "1"})), hugepages()),
        (limits(json!({"memory": "3Mi"})), None),
        (
            limits(json!({"hugepages-2Mi": "2Mi", "nvidia.com/gpu": "1"})),
            Some((
                "spec.resources",
                messages::HUGEPAGES_NEED_CPU_OR_MEMORY.into(),
            )),
        ),
    ]);
    let within = || {
        Some((
            "spec.resources.requests",
            messages::REQUESTS_WITHIN_LIMITS.into(),
        ))
    };
    let equal = || {
        Some((
            "spec.resources.requests",
            messages::REQUESTS_EQUAL_LIMITS.into(),
        ))
    };
    let both = |r: Value, l: Value| demo_resources(r, l);
    table.extend([
        (both(json!({"cpu": "500m"}), json!({"cpu": "1"})), None),
        (both(json!({"cpu": "1"}), json!({"cpu": "1000m"})), None),
        (both(json!({"cpu": 2}), json!({"cpu": "2000m"})), None),
        (
            both(json!({"cpu": "2.0001"}), json!({"cpu": "2"})),
            within(),
        ),
        (
            both(json!({"memory": "2Gi"}), json!({"memory": "2G"})),
            within(),
        ),
        (
            both(json!({"memory": "1Gi"}), json!({"memory": "1073741824"})),
            None,
        ),
        (both(json!({"cpu": "1e3"}), json!({"cpu": "1k"})), None),
        (
            both(
                json!({"nvidia.com/gpu": "1"}),
                json!({"nvidia.com/gpu": "1"}),
            ),
            None,
        ),
        (
            both(
                json!({"nvidia.com/gpu": "1"}),
                json!({"nvidia.com/gpu": "2"}),
            ),
            equal(),
        ),
        (both(json!({"nvidia.com/gpu": "1"}), json!({})), equal()),
        (
            both(json!({"hugepages-2Mi": "2Mi", "cpu": "1"}), json!({})),
            equal(),
        ),
        (both(json!({"cpu": "1"}), json!({})), None),
        (both(json!({"kubernetes.io/x": "1"}), json!({})), None),
    ]);
    table
}

fn demo_resources(requests: Value, limits: Value) -> Value {
    demo_with_resources(requests, limits)["spec"].clone()
}

#[test]
fn the_rules_accept_and_refuse_as_the_table_says() {
    let mut failures = Vec::new();
    let table = table();
    assert!(table.len() > 200, "{} rows", table.len());
    for (patch, expected) in &table {
        // A row is a spec patch, or (for resources) the whole spec.
        let object = if patch.get("image").is_some() && patch.get("storage").is_some() {
            let mut object = demo_with(&json!({}));
            object["spec"] = patch.clone();
            object
        } else {
            demo_with(patch)
        };
        let errors = errors_of(&object).expect("the object deserializes");
        let what = if patch.get("resources").is_some() {
            &patch["resources"]
        } else {
            patch
        };
        match expected {
            None if !errors.is_empty() => failures.push(format!("{what}: refused: {errors:?}")),
            Some((field, message))
                if !errors
                    .iter()
                    .any(|e| e.field == *field && e.message == *message) =>
            {
                failures.push(format!(
                    "{what}: expected {field}: {message}, got {errors:?}"
                ))
            }
            _ => {}
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        table.len(),
        failures.join("\n")
    );
}

#[test]
fn a_name_that_cannot_name_the_service_is_refused() {
    for (name, expected) in [
        ("qwen-demo", None),
        ("a", None),
        ("1abc", Some(("", messages::NAME))),
        ("qwen2.5", Some(("", messages::NAME))),
        ("a-", Some(("", messages::NAME))),
        ("", Some(("metadata.name", "Required value"))),
    ] {
        let mut object = common::read_yaml("examples/qwen-demo.yaml");
        object["metadata"]["name"] = json!(name);
        let errors = errors_of(&object).unwrap();
        let got: Vec<(&str, &str)> = errors
            .iter()
            .map(|e| (e.field.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(got, expected.into_iter().collect::<Vec<_>>(), "{name:?}");
    }
    let mut object = common::read_yaml("examples/qwen-demo.yaml");
    object["metadata"]["name"] = json!("a".repeat(64));
    assert!(!errors_of(&object).unwrap().is_empty());
}

/// What kube-cel judges differently from the API server (`KUBE_CEL_GAPS`, whose API server
/// verdicts api_server.rs checks): validate() gives the other verdict. A kube-cel release that
/// closes a gap fails this test, so that the gap is struck from the list.
#[test]
fn kube_cel_gaps_are_as_documented() {
    for gap in vllmservice_api::validate::KUBE_CEL_GAPS {
        let requests: Value = serde_json::from_str(gap.requests).unwrap();
        let limits: Value = serde_json::from_str(gap.limits).unwrap();
        let errors = errors_of(&demo_with_resources(requests, limits)).unwrap();
        assert_eq!(
            errors.is_empty(),
            !gap.api_server_accepts,
            "{gap:?}: validate() now agrees with the API server ({errors:?}): strike it from \
             KUBE_CEL_GAPS"
        );
    }
}

/// Strings that hit the edges of the formats: their alphabets, separators, digits, units.
fn near_format() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9.*/-]{0,12}",
        "[A-Za-z0-9._/-]{0,70}",
        "[0-9.]{0,6}",
        "([0-9]{1,2}(y|w|d|h|m|s|ms)){0,4}",
        "[+-]?[0-9.]{0,4}(Ki|Mi|Gi|m|k|M|e[0-9]|E-[0-9]|i|x)?",
        "(\\.\\./|/|[a-z]{1,3}/|\\.\\.){0,4}",
        "-{1,2}[a-z_-]{0,24}(=[0-9]{0,2})?",
        "\\PC{0,16}",
        "[ =._A-Za-z0-9\\t\u{a0}é-]{0,12}",
        "(\\.{1,3})[a-z._-]{0,4}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => near_format(),
        1 => Just(String::new()),
        // Around the length limits (63, 253, 4096).
        1 => (0usize..5000).prop_map(|n| "a".repeat(n)),
    ]
}

fn map() -> impl Strategy<Value = BTreeMap<String, String>> {
    let entry = || prop_oneof![near_format(), "[a-zA-Z0-9./_ -]{60,70}"];
    prop_oneof![
        4 => prop::collection::btree_map(entry(), entry(), 0..4),
        // Around the 64-entry limit.
        1 => prop::collection::btree_map("[a-z]{1,4}", "[a-z]{0,2}", 60..70),
    ]
}

prop_compose! {
    fn any_spec()(
        strings in prop::collection::vec(text(), 16),
        numbers in prop::collection::vec(any::<i32>(), 16),
        maps in prop::collection::vec(map(), 5),
        extra_args in prop_oneof![
            4 => prop::collection::vec(text(), 0..6),
            // Around the 128-item limit.
            1 => prop::collection::vec("-{0,3}", 125..135),
        ],
        flags in prop::collection::vec(any::<bool>(), 6),
    ) -> VLLMServiceSpec {
        let quantity = |s: &String| Quantity(s.clone());
        let mut spec: VLLMServiceSpec = serde_json::from_value(json!({
            "image": strings[0], "modelPath": strings[1], "modelName": strings[2],
            "storage": {"pvcName": strings[3], "mountPath": strings[4]},
        })).unwrap();
        spec.replicas = numbers[0];
        spec.port = numbers[1];
        spec.labels = maps[0].clone();
        spec.node_selector = maps[1].clone();
        spec.pod_annotations = maps[2].clone();
        spec.monitoring.labels = maps[3].clone();
        spec.storage.sub_path = flags[0].then(|| strings[5].clone());
        spec.gateway_ref = flags[1].then(|| serde_json::from_value(json!({
            "name": strings[6], "namespace": strings[7], "sectionName": strings[8],
            "host": strings[9],
        })).unwrap());
        spec.engine_args.gpu_memory_utilization = strings[10].clone();
        spec.engine_args.max_model_len = numbers[2];
        spec.engine_args.max_num_seqs = numbers[3];
        spec.engine_args.tensor_parallel_size = flags[2].then_some(numbers[4]);
        spec.engine_args.extra_args = extra_args;
        spec.startup_probe.path = strings[11].clone();
        spec.startup_probe.initial_delay_seconds = numbers[5];
        spec.liveness_probe.period_seconds = numbers[6];
        spec.readiness_probe.timeout_seconds = numbers[7];
        spec.readiness_probe.failure_threshold = numbers[8];
        spec.monitoring.path = strings[12].clone();
        spec.monitoring.interval = strings[13].clone();
        spec.shm_size = flags[3].then(|| quantity(&strings[14]));
        spec.resources = flags[4].then(|| ResourceRequirements {
            limits: Some(maps[4].iter().map(|(k, v)| (k.clone(), quantity(v))).collect()),
            ..Default::default()
        });
        spec
    }
}

/// Whether `field` (`spec.env[0].name`, `spec.labels.a.b/c`) names a value of `object` or,
/// for a missing required field, a key its parent could hold.
fn names_a_field(object: &Value, field: &str) -> bool {
    fn walk(value: &Value, rest: &str) -> bool {
        if rest.is_empty() {
            return true;
        }
        if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after.split_once(']').unwrap();
            let i: usize = index.parse().unwrap();
            return value.get(i).is_some_and(|item| walk(item, tail));
        }
        let rest = rest.strip_prefix('.').unwrap_or(rest);
        // Map keys may contain dots: try every split.
        let Some(object) = value.as_object() else {
            return false;
        };
        object.iter().any(|(key, child)| {
            rest.strip_prefix(key.as_str()).is_some_and(|tail| {
                (tail.is_empty() || tail.starts_with(['.', '['])) && walk(child, tail)
            })
        })
    }
    walk(object, field)
        || field
            .rsplit_once('.')
            .is_some_and(|(parent, _)| walk(object, parent))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Any spec is judged without a panic, and each error names a field of the spec.
    #[test]
    fn every_error_names_a_field_of_the_spec(spec in any_spec()) {
        let object = json!({"metadata": {"name": "spec"}, "spec": spec});
        if let Err(invalid) = validate_spec(&spec) {
            prop_assert!(!invalid.errors.is_empty());
            for e in &invalid.errors {
                prop_assert!(names_a_field(&object, &e.field), "{e} in {object}");
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}

/// A generation that passed is not checked again; a new generation is.
#[test]
fn a_passed_generation_is_not_checked_again_and_a_new_one_is() {
    let passed = vllmservice_api::Passed::default();
    let mut object = demo_with(&json!({}));
    object["metadata"]["uid"] = json!("u-1");
    object["metadata"]["generation"] = json!(1);
    let vllm: VLLMService = serde_json::from_value(object.clone()).unwrap();
    passed.validate(&vllm).expect("the demo is valid");
    assert_eq!(passed.len(), 1);

    // The same generation with a spec that breaks a rule: taken as checked
    // (the API server bumps the generation on every spec change).
    let mut broken = object.clone();
    broken["spec"]["replicas"] = json!(-1);
    let vllm: VLLMService = serde_json::from_value(broken.clone()).unwrap();
    assert!(validate(&vllm).is_err(), "the broken spec breaks a rule");
    assert!(passed.validate(&vllm).is_ok());

    // Its next generation is checked, and refused.
    broken["metadata"]["generation"] = json!(2);
    let vllm: VLLMService = serde_json::from_value(broken).unwrap();
    assert!(passed.validate(&vllm).is_err());

    // An object without uid (a file given to `render`) is always checked.
    let mut no_uid = demo_with(&json!({"replicas": -1}));
    no_uid["metadata"]["generation"] = json!(1);
    let vllm: VLLMService = serde_json::from_value(no_uid).unwrap();
    assert!(passed.validate(&vllm).is_err());

    passed.forget("u-1");
    assert!(passed.is_empty());
}
