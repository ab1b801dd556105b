//! The pure builders: exact snapshots of what the SPEC examples produce, and
//! property tests that no spec panics them or makes them nondeterministic.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use vllmservice_api::VLLMService;
use vllmservice_controller::build;

fn example(file: &str) -> VLLMService {
    let path = testkit::repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).expect("example file");
    let mut vs: VLLMService = serde_saphyr::from_str(&text).expect("example parses");
    // What the API server adds on create; the owner reference needs them.
    vs.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
    vs
}

/// `vs` as the builders take it.
fn valid(vs: &VLLMService) -> vllmservice_api::Valid<'_> {
    vllmservice_api::validate(vs).expect("the example is valid")
}

#[test]
fn spec_example_deployment() {
    insta::assert_yaml_snapshot!(build::deployment(&valid(&example("qwen-demo.yaml"))));
}

#[test]
fn spec_example_service() {
    insta::assert_yaml_snapshot!(build::service(&valid(&example("qwen-demo.yaml"))));
}

#[test]
fn full_example_deployment() {
    insta::assert_yaml_snapshot!(build::deployment(&valid(&example("full.yaml"))));
}

#[test]
fn full_example_service() {
    insta::assert_yaml_snapshot!(build::service(&valid(&example("full.yaml"))));
}

#[test]
fn full_example_httproute() {
    insta::assert_yaml_snapshot!(build::httproute(&valid(&example("full.yaml"))));
}

#[test]
fn full_example_servicemonitor() {
    insta::assert_yaml_snapshot!(build::servicemonitor(&valid(&example("full.yaml"))));
}

#[test]
fn full_example_prometheusrule() {
    insta::assert_yaml_snapshot!(build::prometheusrule(&valid(&example("full.yaml"))));
}

#[test]
fn monitoring_labels_win_over_spec_labels_and_the_operators_keys_win_over_both() {
    let mut vs = example("full.yaml");
    vs.spec
        .labels
        .insert("release".into(), "from-spec-labels".into());
    vs.spec.labels.insert("only-in-spec".into(), "kept".into());
    vs.spec
        .monitoring
        .labels
        .insert("release".into(), "from-monitoring-labels".into());
    vs.spec
        .monitoring
        .labels
        .insert("app.kubernetes.io/managed-by".into(), "someone-else".into());
    let v = valid(&vs);
    let monitor = build::servicemonitor(&v).expect("monitoring is on");
    let rule = build::prometheusrule(&v).expect("alerts are on");
    for labels in [monitor.metadata.labels, rule.metadata.labels] {
        let labels = labels.expect("labels");
        assert_eq!(labels["release"], "from-monitoring-labels");
        assert_eq!(labels["only-in-spec"], "kept");
        assert_eq!(
            labels["app.kubernetes.io/managed-by"],
            "vllmservice-operator"
        );
        assert_eq!(
            labels["app.kubernetes.io/instance"],
            vs.metadata.name.clone().unwrap()
        );
    }
    // The Deployment keeps the general labels.
    let d = build::deployment(&v);
    assert_eq!(d.metadata.labels.unwrap()["release"], "from-spec-labels");
}

#[test]
fn extra_args_come_last_after_tensor_parallelism() {
    let vs = example("full.yaml");
    let args = build::vllm_args(&valid(&vs));
    let tp = args
        .iter()
        .position(|a| a == "--tensor-parallel-size")
        .unwrap();
    assert_eq!(&args[tp + 2..], vs.spec.engine_args.extra_args.as_slice());
    assert_eq!(&args[..2], ["--model", vs.spec.model_path.as_str()]);
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![".*", "[a-z0-9./:-]{0,300}", Just(String::new())]
}

prop_compose! {
    fn arbitrary_service()(
        name in "[a-z]([-a-z0-9]{0,61}[a-z0-9])?",
        image in text(), model_path in text(), model_name in text(),
        replicas in any::<i32>(), port in any::<i32>(),
        labels in prop::collection::btree_map(text(), text(), 0..20),
        pod_annotations in prop::collection::btree_map(text(), text(), 0..5),
        extra_args in prop::collection::vec(text(), 0..10),
        tp in prop::option::of(any::<i32>()),
        shm in prop::option::of(text()),
        scheduler in prop::option::of(text()),
        host_ipc in any::<bool>(),
        probes in (prop::option::of(any::<bool>()), prop::option::of(any::<bool>()),
                   prop::option::of(any::<bool>())),
        period in any::<i32>(),
        sub_path in prop::option::of(text()),
    ) -> VLLMService {
        let mut vs = example("qwen-demo.yaml");
        vs.metadata.name = Some(name);
        let s = &mut vs.spec;
        (s.image, s.model_path, s.model_name) = (image, model_path, model_name);
        (s.replicas, s.port, s.host_ipc) = (replicas, port, host_ipc);
        s.labels = labels;
        s.pod_annotations = pod_annotations;
        s.engine_args.extra_args = extra_args;
        s.engine_args.tensor_parallel_size = tp;
        s.shm_size = shm.map(Quantity);
        s.scheduler_name = scheduler;
        s.startup_probe.enabled = probes.0;
        s.liveness_probe.enabled = probes.1;
        s.readiness_probe.enabled = probes.2;
        s.readiness_probe.period_seconds = period;
        s.storage.sub_path = sub_path;
        vs
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn validation_and_builders_never_panic_and_are_deterministic(vs in arbitrary_service()) {
        // Builders only take what validation lets through.
        let Ok(vs) = vllmservice_api::validate(&vs) else { return Ok(()) };
        let d1 = serde_json::to_value(build::deployment(&vs)).unwrap();
        let d2 = serde_json::to_value(build::deployment(&vs)).unwrap();
        prop_assert_eq!(&d1, &d2);
        let s = serde_json::to_value(build::service(&vs)).unwrap();
        // The operator's keys always win over user labels of the same name.
        let labels: BTreeMap<String, String> =
            serde_json::from_value(d1["metadata"]["labels"].clone()).unwrap();
        prop_assert_eq!(labels["app.kubernetes.io/managed-by"].as_str(), "vllmservice-operator");
        prop_assert_eq!(&d1["spec"]["selector"]["matchLabels"], &s["spec"]["selector"]);
    }
}
