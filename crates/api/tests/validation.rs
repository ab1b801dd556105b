//! validate() and the CRD's CEL rules enforce the same rules with the same messages, name the
//! offending field, and never panic.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use serde_json::{Value, json};
use vllmservice_api::rules::{self, RESERVED_FLAGS};
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

/// The CEL rules, evaluated offline on the generated CRD, reject the same cases on the same
/// field with the same message as validate().
#[test]
fn cel_rules_agree_with_validate() {
    let schema = common::crd_schema();
    let compiled = kube_cel::compile_schema(&schema);
    let validator = kube_cel::Validator::new();
    for example in common::EXAMPLES {
        let object = common::read_yaml(example);
        if let Err(e) = validator.validate_compiled(&compiled, &object, None) {
            panic!("{example}: {e}");
        }
    }
    for case in common::invalid_cases().iter().filter(|c| c.cel) {
        let object = case.object();
        let cel_errors = validator
            .validate_compiled(&compiled, &object, None)
            .err()
            .unwrap_or_else(|| panic!("{}: accepted by the CEL rules", case.name));
        let rust_errors = errors_of(&object).unwrap();
        for cel in cel_errors.iter() {
            assert_eq!(cel.field_path, case.field, "{}: {cel}", case.name);
            assert!(
                rust_errors
                    .iter()
                    .any(|e| e.field == cel.field_path && e.message == cel.message),
                "{}: CEL says {cel}, validate() says {rust_errors:?}",
                case.name
            );
        }
    }
}

/// Evaluates one CEL rule on a string, as the API server would on a string field.
struct CelRule {
    compiled: kube_cel::CompiledSchema,
    validator: kube_cel::Validator,
}

impl CelRule {
    fn on_string(rule: &str) -> Self {
        Self::on(json!({"type": "string"}), rule)
    }

    fn on(mut field: Value, rule: &str) -> Self {
        field["x-kubernetes-validations"] = json!([{"rule": rule, "message": "no"}]);
        let schema = json!({"type": "object", "properties": {"v": field}});
        let compiled = kube_cel::compile_schema(&schema);
        assert!(!compiled.has_errors(), "{rule}");
        Self {
            compiled,
            validator: kube_cel::Validator::new(),
        }
    }

    fn accepts(&self, value: Value) -> bool {
        self.validator
            .validate_compiled(&self.compiled, &json!({ "v": value }), None)
            .is_ok()
    }
}

fn label_map_rule() -> CelRule {
    CelRule::on(
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        &rules::label_keys_cel(),
    )
}

fn annotation_map_rule() -> CelRule {
    CelRule::on(
        json!({"type": "object", "additionalProperties": {"type": "string"}}),
        &rules::annotation_keys_cel(),
    )
}

fn extra_args_rules() -> Vec<CelRule> {
    RESERVED_FLAGS
        .iter()
        .map(|flag| {
            CelRule::on(
                json!({"type": "array", "items": {"type": "string"}}),
                &flag.cel(),
            )
        })
        .collect()
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
        (
            prop::sample::select(
                RESERVED_FLAGS
                    .iter()
                    .flat_map(|f| f.spellings())
                    .collect::<Vec<_>>()
            ),
            "(=[0-9]{0,2}|[a-z_-]{0,2})?",
        )
            .prop_map(|(flag, suffix)| format!("{flag}{suffix}")),
        "\\PC{0,16}",
        // Around env names, keys and trimming.
        "[ =._A-Za-z0-9\\t\u{a0}é-]{0,12}",
        "(\\.{1,3})[a-z._-]{0,4}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The Rust twins of the CEL formats accept exactly what the CEL rules accept.
    #[test]
    fn rust_formats_match_cel(s in near_format()) {
        thread_local! {
            static HOST: CelRule = CelRule::on_string(&rules::hostname_cel());
            static FRACTION: CelRule = CelRule::on_string(&rules::fraction_cel());
            static DURATION: CelRule = CelRule::on_string(&rules::duration_cel());
            static RELATIVE: CelRule = CelRule::on_string(rules::RELATIVE_PATH_CEL);
            static LABELS: CelRule = label_map_rule();
            static ANNOTATIONS: CelRule = annotation_map_rule();
            static EXTRA_ARGS: Vec<CelRule> = extra_args_rules();
            static SUBDOMAIN: CelRule = CelRule::on_string(&rules::dns_subdomain_cel());
            static OPTIONAL_SUBDOMAIN: CelRule =
                CelRule::on_string(&rules::optional_dns_subdomain_cel());
            static LABEL: CelRule = CelRule::on_string(&rules::dns_label_cel());
            static ENV_NAME: CelRule = CelRule::on_string(&rules::env_name_cel());
            static CONFIG_KEY: CelRule = CelRule::on_string(&rules::config_key_cel());
            static IMAGE: CelRule = CelRule::on_string(rules::IMAGE_CEL);
        }
        let host_ok = s.len() <= rules::limits::DNS_SUBDOMAIN;
        if host_ok {
            prop_assert_eq!(HOST.with(|r| r.accepts(json!(s))), rules::is_hostname(&s), "host");
        }
        prop_assert_eq!(FRACTION.with(|r| r.accepts(json!(s))), rules::is_fraction(&s), "fraction");
        prop_assert_eq!(DURATION.with(|r| r.accepts(json!(s))), rules::is_duration(&s), "duration");
        prop_assert_eq!(RELATIVE.with(|r| r.accepts(json!(s))), rules::is_relative_path(&s), "subPath");
        prop_assert_eq!(
            LABELS.with(|r| r.accepts(json!({ s.clone(): "v" }))),
            rules::is_label_key(&s),
            "label key"
        );
        prop_assert_eq!(
            ANNOTATIONS.with(|r| r.accepts(json!({ s.clone(): "v" }))),
            rules::is_annotation_key(&s),
            "annotation key"
        );
        if host_ok {
            prop_assert_eq!(SUBDOMAIN.with(|r| r.accepts(json!(s))), rules::is_dns_subdomain(&s), "subdomain");
            prop_assert_eq!(CONFIG_KEY.with(|r| r.accepts(json!(s))), rules::is_config_key(&s), "config key");
            prop_assert_eq!(
                OPTIONAL_SUBDOMAIN.with(|r| r.accepts(json!(s))),
                s.is_empty() || rules::is_dns_subdomain(&s),
                "optional subdomain"
            );
        }
        if s.len() <= rules::limits::LABEL_NAME {
            prop_assert_eq!(LABEL.with(|r| r.accepts(json!(s))), rules::is_dns_label(&s), "label");
        }
        prop_assert_eq!(ENV_NAME.with(|r| r.accepts(json!(s))), rules::is_env_var_name(&s), "env name");
        prop_assert_eq!(IMAGE.with(|r| r.accepts(json!(s))), rules::is_trimmed(&s), "image");
        for (flag, rule) in RESERVED_FLAGS.iter().zip(EXTRA_ARGS.with(|r| r.iter().map(|r| r.accepts(json!([s]))).collect::<Vec<_>>())) {
            prop_assert_eq!(rule, !flag.is_set_by(&s), "{}", flag.flag);
        }
    }

    /// The schema's `pattern`s (no CEL), evaluated with the regex engine of the CEL rules,
    /// against their Rust twins.
    #[test]
    fn rust_formats_match_openapi_patterns(s in near_format()) {
        thread_local! {
            static QUANTITY: CelRule = pattern_rule(rules::QUANTITY_RE);
            static SIZE: CelRule = pattern_rule(rules::SIZE_RE);
            static LABEL_VALUE: CelRule = pattern_rule(rules::LABEL_VALUE_RE);
        }
        prop_assert_eq!(QUANTITY.with(|r| r.accepts(json!(s))), rules::is_quantity(&s), "quantity");
        prop_assert_eq!(SIZE.with(|r| r.accepts(json!(s))), rules::is_size(&s), "size");
        if s.chars().count() <= rules::limits::LABEL_NAME {
            prop_assert_eq!(
                LABEL_VALUE.with(|r| r.accepts(json!(s))),
                rules::is_label_value(&s),
                "label value"
            );
        }
    }

    #[test]
    fn validate_never_panics(spec in any_spec()) {
        let _ = validate_spec(&spec);
    }
}

/// Errors as (field, message) pairs.
type Reported = BTreeSet<(String, String)>;

/// The (field, message) pairs of the CRD's CEL rules for `object`, restricted to fields under
/// `prefix`, and those validate() reports with the same messages.
fn cel_and_rust_errors(object: &Value, prefix: &str) -> (Reported, Reported) {
    thread_local! {
        static COMPILED: kube_cel::CompiledSchema = kube_cel::compile_schema(&common::crd_schema());
        static MESSAGES: BTreeSet<String> = cel_messages(&common::crd_schema());
    }
    let under = |field: &str| {
        field == prefix
            || field.starts_with(&format!("{prefix}."))
            || field.starts_with(&format!("{prefix}["))
    };
    let cel: Reported = COMPILED.with(|compiled| {
        kube_cel::Validator::new()
            .validate_compiled(compiled, object, None)
            .err()
            .map(|errors| {
                errors
                    .iter()
                    .map(|e| (e.field_path.clone(), e.message.clone()))
                    .collect()
            })
            .unwrap_or_default()
    });
    let cel = cel.into_iter().filter(|(field, _)| under(field)).collect();
    let rust = errors_of(object)
        .expect("the object deserializes")
        .into_iter()
        .filter(|e| under(&e.field) && MESSAGES.with(|m| m.contains(&e.message)))
        .map(|e| (e.field, e.message))
        .collect();
    (cel, rust)
}

fn cel_messages(node: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    match node {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["message"].as_str().map(String::from)),
                );
            }
            map.values().for_each(|v| out.extend(cel_messages(v)));
        }
        Value::Array(items) => items.iter().for_each(|v| out.extend(cel_messages(v))),
        _ => {}
    }
    out
}

/// qwen-demo with `spec` fields replaced.
fn demo_with(fields: Value) -> Value {
    let mut object = common::read_yaml("examples/qwen-demo.yaml");
    for (key, value) in fields.as_object().unwrap() {
        object["spec"][key] = value.clone();
    }
    object
}

/// Resource names around every class the rules tell apart.
fn resource_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "cpu",
        "memory",
        "ephemeral-storage",
        "nvidia.com/gpu",
        "example.kubernetes.io/thing",
        "hugepages-2Mi",
        "hugepages-1Gi",
        "hugepages-x",
        "gpu",
        "pods",
        "a/b/c",
        "requests.example.com/x",
        "Example.com/gpu",
    ])
    .prop_map(String::from)
}

/// Quantities on which kube-cel's quantity library agrees with the API server's (it has no
/// int64 notion of `isInteger()`: `1.0` and `1000m` would differ); the real API server checks
/// the others in api_server.rs.
fn resource_quantity() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        json!("0"),
        json!("1"),
        json!("2"),
        json!("3"),
        json!(4),
        json!("500m"),
        json!("1.5"),
        json!("1Gi"),
        json!("2Mi"),
        json!("3Mi"),
        json!("4Mi"),
        json!("16Gi"),
        json!("16G"),
        json!("1e3"),
        json!("1k"),
        json!("-1"),
        json!("lots"),
    ])
}

fn resource_map() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(resource_name(), resource_quantity(), 0..5)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

fn env_var() -> impl Strategy<Value = Value> {
    let name = prop_oneof![
        3 => "[A-Z_]{1,8}",
        1 => near_format(),
    ];
    let object_name = prop_oneof![3 => "[a-z]{1,6}", 1 => near_format()];
    let key = prop_oneof![3 => "[a-z._-]{1,6}", 1 => near_format()];
    let key_ref = (object_name, key).prop_map(|(n, k)| json!({"name": n, "key": k}));
    let sources = (
        prop::option::of(key_ref.clone()),
        prop::option::of(key_ref),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(secret, config_map, field_ref, resource_ref, file_ref)| {
            let mut from = serde_json::Map::new();
            if let Some(r) = secret {
                from.insert("secretKeyRef".into(), r);
            }
            if let Some(r) = config_map {
                from.insert("configMapKeyRef".into(), r);
            }
            if field_ref {
                from.insert("fieldRef".into(), json!({"fieldPath": "metadata.name"}));
            }
            if resource_ref {
                from.insert("resourceFieldRef".into(), json!({"resource": "limits.cpu"}));
            }
            if file_ref {
                from.insert(
                    "fileKeyRef".into(),
                    json!({"volumeName": "dshm", "path": "p", "key": "K"}),
                );
            }
            Value::Object(from)
        });
    (
        name,
        prop::option::of(prop_oneof!["", "[a-z]{1,4}"]),
        prop::option::of(sources),
    )
        .prop_map(|(name, value, value_from)| {
            let mut var = json!({ "name": name });
            if let Some(value) = value {
                var["value"] = json!(value);
            }
            if let Some(from) = value_from {
                var["valueFrom"] = from;
            }
            var
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// validate() reports exactly what the CRD's CEL rules on `resources` report.
    #[test]
    fn resource_rules_match_cel(
        requests in prop::option::of(resource_map()),
        limits in prop::option::of(resource_map()),
        claims in any::<bool>(),
    ) {
        let mut resources = serde_json::Map::new();
        if let Some(requests) = requests {
            resources.insert("requests".into(), requests);
        }
        if let Some(limits) = limits {
            resources.insert("limits".into(), limits);
        }
        if claims {
            resources.insert("claims".into(), json!([{"name": "gpu"}]));
        }
        let object = demo_with(json!({ "resources": resources }));
        let (cel, rust) = cel_and_rust_errors(&object, "spec.resources");
        prop_assert_eq!(cel, rust, "{}", object["spec"]["resources"]);
    }

    /// validate() reports exactly what the CRD's CEL rules on `env` report.
    #[test]
    fn env_rules_match_cel(env in prop::collection::vec(env_var(), 0..4)) {
        let object = demo_with(json!({ "env": env }));
        let (cel, rust) = cel_and_rust_errors(&object, "spec.env");
        prop_assert_eq!(cel, rust, "{}", object["spec"]["env"]);
    }
}

fn pattern_rule(pattern: &str) -> CelRule {
    CelRule::on_string(&format!("self.matches('{pattern}')"))
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
