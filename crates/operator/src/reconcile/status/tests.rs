//! Unit tests of the parent module.

use super::{
    derive,
    rollout::{Rollout, min_ready, rollout_state, scheduling},
};
use crate::diagnosis::workload::Finding;
use crate::reconcile::{
    done::{Done, Outcome},
    seen::{Seen, Storage},
};
use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use serde_json::json;
use vllmservice_api::{Phase, VLLMService};

/// Available, its reason and message, and the phase of a service whose
/// Deployment has settled at `spec.replicas: 0`.
fn at_zero(autoscaling: Option<serde_json::Value>) -> (String, String, String, Phase) {
    let mut spec = json!({"image": "i", "modelPath": "/m", "modelName": "m", "replicas": 0,
            "storage": {"pvcName": "p", "mountPath": "/data"}});
    if let Some(a) = autoscaling {
        spec["autoscaling"] = a;
    }
    let vs: VLLMService = serde_json::from_value(json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": spec}))
    .unwrap();
    let valid = vllmservice_api::validate(&vs).unwrap();
    let d = deployment(json!({"metadata": {"generation": 1},
            "spec": {"replicas": 0, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 0}}));
    let done = Done {
        deployment: Outcome::Live(d),
        scaled_object: Outcome::Untouched,
        ..Done::default()
    };
    let mut seen = Seen {
        storage: Storage::Bound,
        ..Seen::default()
    };
    // KEDA is installed (AutoscalingReady is then Pending, not a problem).
    seen.apis.keda = true;
    let status = derive(&valid, &seen, &done, Timestamp::UNIX_EPOCH);
    let c = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
            .clone()
    };
    assert_eq!(c("DeploymentReady").status, "True", "{status:?}");
    assert_eq!(c("Degraded").status, "False", "{status:?}");
    let a = c("Available");
    (a.status, a.reason, a.message, status.phase.unwrap())
}

#[test]
fn zero_replicas_are_not_available_but_pending() {
    let (status, reason, message, phase) = at_zero(None);
    assert_eq!(
        (status.as_str(), reason.as_str(), phase),
        ("False", "ScaledToZero", Phase::Pending)
    );
    assert!(message.contains("spec.replicas is 0"), "{message}");
    let (status, reason, message, phase) = at_zero(Some(json!({"minReplicas": 0,
            "maxReplicas": 2, "target": "1", "activationQuery": "sum(queue)"})));
    assert_eq!(
        (status.as_str(), reason.as_str(), phase),
        ("False", "ScaledToZero", Phase::Pending)
    );
    assert!(
        message.contains("autoscaler") && message.contains("activation"),
        "{message}"
    );
}

fn with_strategy(strategy: serde_json::Value) -> Deployment {
    serde_json::from_value(json!({"spec": {"selector": {}, "template": {},
            "strategy": strategy}}))
    .unwrap()
}

#[test]
fn min_ready_follows_the_rollout_strategy_with_kubernetes_rounding() {
    let default = with_strategy(json!({}));
    // 25 % of 1 and of 3 round down to 0 unavailable; of 4 to 1.
    assert_eq!(min_ready(&default, 1), 1);
    assert_eq!(min_ready(&default, 3), 3);
    assert_eq!(min_ready(&default, 4), 3);
    assert_eq!(min_ready(&default, 0), 0);
    let recreate = with_strategy(json!({"type": "Recreate"}));
    assert_eq!(
        min_ready(&recreate, 3),
        1,
        "never below 1 while any are desired"
    );
    let two = with_strategy(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 2, "maxSurge": "50%"}}));
    assert_eq!(min_ready(&two, 4), 2);
    let stuck = with_strategy(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}));
    assert_eq!(
        min_ready(&stuck, 4),
        3,
        "both zero: the Deployment controller allows 1"
    );
}

fn deployment(v: serde_json::Value) -> Deployment {
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_rollout_is_under_way_while_old_pods_run_or_a_later_revision_is_not_available() {
    let surge =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
    let in_place =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
    let d = |revision: &str, strategy: &serde_json::Value, replicas: i32, reason: &str| {
        deployment(json!({
                "metadata": {"annotations": {"deployment.kubernetes.io/revision": revision}},
                "spec": {"selector": {}, "template": {}, "strategy": strategy},
                "status": {"replicas": replicas, "updatedReplicas": 1,
                    "conditions": [{"type": "Progressing", "status": "True", "reason": reason}]}}))
    };
    // The first pods of a new service: no rollout.
    assert_eq!(
        rollout_state(&d("1", &surge, 1, "NewReplicaSetCreated"), 1),
        None
    );
    assert_eq!(
        rollout_state(&d("2", &surge, 3, "ReplicaSetUpdated"), 1),
        Some(Rollout::Surging)
    );
    // In place, the old pod may be gone already.
    assert_eq!(
        rollout_state(&d("2", &in_place, 1, "ReplicaSetUpdated"), 1),
        Some(Rollout::InPlace)
    );
    assert_eq!(
        rollout_state(&d("2", &in_place, 1, "NewReplicaSetAvailable"), 1),
        None
    );
    let unschedulable = || Finding {
        reason: "Unschedulable".into(),
        message: "pod p cannot be scheduled: 0/4 nodes are available".into(),
    };
    let f = scheduling(unschedulable(), None, None, 0).unwrap();
    assert_eq!(f.reason, "Unschedulable");
    let f = scheduling(unschedulable(), None, Some(Rollout::Surging), 0).unwrap();
    assert_eq!(f.reason, "RolloutBlocked");
    assert!(f.message.contains("OneAtATime"), "{}", f.message);
    assert_eq!(
        scheduling(unschedulable(), None, Some(Rollout::Surging), 1),
        None,
        "a stopping pod of the service will make room"
    );
    let f = scheduling(unschedulable(), None, Some(Rollout::InPlace), 0).unwrap();
    assert!(
        !f.message.contains("OneAtATime") && f.message.contains("spec.resources"),
        "{}",
        f.message
    );
}

/// Progressing's reason for a service in an in-place rollout whose new pod
/// is unschedulable, `removed_ago` after the last pod of the service went.
fn in_place_with_unschedulable_pod(removed_ago: Option<std::time::Duration>) -> String {
    let vs: VLLMService = serde_json::from_value(json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": {"image": "i", "modelPath": "/m", "modelName": "m", "replicas": 2,
                "rollout": {"strategy": "OneAtATime"},
                "storage": {"pvcName": "p", "mountPath": "/data"}}}))
    .unwrap();
    let valid = vllmservice_api::validate(&vs).unwrap();
    let d = deployment(json!({
        "metadata": {"generation": 2, "annotations": {"deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 2, "selector": {}, "template": {},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}},
        "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
            "readyReplicas": 1,
            "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]}}));
    let pending: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "qwen-new", "namespace": "ns"},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}]}}))
    .unwrap();
    let done = Done {
        deployment: Outcome::Live(d),
        ..Done::default()
    };
    let seen = Seen {
        storage: Storage::Bound,
        pods: vec![pending],
        pod_removed_ago: removed_ago,
        ..Seen::default()
    };
    let status = derive(&valid, &seen, &done, Timestamp::UNIX_EPOCH);
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    progressing.reason.clone()
}

#[test]
fn a_pod_the_scheduler_has_not_retried_since_a_pod_went_is_not_blocked() {
    use std::time::Duration;
    // The old pod went a moment ago: the scheduler's next try may place the new one.
    assert_eq!(
        in_place_with_unschedulable_pod(Some(Duration::from_secs(2))),
        "RolloutInProgress"
    );
    // Past the scheduler's retry, or with no pod gone, it is blocked.
    assert_eq!(
        in_place_with_unschedulable_pod(Some(Duration::from_secs(20))),
        "RolloutBlocked"
    );
    assert_eq!(in_place_with_unschedulable_pod(None), "RolloutBlocked");
}
