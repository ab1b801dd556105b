//! VLLMServices on the local cluster's real node (docs/local-cluster.md): the
//! kubelet really runs the vLLM simulator (`localhost/vllm-sim:dev`,
//! crates/vllm-sim) in the Deployment the operator builds, really probes it,
//! and kube-proxy really routes the Service's ClusterIP to it. What the kwok
//! nodes cannot show is checked here: readiness waits for the simulated model
//! load, a chat completion is answered through the Service, `/dev/shm` is a
//! memory-backed tmpfs of `shmSize`, the model mount is read-only, no service
//! link variable collides with vLLM's `VLLM_*` settings, and a crashing server
//! gives the reason read from its log in `Degraded` (tests/diagnosis.rs has
//! every failure mode).
//!
//! The operator runs in-process (tests/common), watching the test's namespace.
//! Each test makes its own hostPath PersistentVolume holding a copy of the fake
//! model (config/samples/fake-model). A missing real node fails the test with
//! the reason.

mod common;

use common::{
    Env, WAIT, condition, is_available,
    sim::{
        LOAD_SECONDS, MODEL, MOUNT, START, cluster_ip, describe_pod, model_pvc, pods_of, selector,
        sim_service,
    },
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::core::v1::{Pod, Service},
    jiff::Timestamp,
};
use kube::{
    ResourceExt,
    api::{DeleteParams, ListParams, LogParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use testkit::wait_until;
use vllmservice_api::VLLMService;

/// The VLLMService's one pod, once it exists.
async fn the_pod(env: &Env, name: &str) -> Pod {
    let pods = env.api::<Pod>();
    let lp = ListParams::default().labels(&selector(name));
    wait_until(WAIT, "the VLLMService's pod", || async {
        pods.list(&lp).await.ok()?.items.into_iter().next()
    })
    .await
}

/// True once the VLLMService's pod has restarted its vllm container.
async fn pods_restarted(env: &Env) -> bool {
    pods_of(env, "qwen").await.iter().any(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.restart_count >= 1))
    })
}

fn pod_condition_time(pod: &Pod, type_: &str) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn running_since(pod: &Pod) -> Option<Timestamp> {
    let cs = pod.status.as_ref()?.container_statuses.as_ref()?.first()?;
    cs.state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| t.0)
}

fn container_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .is_some_and(|c| c.ready)
}

/// `kubectl exec` in the pod's `vllm` container, with the simulator image's busybox.
fn exec(env: &Env, pod: &str, args: &[&str]) -> std::process::Output {
    let mut full = vec![
        "-n",
        &env.ns.name,
        "exec",
        pod,
        "-c",
        "vllm",
        "--",
        "/bin/busybox",
    ];
    full.extend_from_slice(args);
    testkit::kubectl(&full)
}

fn exec_ok(env: &Env, pod: &str, args: &[&str]) -> String {
    let out = exec(env, pod, args);
    assert!(
        out.status.success(),
        "exec {args:?} in {pod} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The pod becomes Ready only once the simulated load is over (the kubelet
/// probes /health on port `http`, which the simulator opens after loading),
/// the VLLMService turns Available, and a chat completion sent to the
/// Service's ClusterIP is answered by the simulator with the served model name.
#[tokio::test]
async fn ready_only_after_the_model_loads_and_serves_chat_through_the_service() {
    let env = Env::new("real-serve").await;
    let _model = model_pvc(&env, "models").await;
    env.create(sim_service("qwen", "models", json!([]))).await;

    // Watch the pod: record it running but not Ready (the load in progress), then Ready.
    let pods = env.api::<Pod>();
    let mut seen_running_unready = false;
    let stream = watcher(
        pods.clone(),
        watcher::Config::default().labels(&selector("qwen")),
    )
    .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let ready_pod = tokio::time::timeout(START, async {
        while let Some(pod) = stream.try_next().await.expect("pod watch") {
            if container_ready(&pod) {
                return pod;
            }
            if running_since(&pod).is_some() {
                seen_running_unready = true;
            }
        }
        panic!("the pod watch ended");
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the pod did not become Ready:\n{}",
            describe_pod(&env, "qwen")
        )
    });
    assert!(
        seen_running_unready,
        "the pod was never seen running and not Ready (the simulated load)"
    );
    let started = running_since(&ready_pod).expect("running");
    let ready = pod_condition_time(&ready_pod, "Ready").expect("Ready since");
    let lag = ready.as_second() - started.as_second();
    // Both timestamps are whole seconds: a real lag of at least LOAD_SECONDS
    // never shows as less.
    assert!(
        lag >= LOAD_SECONDS,
        "the pod was Ready {lag} s after its container started ({started} → {ready}), \
         before the simulated load of {LOAD_SECONDS} s was over"
    );
    assert_eq!(
        ready_pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("real-node-0")
    );
    // The simulator's own log says when loading finished.
    let log = pods
        .logs(&ready_pod.name_any(), &LogParams::default())
        .await
        .unwrap();
    assert!(
        log.contains("Application startup complete."),
        "simulator log:\n{log}"
    );

    let vs = env.wait_for("qwen", "Available", is_available).await;
    let status = vs.status.unwrap();
    assert_eq!(status.phase.map(|p| p.as_str()), Some("Running"));

    let addr = cluster_ip(&env, "qwen").await;
    let request = json!({"model": MODEL, "max_tokens": 5,
                         "messages": [{"role": "user", "content": "Say hello"}]})
    .to_string();
    let (code, body) = testkit::http_request(&addr, "POST", "/v1/chat/completions", Some(&request))
        .unwrap_or_else(|e| panic!("POST http://{addr}/v1/chat/completions: {e}"));
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["model"], MODEL, "{answer}");
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    let content = answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(content.split_whitespace().count(), 5, "{answer}");
    let (code, models) = testkit::http_request(&addr, "GET", "/v1/models", None).unwrap();
    assert_eq!(code, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    assert_eq!(models["data"][0]["root"], format!("{MOUNT}/{MODEL}"));
}

/// Inside the container: `/dev/shm` is a tmpfs (memory-backed) of `shmSize`,
/// the model is mounted read-only (a write fails with "Read-only file
/// system"), and — beside a Service named `vllm`, whose link variables a pod
/// with service links does get (checked with a control pod) — no `VLLM_*`
/// variable is set but the ones in `spec.env`.
#[tokio::test]
async fn container_has_memory_shm_read_only_model_and_no_service_links() {
    let env = Env::new("real-pod").await;
    let model = model_pvc(&env, "models").await;
    // A plain Service named vllm first: with service links, every later pod of
    // the namespace would get VLLM_PORT=tcp://..., VLLM_SERVICE_HOST, ...
    let plain: Service = serde_json::from_value(json!({
        "metadata": {"name": "vllm"},
        "spec": {"selector": {"app": "none"}, "ports": [{"port": 8000}]}
    }))
    .unwrap();
    env.api::<Service>()
        .create(&PostParams::default(), &plain)
        .await
        .unwrap();
    env.create(sim_service(
        "qwen",
        "models",
        json!([{"name": "VLLM_SIM_TOKEN_DELAY_MS", "value": "1"}]),
    ))
    .await;

    // The control: a pod with service links (the Kubernetes default) on the real node.
    let control: Pod = serde_json::from_value(json!({
        "metadata": {"name": "links"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"vllm.example.com/node": "real"},
            "tolerations": [{"key": "vllm.example.com/node", "operator": "Equal", "value": "real",
                             "effect": "NoSchedule"}],
            "automountServiceAccountToken": false,
            "containers": [{"name": "env", "image": "localhost/busybox:dev",
                            "imagePullPolicy": "Never", "command": ["/bin/busybox", "env"]}]
        }
    }))
    .unwrap();
    let pods = env.api::<Pod>();
    pods.create(&PostParams::default(), &control).await.unwrap();

    let vs = env.wait_for("qwen", "Available", is_available).await;
    assert_eq!(
        vs.status.unwrap().phase.map(|p| p.as_str()),
        Some("Running")
    );
    let pod = the_pod(&env, "qwen").await;
    let pod_name = pod.name_any();

    // /dev/shm: tmpfs, sized by shmSize (64Mi = 65536 KiB).
    let mounts = exec_ok(&env, &pod_name, &["cat", "/proc/mounts"]);
    let shm = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("/dev/shm"))
        .unwrap_or_else(|| panic!("no /dev/shm mount:\n{mounts}"));
    let fields: Vec<&str> = shm.split_whitespace().collect();
    assert_eq!(fields[2], "tmpfs", "{shm}");
    assert!(
        fields[3].split(',').any(|o| o == "size=65536k"),
        "/dev/shm is not 64Mi: {shm}"
    );
    let df = exec_ok(&env, &pod_name, &["df", "-k", "/dev/shm"]);
    let size_kib = df
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_default();
    assert_eq!(size_kib, "65536", "df -k /dev/shm:\n{df}");
    // Writable and in memory: a file written there shows as used.
    exec_ok(
        &env,
        &pod_name,
        &[
            "dd",
            "if=/dev/zero",
            "of=/dev/shm/probe",
            "bs=1024",
            "count=1024",
        ],
    );
    let df = exec_ok(&env, &pod_name, &["df", "-k", "/dev/shm"]);
    let used: u64 = df
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|u| u.parse().ok())
        .unwrap_or_default();
    assert!(used >= 1024, "1 MiB written to /dev/shm, df says:\n{df}");

    // The model mount: read-only, though the host directory is world-writable.
    let model_mount = mounts
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(MOUNT))
        .unwrap_or_else(|| panic!("no {MOUNT} mount:\n{mounts}"));
    assert!(
        model_mount
            .split_whitespace()
            .nth(3)
            .unwrap()
            .split(',')
            .any(|o| o == "ro"),
        "{model_mount}"
    );
    let target = format!("{MOUNT}/{MODEL}/written-by-the-pod");
    let out = exec(&env, &pod_name, &["touch", &target]);
    assert!(
        !out.status.success(),
        "a write to the model mount succeeded"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(!model.dir.join(MODEL).join("written-by-the-pod").exists());
    // The model is readable: the simulator sized its cache from it.
    let config = exec_ok(
        &env,
        &pod_name,
        &["cat", &format!("{MOUNT}/{MODEL}/config.json")],
    );
    assert!(config.contains("num_hidden_layers"), "{config}");

    // The environment: VLLM_* only from spec.env.
    let environ = exec_ok(&env, &pod_name, &["env"]);
    let vllm_vars: Vec<&str> = environ
        .lines()
        .filter(|l| l.starts_with("VLLM_"))
        .map(|l| l.split('=').next().unwrap())
        .collect();
    let mut sorted = vllm_vars.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["VLLM_SIM_LOAD_SECONDS", "VLLM_SIM_TOKEN_DELAY_MS"],
        "environment of the vllm container:\n{environ}"
    );
    assert!(
        !environ.lines().any(|l| l.starts_with("QWEN_")),
        "a link variable of the VLLMService's own Service:\n{environ}"
    );
    // The control pod, with service links, does get VLLM_PORT=tcp://<ClusterIP>:8000.
    let svc_ip = cluster_ip(&env, "vllm").await;
    let control_log = wait_until(START, "the control pod's environment", || async {
        let p = pods.get("links").await.ok()?;
        let phase = p.status.as_ref()?.phase.clone()?;
        (phase == "Succeeded").then_some(())?;
        pods.logs("links", &LogParams::default()).await.ok()
    })
    .await;
    assert!(
        control_log
            .lines()
            .any(|l| l == format!("VLLM_PORT=tcp://{svc_ip}")),
        "the control pod has no VLLM_PORT link to {svc_ip}:\n{control_log}"
    );
    pods.delete("links", &DeleteParams::default())
        .await
        .unwrap();
}

/// A server that exits at start-up (VLLM_SIM_FAIL=KVCacheTooSmall, exit code
/// 1): the kubelet restarts it with back-off, and the VLLMService's `Degraded`
/// condition says why, from the log (KVCacheTooSmall, not the generic
/// CrashLoopBackOff); `Available` is False.
#[tokio::test]
async fn crashing_server_shows_the_logged_reason_in_degraded() {
    let env = Env::new("real-crash").await;
    let _model = model_pvc(&env, "models").await;
    let mut body = sim_service(
        "qwen",
        "models",
        json!([{"name": "VLLM_SIM_FAIL", "value": "KVCacheTooSmall"}]),
    );
    body["spec"]["env"][0]["value"] = json!("0");
    env.create(body).await;

    let api = env.api::<VLLMService>();
    let vs = tokio::time::timeout(START, async {
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields("metadata.name=qwen"),
        )
        .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(vs) = stream.next().await {
            let Ok(vs) = vs else { continue };
            if condition(&vs, "Degraded")
                .is_some_and(|(s, r, _)| s == "True" && r == "KVCacheTooSmall")
            {
                return vs;
            }
        }
        panic!("the VLLMService watch ended");
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no KVCacheTooSmall in Degraded:\n{}",
            describe_pod(&env, "qwen")
        )
    });
    let (_, reason, message) = condition(&vs, "Degraded").unwrap();
    assert_eq!(reason, "KVCacheTooSmall", "{message}");
    assert!(
        message.contains("set engineArgs.maxModelLen ≤"),
        "{message}"
    );
    let (available, _, _) = condition(&vs, "Available").unwrap();
    assert_eq!(available, "False");

    // What the kubelet reported, and what the simulator printed before exiting.
    wait_until(START, "the vllm container restarted", || async {
        pods_restarted(&env).await.then_some(())
    })
    .await;
    let pod = the_pod(&env, "qwen").await;
    let cs = &pod.status.unwrap().container_statuses.unwrap()[0];
    assert!(cs.restart_count >= 1, "{cs:?}");
    let last = cs.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(last.exit_code, 1);
    assert!(message.contains(&pod.metadata.name.unwrap()), "{message}");
    // The previous instance's log; the kubelet may remove that instance while it
    // restarts the container again ("unable to retrieve container logs"), and
    // every instance fails the same way: read again until one answers.
    let ns = env.ns.name.clone();
    let log = wait_until(START, "the previous instance's log", || {
        let ns = ns.clone();
        async move {
            let out = testkit::kubectl(&["-n", &ns, "logs", "deployment/qwen", "--previous"]);
            let log = String::from_utf8_lossy(&out.stdout).into_owned();
            (out.status.success() && !log.contains("unable to retrieve container logs"))
                .then_some(log)
        }
    })
    .await;
    assert!(
        log.contains("No available memory for the cache blocks")
            || log.contains("To serve at least one request"),
        "the simulator's last log:\n{log}"
    );
}
