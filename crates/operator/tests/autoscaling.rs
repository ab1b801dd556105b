//! Autoscaling end to end with real components on the local cluster
//! (hack/cluster/autoscaling.sh): the simulator's vLLM metrics on the real
//! node → Prometheus → KEDA (operator and metrics API server, through the
//! aggregation layer) → the HPA in kube-controller-manager → the
//! VLLMService's scale subresource → this operator → the Deployment.

mod common;

use std::time::Duration;

use common::{Env, Operator, condition, is_available, sim};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    Api,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
};
use serde_json::{Value, json};
use testkit::{
    Signal,
    load::{Load, LoadSpec},
    wait_until,
};
use vllmservice_api::VLLMService;
use vllmservice_controller::reconcile::apply::FIELD_MANAGER;

/// Scaling steps take a scrape (2 s), the HPA's sync (15 s), KEDA's polling
/// (15 s) and a pod start: minutes, not the usual minute.
const SCALE: Duration = Duration::from_secs(240);

fn scaled_objects(env: &Env) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
    Api::namespaced_with(
        env.client.clone(),
        &env.ns.name,
        &ApiResource::from_gvk(&gvk),
    )
}

/// A simulator service on the real node with `autoscaling`, its triggers reading
/// the pipeline's Prometheus, two sequences per replica (so a few requests
/// queue), no `replicas` (KEDA's HPA owns it).
fn autoscaled(name: &str, pvc: &str, autoscaling: Value) -> Value {
    let mut body = sim::sim_service(name, pvc, json!([]));
    body["spec"]["engineArgs"] = json!({"maxNumSeqs": 2});
    body["spec"]["autoscaling"] = autoscaling;
    body
}

async fn wait_vs(
    env: &Env,
    name: &str,
    what: &str,
    check: impl Fn(&VLLMService) -> bool,
) -> VLLMService {
    let api = env.api::<VLLMService>();
    let deadline = tokio::time::Instant::now() + SCALE;
    loop {
        let vs = api.get(name).await.expect("VLLMService exists");
        if check(&vs) {
            return vs;
        }
        if tokio::time::Instant::now() >= deadline {
            let hpa = testkit::kubectl(&["-n", &env.ns.name, "describe", "hpa"]);
            let so = testkit::kubectl(&["-n", &env.ns.name, "get", "scaledobject", "-o", "yaml"]);
            panic!(
                "timed out waiting for {what}; spec.replicas {:?}, status:\n{}\nHPA:\n{}\nScaledObject:\n{}",
                vs.spec.replicas,
                serde_json::to_string_pretty(&vs.status).unwrap(),
                String::from_utf8_lossy(&hpa.stdout),
                String::from_utf8_lossy(&so.stdout),
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// spec.replicas, the Deployment's replicas and its ready pods all equal `n`.
async fn replicas_settled(env: &Env, name: &str, n: i32) -> bool {
    let Ok(vs) = env.api::<VLLMService>().get(name).await else {
        return false;
    };
    let Ok(d) = env.api::<Deployment>().get(name).await else {
        return false;
    };
    let spec = d.spec.as_ref().and_then(|s| s.replicas);
    let ready = d
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let total = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    vs.spec.replicas == n && spec == Some(n) && ready == n && total == n
}

async fn wait_replicas(env: &Env, name: &str, n: i32) {
    wait_until(
        SCALE,
        &format!("{name}: spec.replicas, the Deployment and its ready pods at {n}"),
        || async { replicas_settled(env, name, n).await.then_some(()) },
    )
    .await;
}

/// Who wrote spec.replicas: the managers of the managedFields entries that own it.
fn replicas_writers(vs: &VLLMService) -> Vec<(String, Option<String>)> {
    vs.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0["f:spec"].get("f:replicas").is_some())
        })
        .map(|m| (m.manager.clone().unwrap_or_default(), m.subresource.clone()))
        .collect()
}

/// A rule file of the pipeline's Prometheus; removed when dropped.
struct RuleFile(std::path::PathBuf);

impl Drop for RuleFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The groups of the PrometheusRule of `name`, written as a rule file (JSON is YAML).
async fn rule_file(env: &Env, name: &str, pipeline: &testkit::Pipeline) -> RuleFile {
    let gvk = GroupVersionKind::gvk("monitoring.coreos.com", "v1", "PrometheusRule");
    let rules: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns.name,
        &ApiResource::from_gvk(&gvk),
    );
    let rule = wait_until(SCALE, "the PrometheusRule", || async {
        rules.get_opt(name).await.ok().flatten()
    })
    .await;
    let path = pipeline
        .rules_dir
        .join(format!("{}-{name}.yaml", env.ns.name));
    let groups = json!({"groups": rule.data["spec"]["groups"]});
    std::fs::write(&path, groups.to_string()).expect("write the rule file");
    RuleFile(path)
}

#[tokio::test]
async fn queued_requests_scale_the_service_to_three_and_idle_returns_it_to_one() {
    let pipeline = testkit::autoscaling();
    let env = Env::new("as-load").await;
    let _volume = sim::model_pvc(&env, "models").await;
    let name = "busy";
    let mut body = autoscaled(
        name,
        "models",
        json!({
            "minReplicas": 1, "maxReplicas": 3, "metric": "requestsWaiting", "target": "2",
            "prometheus": {"serverAddress": pipeline.prometheus_url},
            "scaleDownStabilizationSeconds": 20, "initialCooldownSeconds": 0
        }),
    );
    // Its alert rules too, with the queue alert's threshold below the load's queue.
    body["spec"]["monitoring"] = json!({"enabled": true, "alerts": {"requestsWaiting": 4}});
    env.create(body).await;
    let vs = wait_vs(&env, name, "Available and AutoscalingReady", |vs| {
        is_available(vs) && condition(vs, "AutoscalingReady").is_some_and(|c| c.0 == "True")
    })
    .await;
    let ready = condition(&vs, "AutoscalingReady").unwrap();
    assert!(ready.2.contains("requestsWaiting"), "{ready:?}");
    wait_replicas(&env, name, 1).await;

    // The simulator's own gauge reaches Prometheus with the labels the query selects.
    let ns = &env.ns.name;
    let query = format!(
        "sum(vllm:num_requests_waiting{{namespace=\"{ns}\",service=\"{name}\",model_name=\"{}\"}})",
        sim::MODEL
    );
    wait_until(SCALE, "Prometheus to scrape the pod", || async {
        pipeline.value(&query)
    })
    .await;

    // 14 requests in flight on 2 sequences per replica: ~12 wait at one replica
    // (6 per replica wanted → 3 at most), ~8 at three (still 3).
    let addr = sim::cluster_ip(&env, name).await;
    let mut spec = LoadSpec::new(addr.parse().unwrap(), sim::MODEL);
    spec.concurrency = 14;
    spec.max_tokens = 40;
    spec.max_duration = Duration::from_secs(300);
    spec.request_timeout = Duration::from_secs(60);
    let load = Load::start(spec);

    // The PrometheusRule the operator wrote, loaded into the pipeline's Prometheus
    // as it is (a rule file is the spec's groups): its queue alert goes pending
    // under this load (it fires after its 5 minutes).
    let rules = rule_file(&env, name, pipeline).await;
    pipeline.reload();
    wait_until(SCALE, "VLLMRequestsQueued pending or firing", || async {
        let alerts = pipeline.alerts().ok()?;
        alerts
            .iter()
            .any(|a| {
                // The rule's labels name the service; its summary the namespace too.
                a["labels"]["alertname"] == "VLLMRequestsQueued"
                    && a["labels"]["vllmservice"] == name
                    && a["annotations"]["summary"]
                        .as_str()
                        .is_some_and(|s| s.contains(&format!("{ns}/{name}")))
                    && (a["state"] == "pending" || a["state"] == "firing")
            })
            .then_some(())
    })
    .await;
    drop(rules);

    wait_replicas(&env, name, 3).await;
    let vs = env.api::<VLLMService>().get(name).await.unwrap();
    let ready = condition(&vs, "AutoscalingReady").unwrap();
    assert_eq!(ready.0, "True", "{ready:?}");
    let report = load.stop_async().await;
    assert!(report.ok > 0, "{}", report.summary());

    // Idle: back to the minimum once the (shortened) stabilization window passed.
    wait_replicas(&env, name, 1).await;
    let vs = env.api::<VLLMService>().get(name).await.unwrap();
    let writers = replicas_writers(&vs);
    assert!(
        writers.iter().all(|(m, _)| m != FIELD_MANAGER),
        "the operator wrote spec.replicas: {writers:?}"
    );
    assert!(
        writers
            .iter()
            .any(|(_, sub)| sub.as_deref() == Some("scale")),
        "spec.replicas was not written through the scale subresource: {writers:?}"
    );
}

#[tokio::test]
async fn an_idle_service_scales_to_zero_and_its_activation_signal_brings_it_back() {
    let pipeline = testkit::autoscaling();
    let mut env = Env::new("as-zero").await;
    let ns = env.ns.name.clone();
    // The operator's own default Prometheus (--prometheus-address), not the spec's.
    let default_operator = std::mem::replace(
        &mut env.operator,
        Operator::start_with_prometheus(&ns, &pipeline.prometheus_url).await,
    );
    default_operator.stop().await;
    let _volume = sim::model_pvc(&env, "models").await;
    let name = "sleepy";
    // A gateway's queue for this service: a signal that exists at zero replicas.
    let labels = format!("namespace=\"{ns}\",service=\"{name}\"");
    let signal = Signal::start(pipeline, "test_gateway_pending_requests", &labels, 0.0);
    env.create(autoscaled(
        name,
        "models",
        json!({
            "minReplicas": 0, "maxReplicas": 2, "target": "2",
            "activationQuery": format!("sum(test_gateway_pending_requests{{{labels}}})"),
            "scaleDownStabilizationSeconds": 10, "initialCooldownSeconds": 0
        }),
    ))
    .await;
    // The signal is 0 and nothing runs: KEDA takes it to zero after the cooldown.
    let vs = wait_vs(&env, name, "scaled to zero", |vs| {
        vs.spec.replicas == 0
            && condition(vs, "Available").is_some_and(|c| c.0 == "False" && c.1 == "ScaledToZero")
    })
    .await;
    let available = condition(&vs, "Available").unwrap();
    assert!(available.2.contains("activation"), "{available:?}");
    wait_replicas(&env, name, 0).await;
    let so = scaled_objects(&env).get(name).await.unwrap();
    assert_eq!(so.data["spec"]["minReplicaCount"], 0, "{so:?}");
    let triggers = so.data["spec"]["triggers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        triggers
            .iter()
            .all(|t| t["metadata"]["serverAddress"] == pipeline.prometheus_url.as_str()),
        "{triggers:?}"
    );

    // Three requests wait at the gateway: KEDA activates the service.
    signal.set(3.0);
    wait_vs(&env, name, "back from zero and Available", |vs| {
        vs.spec.replicas >= 1 && is_available(vs)
    })
    .await;
}

#[tokio::test]
async fn every_metric_kind_makes_a_scaled_object_that_keda_and_its_webhook_accept() {
    let pipeline = testkit::autoscaling();
    let env = Env::new("as-kinds").await;
    env.bound_pvc("models").await;
    let kinds = [
        (
            "waiting",
            json!({"metric": "requestsWaiting", "target": "4"}),
        ),
        (
            "running",
            json!({"metric": "requestsRunning", "target": "6"}),
        ),
        ("kv", json!({"metric": "kvCacheUsage", "target": "0.8"})),
        (
            "custom",
            json!({"target": "3", "prometheus": {"query": "sum(rate(vllm:request_success_total[1m]))"}}),
        ),
        (
            "zero-no-activation",
            json!({"minReplicas": 0, "target": "2"}),
        ),
    ];
    for (name, extra) in &kinds {
        let mut body = common::gpu_service(name, "models");
        let mut autoscaling = json!({
            "minReplicas": 1, "maxReplicas": 2,
            "prometheus": {"serverAddress": pipeline.prometheus_url}
        });
        for (k, v) in extra.as_object().unwrap() {
            if k == "prometheus" {
                autoscaling["prometheus"]["query"] = v["query"].clone();
            } else {
                autoscaling[k] = v.clone();
            }
        }
        body["spec"]["autoscaling"] = autoscaling;
        env.create(body).await;
    }
    for (name, _) in &kinds {
        // KEDA made the HPA for it: the ScaledObject is Ready in KEDA's own status.
        let so = wait_until(SCALE, &format!("KEDA to make {name} Ready"), || async {
            let so = scaled_objects(&env).get(name).await.ok()?;
            let ready = so.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(so)
        })
        .await;
        let hpa = so.data["status"]["hpaName"].as_str().unwrap_or_default();
        assert_eq!(hpa, format!("keda-hpa-{name}"), "{so:?}");
        let vs = wait_vs(&env, name, "AutoscalingReady reported", |vs| {
            condition(vs, "AutoscalingReady").is_some_and(|c| c.1 != "Pending")
        })
        .await;
        let ready = condition(&vs, "AutoscalingReady").unwrap();
        if *name == "zero-no-activation" {
            assert_eq!(
                (ready.0.as_str(), ready.1.as_str()),
                ("False", "ActivationQueryMissing"),
                "{ready:?}"
            );
            assert!(
                ready.2.contains("spec.autoscaling.activationQuery"),
                "{ready:?}"
            );
            assert_eq!(so.data["spec"]["minReplicaCount"], 1, "{so:?}");
        } else {
            assert_eq!(ready.0, "True", "{name}: {ready:?}");
        }
    }

    // KEDA's admission webhook runs in the pipeline too: it refuses a second
    // autoscaler for a service that has one...
    let foreign = |name: &str, target: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "aiinfra.example.com/v1alpha1",
                                   "kind": "VLLMService", "name": target},
                "triggers": [{"type": "prometheus", "metadata": {
                    "serverAddress": pipeline.prometheus_url, "query": "vector(1)", "threshold": "1"}}]
            }
        }))
        .unwrap()
    };
    let err = scaled_objects(&env)
        .create(&PostParams::default(), &foreign("second", "running"))
        .await
        .expect_err("KEDA's webhook refuses a second ScaledObject for one service");
    // KEDA names whichever autoscaler of the service it finds first: the
    // ScaledObject, or the HPA it made for it (once that exists).
    let message = err.to_string();
    assert!(
        message.contains("is already managed by the ScaledObject 'running'")
            || message.contains("is already managed by the hpa 'keda-hpa-running'"),
        "{err}"
    );
    // ...and so the operator's own when another autoscaler came first: reported,
    // the service still served.
    scaled_objects(&env)
        .create(&PostParams::default(), &foreign("first", "late"))
        .await
        .expect("a ScaledObject for a service without one");
    let mut body = common::gpu_service("late", "models");
    body["spec"]["autoscaling"] = json!({
        "minReplicas": 1, "maxReplicas": 2, "target": "2",
        "prometheus": {"serverAddress": pipeline.prometheus_url}
    });
    env.create(body).await;
    let vs = wait_vs(&env, "late", "ScaledObjectRefused and Available", |vs| {
        is_available(vs)
            && condition(vs, "AutoscalingReady").is_some_and(|c| c.1 == "ScaledObjectRefused")
    })
    .await;
    let refused = condition(&vs, "AutoscalingReady").unwrap();
    assert!(
        refused
            .2
            .contains("is already managed by the ScaledObject 'first'"),
        "{refused:?}"
    );

    // Autoscaling removed: the ScaledObject goes (and with it KEDA's HPA).
    env.patch_spec("waiting", json!({"autoscaling": null}))
        .await;
    wait_until(SCALE, "the ScaledObject of waiting deleted", || async {
        scaled_objects(&env)
            .get_opt("waiting")
            .await
            .ok()
            .and_then(|o| o.is_none().then_some(()))
    })
    .await;
    let vs = env
        .wait_for("waiting", "AutoscalingReady gone or not requested", |vs| {
            condition(vs, "AutoscalingReady").is_none_or(|c| c.1 != "Active" && c.1 != "Idle")
        })
        .await;
    assert!(vs.status.is_some());
}
