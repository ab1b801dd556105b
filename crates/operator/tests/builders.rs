//! The pure builders: exact snapshots of what the examples produce, and
//! property tests that no spec panics them or makes them nondeterministic.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::prelude::*;
use vllmservice_api::VLLMService;
use vllmservice_controller::{
    cache::placement::Capacity,
    reconcile::{
        build::{self, rollout},
        seen::Seen,
    },
};

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
    insta::assert_yaml_snapshot!(build::deployment(
        &valid(&example("qwen-demo.yaml")),
        &Seen::default()
    ));
}

#[test]
fn spec_example_service() {
    insta::assert_yaml_snapshot!(build::service(&valid(&example("qwen-demo.yaml"))));
}

#[test]
fn full_example_deployment() {
    insta::assert_yaml_snapshot!(build::deployment(
        &valid(&example("full.yaml")),
        &Seen::default()
    ));
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

/// The demo with `spec.autoscaling` from JSON (defaults filled in by serde).
fn autoscaled(autoscaling: serde_json::Value) -> VLLMService {
    let mut vs = example("qwen-demo.yaml");
    vs.spec.autoscaling = Some(serde_json::from_value(autoscaling).expect("autoscaling parses"));
    vs
}

fn scaledobject(vs: &VLLMService) -> vllmservice_controller::kinds::keda::ScaledObject {
    build::scaledobject(&valid(vs), build::DEFAULT_PROMETHEUS_ADDRESS).expect("autoscaling is set")
}

/// Server address override, custom query, scale to zero with an activation query.
#[test]
fn full_example_scaledobject() {
    insta::assert_yaml_snapshot!(scaledobject(&example("full.yaml")));
}

#[test]
fn scaledobject_on_requests_waiting() {
    insta::assert_yaml_snapshot!(scaledobject(&autoscaled(
        serde_json::json!({"minReplicas": 1, "maxReplicas": 3, "target": "2"})
    )));
}

#[test]
fn scaledobject_on_requests_running() {
    insta::assert_yaml_snapshot!(scaledobject(&autoscaled(serde_json::json!({
        "maxReplicas": 4, "metric": "requestsRunning", "target": "6",
        "scaleDownStabilizationSeconds": 60, "initialCooldownSeconds": 120
    }))));
}

#[test]
fn scaledobject_on_kv_cache_usage() {
    insta::assert_yaml_snapshot!(scaledobject(&autoscaled(serde_json::json!({
        "minReplicas": 2, "maxReplicas": 8, "metric": "kvCacheUsage", "target": "0.8"
    }))));
}

/// minReplicas 0 with an activation query: KEDA may scale to 0, and the
/// activation and in-flight triggers keep or bring the service up.
#[test]
fn scaledobject_scaling_to_zero() {
    insta::assert_yaml_snapshot!(scaledobject(&autoscaled(serde_json::json!({
        "minReplicas": 0, "maxReplicas": 3, "target": "2",
        "activationQuery": "sum(gateway_requests_waiting{route=\"qwen-demo\"})"
    }))));
}

/// minReplicas 0 without an activation query: nothing could bring the service
/// back from zero, so it keeps one pod (AutoscalingReady says why).
#[test]
fn scaledobject_min_zero_without_activation_query_keeps_one() {
    let so = scaledobject(&autoscaled(
        serde_json::json!({"minReplicas": 0, "maxReplicas": 3, "target": "2", "activationQuery": ""}),
    ));
    assert_eq!(so.spec.min_replica_count, Some(1));
    let names: Vec<_> = so
        .spec
        .triggers
        .iter()
        .map(|t| t.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["load"]);
    insta::assert_yaml_snapshot!(so.spec);
}

#[test]
fn scaledobject_address_defaults_to_the_operator_flag_and_the_spec_overrides_it() {
    let address = |vs: &VLLMService, default: &str| {
        let so = build::scaledobject(&valid(vs), default).unwrap();
        let addresses: Vec<String> = so
            .spec
            .triggers
            .iter()
            .map(|t| t.metadata["serverAddress"].clone())
            .collect();
        assert!(addresses.windows(2).all(|w| w[0] == w[1]), "{addresses:?}");
        addresses[0].clone()
    };
    let plain = autoscaled(serde_json::json!({"maxReplicas": 3, "target": "2"}));
    assert_eq!(
        address(&plain, "http://127.0.0.1:9090"),
        "http://127.0.0.1:9090"
    );
    let empty = autoscaled(
        serde_json::json!({"maxReplicas": 3, "target": "2", "prometheus": {"serverAddress": ""}}),
    );
    assert_eq!(
        address(&empty, "http://127.0.0.1:9090"),
        "http://127.0.0.1:9090"
    );
    assert_eq!(
        address(&example("full.yaml"), "http://127.0.0.1:9090"),
        "http://prometheus.monitoring.svc:9090"
    );
    assert!(build::scaledobject(&valid(&example("qwen-demo.yaml")), "http://x").is_none());
}

/// A model name is a PromQL string literal in the built-in query, whatever it holds.
#[test]
fn scaledobject_query_escapes_the_model_name() {
    let mut vs = autoscaled(serde_json::json!({"maxReplicas": 3, "target": "2"}));
    vs.spec.model_name = r#"evil"} or vector(100) or {x=""#.into();
    let so = scaledobject(&vs);
    assert_eq!(
        so.spec.triggers[0].metadata["query"],
        r#"sum(vllm:num_requests_waiting{namespace="ai-demo",service="qwen-demo",model_name="evil\"} or vector(100) or {x=\""})"#
    );
}

/// KEDA's webhook refuses an HPA name over 63 characters: a long service name
/// gets a shortened one, asked for explicitly.
#[test]
fn a_long_name_gets_a_short_hpa_name() {
    let mut vs = autoscaled(serde_json::json!({"maxReplicas": 3, "target": "2"}));
    assert_eq!(
        vllmservice_controller::names::hpa_name(&vs),
        "keda-hpa-qwen-demo"
    );
    let hpa_config = |vs: &VLLMService| {
        scaledobject(vs)
            .spec
            .advanced
            .unwrap()
            .horizontal_pod_autoscaler_config
            .unwrap()
    };
    assert_eq!(hpa_config(&vs).name, None, "KEDA's default name");
    vs.metadata.name = Some(format!("a{}", "-b".repeat(31)));
    let name = vllmservice_controller::names::hpa_name(&vs);
    assert!(
        name.len() <= 63 && name.starts_with("keda-hpa-a-b"),
        "{name}"
    );
    assert_eq!(hpa_config(&vs).name.as_deref(), Some(name.as_str()));
    let mut other = vs.clone();
    other.metadata.name = Some(format!("a{}c", "-b".repeat(30)));
    assert_ne!(vllmservice_controller::names::hpa_name(&other), name);
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
    let d = build::deployment(&v, &Seen::default());
    assert_eq!(d.metadata.labels.unwrap()["release"], "from-spec-labels");
}

#[test]
fn extra_args_come_last_after_tensor_parallelism_and_the_drain() {
    let vs = example("full.yaml");
    let args = build::vllm_args(&valid(&vs));
    let tp = args
        .iter()
        .position(|a| a == "--tensor-parallel-size")
        .unwrap();
    assert_eq!(&args[tp + 2..tp + 4], ["--shutdown-timeout", "30"]);
    // Then LoRA, then the user's.
    assert_eq!(
        &args[tp + 4..tp + 13],
        [
            "--enable-lora",
            "--max-loras",
            "2",
            "--max-lora-rank",
            "16",
            "--lora-modules",
            "sql-lora=/data/models/loras/sql",
            // Downloaded by the operator to <mountPath>/loras/<name>.
            "chat-lora=/data/models/loras/chat-lora",
            "--enable-prefix-caching",
        ]
    );
    assert_eq!(&args[tp + 12..], vs.spec.engine_args.extra_args.as_slice());
    assert_eq!(&args[..2], ["--model", vs.spec.model_path.as_str()]);
}

#[test]
fn full_example_download_jobs() {
    let vs = example("full.yaml");
    let downloads = build::downloads(&valid(&vs), &Default::default());
    let names: Vec<&str> = downloads.iter().map(|d| d.want.name.as_str()).collect();
    // The model's first, then the Hugging Face adapter's (the path adapter needs none).
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names[0].starts_with("hf-qwen2-5-7b-instruct-"), "{names:?}");
    assert!(names[1].starts_with("hf-chat-lora-"), "{names:?}");
    insta::assert_yaml_snapshot!(downloads.into_iter().map(|d| d.job).collect::<Vec<_>>());
}

#[test]
fn a_download_job_is_shared_and_follows_the_revision() {
    let a = example("full.yaml");
    let mut b = a.clone();
    b.metadata.name = Some("other-service".into());
    b.metadata.uid = Some("00000000-0000-0000-0000-000000000002".into());
    b.spec.model_name = "other".into();
    let name = |vs: &VLLMService| {
        build::downloads(&valid(vs), &Default::default())[0]
            .want
            .name
            .clone()
    };
    // Same claim, path, repository and revision: one Job for both.
    assert_eq!(name(&a), name(&b));
    let mut c = a.clone();
    c.spec
        .model_source
        .as_mut()
        .unwrap()
        .hugging_face
        .as_mut()
        .unwrap()
        .revision = "v2".into();
    assert_ne!(name(&a), name(&c));
    let mut d = a.clone();
    d.spec.model_path = "/data/models/elsewhere".into();
    assert_ne!(name(&a), name(&d));
    // A mirror is another source: its own Job, told where the Hub is.
    let mut mirrored = a.clone();
    let endpoint = "https://hf-mirror.example.com/hub";
    mirrored
        .spec
        .model_source
        .as_mut()
        .unwrap()
        .hugging_face
        .as_mut()
        .unwrap()
        .endpoint = Some(endpoint.into());
    assert_ne!(name(&a), name(&mirrored));
    let hub = |vs: &VLLMService| {
        let job = build::downloads(&valid(vs), &Default::default())
            .remove(0)
            .job;
        job.spec.unwrap().template.spec.unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "HF_ENDPOINT")
            .and_then(|e| e.value.clone())
    };
    assert_eq!(hub(&mirrored).as_deref(), Some(endpoint));
    assert_eq!(hub(&a), None, "unset: the client's default Hub");
    // The token is an environment variable from the Secret, never an argument.
    let job = &build::downloads(&valid(&a), &Default::default())[0].job;
    let container = &job
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    let token = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "HF_TOKEN")
        .expect("HF_TOKEN");
    assert!(token.value.is_none());
    assert_eq!(
        token
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap()
            .name,
        "hf-token"
    );
    assert!(
        !container
            .command
            .iter()
            .flatten()
            .any(|a| a.contains("token"))
    );
    // The pods name the downloads they use, so a new revision replaces them.
    let pods = |vs: &VLLMService| {
        build::deployment(&valid(vs), &Seen::default())
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[vllmservice_controller::reconcile::downloads::PODS_ANNOTATION]
            .clone()
    };
    assert_ne!(pods(&a), pods(&c));
}

#[test]
fn model_image_deployment_mounts_the_image() {
    let vs = example("model-image.yaml");
    let d = build::deployment(&valid(&vs), &Seen::default());
    let pod = d.spec.unwrap().template.spec.unwrap();
    insta::assert_yaml_snapshot!(pod.volumes);
    let mount = &pod.containers[0].volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.read_only, Some(true));
    assert!(build::downloads(&valid(&vs), &Default::default()).is_empty());
}

#[test]
fn full_example_disruption_budget() {
    insta::assert_yaml_snapshot!(build::disruption_budget(&valid(&example("full.yaml"))));
}

#[test]
fn no_disruption_budget_for_one_replica_or_when_off() {
    let mut vs = example("full.yaml");
    vs.spec.replicas = 1;
    assert!(build::disruption_budget(&valid(&vs)).is_none());
    vs.spec.replicas = 3;
    vs.spec.disruption_budget.enabled = false;
    assert!(build::disruption_budget(&valid(&vs)).is_none());
}

/// Abort on SIGTERM, no preStop hook, stop everything first: no drain flag,
/// no lifecycle, Kubernetes' Recreate strategy and a 10 s grace period.
#[test]
fn deployment_without_drain_and_with_recreate() {
    let mut vs = example("qwen-demo.yaml");
    vs.spec.shutdown.drain_seconds = 0;
    vs.spec.shutdown.pre_stop_seconds = 0;
    vs.spec.rollout.strategy = vllmservice_api::RolloutStrategy::Recreate;
    let d = build::deployment(&valid(&vs), &Seen::default());
    insta::assert_yaml_snapshot!(d.spec.as_ref().unwrap().strategy);
    let pod = d.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.termination_grace_period_seconds, Some(10));
    let c = &pod.containers[0];
    assert!(c.lifecycle.is_none());
    assert!(
        !c.args
            .as_ref()
            .unwrap()
            .iter()
            .any(|a| a.contains("shutdown"))
    );
}

/// What Auto chooses for a changed template: a surge when a pod fits beside
/// the old ones, one pod at a time (said in advance) when none does, and the
/// recorded choice while the template stays the same.
#[test]
fn auto_surges_only_when_a_new_pod_fits() {
    let vs = example("full.yaml");
    let v = valid(&vs);
    let first = build::deployment(&v, &Seen::default());
    let strategy = |d: &k8s_openapi::api::apps::v1::Deployment| {
        serde_json::to_value(d.spec.as_ref().unwrap().strategy.as_ref().unwrap()).unwrap()
    };
    let surge = serde_json::json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    let in_place = serde_json::json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
    assert_eq!(
        strategy(&first),
        surge,
        "the first pods: nothing to replace"
    );
    let capacity = |fit: i64| Capacity {
        per_pod: BTreeMap::from([("nvidia.com/gpu".to_string(), 2)]),
        nodes: 3,
        free: BTreeMap::from([("nvidia.com/gpu".to_string(), 2 * fit)]),
        pods_that_fit: fit,
    };
    // The live Deployment runs an older template.
    let mut old = first.clone();
    old.metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert(rollout::TEMPLATE_HASH_ANNOTATION.into(), "older".into());
    let seen = |fit: i64, live: &k8s_openapi::api::apps::v1::Deployment| Seen {
        deployment: Some(live.clone()),
        capacity: Some(capacity(fit)),
        ..Seen::default()
    };
    assert_eq!(strategy(&build::deployment(&v, &seen(1, &old))), surge);
    let full = build::deployment(&v, &seen(0, &old));
    assert_eq!(strategy(&full), in_place);
    let annotations = full.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[rollout::STRATEGY_ANNOTATION], "OneAtATime");
    assert_eq!(
        annotations[rollout::REASON_ANNOTATION],
        "no free nvidia.com/gpu for a surge pod (a pod needs 2 nvidia.com/gpu; 0 are free on \
         the 3 nodes its nodeSelector, tolerations and affinity allow): replacing in place, one \
         pod at a time"
    );
    // Once applied, the choice stays while the template does, whatever frees up.
    assert_eq!(build::deployment(&v, &seen(5, &full)), full);
    let mut one = vs.clone();
    one.spec.replicas = 1;
    let d = build::deployment(&valid(&one), &seen(0, &old));
    assert!(
        d.metadata.annotations.unwrap()[rollout::REASON_ANNOTATION]
            .ends_with("with 1 replica the service is unavailable until the new pod is ready")
    );
    // A user's choice is taken as it is.
    let mut surge_user = vs.clone();
    surge_user.spec.rollout.strategy = vllmservice_api::RolloutStrategy::Surge;
    surge_user.spec.rollout.max_surge = 2;
    assert_eq!(
        strategy(&build::deployment(&valid(&surge_user), &seen(0, &old))),
        serde_json::json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}})
    );
}

/// Without a GPU count Auto surges; a surge pod the scheduler refuses for the
/// patience turns the recorded surge into one pod at a time, saying why; not
/// before, and not for a scale-up (no surge under way).
#[test]
fn auto_replaces_in_place_after_an_unschedulable_surge_pod() {
    use std::time::Duration;
    use vllmservice_controller::reconcile::seen::Unplaced;
    let vs = example("full.yaml");
    let v = valid(&vs);
    let strategy = |d: &k8s_openapi::api::apps::v1::Deployment| {
        d.metadata.annotations.as_ref().unwrap()[rollout::STRATEGY_ANNOTATION].clone()
    };
    // The live Deployment surges to the current template: one pod more than it wants.
    let mut live = build::deployment(&v, &Seen::default());
    let want = live.spec.as_ref().unwrap().replicas.unwrap();
    live.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
        replicas: Some(want + 1),
        ..Default::default()
    });
    assert_eq!(strategy(&live), "Surge");
    let unplaced = |waited: u64| Unplaced {
        pod: "qwen-7d9f-abcde".into(),
        message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".into(),
        waited: Duration::from_secs(waited),
        patience: Duration::from_secs(60),
    };
    let seen = |u: Option<Unplaced>, live: &k8s_openapi::api::apps::v1::Deployment| Seen {
        deployment: Some(live.clone()),
        unplaced: u,
        ..Seen::default()
    };
    assert_eq!(
        strategy(&build::deployment(&v, &seen(Some(unplaced(59)), &live))),
        "Surge"
    );
    assert_eq!(
        seen(Some(unplaced(59)), &live).recheck_after(),
        Some(Duration::from_secs(1)),
        "looked at again when the patience runs out"
    );
    let d = build::deployment(&v, &seen(Some(unplaced(60)), &live));
    assert_eq!(strategy(&d), "OneAtATime");
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()[rollout::REASON_ANNOTATION],
        "surge pod qwen-7d9f-abcde unschedulable for 60 s (0/3 nodes are available: 3 \
         Insufficient nvidia.com/gpu.): replacing in place, one pod at a time"
    );
    assert_eq!(
        serde_json::to_value(d.spec.as_ref().unwrap().strategy.as_ref().unwrap()).unwrap(),
        serde_json::json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}})
    );
    // A scale-up's unschedulable pod replaces nothing: the surge stays.
    let mut scaling = live.clone();
    scaling.status.as_mut().unwrap().replicas = Some(want);
    assert_eq!(
        strategy(&build::deployment(&v, &seen(Some(unplaced(600)), &scaling))),
        "Surge"
    );
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
        shutdown in (-5..4000i32, -5..700i32, prop::option::of(-5..5000i64)),
        autoscaling in prop::option::of((
            -1..4i32, 0..5i32, "[0-9.]{0,4}", prop::option::of(text()), 0..3usize,
        )),
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
        (s.shutdown.drain_seconds, s.shutdown.pre_stop_seconds) = (shutdown.0, shutdown.1);
        s.termination_grace_period_seconds = shutdown.2;
        s.autoscaling = autoscaling.map(|(min, max, target, activation, metric)| {
            let metric = ["requestsWaiting", "requestsRunning", "kvCacheUsage"][metric];
            serde_json::from_value(serde_json::json!({
                "minReplicas": min, "maxReplicas": max, "target": target,
                "activationQuery": activation, "metric": metric,
            }))
            .unwrap()
        });
        vs
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn validation_and_builders_never_panic_and_are_deterministic(vs in arbitrary_service()) {
        // Builders only take what validation lets through.
        let Ok(vs) = vllmservice_api::validate(&vs) else { return Ok(()) };
        let d1 = serde_json::to_value(build::deployment(&vs, &Seen::default())).unwrap();
        let d2 = serde_json::to_value(build::deployment(&vs, &Seen::default())).unwrap();
        prop_assert_eq!(&d1, &d2);
        let s = serde_json::to_value(build::service(&vs)).unwrap();
        // The operator's keys always win over user labels of the same name.
        let labels: BTreeMap<String, String> =
            serde_json::from_value(d1["metadata"]["labels"].clone()).unwrap();
        prop_assert_eq!(labels["app.kubernetes.io/managed-by"].as_str(), "vllmservice-operator");
        prop_assert_eq!(&d1["spec"]["selector"]["matchLabels"], &s["spec"]["selector"]);
        // The grace period always covers the preStop sleep and the drain.
        let grace = d1["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
        let sd = &vs.spec.shutdown;
        prop_assert!(grace >= i64::from(sd.pre_stop_seconds) + i64::from(sd.drain_seconds));
        let c = &d1["spec"]["template"]["spec"]["containers"][0];
        prop_assert_eq!(c["lifecycle"]["preStop"]["sleep"]["seconds"].as_i64().unwrap_or(0),
            i64::from(sd.pre_stop_seconds));
        // The ScaledObject: deterministic, within the spec's range, its model name quoted.
        let so1 = build::scaledobject(&vs, build::DEFAULT_PROMETHEUS_ADDRESS);
        prop_assert_eq!(&so1, &build::scaledobject(&vs, build::DEFAULT_PROMETHEUS_ADDRESS));
        if let (Some(so), Some(a)) = (so1, &vs.spec.autoscaling) {
            let (min, max) = (so.spec.min_replica_count.unwrap(), so.spec.max_replica_count.unwrap());
            prop_assert!(min <= max && min >= 0 && max == a.max_replicas);
            let quoted = build::promql::string(&vs.spec.model_name);
            let matcher = format!("model_name={quoted}");
            prop_assert!(so.spec.triggers[0].metadata["query"].contains(&matcher));
        }
    }
}

/// A Deployment as the API server may report it, in any state.
fn arbitrary_deployment() -> impl Strategy<Value = k8s_openapi::api::apps::v1::Deployment> {
    (
        any::<i32>(),
        (any::<i64>(), any::<i64>()),
        prop::collection::vec((any::<i32>(), 0..4usize), 4),
        prop::collection::vec((0..4usize, 0..3usize, text()), 0..3),
        prop::option::of(text()),
    )
        .prop_map(
            |(replicas, (generation, observed), counts, conditions, hash)| {
                let types = ["Available", "Progressing", "ReplicaFailure", "Other"];
                let statuses = ["True", "False", "Unknown"];
                let reasons = [
                    "NewReplicaSetAvailable",
                    "ProgressDeadlineExceeded",
                    "",
                    "X",
                ];
                let conditions: Vec<_> = conditions
                    .into_iter()
                    .map(|(t, s, m)| {
                        serde_json::json!({"type": types[t], "status": statuses[s],
                        "reason": reasons[t], "message": m})
                    })
                    .collect();
                let annotations = match hash {
                    Some(h) => serde_json::json!({rollout::TEMPLATE_HASH_ANNOTATION: h}),
                    None => serde_json::json!({}),
                };
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "qwen", "namespace": "ns", "generation": generation,
                        "annotations": annotations},
                    "spec": {"replicas": replicas, "selector": {}, "template": {}},
                    "status": {"observedGeneration": observed, "replicas": counts[0].0,
                        "readyReplicas": counts[1].0, "availableReplicas": counts[2].0,
                        "updatedReplicas": counts[3].0, "conditions": conditions},
                }))
                .unwrap()
            },
        )
}

/// A pod of the service in any phase, with any container state.
fn arbitrary_pod() -> impl Strategy<Value = k8s_openapi::api::core::v1::Pod> {
    (0..5usize, any::<bool>(), 0..5usize, any::<i32>(), text(), any::<bool>()).prop_map(
        |(phase, ready, state, code, message, deleting)| {
            let phases = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
            let state = match state {
                0 => serde_json::json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}}),
                1 => serde_json::json!({"waiting": {"reason": "ImagePullBackOff", "message": message}}),
                2 => serde_json::json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
                3 => serde_json::json!({"terminated": {"exitCode": code, "reason": message}}),
                _ => serde_json::json!({}),
            };
            let mut meta = serde_json::json!({"name": "qwen-1", "namespace": "ns",
                "labels": {"app.kubernetes.io/instance": "qwen"}});
            if deleting {
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            serde_json::from_value(serde_json::json!({
                "metadata": meta,
                "status": {"phase": phases[phase],
                    "conditions": [
                        {"type": "Ready", "status": if ready { "True" } else { "False" }},
                        {"type": "PodScheduled", "status": if phase == 0 { "False" } else { "True" },
                         "reason": "Unschedulable", "message": message}],
                    "containerStatuses": [{"name": "vllm", "ready": ready, "restartCount": code,
                        "image": "i", "imageID": "", "state": state, "lastState": state}]},
            }))
            .unwrap()
        },
    )
}

/// A download in any state.
fn arbitrary_download()
-> impl Strategy<Value = vllmservice_controller::reconcile::seen::DownloadSeen> {
    use vllmservice_controller::{diagnosis::hf_log::Failure, reconcile::seen::DownloadState};
    (
        0..4usize,
        0..5usize,
        any::<bool>(),
        text(),
        prop::option::of(text()),
    )
        .prop_map(|(state, failure, is_final, text, progress)| {
            let failures = [
                Failure::GatedRepo,
                Failure::RepoNotFound,
                Failure::RevisionNotFound,
                Failure::DiskFull,
                Failure::DownloadError,
            ];
            let state = match state {
                0 => DownloadState::NotStarted,
                1 => DownloadState::Running {
                    progress,
                    waiting: Some(text.clone()),
                },
                2 => DownloadState::Complete,
                _ => DownloadState::Failed {
                    failure: failures[failure],
                    evidence: text.clone(),
                    pod: progress,
                    is_final,
                },
            };
            vllmservice_controller::reconcile::seen::DownloadSeen {
                name: "download-1".into(),
                what: text.clone(),
                field: "modelSource.huggingFace".into(),
                target: "/models/m".into(),
                job: None,
                state,
            }
        })
}

/// What the apply step may report for a wanted child.
fn outcome<K: Clone>(
    want: &build::Want<K>,
    pick: u8,
) -> vllmservice_controller::reconcile::done::Outcome<K> {
    use vllmservice_controller::reconcile::done::Outcome;
    match (want, pick % 4) {
        (build::Want::Present(k), 0 | 1) => Outcome::Live(k.clone()),
        (build::Want::Present(_), 2) => Outcome::Foreign,
        (build::Want::Present(_), _) => Outcome::Refused("denied".into()),
        (build::Want::Absent, _) => Outcome::Absent,
        (build::Want::Untouched, _) => Outcome::Untouched,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Build and status derivation take any spec validation lets through and any
    /// state of the world the read step may see, and never panic: a panic here would
    /// fail one object's reconcile (the runtime catches it), but it is a bug.
    #[test]
    fn build_and_status_never_panic_on_any_seen_state(
        vs in arbitrary_service(),
        apis in (any::<bool>(), any::<bool>(), any::<bool>()),
        deployment in prop::option::of(arbitrary_deployment()),
        pods in prop::collection::vec(arbitrary_pod(), 0..4),
        downloads in prop::collection::vec(arbitrary_download(), 0..3),
        storage in 0..4usize,
        gateway in 0..4usize,
        capacity in prop::option::of((0..3i64, 0..4usize, -2..6i64)),
        picks in prop::collection::vec(any::<u8>(), 7),
    ) {
        use vllmservice_controller::{
            optional_apis::Apis,
            reconcile::{done::{Done, Outcome}, seen::{GatewaySeen, Storage}, status},
        };
        let Ok(vs) = vllmservice_api::validate(&vs) else { return Ok(()) };
        let protocol = ["HTTP", "TCP", "HTTPS"][gateway % 3];
        let gw: vllmservice_controller::cache::CachedGateway = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "gw", "namespace": "ns"},
                "spec": {"gatewayClassName": "c", "listeners": [
                    {"name": "http", "port": 80, "protocol": protocol}]}}),
        ).unwrap();
        let seen = Seen {
            apis: Apis { gateway: apis.0, prometheus: apis.1, keda: apis.2 },
            deployment: deployment.clone(),
            pods,
            downloads,
            storage: [Storage::Missing, Storage::NotBound("Pending".into()), Storage::Bound,
                Storage::Image][storage].clone(),
            gateway: match gateway {
                0 => GatewaySeen::NotLooked,
                1 => GatewaySeen::Missing,
                _ => GatewaySeen::Found(Box::new(gw)),
            },
            capacity: capacity.map(|(per_pod, nodes, fit)| Capacity {
                per_pod: BTreeMap::from([("nvidia.com/gpu".to_string(), per_pod)]),
                nodes,
                free: BTreeMap::from([("nvidia.com/gpu".to_string(), fit.max(0) * per_pod)]),
                pods_that_fit: fit,
            }),
            ..Seen::default()
        };
        let want = build::all(&vs, &seen, &build::Defaults::default());
        let done = Done {
            resolution: want.resolution.clone(),
            deployment: match (picks[0] % 3, deployment) {
                (0, Some(live)) => Outcome::Live(live),
                (1, _) => Outcome::Foreign,
                _ => Outcome::Live(want.deployment.clone()),
            },
            service: outcome(&build::Want::Present(want.service.clone()), picks[1]),
            route: outcome(&want.route, picks[2]),
            monitor: outcome(&want.monitor, picks[3]),
            rule: outcome(&want.rule, picks[4]),
            pdb: outcome(&want.pdb, picks[5]),
            scaled_object: outcome(&want.scaled_object, picks[6]),
            foreign_jobs: Vec::new(),
        };
        let now = k8s_openapi::jiff::Timestamp::now();
        let derived = status::derive(&vs, &seen, &done, now);
        // The status always says something for every condition it sets.
        for c in &derived.conditions {
            prop_assert!(!c.type_.is_empty() && !c.reason.is_empty(), "{c:?}");
        }
    }
}
