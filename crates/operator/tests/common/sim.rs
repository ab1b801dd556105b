//! VLLMServices that run the vLLM simulator (`localhost/vllm-sim:dev`) on the
//! local cluster's real node, with a hostPath model volume of their own.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use serde_json::{Value, json};

use super::Env;

/// The served model name, and its directory under the mount.
pub const MODEL: &str = "qwen-sim";
pub const MOUNT: &str = "/data/models";
/// Pods on the real node pull nothing, but start real containers: allow more than WAIT.
pub const START: Duration = Duration::from_secs(120);

/// Removes the hostPath model copy and the PersistentVolume when dropped.
pub struct ModelVolume {
    pub pv: String,
    pub dir: PathBuf,
}

impl Drop for ModelVolume {
    fn drop(&mut self) {
        let _ = testkit::kubectl(&["delete", "pv", &self.pv, "--wait=false"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A bound PVC `name` backed by a hostPath PersistentVolume with a copy of the
/// fake model at `<MOUNT>/<MODEL>` once mounted. Fails (never skips) without the real node.
pub async fn model_pvc(env: &Env, name: &str) -> ModelVolume {
    testkit::require_real_node();
    let pv_name = format!("{}-{name}", env.ns.name);
    let dir = testkit::repo_root()
        .join("target/real-node-models")
        .join(&pv_name);
    let _ = std::fs::remove_dir_all(&dir);
    testkit::fake_model_dir(&dir, MODEL);
    let volume = ModelVolume {
        pv: pv_name.clone(),
        dir: dir.clone(),
    };
    super::bound_pvc(&env.client, &env.ns.name, name, dir.to_str().unwrap()).await;
    volume
}

/// A VLLMService running the simulator on the real node without a GPU, small,
/// with short probe timings and `env` (a JSON array) for the simulator.
pub fn sim_service(name: &str, pvc: &str, env: Value) -> Value {
    json!({
        "apiVersion": "aiinfra.example.com/v1alpha1",
        "kind": "VLLMService",
        "metadata": {"name": name},
        "spec": {
            "image": "localhost/vllm-sim:dev",
            "modelPath": format!("{MOUNT}/{MODEL}"),
            "modelName": MODEL,
            "nodeSelector": {"vllm.example.com/node": "real"},
            "tolerations": [{"key": "vllm.example.com/node", "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "resources": {"requests": {"cpu": "20m", "memory": "32Mi"},
                          "limits": {"memory": "256Mi"}},
            "storage": {"pvcName": pvc, "mountPath": MOUNT},
            "shmSize": "64Mi",
            "env": env,
            "readinessProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 3},
            "startupProbe": {"initialDelaySeconds": 0, "periodSeconds": 1, "failureThreshold": 120}
        }
    })
}

pub fn selector(name: &str) -> String {
    format!("app.kubernetes.io/name=vllmservice,app.kubernetes.io/instance={name}")
}

/// The VLLMService's pods, newest first.
pub async fn pods_of(env: &Env, name: &str) -> Vec<Pod> {
    let lp = ListParams::default().labels(&selector(name));
    let mut pods = env.api::<Pod>().list(&lp).await.unwrap().items;
    pods.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
    });
    pods
}

/// The log of the vllm container of `pod` (its previous instance if `previous`).
pub async fn log_of(env: &Env, pod: &str, previous: bool) -> String {
    let params = LogParams {
        container: Some("vllm".into()),
        previous,
        ..LogParams::default()
    };
    env.api::<Pod>()
        .logs(pod, &params)
        .await
        .unwrap_or_else(|e| panic!("log of {pod} (previous: {previous}): {e}"))
}

/// The log of the vllm container of `pod`, if there is one (a previous instance
/// exists only after a restart).
pub async fn try_log_of(env: &Env, pod: &str, previous: bool) -> Option<String> {
    let params = LogParams {
        container: Some("vllm".into()),
        previous,
        ..LogParams::default()
    };
    env.api::<Pod>().logs(pod, &params).await.ok()
}

/// `kubectl describe` of the VLLMService's pods, for failure messages.
pub fn describe_pods(env: &Env, name: &str) -> String {
    let out = testkit::kubectl(&[
        "-n",
        &env.ns.name,
        "describe",
        "pods",
        "-l",
        &selector(name),
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}
