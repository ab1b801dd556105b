//! The contract under change, against the local cluster: status stays true
//! during rollouts, the operator never takes over what someone else created,
//! a replace keeps other managers' fields, pods pass Pod Security admission,
//! long event notes are stored, and an unchanged world sees no writes.

mod common;

use std::sync::{Arc, Mutex};

use common::{Env, condition, gpu_service, is_available};
use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Namespace, Pod, Service},
    events::v1::Event,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use testkit::wait_until;
use vllmservice_api::{Phase, VLLMService};

/// Every VLLMService status the watch shows, in order, from the moment it starts.
fn record_statuses(api: Api<VLLMService>, name: &str) -> Arc<Mutex<Vec<VLLMService>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, config).applied_objects());
        while let Some(Ok(vs)) = events.next().await {
            out.lock().unwrap().push(vs);
        }
    });
    seen
}

fn summary(vs: &VLLMService) -> String {
    let s = vs.status.as_ref();
    format!(
        "gen {:?}/{:?} phase {:?} Available {:?} Progressing {:?} DeploymentReady {:?}",
        vs.metadata.generation,
        s.and_then(|s| s.observed_generation),
        s.and_then(|s| s.phase),
        condition(vs, "Available"),
        condition(vs, "Progressing"),
        condition(vs, "DeploymentReady"),
    )
}

/// Rolls out a new image of a Running service of `replicas` and checks every
/// status write the watch shows on the way: Available=True and Running all along.
/// Returns how many status writes came while the rollout ran.
async fn rollout_keeps_serving(env: &Env, name: &str, replicas: i32) -> usize {
    env.bound_pvc(&format!("{name}-models")).await;
    let mut body = gpu_service(name, &format!("{name}-models"));
    body["spec"]["replicas"] = json!(replicas);
    env.create(body).await;
    env.wait_for(name, "Available", is_available).await;
    let api = env.api::<VLLMService>();
    let seen = record_statuses(api.clone(), name);
    // The watch's first event is the current object.
    wait_until(common::WAIT, "the watch to start", || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    env.patch_spec(name, json!({"image": "vllm/vllm-openai:v0.12.0"}))
        .await;
    let deployments = env.api::<Deployment>();
    let done = env
        .wait_for(name, "the rollout to complete", |vs| {
            is_available(vs)
                && condition(vs, "DeploymentReady").is_some_and(|c| c.0 == "True")
                && condition(vs, "Progressing").is_some_and(|c| c.1 == "Complete")
        })
        .await;
    let d = deployments.get(name).await.unwrap();
    let image = d.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("vllm/vllm-openai:v0.12.0"));
    // The final status may still be on its way to the watch.
    let final_rv = done.resource_version();
    wait_until(
        common::WAIT,
        "the watch to show the final status",
        || async {
            let seen = seen.lock().unwrap();
            seen.iter()
                .any(|vs| vs.resource_version() == final_rv)
                .then_some(())
        },
    )
    .await;

    let seen = seen.lock().unwrap().clone();
    let new_generation = done.metadata.generation;
    let mut during = 0;
    for vs in &seen {
        let status = vs.status.as_ref().expect("a Running service has a status");
        assert!(
            condition(vs, "Available").is_some_and(|c| c.0 == "True")
                && status.phase == Some(Phase::Running),
            "a status write during the rollout of {replicas} replica(s) said the service does \
             not serve: {}\nall writes seen:\n{}",
            summary(vs),
            seen.iter().map(summary).collect::<Vec<_>>().join("\n")
        );
        let rolling = status.observed_generation == new_generation
            && condition(vs, "DeploymentReady").is_some_and(|c| c.0 != "True");
        if rolling {
            during += 1;
            let progressing = condition(vs, "Progressing").unwrap();
            assert_eq!(
                (progressing.0.as_str(), progressing.1.as_str()),
                ("True", "RolloutInProgress"),
                "{}",
                summary(vs)
            );
            assert!(
                progressing.2.contains("pods updated"),
                "Progressing says how far the rollout is: {}",
                progressing.2
            );
        }
    }
    during
}

#[tokio::test]
async fn rollouts_of_one_and_three_replicas_keep_the_service_available() {
    let env = Env::new("ct-rollout").await;
    rollout_keeps_serving(&env, "one", 1).await;
    let during = rollout_keeps_serving(&env, "three", 3).await;
    // Without status writes while old and new pods serve together, this test would
    // not test what it says.
    assert!(
        during > 0,
        "no status write was seen while the 3-replica rollout ran"
    );
    env.operator.stop().await;
}

/// A Deployment of the test's, with the VLLMService's name and no owner reference.
fn foreign_deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"owner": "someone-else"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"owner": name}},
                 "template": {"metadata": {"labels": {"owner": name}},
                              "spec": {"containers": [{"name": "c", "image": "example.com/theirs:1"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn a_foreign_create_racing_the_operators_is_never_taken_over() {
    let env = Env::new("ct-race").await;
    env.bound_pvc("models").await;
    let deployments = env.api::<Deployment>();
    const ROUNDS: usize = 12;
    let mut theirs = 0;
    for i in 0..ROUNDS {
        let name = format!("race-{i}");
        let body = gpu_service(&name, "models");
        // Both creates at about the same time; the foreign one is delayed by a
        // different few milliseconds each round, so that either may win.
        let delay = std::time::Duration::from_millis((i as u64 % 6) * 15);
        let (_, foreign) = tokio::join!(env.create(body), async {
            tokio::time::sleep(delay).await;
            deployments
                .create(&PostParams::default(), &foreign_deployment(&name))
                .await
        });
        let we_won = foreign.is_ok();
        let vs = env
            .wait_for(&name, "a status", |vs| {
                vs.status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation == vs.metadata.generation)
            })
            .await;
        let d = deployments.get(&name).await.unwrap();
        let controlled = d
            .owner_references()
            .iter()
            .any(|r| r.controller == Some(true) && Some(&r.uid) == vs.metadata.uid.as_ref());
        if we_won {
            theirs += 1;
            assert!(
                !controlled,
                "round {i}: the test created Deployment {name}, and the operator took it over"
            );
            let image = d.spec.unwrap().template.spec.unwrap().containers[0]
                .image
                .clone();
            assert_eq!(image.as_deref(), Some("example.com/theirs:1"), "round {i}");
            let vs = env
                .wait_for(&name, "DeploymentReady=False/ResourceConflict", |vs| {
                    condition(vs, "DeploymentReady").is_some_and(|c| c.1 == "ResourceConflict")
                })
                .await;
            assert_eq!(vs.status.unwrap().deployment_name, None);
        } else {
            assert!(controlled, "round {i}: the operator's create won: {d:?}");
        }
    }
    eprintln!("the test's create won {theirs} of {ROUNDS} races");
    env.operator.stop().await;
}

/// A merge patch by another field manager.
async fn patch_as<K>(api: &Api<K>, manager: &str, name: &str, patch: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(manager.into()),
            ..PatchParams::default()
        },
        &Patch::Merge(patch),
    )
    .await
    .unwrap_or_else(|e| panic!("patch as {manager} refused: {e}"));
}

#[tokio::test]
async fn a_replace_for_a_duplicate_entry_keeps_what_other_managers_set() {
    let env = Env::new("ct-replace").await;
    env.bound_pvc("models").await;
    env.create(gpu_service("dup", "models")).await;
    env.wait_for("dup", "Available", is_available).await;
    let services = env.api::<Service>();
    let deployments = env.api::<Deployment>();

    // Others' fields: an annotation and a spec field on the Service; `kubectl rollout
    // restart`'s annotation on the pod template.
    patch_as(
        &services,
        "platform-team",
        "dup",
        json!({"metadata": {"annotations": {"example.com/owner": "platform"}},
               "spec": {"sessionAffinity": "ClientIP"}}),
    )
    .await;
    patch_as(
        &deployments,
        "kubectl-rollout",
        "dup",
        json!({"spec": {"template": {"metadata": {"annotations":
            {"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"}}}}}),
    )
    .await;
    // Then a hand edit that apply cannot undo: our port renumbered by another manager.
    // Apply keys Service ports by number, so ours comes back beside theirs, both named
    // "http", which the API server refuses ("Duplicate value"): only a replace fixes it.
    patch_as(
        &services,
        "hand-edit",
        "dup",
        json!({"spec": {"ports": [{"name": "http", "port": 9999, "protocol": "TCP",
                                   "targetPort": "http"}]}}),
    )
    .await;
    let expect_port_count = 1;
    let services_api = services.clone();
    let service = wait_until(common::WAIT, "the Service back to one port", || async {
        let s = services_api.get("dup").await.ok()?;
        let ports = s.spec.as_ref()?.ports.as_ref()?;
        (ports.len() == expect_port_count && ports[0].port == 8000).then_some(s)
    })
    .await;
    assert_eq!(
        service
            .annotations()
            .get("example.com/owner")
            .map(String::as_str),
        Some("platform"),
        "another manager's annotation was dropped"
    );
    assert_eq!(
        service.spec.as_ref().unwrap().session_affinity.as_deref(),
        Some("ClientIP"),
        "another manager's spec field was dropped"
    );

    // The Deployment: the container port renumbered by another manager makes every
    // apply fail with "Duplicate value" on its name; the replace keeps the
    // rollout-restart annotation.
    let d = deployments.get("dup").await.unwrap();
    let mut containers = serde_json::to_value(
        &d.spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers,
    )
    .unwrap();
    containers[0]["ports"][0]["containerPort"] = json!(8001);
    patch_as(
        &deployments,
        "hand-edit",
        "dup",
        json!({"spec": {"template": {"spec": {"containers": containers}}}}),
    )
    .await;
    let d = wait_until(common::WAIT, "the Deployment back to one port", || async {
        let d = deployments.get("dup").await.ok()?;
        let ports = d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
            .ports
            .as_ref()?
            .len();
        let port = d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
            .ports
            .as_ref()?[0]
            .container_port;
        (ports == 1 && port == 8000).then_some(d)
    })
    .await;
    let template_annotations = d
        .spec
        .unwrap()
        .template
        .metadata
        .unwrap()
        .annotations
        .unwrap_or_default();
    assert_eq!(
        template_annotations
            .get("kubectl.kubernetes.io/restartedAt")
            .map(String::as_str),
        Some("2026-12-01T00:00:00Z"),
        "kubectl rollout restart's annotation was dropped"
    );
    env.wait_for("dup", "Available", is_available).await;
    env.operator.stop().await;
}

/// A namespace that enforces Pod Security `level`, with a bound PVC.
async fn pss_env(prefix: &str, level: &str) -> Env {
    let env = Env::new(prefix).await;
    Api::<Namespace>::all(env.client.clone())
        .patch(
            &env.ns.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/enforce-version": "latest"}}})),
        )
        .await
        .unwrap();
    env.bound_pvc("models").await;
    env
}

async fn pods_of(env: &Env, name: &str) -> Vec<Pod> {
    env.api::<Pod>()
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn default_pods_pass_baseline_and_non_root_pods_pass_restricted() {
    let env = pss_env("ct-baseline", "baseline").await;
    env.create(gpu_service("plain", "models")).await;
    env.wait_for("plain", "Available under baseline", is_available)
        .await;
    let pod = pods_of(&env, "plain").await.remove(0);
    let spec = pod.spec.unwrap();
    assert_eq!(spec.automount_service_account_token, Some(false));
    let sc = spec.containers[0].security_context.clone().unwrap();
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
    assert_eq!(
        spec.security_context
            .unwrap()
            .seccomp_profile
            .unwrap()
            .type_,
        "RuntimeDefault"
    );
    env.operator.stop().await;

    let env = pss_env("ct-restricted", "restricted").await;
    let mut body = gpu_service("nonroot", "models");
    body["spec"]["podSecurityContext"] = json!({"runAsNonRoot": true, "runAsUser": 1000});
    env.create(body).await;
    env.wait_for("nonroot", "Available under restricted", is_available)
        .await;
    // Without runAsNonRoot, restricted refuses the pods, and status says why.
    env.create(gpu_service("root", "models")).await;
    let vs = env
        .wait_for("root", "Degraded=True/ReplicaFailure", |vs| {
            condition(vs, "Degraded").is_some_and(|c| c.1 == "ReplicaFailure")
        })
        .await;
    let message = condition(&vs, "Degraded").unwrap().2;
    assert!(message.contains("violates PodSecurity"), "{message}");
    env.operator.stop().await;
}

#[tokio::test]
async fn an_event_note_of_multibyte_text_is_cut_to_the_api_servers_byte_limit_and_stored() {
    let env = Env::new("ct-event").await;
    env.bound_pvc("models").await;
    // A pod whose status (set by hand: kwok leaves it alone) carries a long
    // message in multi-byte text, which the Degraded event repeats.
    env.create(gpu_service("noisy", "models")).await;
    env.wait_for("noisy", "Available", is_available).await;
    let pod = pods_of(&env, "noisy").await.remove(0);
    let pods = env.api::<Pod>();
    pods.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"kwok.x-k8s.io/status": "custom"}}})),
    )
    .await
    .unwrap();
    let long = "模型加载失败，".repeat(200);
    pods.patch_status(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"containerStatuses": [{
            "name": "vllm", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            // A pull failure: reported with the kubelet's message (a crash would be
            // diagnosed from the container's log instead).
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": long}}}]}})),
    )
    .await
    .unwrap();
    env.wait_for("noisy", "Degraded=True/ImagePullBackOff", |vs| {
        condition(vs, "Degraded").is_some_and(|c| c.1 == "ImagePullBackOff")
    })
    .await;
    let events = env.api::<Event>();
    let event = wait_until(common::WAIT, "the ImagePullBackOff event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ImagePullBackOff"))
    })
    .await;
    let note = event.note.unwrap();
    assert!(note.len() <= 1024, "{} bytes", note.len());
    assert!(
        note.len() > 1000,
        "cut much shorter than needed: {} bytes",
        note.len()
    );
    assert!(note.ends_with('…'), "{note}");
    assert!(note.contains("模型加载失败"), "{note}");
    env.operator.stop().await;
}

/// Every status the watch shows for the new service created from `body`, in
/// order, up to the first Available one (a watch started before the create).
async fn first_statuses(env: &Env, body: Value) -> Vec<VLLMService> {
    let name = body["metadata"]["name"].as_str().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (listed, list_done) = tokio::sync::oneshot::channel();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (api, out) = (env.api::<VLLMService>(), seen.clone());
    tokio::spawn(async move {
        let mut listed = Some(listed);
        let mut events = std::pin::pin!(watcher(api, config));
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::InitDone => {
                    if let Some(tx) = listed.take() {
                        let _ = tx.send(());
                    }
                }
                watcher::Event::Apply(vs) | watcher::Event::InitApply(vs) => {
                    out.lock().unwrap().push(vs)
                }
                _ => {}
            }
        }
    });
    // Every write after the create is seen: the watch runs from before it.
    list_done.await.expect("the watch lists");
    env.create(body).await;
    env.wait_for(&name, "Available", is_available).await;
    wait_until(common::WAIT, "the watch to show Available", || async {
        let seen = seen.lock().unwrap();
        seen.iter().any(is_available).then(|| seen.clone())
    })
    .await
    .into_iter()
    .filter(|vs| vs.status.is_some())
    .collect()
}

/// A new service's first status waits for its pods within the settle window
/// (`settle.rs`): a quick start is stored once, Available, with no Pending
/// before it; a failure is written at once, long before the window ends.
/// Without the window the same start stores Pending first (one more write).
#[tokio::test]
async fn a_new_services_first_status_waits_for_its_pods_but_not_for_a_failure() {
    // A window far longer than any wait here: whatever is written within the
    // test's waits was not held back by it.
    let env = Env::with_options("ct-settle", |o| {
        o.status_settle = std::time::Duration::from_secs(600)
    })
    .await;
    env.bound_pvc("models").await;
    let statuses = first_statuses(&env, gpu_service("quick", "models")).await;
    let phases: Vec<_> = statuses.iter().map(summary).collect();
    assert!(
        is_available(&statuses[0]),
        "the first stored status is not Available: {phases:#?}"
    );
    assert!(
        env.operator.metrics.status_writes_held.get() >= 1,
        "no reconcile held the first status"
    );
    // Its events: the children created, and no separate Available (nothing turned).
    assert_eq!(event_reasons(&env, "quick").await, ["Created"]);

    let mut greedy = gpu_service("greedy", "models");
    greedy["spec"]["resources"] = json!({"limits": {"nvidia.com/gpu": "9"}});
    env.create(greedy).await;
    let vs = env
        .wait_for(
            "greedy",
            "Degraded=True/Unschedulable, within the window",
            |vs| condition(vs, "Degraded").is_some_and(|c| c.1 == "Unschedulable"),
        )
        .await;
    assert_eq!(vs.status.unwrap().phase, Some(Phase::Failed));
    env.operator.stop().await;

    let env = Env::with_options("ct-nosettle", |o| {
        o.status_settle = std::time::Duration::ZERO
    })
    .await;
    env.bound_pvc("models").await;
    let statuses = first_statuses(&env, gpu_service("quick", "models")).await;
    let phases: Vec<_> = statuses.iter().map(summary).collect();
    assert_eq!(
        statuses[0].status.as_ref().unwrap().phase,
        Some(Phase::Pending),
        "without the window the first stored status is Pending: {phases:#?}"
    );
    assert_eq!(env.operator.metrics.status_writes_held.get(), 0);
    // Pending was written, so turning Available is announced.
    assert_eq!(event_reasons(&env, "quick").await, ["Available", "Created"]);
    env.operator.stop().await;
}

/// The sorted reasons of the events about VLLMService `name`, read once the
/// operator has no reconcile in flight (a reconcile publishes its events
/// before it ends, so none of the reconciles seen so far has one pending).
async fn event_reasons(env: &Env, name: &str) -> Vec<String> {
    wait_until(common::WAIT, "the operator's reconciles to end", || async {
        (env.operator.metrics.reconciles_in_flight.get() == 0).then_some(())
    })
    .await;
    let events = env
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut reasons: Vec<String> = events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("VLLMService")
        })
        .filter_map(|e| e.reason)
        .collect();
    reasons.sort();
    reasons
}

#[tokio::test]
async fn the_full_example_converges_and_an_unchanged_world_sees_no_writes() {
    let env = Env::new("ct-full").await;
    env.bound_pvc("qwen-models").await;
    let text = std::fs::read_to_string(testkit::repo_root().join("examples/full.yaml")).unwrap();
    let mut body: Value = serde_saphyr::from_str(&text).unwrap();
    body["metadata"]["namespace"] = json!(env.ns.name);
    let pvc = body["spec"]["storage"]["pvcName"]
        .as_str()
        .unwrap()
        .to_string();
    if pvc != "qwen-models" {
        env.bound_pvc(&pvc).await;
    }
    // The Gateway it routes through, in the test's namespace, accepted by nobody:
    // the route is written and RouteReady waits for a Gateway controller.
    let gateway_ref = body["spec"]["gatewayRef"].clone();
    body["spec"]["gatewayRef"]["namespace"] = json!(env.ns.name);
    let gateway: Value = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": gateway_ref["name"], "namespace": env.ns.name},
        "spec": {"gatewayClassName": "example", "listeners": [
            {"name": gateway_ref["sectionName"], "port": 443, "protocol": "HTTPS",
             "hostname": gateway_ref["host"],
             "tls": {"certificateRefs": [{"name": "tls"}]}}]}
    });
    let gateways: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.ns.name,
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "gateway.networking.k8s.io",
            "v1",
            "Gateway",
        )),
    );
    gateways
        .create(
            &PostParams::default(),
            &serde_json::from_value(gateway).unwrap(),
        )
        .await
        .unwrap();
    let sa = body["spec"]["serviceAccountName"].as_str().unwrap();
    env.api::<k8s_openapi::api::core::v1::ServiceAccount>()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": sa}})).unwrap(),
        )
        .await
        .unwrap();
    let name = body["metadata"]["name"].as_str().unwrap().to_string();
    // The shared cluster runs KEDA, which reports on the ScaledObject (and its HPA)
    // on its own time: the world is unchanged only once it has. Its triggers query
    // the pipeline's Prometheus (a reachable one, so that nothing keeps failing).
    let pipeline = testkit::autoscaling();
    body["spec"]["autoscaling"]["prometheus"]["serverAddress"] = json!(pipeline.prometheus_url);
    env.create(body).await;
    env.wait_for(&name, "every child written", |vs| {
        vs.status.as_ref().is_some_and(|s| {
            s.observed_generation == vs.metadata.generation
                && s.http_route_name.is_some()
                && s.service_monitor_name.is_some()
        })
    })
    .await;
    env.wait_for(&name, "KEDA's report: AutoscalingReady Idle", |vs| {
        common::condition(vs, "AutoscalingReady").is_some_and(|c| c.1 == "Idle")
    })
    .await;
    let hpas = env.api::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>();
    testkit::wait_until(common::WAIT, "the HPA's first sync", || async {
        let hpa = hpas.get_opt(&format!("keda-hpa-{name}")).await.ok()??;
        let conditions = hpa.status?.conditions?;
        conditions
            .iter()
            .any(|c| c.type_ == "ScalingLimited")
            .then_some(())
    })
    .await;
    env.assert_idle_reconcile_writes_nothing(&name).await;
    env.operator.stop().await;
}

#[tokio::test]
async fn fields_removed_from_the_spec_are_removed_from_the_children_it_created() {
    let env = Env::new("ct-removed").await;
    env.bound_pvc("models").await;
    let mut body = gpu_service("trim", "models");
    body["spec"]["labels"] = json!({"team": "search"});
    body["spec"]["env"] = json!([{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]);
    body["spec"]["nodeSelector"] = json!({"nvidia.com/gpu.present": "true"});
    env.create(body).await;
    env.wait_for("trim", "Available", is_available).await;
    // Created with a POST, so our first entry in managedFields is an Update; the
    // apply that removes these fields must still own them to remove them.
    env.api::<VLLMService>()
        .patch(
            "trim",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"labels": null, "env": null, "nodeSelector": null}})),
        )
        .await
        .unwrap();
    let deployments = env.api::<Deployment>();
    let d = wait_until(
        common::WAIT,
        "the removed fields gone from the Deployment",
        || async {
            let d = deployments.get("trim").await.ok()?;
            let pod = d.spec.as_ref()?.template.spec.as_ref()?;
            let env_gone = pod.containers[0].env.as_ref().is_none_or(|e| e.is_empty());
            let selector_gone = pod.node_selector.as_ref().is_none_or(|s| s.is_empty());
            let label_gone = !d.labels().contains_key("team");
            (env_gone && selector_gone && label_gone).then_some(d)
        },
    )
    .await;
    let ours: Vec<_> = d
        .managed_fields()
        .iter()
        .filter(|m| m.manager.as_deref() == Some("vllmservice-operator"))
        .map(|m| m.operation.clone().unwrap_or_default())
        .collect();
    assert_eq!(ours, ["Apply"], "our managedFields entries: {ours:?}");
    env.operator.stop().await;
}
