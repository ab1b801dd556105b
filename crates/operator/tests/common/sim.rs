//! VLLMServices that run the simulator (`localhost/vllm-sim:dev`) on the local
//! cluster's real node (docs/local-cluster.md): the model volume, the spec,
//! the Service's address, and a diagnosis of the pods.

use std::{path::PathBuf, time::Duration};

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{ListParams, LogParams};
use serde_json::{Value, json};

use super::Env;

/// The served model name, and its directory under the mount.
pub const MODEL: &str = "qwen-sim";
pub const MOUNT: &str = "/data/models";
/// The simulator's loading time (VLLM_SIM_LOAD_SECONDS): its port stays closed until it has passed.
pub const LOAD_SECONDS: i64 = 3;
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
/// fake model at `<MOUNT>/<MODEL>` once mounted. Fails unless the cluster has
/// its real node.
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

/// A VLLMService running the simulator on the real node, small and without a
/// GPU (the node's GPUs are shared with other tests), with short probe
/// timings, and `extra_env` (a JSON array) beside the loading time
/// (LOAD_SECONDS unless `extra_env` sets VLLM_SIM_LOAD_SECONDS).
pub fn sim_service(name: &str, pvc: &str, extra_env: Value) -> Value {
    let extra = extra_env.as_array().cloned().unwrap_or_default();
    let mut env = Vec::new();
    if !extra.iter().any(|e| e["name"] == "VLLM_SIM_LOAD_SECONDS") {
        env.push(json!({"name": "VLLM_SIM_LOAD_SECONDS", "value": LOAD_SECONDS.to_string()}));
    }
    env.extend(extra);
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

/// The label selector of a VLLMService's pods.
pub fn selector(name: &str) -> String {
    format!("app.kubernetes.io/name=vllmservice,app.kubernetes.io/instance={name}")
}

/// The pods of VLLMService `name` (terminating ones included), newest first.
pub async fn pods_of(env: &Env, name: &str) -> Vec<Pod> {
    let mut pods = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&selector(name)))
        .await
        .expect("list pods")
        .items;
    pods.sort_by(|a, b| {
        b.metadata
            .creation_timestamp
            .cmp(&a.metadata.creation_timestamp)
    });
    pods
}

/// A diagnosis for a pod that did not get where a test waited for it to.
pub fn describe_pod(env: &Env, name: &str) -> String {
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

/// The ClusterIP:port of a Service.
pub async fn cluster_ip(env: &Env, service: &str) -> String {
    let svc = env.api::<Service>().get(service).await.unwrap();
    let spec = svc.spec.unwrap();
    let ip = spec.cluster_ip.expect("a ClusterIP");
    format!("{ip}:{}", spec.ports.unwrap()[0].port)
}

/// The log of the vllm container of `pod` (its previous instance if `previous`).
pub async fn log_of(env: &Env, pod: &str, previous: bool) -> String {
    try_log_of(env, pod, previous)
        .await
        .unwrap_or_else(|| panic!("no log of {pod} (previous: {previous})"))
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
