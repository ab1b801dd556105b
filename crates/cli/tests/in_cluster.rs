//! The operator as users install it, running in the local cluster: the Helm
//! chart and `deploy/install.yaml`, each with the locally built image
//! `localhost/vllmservice-operator:dev` (hack/images), two replicas with leader
//! election, scheduled on the real node (docs/local-cluster.md), in a
//! namespace that enforces the restricted Pod Security Standard. The pods are
//! admitted, their /readyz probes pass, one replica takes the Lease, and it
//! reconciles a VLLMService (on a kwok GPU node) to Available through its
//! in-cluster ServiceAccount: the API server at the `kubernetes` Service
//! (198.19.0.1), no cluster DNS.
//!
//! Each install watches only a namespace of the test's own (`watchNamespace` /
//! `--watch-namespace`): the shared cluster runs other tests' VLLMServices,
//! which an operator watching every namespace would take over. Cleanup removes
//! everything but the CRD, which other tests use.

use std::{
    process::{Command, Output},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    coordination::v1::Lease,
    core::v1::{Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, LogParams, PostParams},
    core::DynamicObject,
};
use serde_json::{Value, json};
use testkit::{
    TestNamespace,
    pod_security::{assert_restricted, enforce_restricted},
    stdout_of,
};

const IMAGE_REPOSITORY: &str = "localhost/vllmservice-operator";
const IMAGE_TAG: &str = "dev";
/// Up to a real node's container start, the operator's cache sync and a lease.
const WAIT: Duration = Duration::from_secs(120);

/// `hack/tools/helm.sh ARGS` against the shared cluster.
fn helm(args: &[&str]) -> Output {
    testkit::helm()
        .args(args)
        .env("KUBECONFIG", testkit::cluster().kubeconfig())
        .output()
        .expect("run hack/tools/helm.sh")
}

/// The image must be in the real node's containerd: `cluster.sh up` and
/// `cluster.sh load-images` import it from target/<profile>/vllmservice-operator.
fn require_operator_image() {
    let out = Command::new(testkit::repo_root().join("hack/cluster/cluster.sh"))
        .arg("load-images")
        .output()
        .expect("run cluster.sh load-images");
    stdout_of("hack/cluster/cluster.sh load-images", out);
}

/// The operator image as the real node imported it (hack/images/build.sh's
/// archive): its config digest (the image ID), the paths in its layer, and its entrypoint binary.
struct OperatorImage {
    digest: String,
    paths: Vec<String>,
    binary: Vec<u8>,
}

fn read_operator_image() -> OperatorImage {
    use std::{collections::HashMap, io::Read};
    let path = testkit::repo_root().join("target/images/vllmservice-operator.tar");
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut blobs: HashMap<String, Vec<u8>> = HashMap::new();
    for entry in tar::Archive::new(file).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        blobs.insert(name, data);
    }
    let blob = |digest: &str| -> &Vec<u8> {
        let key = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        blobs
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in {}", path.display()))
    };
    let index: Value = serde_json::from_slice(&blobs["index.json"]).unwrap();
    let digest = index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let manifest: Value = serde_json::from_slice(blob(&digest)).unwrap();
    // The kubelet reports a container's image by its config digest.
    let config_digest = manifest["config"]["digest"].as_str().unwrap().to_string();
    let config: Value = serde_json::from_slice(blob(&config_digest)).unwrap();
    let entrypoint = config["config"]["Entrypoint"][0]
        .as_str()
        .unwrap()
        .to_string();
    let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
    let (mut paths, mut binary) = (Vec::new(), None);
    for entry in tar::Archive::new(layer.as_slice()).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = format!("/{}", entry.path().unwrap().to_string_lossy());
        if name == entrypoint {
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            binary = Some(data);
        }
        paths.push(name);
    }
    let _ = digest;
    OperatorImage {
        digest: config_digest,
        binary: binary.unwrap_or_else(|| panic!("no {entrypoint} in the image's layer: {paths:?}")),
        paths,
    }
}

/// The program interpreter (dynamic loader) an ELF64 little-endian file asks
/// for (its PT_INTERP program header), or None: a static binary has none.
fn interpreter(elf: &[u8]) -> Option<String> {
    assert!(
        elf.starts_with(b"\x7fELF") && elf[4] == 2 && elf[5] == 1,
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (phoff, phentsize, phnum) = (u64_at(0x20), u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32::from_le_bytes(elf[ph..ph + 4].try_into().unwrap()) == 3)
        .map(|ph| {
            let (offset, size) = (u64_at(ph + 8), u64_at(ph + 32));
            String::from_utf8_lossy(&elf[offset..offset + size])
                .trim_end_matches('\0')
                .to_string()
        })
}

/// The image the in-cluster tests run is the one users run: its binary is
/// static (the image has no libraries to load) and links jemalloc, as the
/// Dockerfile builds it; hack/test.sh makes it from hack/images/shipped.sh.
#[test]
fn the_operator_image_holds_the_shipped_static_binary() {
    require_operator_image();
    let image = read_operator_image();
    if let Some(loader) = interpreter(&image.binary) {
        panic!(
            "the operator image's binary is dynamically linked (it asks for {loader}), not the \
             static one the Dockerfile builds: build it with hack/images/shipped.sh and load it \
             with VLLM_OPERATOR_BINARY=<its path> hack/cluster/cluster.sh load-images (hack/test.sh does)"
        );
    }
    let libraries: Vec<&String> = image.paths.iter().filter(|p| p.contains(".so")).collect();
    assert!(
        libraries.is_empty(),
        "shared libraries in the image: {libraries:?}"
    );
    // jemalloc's own messages start with "<jemalloc>": the allocator the Dockerfile links.
    assert!(
        image.binary.windows(10).any(|w| w == b"<jemalloc>"),
        "the operator image's binary does not link jemalloc"
    );
}

/// Waits until the Deployment's `replicas` pods are Ready, failing at once with
/// FailedCreate events (Pod Security refusals), and with the pods' state on timeout.
async fn wait_ready_pods(client: &Client, ns: &str, selector: &str, replicas: usize) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let refused: Vec<String> = events
            .list(&ListParams::default().fields("reason=FailedCreate"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|e| e.message)
            .collect();
        assert!(refused.is_empty(), "operator pods refused: {refused:#?}");
        let list = pods
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items;
        let ready: Vec<Pod> = list
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .cloned()
            .collect();
        if ready.len() >= replicas {
            return ready;
        }
        if tokio::time::Instant::now() >= deadline {
            let describe = testkit::kubectl(&["-n", ns, "describe", "pods", "-l", selector]);
            let logs = testkit::kubectl(&["-n", ns, "logs", "-l", selector, "--tail=20"]);
            panic!(
                "{} of {replicas} operator pods Ready in {ns}:\n{}\n{}",
                ready.len(),
                String::from_utf8_lossy(&describe.stdout),
                String::from_utf8_lossy(&logs.stdout)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Checks the operator pods: on the real node, running the local image, and
/// that one of them holds the Lease `ns/lease`. Returns the leader's name.
async fn assert_pods_and_leader(client: &Client, ns: &str, pods: &[Pod], lease: &str) -> String {
    for p in pods {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_name.as_deref(),
            Some("real-node-0"),
            "{}",
            p.name_any()
        );
        assert_eq!(
            spec.containers[0].image.as_deref(),
            Some("localhost/vllmservice-operator:dev")
        );
        // Exactly the archive the static-binary test reads.
        let image_id = p
            .status
            .as_ref()
            .unwrap()
            .container_statuses
            .as_ref()
            .unwrap()[0]
            .image_id
            .clone();
        let archive = read_operator_image().digest;
        assert!(
            image_id.ends_with(&archive),
            "{} runs {image_id}, not the archive's {archive}",
            p.name_any()
        );
    }
    let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let holder = testkit::wait_until(WAIT, "a replica holding the leader Lease", || async {
        let l = leases.get_opt(lease).await.ok()??;
        l.spec?.holder_identity.filter(|h| names.contains(h))
    })
    .await;
    // The follower says so on /readyz, the leader that it became the leader.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let log = testkit::wait_until(WAIT, "the leader's log line", || async {
        let log = pods_api.logs(&holder, &LogParams::default()).await.ok()?;
        log.contains("became the leader").then_some(log)
    })
    .await;
    assert!(!log.contains("panicked"), "{log}");
    holder
}

/// A bound PVC (static PV, the kwok pods mount nothing) and a VLLMService on the
/// kwok GPU nodes in `ns`; waits until the in-cluster operator made it
/// Available. No operator runs in this test process.
async fn reconciled_to_available(client: &Client, ns: &str) {
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": format!("{ns}-models")},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadOnlyMany"],
                 "storageClassName": "static-models", "hostPath": {"path": "/data/models"},
                 "persistentVolumeReclaimPolicy": "Retain",
                 "claimRef": {"namespace": ns, "name": "models"}}
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await
        .unwrap();
    struct DeletePv(String);
    impl Drop for DeletePv {
        fn drop(&mut self) {
            let _ = testkit::kubectl(&["delete", "pv", &self.0, "--wait=false"]);
        }
    }
    let _pv = DeletePv(format!("{ns}-models"));
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "models"},
        "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "static-models",
                 "resources": {"requests": {"storage": "10Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let vs: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
        "metadata": {"name": "qwen"},
        "spec": {
            "image": "vllm/vllm-openai:v0.11.0",
            "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
            "modelName": "qwen2.5-1.5b-instruct",
            "resources": {"requests": {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
                          "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
            "storage": {"pvcName": "models", "mountPath": "/data/models"}
        }
    }))
    .unwrap();
    let ar = kube::discovery::ApiResource {
        group: "aiinfra.example.com".into(),
        version: "v1alpha1".into(),
        api_version: "aiinfra.example.com/v1alpha1".into(),
        kind: "VLLMService".into(),
        plural: "vllmservices".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    api.create(&PostParams::default(), &vs).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let vs = api.get("qwen").await.expect("the VLLMService");
        let status = &vs.data["status"];
        let available = status["observedGeneration"].as_i64() == vs.metadata.generation
            && status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Available" && c["status"] == "True");
        if available {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the in-cluster operator did not make {ns}/qwen Available; last status:\n{status:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its children exist, made by the operator's field manager.
    let d = Api::<Deployment>::namespaced(client.clone(), ns)
        .get("qwen")
        .await
        .expect("the Deployment the operator made");
    assert!(
        d.metadata
            .managed_fields
            .iter()
            .flatten()
            .any(|m| m.manager.as_deref() == Some("vllmservice-operator")),
        "{:?}",
        d.metadata.managed_fields
    );
}

/// `GET https://<pod>:8443/metrics` with `token` (none: no header), as curl
/// does it: (status code, body). The certificate is self-signed.
fn scrape(pod_ip: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-sSk", "--max-time", "10", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("https://{pod_ip}:8443/metrics"))
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    match code.trim().parse() {
        Ok(code) if code > 0 => (code, body.to_string()),
        // No answer: curl says why.
        _ => (0, String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// The chart's /metrics is HTTPS and refuses a scraper without a token (401)
/// and one whose user may not get /metrics (403); a ServiceAccount bound to
/// the chart's metrics-reader ClusterRole reads it (200).
async fn metrics_need_an_allowed_token(ns: &str, pod: &Pod, release: &str) {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("a Ready pod has an IP");
    let (code, body) = scrape(&ip, None);
    assert_eq!(code, 401, "no token: {body}");
    testkit::kubectl_ok(&["-n", ns, "create", "serviceaccount", "nobody"]);
    let nobody = testkit::kubectl_ok(&["-n", ns, "create", "token", "nobody"]);
    let (code, body) = scrape(&ip, Some(nobody.trim()));
    assert_eq!(code, 403, "a token without the reader role: {body}");
    assert!(body.contains("may not get /metrics"), "{body}");

    testkit::kubectl_ok(&["-n", ns, "create", "serviceaccount", "prometheus"]);
    let binding = format!("{release}-prometheus");
    testkit::kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        &format!("--clusterrole={release}-vllmservice-operator-metrics-reader"),
        &format!("--serviceaccount={ns}:prometheus"),
    ]);
    // Removed with the release's other cluster-scoped objects.
    testkit::kubectl_ok(&[
        "label",
        "clusterrolebinding",
        &binding,
        &format!("app.kubernetes.io/instance={release}"),
    ]);
    let token = testkit::kubectl_ok(&["-n", ns, "create", "token", "prometheus"]);
    // The authorizer learns of the binding through an informer.
    let body = testkit::wait_until(WAIT, "the reader's scrape answered 200", || async {
        let (code, body) = scrape(&ip, Some(token.trim()));
        (code == 200).then_some(body)
    })
    .await;
    assert!(body.contains("vllmservice_operator_leader"), "{body}");
}

/// `helm install` of charts/vllmservice-operator with the local image, two
/// replicas, leader election, the real node, watching one other namespace.
#[tokio::test]
async fn helm_chart_runs_in_cluster_and_reconciles() {
    testkit::require_real_node();
    testkit::install_crds();
    require_operator_image();
    let client = testkit::client().await;
    let ns = TestNamespace::new(&client, "inc-helm").await;
    let work = TestNamespace::new(&client, "inc-helm-work").await;
    enforce_restricted(&ns.name);
    let release = format!("op-{}", testkit::random_suffix());

    struct Uninstall(String, String);
    impl Drop for Uninstall {
        fn drop(&mut self) {
            let _ = helm(&["uninstall", &self.0, "--namespace", &self.1, "--wait"]);
            // Whatever helm did not remove (a failed install).
            let _ = testkit::kubectl(&[
                "delete",
                "clusterrole,clusterrolebinding",
                "-l",
                &format!("app.kubernetes.io/instance={}", self.0),
                "--wait=false",
            ]);
        }
    }
    let _uninstall = Uninstall(release.clone(), ns.name.clone());
    let values = testkit::repo_root()
        .join("target")
        .join(format!("in-cluster-{release}.values.yaml"));
    std::fs::write(
        &values,
        format!(
            "image: {{repository: {IMAGE_REPOSITORY}, tag: {IMAGE_TAG}, pullPolicy: IfNotPresent}}\n\
             replicaCount: 2\n\
             leaderElection: {{enabled: true}}\n\
             watchNamespace: {}\n\
             logFormat: human\n\
             nodeSelector: {{vllm.example.com/node: real}}\n\
             tolerations: [{{key: vllm.example.com/node, operator: Equal, value: real, effect: NoSchedule}}]\n",
            work.name
        ),
    )
    .unwrap();
    let out = helm(&[
        "install",
        &release,
        "charts/vllmservice-operator",
        "--namespace",
        &ns.name,
        "--values",
        values.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&values);
    stdout_of("helm install", out);

    let selector =
        format!("app.kubernetes.io/instance={release},app.kubernetes.io/name=vllmservice-operator");
    let pods = wait_ready_pods(&client, &ns.name, &selector, 2).await;
    let leader = assert_pods_and_leader(&client, &ns.name, &pods, "vllmservice-operator").await;
    reconciled_to_available(&client, &work.name).await;
    eprintln!("helm: leader {leader} reconciled {}/qwen", work.name);
    metrics_need_an_allowed_token(&ns.name, &pods[0], &release).await;
    drop(_uninstall);
    work.delete_and_wait(&client).await;
}

/// `kubectl apply` of deploy/install.yaml into `vllmservice-system`, with the
/// Deployment changed only as a user of this cluster would: the local image,
/// the real node, and `--watch-namespace` (the shared cluster's other
/// namespaces are other tests').
#[tokio::test]
async fn install_yaml_runs_in_cluster_and_reconciles() {
    const NS: &str = "vllmservice-system";
    testkit::require_real_node();
    testkit::install_crds();
    require_operator_image();
    let client = testkit::client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // Another test's install (crates/cli/tests/packaging.rs) may still be going away.
    testkit::eventually(Duration::from_secs(120), || async {
        namespaces.get_opt(NS).await.unwrap().is_none()
    })
    .await
    .expect("no other vllmservice-system namespace (a previous install is still there)");
    let work = TestNamespace::new(&client, "inc-yaml-work").await;

    /// Removes the install but the CRD, which other tests use: its cluster-scoped
    /// objects by name (a label would match other installs of the chart), and
    /// the namespace with everything in it, waited for so that the next install
    /// starts clean.
    struct Uninstall(Vec<String>);
    impl Drop for Uninstall {
        fn drop(&mut self) {
            for object in &self.0 {
                let _ = testkit::kubectl(&["delete", object, "--ignore-not-found", "--wait=false"]);
            }
            let _ = testkit::kubectl(&["delete", "namespace", NS, "--timeout=90s"]);
        }
    }
    let mut uninstall = Uninstall(Vec::new());

    let install = std::fs::read_to_string(testkit::repo_root().join("deploy/install.yaml"))
        .expect("deploy/install.yaml");
    let mut docs = Vec::new();
    let mut changed = false;
    for doc in install.split("\n---\n") {
        let mut v: Value = match serde_saphyr::from_str(doc) {
            Ok(Value::Null) | Err(_) if !doc.lines().any(|l| l.starts_with("kind:")) => continue,
            Ok(v) => v,
            Err(e) => panic!("deploy/install.yaml: {e}"),
        };
        if let (Some(kind @ ("ClusterRole" | "ClusterRoleBinding")), Some(name)) =
            (v["kind"].as_str(), v["metadata"]["name"].as_str())
        {
            uninstall.0.push(format!("{}/{name}", kind.to_lowercase()));
        }
        if v["kind"] == "Deployment" {
            let pod = &mut v["spec"]["template"]["spec"];
            pod["nodeSelector"]["vllm.example.com/node"] = json!("real");
            pod["tolerations"] = json!([{"key": "vllm.example.com/node", "operator": "Equal",
                                          "value": "real", "effect": "NoSchedule"}]);
            let c = &mut pod["containers"][0];
            c["image"] = json!(format!("{IMAGE_REPOSITORY}:{IMAGE_TAG}"));
            c["args"]
                .as_array_mut()
                .unwrap()
                .push(json!(format!("--watch-namespace={}", work.name)));
            changed = true;
        }
        docs.push(serde_saphyr::to_string(&v).expect("YAML"));
    }
    assert!(changed, "deploy/install.yaml has no Deployment");
    let file = testkit::repo_root()
        .join("target")
        .join(format!("in-cluster-install-{}.yaml", work.name));
    std::fs::write(&file, docs.join("\n---\n")).unwrap();
    let out = testkit::kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
    let applied = stdout_of(
        "kubectl apply -f deploy/install.yaml (local image, real node, --watch-namespace)",
        out,
    );
    assert!(
        applied.contains("deployment.apps/vllmservice-operator"),
        "{applied}"
    );
    assert_restricted(NS);

    let selector =
        "app.kubernetes.io/name=vllmservice-operator,app.kubernetes.io/component=controller";
    let pods = wait_ready_pods(&client, NS, selector, 2).await;
    let leader = assert_pods_and_leader(&client, NS, &pods, "vllmservice-operator").await;
    reconciled_to_available(&client, &work.name).await;
    eprintln!(
        "install.yaml: leader {leader} reconciled {}/qwen",
        work.name
    );
    drop(uninstall);
    work.delete_and_wait(&client).await;
}
