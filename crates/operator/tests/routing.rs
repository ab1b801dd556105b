//! Gateway API routing on the local control plane: every case of the
//! gatewayRef resolution (missing Gateway, missing listener, wrong protocol), the Gateway controller's verdict read back into RouteReady,
//! foreign routes left alone, and a cluster that gets the Gateway API (and the
//! Prometheus Operator's and KEDA's CRDs) late.

mod common;

use std::time::Duration;

use common::{Env, Operator, condition, gpu_service, is_available, requests::Requests};
use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, ResourceExt,
    api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};
use testkit::{PrivateCluster, wait_until};
use vllmservice_api::VLLMService;
use vllmservice_controller::runtime::metrics::{Metrics, count_writes};

/// Much less than the 1-minute timed retry: seeing a change within this proves the Gateway watch.
const FAST: Duration = Duration::from_secs(20);

fn routed_service(name: &str) -> Value {
    let mut body = gpu_service(name, "models");
    body["spec"]["gatewayRef"] =
        json!({"name": "llm-gateway", "sectionName": "http", "host": "llm.example.local"});
    body
}

fn gateway(listener: &str, protocol: &str) -> Gateway {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "llm-gateway"},
        "spec": {"gatewayClassName": "example", "listeners": [
            {"name": listener, "port": 80, "protocol": protocol}]}
    }))
    .unwrap()
}

async fn set_gateway(env: &Env, listener: &str, protocol: &str) {
    // A merge patch replaces the listener list as a whole.
    let spec = serde_json::to_value(gateway(listener, protocol).spec).unwrap();
    env.api::<Gateway>()
        .patch(
            "llm-gateway",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .unwrap();
}

async fn route_reason(env: &Env, name: &str, reason: &str) -> VLLMService {
    env.wait_for(name, &format!("RouteReady reason {reason}"), |vs| {
        condition(vs, "RouteReady").is_some_and(|c| c.1 == reason)
            && vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
    })
    .await
}

async fn wait_route_gone(env: &Env, name: &str) {
    wait_until(FAST, "the HTTPRoute to be deleted", || async {
        env.api::<HttpRoute>()
            .get_opt(name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

/// Writes the route's status as a Gateway controller would.
async fn gateway_controller_says(
    env: &Env,
    name: &str,
    accepted: (&str, &str),
    resolved: &str,
    generation: i64,
) {
    let cond = |t: &str, s: &str, r: &str| {
        json!({"type": t, "status": s, "reason": r, "message": format!("{t} is {s}"),
               "observedGeneration": generation, "lastTransitionTime": "2026-11-29T00:00:00Z"})
    };
    let status = json!({"status": {"parents": [{
        "controllerName": "example.com/gateway-controller",
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                      "name": "llm-gateway", "namespace": env.ns.name, "sectionName": "http"},
        "conditions": [cond("Accepted", accepted.0, accepted.1),
                       cond("ResolvedRefs", resolved, "ResolvedRefs")]}]}});
    env.api::<HttpRoute>()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_route_follows_the_resolution_table() {
    testkit::install_gateway_api_crds();
    let env = Env::new("rt-table").await;
    env.bound_pvc("models").await;
    env.create(routed_service("chat")).await;

    // Gateway not found: message names it; no route.
    let vs = route_reason(&env, "chat", "GatewayNotFound").await;
    let (status, _, message) = condition(&vs, "RouteReady").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains(&format!("Gateway {}/llm-gateway", env.ns.name)),
        "{message}"
    );
    assert!(
        env.api::<HttpRoute>()
            .get_opt("chat")
            .await
            .unwrap()
            .is_none()
    );

    // The Gateway appears without the listener: noticed through the Gateway watch.
    env.api::<Gateway>()
        .create(&PostParams::default(), &gateway("web", "HTTP"))
        .await
        .unwrap();
    let vs = tokio::time::timeout(FAST, route_reason(&env, "chat", "ListenerNotFound"))
        .await
        .expect("the Gateway's creation is noticed within seconds");
    assert!(condition(&vs, "RouteReady").unwrap().2.contains("\"http\""));

    // The listener appears: the route is made, fast.
    set_gateway(&env, "http", "HTTP").await;
    let route = wait_until(FAST, "the HTTPRoute", || async {
        env.api::<HttpRoute>().get_opt("chat").await.ok().flatten()
    })
    .await;
    let vs = env.api::<VLLMService>().get("chat").await.unwrap();
    assert_eq!(route.owner_references()[0].uid, vs.uid().unwrap());
    let spec = serde_json::to_value(&route.spec).unwrap();
    assert_eq!(spec["parentRefs"][0]["name"], "llm-gateway");
    assert_eq!(spec["parentRefs"][0]["namespace"], env.ns.name.as_str());
    assert_eq!(spec["parentRefs"][0]["sectionName"], "http");
    assert_eq!(spec["hostnames"], json!(["llm.example.local"]));
    assert_eq!(spec["rules"][0]["backendRefs"][0]["name"], "chat");
    assert_eq!(spec["rules"][0]["backendRefs"][0]["port"], 8000);
    let vs = route_reason(&env, "chat", "RoutePending").await;
    let st = vs.status.clone().unwrap();
    assert_eq!(st.http_route_name.as_deref(), Some("chat"));
    assert_eq!(st.gateway_ref_name.as_deref(), Some("llm-gateway"));
    assert_eq!(
        st.gateway_ref_namespace.as_deref(),
        Some(env.ns.name.as_str())
    );
    assert_eq!(condition(&vs, "RouteReady").unwrap().0, "Unknown");

    // The listener is renamed away: the route goes.
    set_gateway(&env, "other", "HTTP").await;
    wait_route_gone(&env, "chat").await;
    let vs = route_reason(&env, "chat", "ListenerNotFound").await;
    assert_eq!(vs.status.as_ref().unwrap().http_route_name, None);

    // A TCP listener of that name: a configuration error, said plainly.
    set_gateway(&env, "http", "TCP").await;
    let vs = route_reason(&env, "chat", "UnsupportedProtocol").await;
    assert!(
        condition(&vs, "RouteReady")
            .unwrap()
            .2
            .contains("protocol TCP")
    );
    assert!(
        env.api::<HttpRoute>()
            .get_opt("chat")
            .await
            .unwrap()
            .is_none()
    );

    // Back to HTTP, then the gatewayRef is removed: the route goes again.
    set_gateway(&env, "http", "HTTPS").await;
    wait_until(FAST, "the HTTPRoute again", || async {
        env.api::<HttpRoute>().get_opt("chat").await.ok().flatten()
    })
    .await;
    env.api::<VLLMService>()
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gatewayRef": null}})),
        )
        .await
        .unwrap();
    wait_route_gone(&env, "chat").await;
    let vs = route_reason(&env, "chat", "RouteNotRequired").await;
    assert_eq!(condition(&vs, "RouteReady").unwrap().0, "True");
    assert_eq!(vs.status.as_ref().unwrap().gateway_ref_name, None);
}

#[tokio::test]
async fn route_ready_follows_the_gateway_controllers_verdict_at_the_current_generation() {
    testkit::install_gateway_api_crds();
    let env = Env::new("rt-verdict").await;
    env.bound_pvc("models").await;
    env.api::<Gateway>()
        .create(&PostParams::default(), &gateway("http", "HTTP"))
        .await
        .unwrap();
    env.create(routed_service("chat")).await;
    let route = wait_until(FAST, "the HTTPRoute", || async {
        env.api::<HttpRoute>().get_opt("chat").await.ok().flatten()
    })
    .await;
    let generation = route.metadata.generation.unwrap();

    gateway_controller_says(
        &env,
        "chat",
        ("False", "NotAllowedByListeners"),
        "True",
        generation,
    )
    .await;
    let vs = route_reason(&env, "chat", "NotAllowedByListeners").await;
    assert_eq!(condition(&vs, "RouteReady").unwrap().0, "False");
    assert_eq!(condition(&vs, "Available").unwrap().0, "False");

    gateway_controller_says(&env, "chat", ("True", "Accepted"), "True", generation).await;
    let vs = env
        .wait_for("chat", "Available with the route accepted", is_available)
        .await;
    assert_eq!(condition(&vs, "RouteReady").unwrap().1, "Accepted");

    // Idle with routing on: an unrelated change causes no write.
    env.assert_idle_reconcile_writes_nothing("chat").await;

    // A new host bumps the route's generation: the old verdict is not trusted.
    env.patch_spec(
        "chat",
        json!({"gatewayRef": {"host": "chat.example.local"}}),
    )
    .await;
    let vs = route_reason(&env, "chat", "RoutePending").await;
    assert_eq!(condition(&vs, "Available").unwrap().0, "False");
    let route = env.api::<HttpRoute>().get("chat").await.unwrap();
    assert!(route.metadata.generation.unwrap() > generation);
}

#[tokio::test]
async fn a_foreign_httproute_with_the_same_name_is_left_alone_and_reported() {
    testkit::install_gateway_api_crds();
    let env = Env::new("rt-foreign").await;
    env.bound_pvc("models").await;
    env.api::<Gateway>()
        .create(&PostParams::default(), &gateway("http", "HTTP"))
        .await
        .unwrap();
    let foreign: HttpRoute = serde_json::from_value(json!({
        "metadata": {"name": "chat"},
        "spec": {"hostnames": ["someone-else.example"],
                 "rules": [{"backendRefs": [{"name": "elsewhere", "port": 80}]}]}
    }))
    .unwrap();
    let foreign = env
        .api::<HttpRoute>()
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    env.create(routed_service("chat")).await;
    let vs = route_reason(&env, "chat", "ResourceConflict").await;
    assert_eq!(condition(&vs, "Degraded").unwrap().1, "ResourceConflict");
    // Removing the gatewayRef must not delete the foreign route either.
    env.api::<VLLMService>()
        .patch(
            "chat",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gatewayRef": null}})),
        )
        .await
        .unwrap();
    route_reason(&env, "chat", "RouteNotRequired").await;
    let after = env.api::<HttpRoute>().get("chat").await.unwrap();
    assert_eq!(after.metadata.generation, foreign.metadata.generation);
    assert!(after.owner_references().is_empty());
}

#[tokio::test]
async fn without_optional_apis_the_service_reports_them_and_converges_once_installed() {
    let cluster = PrivateCluster::start("no-gateway-api");
    cluster.install_crds();
    let client = cluster.client().await;
    // The whole cluster goes with the test; the namespace needs no cleanup.
    let ns = "rt-late";
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    // The operator's requests are recorded: an optional API that comes or
    // goes starts or stops its own watches, and no other watch lists again.
    let requests = Requests::default();
    let metrics = std::sync::Arc::new(Metrics::default());
    let operator_client =
        kube::client::ClientBuilder::try_from(testkit::config_for(cluster.kubeconfig()).await)
            .expect("client builder")
            .with_layer(&count_writes(metrics.clone()))
            .with_layer(&requests.layer())
            .build();
    let operator = Operator::start_with(operator_client, metrics, ns, true);
    let services: Api<VLLMService> = Api::namespaced(client.clone(), ns);
    let vs: VLLMService = serde_json::from_value(routed_service("chat")).unwrap();
    services.create(&PostParams::default(), &vs).await.unwrap();

    let reason = |vs: &VLLMService| condition(vs, "RouteReady").map(|c| c.1);
    let vs = wait_until(common::WAIT, "RouteReady=False/APINotInstalled", || async {
        let vs = services.get("chat").await.ok()?;
        (reason(&vs).as_deref() == Some("APINotInstalled")).then_some(vs)
    })
    .await;
    let message = condition(&vs, "RouteReady").unwrap().2;
    assert!(
        message.contains("httproutes.gateway.networking.k8s.io"),
        "{message}"
    );
    // The rest is served: the Deployment exists.
    assert_eq!(
        vs.status.as_ref().unwrap().deployment_name.as_deref(),
        Some("chat")
    );

    // Monitoring does not gate serving: without the Prometheus Operator's CRDs a
    // monitored service (its PVC bound, no gatewayRef) is Running, and says what is
    // missing in MonitoringReady and Degraded.
    common::bound_pvc(&client, ns, "models", "/data/models").await;
    let mut monitored = gpu_service("watched", "models");
    monitored["spec"]["monitoring"] = json!({"enabled": true});
    let monitored: VLLMService = serde_json::from_value(monitored).unwrap();
    services
        .create(&PostParams::default(), &monitored)
        .await
        .unwrap();
    let vs = wait_until(
        common::WAIT,
        "watched Running without monitoring CRDs",
        || async {
            let vs = services.get("watched").await.ok()?;
            let running = vs.status.as_ref()?.phase == Some(vllmservice_api::Phase::Running);
            (running && common::is_available(&vs)).then_some(vs)
        },
    )
    .await;
    let monitoring = condition(&vs, "MonitoringReady").unwrap();
    assert_eq!(
        (monitoring.0.as_str(), monitoring.1.as_str()),
        ("False", "APINotInstalled"),
        "{monitoring:?}"
    );
    let degraded = condition(&vs, "Degraded").unwrap();
    assert_eq!(
        (degraded.0.as_str(), degraded.1.as_str()),
        ("True", "APINotInstalled"),
        "{degraded:?}"
    );
    assert!(
        degraded.2.contains("servicemonitors.monitoring.coreos.com"),
        "{degraded:?}"
    );

    // Autoscaling does not gate serving either: without KEDA an autoscaled
    // service is Running, AutoscalingReady says what is missing.
    let mut scaled = gpu_service("scaled", "models");
    scaled["spec"]["autoscaling"] = json!({"minReplicas": 1, "maxReplicas": 3, "target": "2"});
    let scaled: VLLMService = serde_json::from_value(scaled).unwrap();
    services
        .create(&PostParams::default(), &scaled)
        .await
        .unwrap();
    let vs = wait_until(common::WAIT, "scaled Running without KEDA", || async {
        let vs = services.get("scaled").await.ok()?;
        let running = vs.status.as_ref()?.phase == Some(vllmservice_api::Phase::Running);
        let reported = condition(&vs, "AutoscalingReady").is_some();
        (running && reported && common::is_available(&vs)).then_some(vs)
    })
    .await;
    let autoscaling = condition(&vs, "AutoscalingReady").unwrap();
    assert_eq!(
        (autoscaling.0.as_str(), autoscaling.1.as_str()),
        ("False", "APINotInstalled"),
        "{autoscaling:?}"
    );
    assert!(
        autoscaling.2.contains("scaledobjects.keda.sh"),
        "{autoscaling:?}"
    );
    // KEDA's CRDs installed later: the ScaledObject is made without an operator restart.
    let before = requests.lists();
    for always in ALWAYS_WATCHED {
        assert!(
            before.contains_key(always),
            "no list of {always}: {before:?}"
        );
    }
    cluster.install_keda_crds();
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject");
    let scaled_objects: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
    let so = wait_until(
        common::WAIT,
        "the ScaledObject, without an operator restart",
        || async { scaled_objects.get_opt("scaled").await.ok().flatten() },
    )
    .await;
    assert_eq!(so.data["spec"]["scaleTargetRef"]["kind"], "VLLMService");
    assert_eq!(so.data["spec"]["maxReplicaCount"], 3);
    let with_keda = requests.lists();
    assert_eq!(with_keda.get("scaledobjects"), Some(&1), "{with_keda:?}");
    relisted_nothing_else(&before, &with_keda, &["scaledobjects"]);

    cluster.install_gateway_api_crds();
    let gateways: Api<Gateway> = Api::namespaced(client.clone(), ns);
    wait_until(common::WAIT, "the Gateway API to be served", || async {
        gateways
            .create(&PostParams::default(), &gateway("http", "HTTP"))
            .await
            .ok()
    })
    .await;
    let routes: Api<HttpRoute> = Api::namespaced(client.clone(), ns);
    wait_until(
        common::WAIT,
        "the HTTPRoute, without an operator restart",
        || async { routes.get_opt("chat").await.ok().flatten() },
    )
    .await;
    let with_gateway = requests.lists();
    for listed in ["httproutes", "gateways"] {
        assert_eq!(with_gateway.get(listed), Some(&1), "{with_gateway:?}");
    }
    relisted_nothing_else(&with_keda, &with_gateway, &["httproutes", "gateways"]);

    // KEDA removed: its watch stops, the service says so again, and nothing
    // else is listed again (the Gateway API's watches included).
    let out = cluster
        .kubectl()
        .args(["delete", "crd", "scaledobjects.keda.sh", "--wait=true"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        common::WAIT,
        "AutoscalingReady=False/APINotInstalled again",
        || async {
            let vs = services.get("scaled").await.ok()?;
            let c = condition(&vs, "AutoscalingReady")?;
            (c.1 == "APINotInstalled").then_some(())
        },
    )
    .await;
    relisted_nothing_else(&with_gateway, &requests.lists(), &[]);
    operator.stop().await;
}

/// What the operator watches whatever optional APIs are installed.
const ALWAYS_WATCHED: [&str; 8] = [
    "vllmservices",
    "deployments",
    "services",
    "pods",
    "persistentvolumeclaims",
    "poddisruptionbudgets",
    "jobs",
    "horizontalpodautoscalers",
];

/// Between the LIST counts `before` and `after`, only the resources in `new` were listed.
fn relisted_nothing_else(
    before: &std::collections::BTreeMap<String, usize>,
    after: &std::collections::BTreeMap<String, usize>,
    new: &[&str],
) {
    for (resource, n) in after {
        if new.contains(&resource.as_str()) || resource == "customresourcedefinitions" {
            continue;
        }
        assert_eq!(
            before.get(resource),
            Some(n),
            "{resource} listed again: before {before:?}, after {after:?}"
        );
    }
}
