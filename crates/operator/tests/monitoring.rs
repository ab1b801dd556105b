//! Prometheus Operator objects on the local control plane: the ServiceMonitor
//! and the per-service PrometheusRule, accepted by the real CRD schemas,
//! following the spec, and never written over when someone else owns the name.

mod common;

use common::{Env, condition, gpu_service, is_available};
use kube::{ResourceExt, api::PostParams};
use serde_json::{Value, json};
use testkit::wait_until;
use vllmservice_api::VLLMService;
use vllmservice_controller::kinds::prometheus::{PrometheusRule, ServiceMonitor};

fn monitored_service(name: &str) -> Value {
    let mut body = gpu_service(name, "models");
    body["spec"]["monitoring"] = json!({"enabled": true, "interval": "15s",
                                        "labels": {"release": "prometheus"}});
    body
}

async fn monitoring_reason(env: &Env, name: &str, reason: &str) -> VLLMService {
    env.wait_for(name, &format!("MonitoringReady reason {reason}"), |vs| {
        condition(vs, "MonitoringReady").is_some_and(|c| c.1 == reason)
            && vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
    })
    .await
}

#[tokio::test]
async fn monitoring_makes_a_service_monitor_and_alerts_and_removes_them_when_off() {
    testkit::install_prometheus_crds();
    let env = Env::new("mon-life").await;
    env.bound_pvc("models").await;
    env.create(monitored_service("chat")).await;
    let vs = env
        .wait_for("chat", "Available with monitoring", is_available)
        .await;
    assert_eq!(condition(&vs, "MonitoringReady").unwrap().1, "Monitored");
    assert_eq!(
        vs.status.as_ref().unwrap().service_monitor_name.as_deref(),
        Some("chat")
    );

    let sm = env.api::<ServiceMonitor>().get("chat").await.unwrap();
    assert_eq!(sm.owner_references()[0].uid, vs.uid().unwrap());
    assert_eq!(sm.labels()["release"], "prometheus");
    assert_eq!(
        sm.labels()["app.kubernetes.io/managed-by"],
        "vllmservice-operator"
    );
    let spec = serde_json::to_value(&sm.spec).unwrap();
    assert_eq!(spec["endpoints"][0]["port"], "http");
    assert_eq!(spec["endpoints"][0]["path"], "/metrics");
    assert_eq!(spec["endpoints"][0]["interval"], "15s");
    assert_eq!(
        spec["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "chat"
    );
    assert_eq!(
        spec["namespaceSelector"]["matchNames"],
        json!([env.ns.name])
    );

    // The real PrometheusRule CRD schema accepted it; check what it says.
    let rule = env.api::<PrometheusRule>().get("chat").await.unwrap();
    let rules = &rule.spec.groups.as_ref().unwrap()[0]
        .rules
        .as_ref()
        .unwrap();
    let names: Vec<_> = rules.iter().filter_map(|r| r.alert.as_deref()).collect();
    assert_eq!(
        names,
        [
            "VLLMServiceDown",
            "VLLMServiceReplicasMissing",
            "VLLMRequestsQueued",
            "VLLMKVCacheNearlyFull",
            "VLLMTimeToFirstTokenHigh",
            "VLLMEndToEndLatencyHigh"
        ]
    );
    let scope = format!("namespace=\"{}\",service=\"chat\"", env.ns.name);
    for r in rules
        .iter()
        .filter(|r| r.alert.as_deref() != Some("VLLMServiceReplicasMissing"))
    {
        let expr = serde_json::to_value(&r.expr).unwrap();
        assert!(expr.as_str().unwrap().contains(&scope), "{expr}");
    }
    let queued = serde_json::to_value(&rules[2].expr).unwrap();
    assert!(queued.as_str().unwrap().ends_with("> 10"), "{queued}");

    // Idle: nothing to write.
    env.assert_idle_reconcile_writes_nothing("chat").await;

    // Thresholds follow the spec; alerts can be turned off alone.
    env.patch_spec(
        "chat",
        json!({"monitoring": {"alerts": {"requestsWaiting": 25}}}),
    )
    .await;
    wait_until(common::WAIT, "the queue threshold to follow", || async {
        let rule = env.api::<PrometheusRule>().get("chat").await.ok()?;
        let expr = serde_json::to_value(&rule.spec.groups?[0].rules.as_ref()?[2].expr).ok()?;
        expr.as_str()?.ends_with("> 25").then_some(())
    })
    .await;
    env.patch_spec(
        "chat",
        json!({"monitoring": {"alerts": {"enabled": false}}}),
    )
    .await;
    wait_until(common::WAIT, "the PrometheusRule to be deleted", || async {
        env.api::<PrometheusRule>()
            .get_opt("chat")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        env.api::<ServiceMonitor>()
            .get_opt("chat")
            .await
            .unwrap()
            .is_some()
    );

    env.patch_spec("chat", json!({"monitoring": {"enabled": false}}))
        .await;
    let vs = monitoring_reason(&env, "chat", "MonitoringDisabled").await;
    assert_eq!(vs.status.as_ref().unwrap().service_monitor_name, None);
    wait_until(common::WAIT, "the ServiceMonitor to be deleted", || async {
        env.api::<ServiceMonitor>()
            .get_opt("chat")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_foreign_service_monitor_with_the_same_name_is_left_alone_and_reported() {
    testkit::install_prometheus_crds();
    let env = Env::new("mon-foreign").await;
    env.bound_pvc("models").await;
    let foreign: ServiceMonitor = serde_json::from_value(json!({
        "metadata": {"name": "chat", "labels": {"team": "other"}},
        "spec": {"endpoints": [{"port": "web"}], "selector": {"matchLabels": {"app": "other"}}}
    }))
    .unwrap();
    let foreign = env
        .api::<ServiceMonitor>()
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    env.create(monitored_service("chat")).await;
    let vs = monitoring_reason(&env, "chat", "ResourceConflict").await;
    assert_eq!(condition(&vs, "Degraded").unwrap().1, "ResourceConflict");
    assert!(
        condition(&vs, "MonitoringReady")
            .unwrap()
            .2
            .contains("ServiceMonitor")
    );

    env.patch_spec("chat", json!({"monitoring": {"enabled": false}}))
        .await;
    monitoring_reason(&env, "chat", "MonitoringDisabled").await;
    let after = env.api::<ServiceMonitor>().get("chat").await.unwrap();
    assert_eq!(after.metadata.generation, foreign.metadata.generation);
    assert_eq!(after.labels(), foreign.labels());
}
