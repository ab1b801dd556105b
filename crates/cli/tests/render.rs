//! `render` prints offline exactly what the controller applies: the rendered
//! objects are compared with what the API server holds after the real
//! operator (this binary, `run`) reconciled the same VLLMService.

use std::{
    io::Write,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::{Value, json};
use testkit::{TestNamespace, kubectl_ok, wait_until};
use vllmservice_controller::reconcile::apply::is_subset;

const BIN: &str = env!("CARGO_BIN_EXE_vllmservice-operator");

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn render(manifest: &str) -> std::process::Output {
    render_with(&["render", "-"], manifest)
}

/// `vllmservice-operator ARGS` with `manifest` on stdin.
fn render_with(args: &[&str], manifest: &str) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("render runs");
    // A refused argument ends the process before it reads its input: then
    // the write finds the pipe closed, and the exit status tells the rest.
    let written = child.stdin.take().unwrap().write_all(manifest.as_bytes());
    if let Err(e) = written {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

/// The objects of `render`'s multi-document YAML.
fn documents(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .map(|d| d.trim_start_matches("---\n"))
        .filter(|d| d.contains("kind:"))
        .map(|d| serde_saphyr::from_str(d).expect("rendered YAML parses"))
        .collect()
}

#[tokio::test]
async fn render_prints_what_the_controller_applies() {
    testkit::install_crds();
    testkit::install_gateway_api_crds();
    testkit::install_prometheus_crds();
    testkit::install_keda_crds();
    let client = testkit::client().await;
    let ns = TestNamespace::new(&client, "render").await;
    let n = ns.name.as_str();
    let _operator = Running(
        Command::new(BIN)
            .args([
                "run",
                "--watch-namespace",
                n,
                "--metrics-addr",
                "127.0.0.1:0",
                "--metrics-insecure",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .env("KUBECONFIG", testkit::cluster().kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("operator starts"),
    );
    let manifest = json!({
        "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
        "metadata": {"name": "chat", "namespace": n},
        "spec": {
            "image": "vllm/vllm-openai:v0.11.0", "modelPath": "/models/m", "modelName": "m",
            "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "0.5"}},
            "storage": {"pvcName": "models", "mountPath": "/models"},
            "gatewayRef": {"name": "gw", "sectionName": "http", "host": "chat.example.com"},
            "monitoring": {"enabled": true, "labels": {"release": "prom"}},
            "engineArgs": {"extraArgs": ["--enable-prefix-caching"]},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 3, "metric": "kvCacheUsage", "target": "0.8"}
        }
    });
    let gateway = json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "gw", "namespace": n},
        "spec": {"gatewayClassName": "x", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}
    });
    for object in [&gateway, &manifest] {
        let out = testkit::kubectl_stdin(&["apply", "-f", "-"], &object.to_string());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let kinds = [
        "deployment",
        "service",
        "httproute",
        "servicemonitor",
        "prometheusrule",
        "scaledobject",
    ];
    wait_until(
        Duration::from_secs(60),
        "the operator to make every child",
        || async {
            kinds
                .iter()
                .all(|k| {
                    testkit::kubectl(&["-n", n, "get", k, "chat"])
                        .status
                        .success()
                })
                .then_some(())
        },
    )
    .await;

    // Render the stored object (with its UID, so owner references match too).
    let stored = kubectl_ok(&["-n", n, "get", "vllmservice", "chat", "-o", "yaml"]);
    let out = render(&stored);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = documents(&text);
    assert_eq!(docs.len(), kinds.len(), "{text}");
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap().to_lowercase();
        let live: Value =
            serde_json::from_str(&kubectl_ok(&["-n", n, "get", &kind, "chat", "-o", "json"]))
                .unwrap();
        assert!(
            is_subset(&doc, &live, ""),
            "render output for {kind} differs from the live object:\nrendered: {doc:#}\nlive: {live:#}"
        );
    }
}

#[test]
fn render_rejects_invalid_input_naming_the_fields() {
    let out = render(
        "apiVersion: aiinfra.example.com/v1alpha1\nkind: VLLMService\nmetadata: {name: x}\n\
         spec: {image: img, modelPath: /m, modelName: m, port: 0,\n\
         storage: {pvcName: p, mountPath: data}}\n",
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.port"), "{err}");
    assert!(err.contains("spec.storage.mountPath"), "{err}");
    let out = render(
        "apiVersion: aiinfra.example.com/v1alpha1\nkind: VLLMService\nmetadata: {name: x}\nspec: {}\n",
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing field"));
}

#[test]
fn render_takes_the_file_as_kubectl_users_type_it() {
    let example = testkit::repo_root().join("examples/qwen-demo.yaml");
    let text = std::fs::read_to_string(&example).unwrap();
    let path = example.to_str().unwrap();
    let positional = render_with(&["render", path], "");
    assert!(positional.status.success(), "{positional:?}");
    for args in [
        vec!["render", "-f", path],
        vec!["render", "--filename", path],
        vec!["render", "-f", "-"],
    ] {
        let out = render_with(&args, &text);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout, positional.stdout, "{args:?}");
    }
    // One manifest, not two.
    let both = render_with(&["render", path, "-f", path], "");
    assert!(!both.status.success());
    let none = render_with(&["render"], "");
    assert!(!none.status.success());
}

/// `render` shows the download Jobs (first: they run before any pod) and the
/// LoRA flags in the Deployment's args.
#[test]
fn render_shows_the_download_jobs_and_the_lora_args() {
    let path = testkit::repo_root().join("examples/full.yaml");
    let out = render_with(&["render", "-f", path.to_str().unwrap()], "");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = documents(&text);
    let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
    assert_eq!(&kinds[..3], ["Job", "Job", "Deployment"], "{text}");
    let command = &docs[0]["spec"]["template"]["spec"]["containers"][0]["command"];
    assert_eq!(
        command,
        &json!([
            "hf",
            "download",
            "Qwen/Qwen2.5-7B-Instruct",
            "--revision",
            "main",
            "--local-dir",
            "/data/models/Qwen2.5-7B-Instruct"
        ])
    );
    let args = docs[2]["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap();
    let at = args
        .iter()
        .position(|a| a == "--lora-modules")
        .expect("--lora-modules");
    assert_eq!(args[at + 1], "sql-lora=/data/models/loras/sql");
    assert_eq!(args[at + 2], "chat-lora=/data/models/loras/chat-lora");
}

/// `render` prints the ScaledObject last, with the operator's Prometheus address
/// (`--prometheus-address`, as `run` takes it) unless the spec sets its own.
#[test]
fn render_shows_the_scaled_object_with_the_prometheus_address() {
    let mut demo: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(testkit::repo_root().join("examples/qwen-demo.yaml")).unwrap(),
    )
    .unwrap();
    demo["spec"]["autoscaling"] = json!({"maxReplicas": 3, "target": "2"});
    let manifest = demo.to_string();
    let addresses = |args: &[&str]| -> Vec<String> {
        let out = render_with(args, &manifest);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let docs = documents(&text);
        let last = docs.last().unwrap();
        assert_eq!(last["kind"], "ScaledObject", "{text}");
        assert_eq!(last["spec"]["scaleTargetRef"]["name"], "qwen-demo");
        last["spec"]["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["metadata"]["serverAddress"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        addresses(&["render", "-"]),
        [vllmservice_controller::reconcile::build::DEFAULT_PROMETHEUS_ADDRESS]
    );
    assert_eq!(
        addresses(&[
            "render",
            "-",
            "--prometheus-address",
            "http://127.0.0.1:9090"
        ]),
        ["http://127.0.0.1:9090"]
    );
    let out = render_with(
        &["render", "-", "--prometheus-address", "prom:9090"],
        &manifest,
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("http:// or https:// URL"),
        "{out:?}"
    );
}
