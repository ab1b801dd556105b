//! Why a workload is not serving, read from its Deployment and Pods (and what
//! the read step found in failing vLLM containers' logs), so that `kubectl
//! describe vllm NAME` says it without anyone reading pod logs.
//! Pure: the same objects always give the same findings in the same order.

use std::collections::BTreeMap;

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ContainerStatus, Pod},
};

use crate::diagnosis::vllm_log::Diagnosis;

/// One reason the workload is failing, with a message for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// A CamelCase reason: ImagePullBackOff, ErrImagePull, CrashLoopBackOff,
    /// Unschedulable, ProgressDeadlineExceeded, ReplicaFailure.
    pub reason: String,
    pub message: String,
}

/// Failures visible in the Deployment's conditions and its Pods' statuses. A
/// pod's entry in `from_logs` (its vllm container's log, classified) replaces
/// the generic crash finding of that container. At most one finding per reason
/// (the first pod by name wins).
pub fn findings(
    deployment: Option<&Deployment>,
    pods: &[Pod],
    from_logs: &BTreeMap<String, Diagnosis>,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    let mut push = |f: Finding| {
        if !out.iter().any(|o| o.reason == f.reason) {
            out.push(f);
        }
    };
    let mut pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pod in pods {
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let Some(status) = &pod.status else { continue };
        for c in status.conditions.iter().flatten() {
            if c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
            {
                push(Finding {
                    reason: "Unschedulable".into(),
                    message: format!(
                        "pod {pod_name} cannot be scheduled: {}",
                        c.message.as_deref().unwrap_or("no reason given")
                    ),
                });
            }
        }
        let from_log = from_logs.get(pod_name);
        if let Some(d) = from_log {
            push(Finding {
                reason: d.reason.into(),
                message: format!("pod {pod_name}: {}", d.message),
            });
        }
        for cs in status.container_statuses.iter().flatten() {
            if from_log.is_some() && cs.name == crate::names::CONTAINER_NAME {
                continue;
            }
            if let Some(f) = container_finding(pod_name, cs, pod) {
                push(f);
            }
        }
    }
    if let Some(d) = deployment {
        for c in d.status.iter().flat_map(|s| s.conditions.iter().flatten()) {
            let msg = c.message.clone().unwrap_or_default();
            if c.type_ == "Progressing" && c.reason.as_deref() == Some("ProgressDeadlineExceeded") {
                push(Finding {
                    reason: "ProgressDeadlineExceeded".into(),
                    message: format!("the rollout made no progress within its deadline: {msg}"),
                });
            }
            if c.type_ == "ReplicaFailure" && c.status == "True" {
                push(Finding {
                    reason: "ReplicaFailure".into(),
                    message: format!("pods cannot be created: {msg}"),
                });
            }
        }
    }
    out
}

fn container_finding(pod_name: &str, cs: &ContainerStatus, pod: &Pod) -> Option<Finding> {
    let waiting = cs.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    let detail = waiting
        .message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|m| format!(": {m}"))
        .unwrap_or_default();
    match reason {
        "ImagePullBackOff" | "ErrImagePull" | "InvalidImageName" => {
            let image = pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .find(|c| c.name == cs.name)
                .and_then(|c| c.image.clone())
                .unwrap_or_else(|| cs.image.clone());
            Some(Finding {
                reason: reason.into(),
                message: format!(
                    "pod {pod_name}: image {image} cannot be pulled ({reason}){detail}"
                ),
            })
        }
        "CrashLoopBackOff" | "CreateContainerConfigError" | "CreateContainerError" => {
            let last = cs
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| {
                    format!(
                        "; last terminated with {} (exit code {})",
                        t.reason.as_deref().unwrap_or("Error"),
                        t.exit_code
                    )
                })
                .unwrap_or_default();
            Some(Finding {
                reason: reason.into(),
                message: format!(
                    "pod {pod_name}: container {} is in {reason}{last}{detail}",
                    cs.name
                ),
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn image_pull_failure_names_the_image() {
        let p = pod(json!({
            "metadata": {"name": "p1"},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:nope"}]},
            "status": {"containerStatuses": [{"name": "vllm", "image": "x", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image"}}}]}
        }));
        let f = findings(None, &[p], &BTreeMap::new());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].reason, "ImagePullBackOff");
        assert!(
            f[0].message.contains("vllm/vllm-openai:nope"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn crash_loop_reports_last_termination() {
        let p = pod(json!({
            "metadata": {"name": "p1"},
            "status": {"containerStatuses": [{"name": "vllm", "image": "x", "imageID": "", "ready": false,
                "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]}
        }));
        let f = findings(None, &[p], &BTreeMap::new());
        assert_eq!(f[0].reason, "CrashLoopBackOff");
        assert!(
            f[0].message.contains("OOMKilled (exit code 137)"),
            "{}",
            f[0].message
        );
    }

    #[test]
    fn unschedulable_and_deployment_failures_are_reported_once_each() {
        let unsched = |n: &str| {
            pod(
                json!({"metadata": {"name": n}, "status": {"conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}]}}),
            )
        };
        let d: Deployment = serde_json::from_value(json!({"status": {"conditions": [
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"x\" has timed out progressing."},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "pods \"x\" is forbidden: violates PodSecurity"}]}}))
        .unwrap();
        let f = findings(Some(&d), &[unsched("b"), unsched("a")], &BTreeMap::new());
        let reasons: Vec<_> = f.iter().map(|f| f.reason.as_str()).collect();
        assert_eq!(
            reasons,
            [
                "Unschedulable",
                "ProgressDeadlineExceeded",
                "ReplicaFailure"
            ]
        );
        assert!(
            f[0].message
                .starts_with("pod a cannot be scheduled: 0/4 nodes")
        );
    }

    #[test]
    fn a_log_diagnosis_replaces_the_crash_loop_finding() {
        let p = pod(json!({
            "metadata": {"name": "p1"},
            "status": {"containerStatuses": [{"name": "vllm", "image": "x", "imageID": "", "ready": false,
                "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1}}}]}
        }));
        let logs = BTreeMap::from([(
            "p1".to_string(),
            Diagnosis {
                reason: "KVCacheTooSmall",
                message: "set engineArgs.maxModelLen ≤ 99760".into(),
            },
        )]);
        let f = findings(None, &[p], &logs);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].reason, "KVCacheTooSmall");
        assert_eq!(f[0].message, "pod p1: set engineArgs.maxModelLen ≤ 99760");
    }

    #[test]
    fn healthy_pods_have_no_findings() {
        let p = pod(
            json!({"metadata": {"name": "p"}, "status": {"containerStatuses": [{"name": "vllm",
            "image": "x", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}}]}}),
        );
        assert!(findings(None, &[p], &BTreeMap::new()).is_empty());
    }
}
