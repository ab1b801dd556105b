//! The hand-written third-party kinds (`src/kinds/`) against the CRDs pinned
//! in `hack/cluster/crds/go.mod` (fetched by `hack/cluster/crds.sh`, which
//! needs Go and the Go module cache or the network): each kind's group,
//! version, kind, plural and scope are the CRD's, and what the builders make
//! validates against the CRD's `openAPIV3Schema`, an unknown field being an
//! error (the API server would prune it silently: a misspelled field would
//! vanish). Whether the API server and KEDA accept the objects is tested on
//! the cluster (`tests/monitoring.rs`, `tests/autoscaling.rs`).

use std::any::TypeId;

use kube::{Resource, core::NamespaceResourceScope};
use serde::Serialize;
use serde_json::{Value, json};
use vllmservice_api::VLLMService;
use vllmservice_controller::{
    kinds::{
        keda::{Condition, ScaledObject, ScaledObjectStatus},
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    reconcile::build,
};

/// The pinned CRD manifest of `set` (a `hack/cluster/crds.sh` argument) whose
/// path ends with `file`, as JSON.
fn pinned_crd(set: &str, file: &str) -> Value {
    let script = testkit::repo_root().join("hack/cluster/crds.sh");
    let out = std::process::Command::new(&script)
        .arg(set)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} {set} failed, so the pinned CRDs the kinds are checked against are missing \
         (it needs Go and the Go module cache or the network):\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout
        .lines()
        .find(|l| l.ends_with(file))
        .unwrap_or_else(|| panic!("{} {set} printed no {file}:\n{stdout}", script.display()));
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"))
}

fn service_monitor_crd() -> Value {
    pinned_crd("prometheus", "/monitoring.coreos.com_servicemonitors.yaml")
}

fn prometheus_rule_crd() -> Value {
    pinned_crd("prometheus", "/monitoring.coreos.com_prometheusrules.yaml")
}

fn scaled_object_crd() -> Value {
    pinned_crd("keda", "/keda.sh_scaledobjects.yaml")
}

/// The CRD's version `K` is of (served and the storage version).
fn version_of<K: Resource<DynamicType = ()>>(crd: &Value) -> &Value {
    let versions = crd["spec"]["versions"].as_array().expect("spec.versions");
    let v = versions
        .iter()
        .find(|v| v["name"] == K::version(&()).as_ref())
        .unwrap_or_else(|| {
            panic!(
                "the pinned {} CRD has no version {} (it has {:?})",
                K::kind(&()),
                K::version(&()),
                versions.iter().map(|v| &v["name"]).collect::<Vec<_>>()
            )
        });
    assert_eq!(
        v["served"],
        true,
        "{} {} is not served",
        K::kind(&()),
        v["name"]
    );
    assert_eq!(
        v["storage"],
        true,
        "{} {} is not stored",
        K::kind(&()),
        v["name"]
    );
    v
}

/// `K`'s `kube::Resource` names the CRD's group, version, kind, plural and scope.
fn assert_same_names<K>(crd: &Value)
where
    K: Resource<DynamicType = ()>,
    K::Scope: 'static,
{
    let kind = K::kind(&());
    assert_eq!(
        crd["spec"]["group"],
        K::group(&()).as_ref(),
        "{kind}: group"
    );
    assert_eq!(crd["spec"]["names"]["kind"], kind.as_ref(), "kind");
    assert_eq!(
        crd["spec"]["names"]["plural"],
        K::plural(&()).as_ref(),
        "{kind}: plural"
    );
    assert_eq!(crd["spec"]["scope"], "Namespaced", "{kind}: scope");
    assert_eq!(
        TypeId::of::<K::Scope>(),
        TypeId::of::<NamespaceResourceScope>(),
        "{kind}: namespaced"
    );
    version_of::<K>(crd);
}

#[test]
fn each_kind_names_the_pinned_crds_group_version_kind_plural_and_scope() {
    assert_same_names::<ServiceMonitor>(&service_monitor_crd());
    assert_same_names::<PrometheusRule>(&prometheus_rule_crd());
    assert_same_names::<ScaledObject>(&scaled_object_crd());
}

/// `schema` with every object that lists its properties closed to others, as
/// `kubectl --validate=strict` has the API server treat unknown fields.
fn strict(schema: &mut Value) {
    match schema {
        Value::Object(o) => {
            let open = o.contains_key("additionalProperties")
                || o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if o.contains_key("properties") && !open {
                o.insert("additionalProperties".into(), Value::Bool(false));
            }
            o.values_mut().for_each(strict);
        }
        Value::Array(a) => a.iter_mut().for_each(strict),
        _ => {}
    }
}

/// The schema errors of `object` under `K`'s version of `crd`, unknown fields included.
fn schema_errors<K: Resource<DynamicType = ()>>(crd: &Value, object: &Value) -> Vec<String> {
    let mut schema = version_of::<K>(crd)["schema"]["openAPIV3Schema"].clone();
    assert!(schema.is_object(), "{}: no openAPIV3Schema", K::kind(&()));
    strict(&mut schema);
    let validator = jsonschema::validator_for(&schema).expect("the CRD's schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn assert_valid<K: Resource<DynamicType = ()> + Serialize>(crd: &Value, object: &K, what: &str) {
    let json = serde_json::to_value(object).unwrap();
    let errors = schema_errors::<K>(crd, &json);
    assert!(
        errors.is_empty(),
        "{what}: the pinned {} CRD's schema refuses it:\n{}\n{json:#}",
        K::kind(&()),
        errors.join("\n")
    );
}

fn example(file: &str) -> VLLMService {
    let path = testkit::repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).expect("example file");
    let mut vs: VLLMService = serde_saphyr::from_str(&text).expect("example parses");
    vs.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    vs
}

/// The demo with `spec.autoscaling` from JSON.
fn autoscaled(autoscaling: Value) -> VLLMService {
    let mut vs = example("qwen-demo.yaml");
    vs.spec.autoscaling = Some(serde_json::from_value(autoscaling).expect("autoscaling parses"));
    vs
}

/// Services that between them make every field of the three kinds the builders set.
fn services() -> Vec<(&'static str, VLLMService)> {
    let mut long = autoscaled(json!({"maxReplicas": 3, "target": "2"}));
    long.metadata.name = Some(format!("a{}", "-b".repeat(31)));
    vec![
        ("full.yaml", example("full.yaml")),
        (
            "scaling to zero on kvCacheUsage",
            autoscaled(json!({"minReplicas": 0, "maxReplicas": 5, "target": "0.8",
                "metric": "kvCacheUsage", "activationQuery": "sum(up)"})),
        ),
        ("a name too long for KEDA's HPA name", long),
    ]
}

#[test]
fn what_the_builders_make_validates_against_the_pinned_crds() {
    let (sm_crd, rule_crd, so_crd) = (
        service_monitor_crd(),
        prometheus_rule_crd(),
        scaled_object_crd(),
    );
    let mut built = (0, 0, 0);
    for (what, vs) in services() {
        let vs = vllmservice_api::validate(&vs).expect("the service is valid");
        if let Some(sm) = build::servicemonitor(&vs) {
            assert_valid(&sm_crd, &sm, what);
            built.0 += 1;
        }
        if let Some(rule) = build::prometheusrule(&vs) {
            assert_valid(&rule_crd, &rule, what);
            built.1 += 1;
        }
        if let Some(so) = build::scaledobject(&vs, build::DEFAULT_PROMETHEUS_ADDRESS) {
            let hpa_named = so
                .spec
                .advanced
                .as_ref()
                .unwrap()
                .horizontal_pod_autoscaler_config
                .as_ref()
                .unwrap()
                .name
                .is_some();
            assert_valid(&so_crd, &so, what);
            built.2 += 1 + usize::from(hpa_named);
        }
    }
    // Each kind built, and the ScaledObject once with its HPA named.
    assert_eq!(
        built,
        (1, 1, 4),
        "(ServiceMonitors, PrometheusRules, ScaledObjects + named HPAs)"
    );

    // The status the operator reads, as the type writes it, is KEDA's.
    let mut so = build::scaledobject(
        &vllmservice_api::validate(&example("full.yaml")).unwrap(),
        build::DEFAULT_PROMETHEUS_ADDRESS,
    )
    .unwrap();
    so.status = Some(ScaledObjectStatus {
        conditions: Some(vec![Condition {
            message: Some("ScaledObject is defined correctly and is ready for scaling".into()),
            reason: Some("ScaledObjectReady".into()),
            status: "True".into(),
            r#type: "Ready".into(),
        }]),
    });
    assert_valid(&so_crd, &so, "with KEDA's Ready condition");
}

/// The check is not vacuous: a misspelled field, a wrong type and a missing
/// required field are each refused.
#[test]
fn the_schema_check_refuses_unknown_fields_wrong_types_and_missing_required_fields() {
    let vs = example("full.yaml");
    let vs = vllmservice_api::validate(&vs).unwrap();
    let sm_crd = service_monitor_crd();
    let sm = serde_json::to_value(build::servicemonitor(&vs).unwrap()).unwrap();
    assert!(schema_errors::<ServiceMonitor>(&sm_crd, &sm).is_empty());

    let mut misspelled = sm.clone();
    let endpoint = misspelled["spec"]["endpoints"][0].as_object_mut().unwrap();
    let interval = endpoint.remove("interval").unwrap();
    endpoint.insert("intervall".into(), interval);
    let errors = schema_errors::<ServiceMonitor>(&sm_crd, &misspelled);
    assert!(
        errors.iter().any(|e| e.contains("intervall")),
        "a misspelled field is refused: {errors:?}"
    );

    let so_crd = scaled_object_crd();
    let so = build::scaledobject(&vs, build::DEFAULT_PROMETHEUS_ADDRESS).unwrap();
    let mut wrong_type = serde_json::to_value(&so).unwrap();
    wrong_type["spec"]["maxReplicaCount"] = json!("4");
    assert!(!schema_errors::<ScaledObject>(&so_crd, &wrong_type).is_empty());

    let mut missing = serde_json::to_value(&so).unwrap();
    missing["spec"].as_object_mut().unwrap().remove("triggers");
    assert!(!schema_errors::<ScaledObject>(&so_crd, &missing).is_empty());
}

/// A live ScaledObject with all that KEDA writes parses (the fields not
/// modelled are dropped) and keeps the conditions the operator reads.
#[test]
fn a_scaled_object_as_keda_reports_it_parses() {
    let so: ScaledObject = serde_json::from_value(json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": "s", "namespace": "ns"},
        "spec": {"scaleTargetRef": {"apiVersion": "aiinfra.example.com/v1alpha1",
                                    "kind": "VLLMService", "name": "s"},
                 "minReplicaCount": 0, "maxReplicaCount": 3, "fallback": {"failureThreshold": 3, "replicas": 1},
                 "triggers": [{"type": "prometheus", "name": "load", "metricType": "AverageValue",
                               "useCachedMetrics": false,
                               "metadata": {"query": "sum(x)", "threshold": "2"}}]},
        "status": {"hpaName": "keda-hpa-s", "originalReplicaCount": 1,
                   "scaleTargetKind": "aiinfra.example.com/v1alpha1.VLLMService",
                   "conditions": [
            {"type": "Ready", "status": "True", "reason": "ScaledObjectReady", "message": "ok"},
            {"type": "Active", "status": "False"}]}
    }))
    .expect("a ScaledObject as KEDA reports it parses");
    assert_eq!(so.spec.triggers[0].metadata["threshold"], "2");
    let conditions = so.status.unwrap().conditions.unwrap();
    assert_eq!(
        (conditions[0].r#type.as_str(), conditions[0].status.as_str()),
        ("Ready", "True")
    );
    assert_eq!(conditions[1].reason, None);
}
