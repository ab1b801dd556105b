//! The stand-in Hugging Face Hub in a test's namespace, for download Jobs that run the REAL
//! `hf` (`localhost/hf:0.36`, `localhost/hf:2`: hack/images/build.sh): a Deployment of the
//! `localhost/hf:2` image running its `stand-in-hub` (crates/vllm-sim/tools/stand_in_hub.py)
//! over the fixture tree at /srv/hub (crates/vllm-sim/hub), on the real node, and a Service.
//! Its endpoint is the Service's ClusterIP: the local cluster has no DNS for pods
//! (docs/local-cluster.md), so `<service>.<namespace>.svc` would not resolve.

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::api::PostParams;
use serde_json::{Value, json};

use super::{Env, sim::START};

/// The downloader images of the clients the tests run: huggingface_hub 0.36.2 (vLLM
/// 0.18-0.19's) and 2.4.0 (vLLM 0.34's generation).
pub const CLIENTS: [&str; 2] = ["localhost/hf:0.36", "localhost/hf:2"];
/// A short name of a client image for object names: `hf-0-36`, `hf-2`.
pub fn short(client: &str) -> String {
    client
        .trim_start_matches("localhost/")
        .replace([':', '.'], "-")
}

const NAME: &str = "stand-in-hub";
const PORT: u16 = 8080;

/// The Hub's Deployment: the image's user, a read-only root file system, nothing else writable
/// (the server writes nothing), on the real node.
fn deployment() -> Value {
    let labels = json!({"app.kubernetes.io/name": NAME});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"vllm.example.com/node": "real"},
                    "tolerations": [{"key": "vllm.example.com/node", "operator": "Equal",
                                     "value": "real", "effect": "NoSchedule"}],
                    "enableServiceLinks": false,
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "hub",
                        "image": "localhost/hf:2",
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/usr/local/bin/stand-in-hub", "--root", "/srv/hub",
                                    "--host", "0.0.0.0", "--port", PORT.to_string()],
                        "ports": [{"name": "http", "containerPort": PORT}],
                        // Listening is ready: the server binds before it serves.
                        "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"memory": "128Mi"}},
                        "securityContext": {"readOnlyRootFilesystem": true,
                                            "allowPrivilegeEscalation": false,
                                            "capabilities": {"drop": ["ALL"]}}
                    }]
                }
            }
        }
    })
}

fn service() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": NAME},
        "spec": {
            "selector": {"app.kubernetes.io/name": NAME},
            "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]
        }
    })
}

/// Starts the Hub in namespace `ns` and returns its endpoint, `http://<ClusterIP>:8080`, once
/// the Hub answers there as the Hub does (a known repo's revision info, 200). Fails with the
/// pod's description when it does not (an image not loaded: hack/cluster/cluster.sh load-images).
pub async fn start(client: &kube::Client, ns: &str) -> String {
    testkit::require_real_node();
    let deployment: Deployment = serde_json::from_value(deployment()).unwrap();
    kube::Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &deployment)
        .await
        .expect("the stand-in Hub's Deployment");
    let service: Service = serde_json::from_value(service()).unwrap();
    let service = kube::Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &service)
        .await
        .expect("the stand-in Hub's Service");
    let ip = service
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a ClusterIP");
    let addr = format!("{ip}:{PORT}");
    // From the host, through kube-proxy's rules for the ClusterIP (as the Jobs' pods reach it):
    // they exist once the pod is ready, and the answer is the stand-in's, not a connection refused.
    let probe = "/api/models/Qwen/Qwen2.5-0.5B-Instruct/revision/main";
    let answered = testkit::eventually(START, || {
        let addr = addr.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                testkit::http_request(&addr, "GET", probe, None).is_ok_and(|(code, _)| code == 200)
            })
            .await
            .unwrap_or(false)
        }
    })
    .await;
    if answered.is_err() {
        let describe = testkit::kubectl(&[
            "-n",
            ns,
            "describe",
            "pods",
            "-l",
            &format!("app.kubernetes.io/name={NAME}"),
        ]);
        panic!(
            "the stand-in Hub did not answer GET http://{addr}{probe} within {START:?} \
             (are localhost/hf:2 and localhost/hf:0.36 on the real node? \
             hack/cluster/cluster.sh load-images):\n{}",
            String::from_utf8_lossy(&describe.stdout)
        );
    }
    format!("http://{addr}")
}

/// The Hub's log (one line per request), for a failure message.
pub fn log(env: &Env) -> String {
    let out = testkit::kubectl(&[
        "-n",
        &env.ns.name,
        "logs",
        &format!("deployment/{NAME}"),
        "--tail=200",
    ]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}
