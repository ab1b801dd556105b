//! GPU-aware rollouts on kwok nodes whose every GPU is taken: `Auto` replaces
//! pods in place (and says so in advance), `Surge` is reported as
//! `RolloutBlocked` with the numbers while the old pods keep serving, and
//! adding a node unblocks it without a spec change.
//!
//! Each test makes its own kwok node(s), labelled and tainted with the test's
//! namespace so that no other test's pods land there, and an in-process
//! operator that counts the cluster's free GPUs from its node and pod caches
//! (or, as installed by default, does not, and learns from an unschedulable
//! surge pod).

mod common;

use std::time::Duration;

use common::{Env, condition, gpu_service, is_available};
use futures::TryStreamExt;
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Event, Node},
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;

const POOL: &str = "test.vllm.example.com/pool";

/// A kwok-managed node with `gpus` nvidia.com/gpu, only for this test's pods;
/// deleted when dropped.
struct PoolNode {
    name: String,
}

impl PoolNode {
    async fn add(env: &Env, suffix: &str, gpus: u32) -> PoolNode {
        let name = format!("{}-{suffix}", env.ns.name);
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {"kubernetes.io/hostname": name, "type": "kwok", POOL: env.ns.name}},
            "spec": {"taints": [{"key": POOL, "value": env.ns.name, "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()}}
        }))
        .unwrap();
        Api::<Node>::all(env.client.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("create the kwok node");
        PoolNode { name }
    }
}

impl Drop for PoolNode {
    fn drop(&mut self) {
        let _ = testkit::kubectl(&["delete", "node", &self.name, "--wait=false"]);
    }
}

/// `replicas` pods of one GPU each, only on this test's nodes.
fn pool_service(env: &Env, name: &str, replicas: i32, strategy: &str) -> Value {
    let mut vs = gpu_service(name, "models");
    let spec = &mut vs["spec"];
    spec["replicas"] = json!(replicas);
    spec["nodeSelector"] = json!({POOL: env.ns.name});
    spec["tolerations"] = json!([{"key": POOL, "operator": "Equal", "value": env.ns.name,
                                  "effect": "NoSchedule"}]);
    spec["rollout"] = json!({"strategy": strategy});
    vs
}

fn progressing(vs: &VLLMService) -> (String, String, String) {
    condition(vs, "Progressing").unwrap_or_default()
}

/// Every status of `name` the watch shows until `done` holds for one; returns them all.
async fn statuses_until(
    env: &Env,
    name: &str,
    what: &str,
    done: impl Fn(&VLLMService) -> bool,
) -> Vec<VLLMService> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(env.api::<VLLMService>(), config).applied_objects();
    let mut stream = std::pin::pin!(stream);
    let mut seen = Vec::new();
    let outcome = tokio::time::timeout(Duration::from_secs(120), async {
        while let Some(vs) = stream.try_next().await.expect("VLLMService watch") {
            let finished = done(&vs);
            seen.push(vs);
            if finished {
                return;
            }
        }
    })
    .await;
    if outcome.is_err() {
        let last = seen.last().and_then(|v| v.status.clone());
        panic!("{what}: not reached in 120 s; last status: {last:#?}");
    }
    seen
}

fn rollout_done(image: &str) -> impl Fn(&VLLMService) -> bool + '_ {
    move |vs| {
        vs.spec.image == image
            && is_available(vs)
            && progressing(vs).1 == "Complete"
            && condition(vs, "DeploymentReady").is_some_and(|c| c.0 == "True")
    }
}

/// A service of 2 one-GPU pods, Available on its own node of 2 GPUs (so every
/// GPU it may use is taken), with rollout `strategy`.
async fn full_node_service(prefix: &str, strategy: &str) -> (Env, PoolNode) {
    full_node_service_in(Env::new(prefix).await, strategy).await
}

async fn full_node_service_in(env: Env, strategy: &str) -> (Env, PoolNode) {
    let node = PoolNode::add(&env, "a", 2).await;
    env.bound_pvc("models").await;
    env.create(pool_service(&env, "qwen", 2, strategy)).await;
    env.wait_for("qwen", "Available 2/2 on the full node", |vs| {
        is_available(vs) && vs.status.as_ref().and_then(|s| s.ready.as_deref()) == Some("2/2")
    })
    .await;
    (env, node)
}

#[tokio::test]
async fn auto_replaces_in_place_when_every_gpu_is_taken() {
    let (env, _node) = full_node_service("gpu-auto", "Auto").await;

    let image = "vllm/vllm-openai:v0.11.1";
    env.patch_spec("qwen", json!({"image": image})).await;
    let seen = statuses_until(
        &env,
        "qwen",
        "the rollout to the new image",
        rollout_done(image),
    )
    .await;

    // Said in advance, while the rollout ran.
    let told = seen.iter().find(|vs| {
        let p = progressing(vs);
        p.1 == "RolloutInProgress" && p.2.contains("replacing in place")
    });
    let told = told.unwrap_or_else(|| {
        panic!(
            "no status said the rollout replaces in place: {:#?}",
            seen.iter().map(progressing).collect::<Vec<_>>()
        )
    });
    let message = progressing(told).2;
    assert!(
        message.contains("no free nvidia.com/gpu for a surge pod")
            && message.contains("a pod needs 1 nvidia.com/gpu; 0 are free on the 1 node"),
        "{message}"
    );
    assert!(
        !seen.iter().any(|vs| progressing(vs).1 == "RolloutBlocked"),
        "Auto never blocks"
    );
    let last = seen.last().unwrap().status.clone().unwrap();
    assert_eq!(last.rollout_strategy.as_deref(), Some("OneAtATime"));
    let d = env.api::<Deployment>().get("qwen").await.unwrap();
    let rolling = d.spec.unwrap().strategy.unwrap().rolling_update.unwrap();
    assert_eq!(
        serde_json::to_value(&rolling).unwrap(),
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
}

/// The default install counts no GPUs (no node watch, pods by label only):
/// Auto surges, and once the surge pod has stayed Unschedulable for the
/// patience, replaces in place, saying why.
#[tokio::test]
async fn without_gpu_accounting_auto_replaces_in_place_after_an_unschedulable_surge_pod() {
    let env = Env::with_options("gpu-auto-blind", |o| {
        o.gpu_accounting = false;
        o.defaults.surge_unschedulable_seconds = 3;
    })
    .await;
    let (env, _node) = full_node_service_in(env, "Auto").await;

    let image = "vllm/vllm-openai:v0.11.1";
    env.patch_spec("qwen", json!({"image": image})).await;
    let seen = statuses_until(
        &env,
        "qwen",
        "the rollout to the new image",
        rollout_done(image),
    )
    .await;
    let progress: Vec<_> = seen.iter().map(progressing).collect();
    // A surge first: the operator cannot know that no GPU is free.
    let surged = seen.iter().position(|vs| {
        vs.status
            .as_ref()
            .and_then(|s| s.rollout_strategy.as_deref())
            == Some("Surge")
            && progressing(vs).1 == "RolloutInProgress"
    });
    let in_place = seen.iter().position(|vs| {
        let p = progressing(vs);
        p.1 == "RolloutInProgress" && p.2.contains("replacing in place")
    });
    let (Some(surged), Some(in_place)) = (surged, in_place) else {
        panic!("want a surge, then replacing in place: {progress:#?}");
    };
    assert!(surged < in_place, "{progress:#?}");
    let message = progressing(&seen[in_place]).2;
    assert!(
        message.contains("surge pod qwen-")
            && message.contains("unschedulable for")
            && message.contains("Insufficient nvidia.com/gpu"),
        "{message}"
    );
    assert!(
        !progress.iter().any(|p| p.1 == "RolloutBlocked"),
        "Auto never blocks: {progress:#?}"
    );
    let last = seen.last().unwrap().status.clone().unwrap();
    assert_eq!(last.rollout_strategy.as_deref(), Some("OneAtATime"));
    let d = env.api::<Deployment>().get("qwen").await.unwrap();
    let rolling = d.spec.unwrap().strategy.unwrap().rolling_update.unwrap();
    assert_eq!(
        serde_json::to_value(&rolling).unwrap(),
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
}

#[tokio::test]
async fn surge_is_blocked_with_the_numbers_until_a_node_is_added() {
    let (env, _node) = full_node_service("gpu-surge", "Surge").await;

    let image = "vllm/vllm-openai:v0.11.1";
    env.patch_spec("qwen", json!({"image": image})).await;
    let seen = statuses_until(&env, "qwen", "RolloutBlocked", |vs| {
        progressing(vs).1 == "RolloutBlocked"
    })
    .await;
    let blocked = seen.last().unwrap();
    let (status, _, message) = progressing(blocked);
    assert_eq!(status, "False");
    assert!(
        message.contains("the rollout is blocked")
            && message.contains("a pod needs 1 nvidia.com/gpu; 0 are free on the 1 node")
            && message.contains("set spec.rollout.strategy to Auto or OneAtATime"),
        "{message}"
    );
    // The old pods keep serving.
    assert!(is_available(blocked), "{:#?}", blocked.status);
    assert_eq!(
        blocked.status.as_ref().and_then(|s| s.phase),
        Some(vllmservice_api::Phase::Running)
    );
    assert_eq!(
        condition(blocked, "Degraded").map(|c| c.1).as_deref(),
        Some("RolloutBlocked")
    );
    // One event for this rollout.
    let events = Api::<Event>::namespaced(env.client.clone(), &env.ns.name);
    let blocked_events = || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("RolloutBlocked"))
            .collect::<Vec<_>>()
    };
    testkit::wait_until(common::WAIT, "the RolloutBlocked event", || async {
        (!blocked_events().await.is_empty()).then_some(())
    })
    .await;

    // A node with a free GPU unblocks it; the spec is not touched.
    let generation = blocked.metadata.generation;
    let _second = PoolNode::add(&env, "b", 1).await;
    let seen = statuses_until(
        &env,
        "qwen",
        "the rollout after the node was added",
        rollout_done(image),
    )
    .await;
    let done = seen.last().unwrap();
    assert_eq!(done.metadata.generation, generation, "no spec change");
    assert_eq!(
        done.status.as_ref().unwrap().rollout_strategy.as_deref(),
        Some("Surge")
    );
    let events = blocked_events().await;
    assert_eq!(events.len(), 1, "one event per rollout: {events:#?}");
    assert!(
        events[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("nvidia.com/gpu")
    );
    let _ = env
        .api::<VLLMService>()
        .delete("qwen", &DeleteParams::default())
        .await;
}
