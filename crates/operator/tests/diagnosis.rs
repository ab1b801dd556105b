//! Why vLLM did not start, and what it runs with (issue 15), on the local
//! cluster's real node: the kubelet really runs the vLLM simulator in each of
//! its failure modes, the operator reads the failed container's log through the
//! API server and says in `Degraded` (and `Available`) what went wrong, with the
//! numbers the simulator printed, within seconds of the container's exit. A
//! healthy service's log is read once per revision, for `status.engine`, and
//! never for a diagnosis.
//!
//! The operator runs in-process (tests/common), watching the test's namespace.
//! A missing real node fails the tests with the reason.

mod common;

use common::{
    Env, condition, is_available,
    sim::{self, START, model_pvc, sim_service},
};
use futures::StreamExt;
use k8s_openapi::{api::core::v1::Pod, jiff::Timestamp};
use kube::{
    ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;

/// The text of `s` between `a` and the next `b`.
fn between<'a>(s: &'a str, a: &str, b: &str) -> &'a str {
    let from = s.find(a).unwrap_or_else(|| panic!("no {a:?} in:\n{s}")) + a.len();
    let len = s[from..]
        .find(b)
        .unwrap_or_else(|| panic!("no {b:?} after {a:?} in:\n{s}"));
    &s[from..from + len]
}

/// Waits (on a watch, not a poll) until `Degraded` is True with `reason`; returns
/// the VLLMService and when it was seen.
async fn wait_degraded(env: &Env, name: &str, reason: &str) -> (VLLMService, Timestamp) {
    let api = env.api::<VLLMService>();
    let mut last = None;
    let found = tokio::time::timeout(START, async {
        let stream = watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}")),
        )
        .applied_objects();
        let mut stream = std::pin::pin!(stream);
        while let Some(vs) = stream.next().await {
            let Ok(vs) = vs else { continue };
            if condition(&vs, "Degraded").is_some_and(|(s, r, _)| s == "True" && r == reason) {
                return (vs, Timestamp::now());
            }
            last = Some(vs);
        }
        panic!("the VLLMService watch ended");
    })
    .await;
    found.unwrap_or_else(|_| {
        panic!(
            "no Degraded={reason} within {START:?}; last status:\n{}\npods:\n{}",
            serde_json::to_string_pretty(&last.and_then(|v| v.status)).unwrap(),
            sim::describe_pod(env, name)
        )
    })
}

/// The vllm container's last termination (current state or last state) and whether
/// it is the previous instance.
fn termination(pod: &Pod) -> (k8s_openapi::api::core::v1::ContainerStateTerminated, bool) {
    let cs = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "vllm"))
        .expect("a vllm container status");
    if let Some(t) = cs.state.as_ref().and_then(|s| s.terminated.clone()) {
        return (t, false);
    }
    let t = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .unwrap_or_else(|| panic!("the vllm container never terminated: {cs:?}"));
    (t, true)
}

/// One failure case: creates `name` with `spec` merged over the simulator service,
/// waits for `Degraded=reason` and returns its message, `Available`'s (status,
/// reason, message) and the failed instance's log. Asserts the diagnosis came
/// within seconds of the container's exit, and that it is one diagnosis read.
async fn failure(prefix: &str, env_vars: Value, spec: Value, reason: &str) -> Case {
    let env = Env::new(prefix).await;
    let model = model_pvc(&env, "models").await;
    let mut body = sim_service("qwen", "models", env_vars);
    for (k, v) in spec.as_object().cloned().unwrap_or_default() {
        body["spec"][k] = v;
    }
    env.create(body).await;
    let (vs, seen_at) = wait_degraded(&env, "qwen", reason).await;
    let (_, _, message) = condition(&vs, "Degraded").unwrap();
    let available = condition(&vs, "Available").unwrap();
    let pod = sim::pods_of(&env, "qwen").await.remove(0);
    let (ended, previous) = termination(&pod);
    let finished = ended.finished_at.as_ref().expect("finishedAt").0;
    let lag = seen_at.as_second() - finished.as_second();
    assert!(
        (0..=10).contains(&lag),
        "Degraded={reason} {lag} s after the container ended at {finished} (seen {seen_at})"
    );
    // The container may have restarted since: the failed instance's log is the
    // current or the previous one (every instance fails alike).
    let mut log = sim::log_of(&env, &pod.name_any(), previous).await;
    if !previous {
        log.push_str(
            &sim::try_log_of(&env, &pod.name_any(), true)
                .await
                .unwrap_or_default(),
        );
    }
    assert!(
        message.contains(&format!("pod {}", pod.name_any())),
        "{message}"
    );
    let reads = env.operator.metrics.log_reads("diagnosis");
    assert!(
        (1..=2).contains(&reads),
        "{reads} diagnosis log reads for one failing pod (one per container instance)"
    );
    eprintln!("{prefix}: Degraded={reason} {lag} s after the exit: {message}");
    Case {
        env,
        _model: model,
        message,
        available,
        log,
    }
}

struct Case {
    env: Env,
    _model: sim::ModelVolume,
    message: String,
    available: (String, String, String),
    log: String,
}

fn assert_contains(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "{p:?} missing in:\n{message}");
    }
}

/// `Available` is False for the same reason when the failure blocks serving.
fn assert_blocks_serving(case: &Case, reason: &str) {
    let (status, r, m) = &case.available;
    assert_eq!((status.as_str(), r.as_str()), ("False", reason), "{m}");
    assert!(m.starts_with("0/1 replicas ready"), "{m}");
}

#[tokio::test]
async fn kv_cache_too_small_gives_the_lengths_and_the_fix() {
    let case = failure(
        "diag-kv",
        json!([{"name": "VLLM_SIM_FAIL", "value": "KVCacheTooSmall"},
               {"name": "VLLM_SIM_LOAD_SECONDS", "value": "0"}]),
        json!({}),
        "KVCacheTooSmall",
    )
    .await;
    let line = between(
        &case.log,
        "ValueError: To serve at least one request",
        "Try increasing",
    );
    let n = between(line, "max seq len (", ")");
    let x = between(line, "), (", " GiB");
    let y = between(line, "KV cache memory (", " GiB");
    let m = between(line, "maximum model length is ", ".");
    assert_contains(
        &case.message,
        &[
            &format!("{n} tokens need {x} GiB"),
            &format!("{y} GiB are available"),
            &format!("set engineArgs.maxModelLen ≤ {m}"),
            "raise engineArgs.gpuMemoryUtilization",
        ],
    );
    assert_blocks_serving(&case, "KVCacheTooSmall");
    // One Warning event with the diagnosis (the Degraded transition's).
    let events = testkit::kubectl_ok(&[
        "-n",
        &case.env.ns.name,
        "get",
        "events",
        "--field-selector",
        "reason=KVCacheTooSmall",
        "-o",
        "jsonpath={range .items[*]}{.message}{\"\\n\"}{end}",
    ]);
    assert_eq!(events.lines().count(), 1, "{events}");
    assert!(events.contains(&format!("≤ {m}")), "{events}");
}

#[tokio::test]
async fn gpu_memory_insufficient_gives_free_total_and_utilization() {
    let case = failure(
        "diag-gpu",
        json!([{"name": "VLLM_SIM_FAIL", "value": "InsufficientGPUMemory"}]),
        json!({}),
        "GPUMemoryInsufficient",
    )
    .await;
    let pair = between(&case.log, "Free memory on device cuda:0 (", " GiB)");
    let util = between(&case.log, "desired GPU memory utilization (", ",");
    assert_contains(
        &case.message,
        &[
            &format!("{pair} GiB free"),
            &format!("gpuMemoryUtilization {util} asks for"),
            "lower gpuMemoryUtilization",
        ],
    );
    assert_blocks_serving(&case, "GPUMemoryInsufficient");
}

#[tokio::test]
async fn wrong_model_path_names_the_path_the_pvc_and_the_mount() {
    let case = failure(
        "diag-model",
        json!([]),
        json!({"modelPath": "/data/models/not-there"}),
        "ModelNotFound",
    )
    .await;
    assert!(
        case.log.contains(
            "Invalid repository ID or local directory specified: '/data/models/not-there'"
        ),
        "{}",
        case.log
    );
    assert_contains(
        &case.message,
        &[
            "no model at '/data/models/not-there' (spec.modelPath)",
            "PersistentVolumeClaim models (storage.pvcName)",
            "storage.mountPath /data/models",
        ],
    );
}

#[tokio::test]
async fn tensor_parallel_size_not_dividing_the_heads_lists_the_valid_sizes() {
    let case = failure(
        "diag-tp",
        json!([]),
        json!({"engineArgs": {"tensorParallelSize": 5}}),
        "TensorParallelNotDivisible",
    )
    .await;
    let heads = between(&case.log, "Total number of attention heads (", ")");
    assert_eq!(heads, "12", "the fake model's config.json");
    assert_contains(
        &case.message,
        &[
            "12 attention heads",
            "tensorParallelSize 5",
            "1, 2, 3, 4, 6, 12",
        ],
    );
}

#[tokio::test]
async fn old_vllm_rejecting_shutdown_timeout_says_what_to_do() {
    let case = failure(
        "diag-old",
        json!([{"name": "VLLM_SIM_VLLM_VERSION", "value": "0.17.1"}]),
        json!({"shutdown": {"drainSeconds": 30}}),
        "UnrecognizedArgument",
    )
    .await;
    assert!(
        case.log
            .contains("unrecognized arguments: --shutdown-timeout 30"),
        "{}",
        case.log
    );
    assert_contains(
        &case.message,
        &[
            "--shutdown-timeout 30",
            "vLLM ≥ 0.18",
            "shutdown.drainSeconds: 0",
        ],
    );
}

#[tokio::test]
async fn a_load_longer_than_the_startup_budget_says_the_budget_and_the_progress() {
    let case = failure(
        "diag-slow",
        json!([{"name": "VLLM_SIM_LOAD_SECONDS", "value": "120"}]),
        json!({"startupProbe": {"initialDelaySeconds": 2, "periodSeconds": 1, "failureThreshold": 3}}),
        "StartupProbeTimeout",
    )
    .await;
    assert!(
        case.log.contains("KeyboardInterrupt: terminated"),
        "{}",
        case.log
    );
    assert_contains(
        &case.message,
        &[
            "5 s (startupProbe initialDelaySeconds 2 + periodSeconds 1 × failureThreshold 3)",
            "while it was still loading after",
            "raise startupProbe.failureThreshold",
        ],
    );
    // How far it got: the simulator prints its first shard line right after it starts
    // loading; which of the two is last depends on where the kill landed.
    assert!(
        case.message
            .contains("last step: loading weights (0/4 shards)")
            || case.message.contains("last step: loading the model"),
        "{}",
        case.message
    );
}

#[tokio::test]
async fn shared_memory_too_small_names_shm_size() {
    let case = failure(
        "diag-shm",
        json!([{"name": "VLLM_SIM_FAIL", "value": "SharedMemoryTooSmall"}]),
        json!({}),
        "SharedMemoryTooSmall",
    )
    .await;
    assert_contains(
        &case.message,
        &[
            "Error while creating shared memory segment /dev/shm/nccl-",
            "spec.shmSize 64Mi",
            "raise spec.shmSize",
        ],
    );
}

#[tokio::test]
async fn any_other_error_exit_quotes_the_last_error_line() {
    let case = failure(
        "diag-other",
        json!([{"name": "VLLM_SIM_FAIL", "value": "OutOfMemory"},
               {"name": "VLLM_SIM_LOAD_SECONDS", "value": "0"}]),
        json!({}),
        "EngineStartFailed",
    )
    .await;
    let line = between(&case.log, "torch.OutOfMemoryError: ", "\n");
    // The spec's literal env values are masked wherever they appear, here the
    // "OutOfMemory" of VLLM_SIM_FAIL inside the exception's name.
    assert_contains(
        &case.message,
        &[
            "vLLM exited with code 1: torch.[masked]Error: ",
            &line[..40],
        ],
    );
}

/// `status.engine` is what the simulator logged and serves, read once per revision
/// (no diagnosis read for the healthy pods, and none again after later reconciles),
/// shown by `kubectl get vllm -o wide`, and read again after a spec change that
/// changes it.
#[tokio::test]
async fn engine_status_matches_the_simulator_and_follows_a_spec_change() {
    let env = Env::new("diag-engine").await;
    let _model = model_pvc(&env, "models").await;
    env.create(sim_service(
        "qwen",
        "models",
        json!([{"name": "VLLM_SIM_LOAD_SECONDS", "value": "1"}]),
    ))
    .await;
    let engine_of = |vs: &VLLMService| vs.status.as_ref().and_then(|s| s.engine.clone());
    let vs = env
        .wait_for("qwen", "Available with status.engine", |vs| {
            is_available(vs) && engine_of(vs).is_some()
        })
        .await;
    let engine = engine_of(&vs).unwrap();
    let pod = sim::pods_of(&env, "qwen").await.remove(0);
    let log = sim::log_of(&env, &pod.name_any(), false).await;
    let tokens: i64 = between(&log, "GPU KV cache size: ", " tokens")
        .replace(',', "")
        .parse()
        .unwrap();
    let concurrency: f64 = between(&log, "tokens per request: ", "x").parse().unwrap();
    assert_eq!(engine.version.as_deref(), Some("0.34.0"), "{engine:?}");
    assert_eq!(engine.max_model_len, Some(4096), "{engine:?}");
    assert_eq!(engine.kv_cache_tokens, Some(tokens), "{engine:?}");
    assert_eq!(engine.max_concurrency, Some(concurrency), "{engine:?}");
    assert_eq!(engine.tensor_parallel_size, Some(1), "{engine:?}");
    assert_eq!(
        engine.revision.as_deref(),
        pod.labels().get("pod-template-hash").map(String::as_str)
    );
    // What the simulator serves agrees.
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
    let (code, models) =
        testkit::http_request(&format!("{ip}:8000"), "GET", "/v1/models", None).unwrap();
    assert_eq!(code, 200, "{models}");
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["max_model_len"], 4096, "{models}");
    let (_, version) =
        testkit::http_request(&format!("{ip}:8000"), "GET", "/version", None).unwrap();
    assert!(version.contains("\"0.34.0\""), "{version}");
    let wide = testkit::kubectl_ok(&["-n", &env.ns.name, "get", "vllm", "qwen", "-o", "wide"]);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert!(
        header.contains(&"MAXMODELLEN") && header.contains(&"KVCACHETOKENS"),
        "{wide}"
    );
    assert!(
        wide.contains(" 4096 ") && wide.contains(&format!(" {tokens} ")),
        "{wide}"
    );

    let metrics = &env.operator.metrics;
    assert_eq!(
        metrics.log_reads("engine"),
        1,
        "one engine read for the revision"
    );
    assert_eq!(
        metrics.log_reads("diagnosis"),
        0,
        "a healthy pod's log is not read for a diagnosis"
    );
    env.assert_idle_reconcile_writes_nothing("qwen").await;
    assert_eq!(
        metrics.log_reads("engine"),
        1,
        "a later reconcile reads nothing again"
    );

    // A spec change that changes it: a new revision, read once.
    env.patch_spec("qwen", json!({"engineArgs": {"maxModelLen": 2048}}))
        .await;
    let vs = env
        .wait_for("qwen", "status.engine of the new revision", |vs| {
            is_available(vs) && engine_of(vs).and_then(|e| e.max_model_len) == Some(2048)
        })
        .await;
    let engine2 = engine_of(&vs).unwrap();
    assert_ne!(engine2.revision, engine.revision);
    let pod2 = sim::pods_of(&env, "qwen").await.remove(0);
    assert_eq!(
        engine2.revision.as_deref(),
        pod2.labels().get("pod-template-hash").map(String::as_str)
    );
    let log2 = sim::log_of(&env, &pod2.name_any(), false).await;
    let tokens2: i64 = between(&log2, "GPU KV cache size: ", " tokens")
        .replace(',', "")
        .parse()
        .unwrap();
    assert_eq!(engine2.kv_cache_tokens, Some(tokens2));
    let concurrency2: f64 = between(&log2, "tokens per request: ", "x").parse().unwrap();
    assert_eq!(engine2.max_concurrency, Some(concurrency2));
    assert_eq!(
        metrics.log_reads("engine"),
        2,
        "one engine read per revision"
    );
    assert_eq!(metrics.log_reads("diagnosis"), 0);
}

// ---- at scale, on kwok --------------------------------------------------------

/// 100 crash-looping services on kwok nodes (the kubelet's part played by the
/// project's kwok stage; kwok serves `hack/cluster/kwok-logs/` as the pods'
/// logs through the API server): one log read per container restart, measured
/// with the operator's `pod_log_reads` counter. A second restart of every pod
/// costs exactly one more read each; reconciles without a restart cost none; an
/// OOMKilled container is diagnosed from its last state with no read; healthy
/// pods are read once for `status.engine` and never for a diagnosis. A private
/// cluster, because the shared one may be older than kwok serving logs.
#[tokio::test]
async fn a_hundred_crash_loops_cost_one_log_read_per_restart() {
    use common::{Operator, QuietCounts};
    use kube::api::{Patch, PatchParams};
    const CRASHING: usize = 100;
    const OOM: usize = 5;
    const HEALTHY: usize = 10;
    let cluster = testkit::PrivateCluster::start("diag-kwok");
    cluster.install_crds();
    let client = cluster.client().await;
    // The namespace in the private cluster (TestNamespace::new waits on the shared one).
    let ns = testkit::TestNamespace {
        name: format!("diag-scale-{}", testkit::random_suffix()),
    };
    let out = cluster
        .kubectl()
        .args(["create", "namespace", &ns.name])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    testkit::wait_until(
        common::WAIT,
        "the namespace's default ServiceAccount",
        || async {
            let out = cluster
                .kubectl()
                .args(["-n", &ns.name, "get", "serviceaccount", "default"])
                .output()
                .ok()?;
            out.status.success().then_some(())
        },
    )
    .await;
    let operator =
        Operator::start_with_config(testkit::config_for(cluster.kubeconfig()).await, &ns.name)
            .await;
    let env = Env {
        client: client.clone(),
        ns,
        operator,
    };
    env.bound_pvc("models").await;
    let small = |name: &str, last: Option<(&str, &str)>| {
        let mut vs = common::gpu_service(name, "models");
        vs["spec"]["resources"] = json!({"requests": {"cpu": "10m", "memory": "16Mi"}});
        if let Some((reason, code)) = last {
            vs["spec"]["podAnnotations"] = json!({
                "sim.vllm.example.com/waiting-reason": "CrashLoopBackOff",
                "sim.vllm.example.com/last-terminated-reason": reason,
                "sim.vllm.example.com/last-terminated-exit-code": code});
        }
        vs
    };
    let crashing: Vec<String> = (0..CRASHING).map(|i| format!("crash-{i:03}")).collect();
    let oom: Vec<String> = (0..OOM).map(|i| format!("oom-{i}")).collect();
    let healthy: Vec<String> = (0..HEALTHY).map(|i| format!("ok-{i}")).collect();
    let started = std::time::Instant::now();
    for n in &crashing {
        env.create(small(n, Some(("Error", "1")))).await;
    }
    for n in &oom {
        env.create(small(n, Some(("OOMKilled", "137")))).await;
    }
    for n in &healthy {
        env.create(small(n, None)).await;
    }
    let api = env.api::<VLLMService>();
    testkit::wait_until(
        std::time::Duration::from_secs(240),
        "every service diagnosed or serving",
        || all_diagnosed(&api),
    )
    .await;
    let took = started.elapsed();
    let metrics = &env.operator.metrics;
    metrics.quiet_counts().await;
    assert_eq!(
        metrics.log_reads("diagnosis"),
        CRASHING as u64,
        "one read per crash-looping container instance"
    );
    assert_eq!(
        metrics.log_reads("engine"),
        HEALTHY as u64,
        "one engine read per healthy service's revision"
    );

    // Every crash-looping pod restarts once more: a new instance, one more read each.
    let pods = env.api::<Pod>();
    let list = pods.list(&Default::default()).await.unwrap();
    let mut restarted = 0;
    for pod in &list.items {
        if !pod
            .labels()
            .get("app.kubernetes.io/instance")
            .is_some_and(|i| i.starts_with("crash-"))
        {
            continue;
        }
        let mut statuses = serde_json::to_value(
            pod.status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap(),
        )
        .unwrap();
        let cs = &mut statuses[0];
        let restarts = cs["restartCount"].as_i64().unwrap();
        cs["restartCount"] = json!(restarts + 1);
        cs["lastState"]["terminated"]["finishedAt"] = json!(
            Timestamp::now()
                .to_string()
                .split('.')
                .next()
                .unwrap()
                .to_string()
                + "Z"
        );
        pods.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"containerStatuses": statuses}})),
        )
        .await
        .unwrap();
        restarted += 1;
    }
    assert_eq!(restarted, CRASHING);
    testkit::wait_until(
        common::WAIT,
        "one more read per restarted container",
        || async { (metrics.log_reads("diagnosis") >= 2 * CRASHING as u64).then_some(()) },
    )
    .await;
    let (_, reconciles) = metrics.quiet_counts().await;
    // More reconciles without a restart (an unrelated change of each Service) read nothing.
    for n in crashing.iter().chain(&healthy) {
        env.api::<k8s_openapi::api::core::v1::Service>()
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": "1"}}})),
            )
            .await
            .unwrap();
    }
    testkit::wait_until(
        common::WAIT,
        "a reconcile of each touched service",
        || async {
            (metrics.reconciles.get() >= reconciles + (CRASHING + HEALTHY) as u64).then_some(())
        },
    )
    .await;
    metrics.quiet_counts().await;
    assert_eq!(
        metrics.log_reads("diagnosis"),
        2 * CRASHING as u64,
        "reads without a restart"
    );
    assert_eq!(metrics.log_reads("engine"), HEALTHY as u64);
    all_diagnosed(&api).await.expect("still diagnosed");
    eprintln!(
        "{CRASHING} crash-looping + {OOM} OOMKilled + {HEALTHY} healthy services: diagnosed in {:.1} s; \
         {} diagnosis reads for {} container instances, {} engine reads, 0 for OOMKilled",
        took.as_secs_f64(),
        metrics.log_reads("diagnosis"),
        2 * CRASHING,
        metrics.log_reads("engine"),
    );
}

/// Every VLLMService of the scale test as it should end: crash-* Degraded with the
/// log's KVCacheTooSmall, oom-* with OOMKilled, ok-* Available with status.engine.
async fn all_diagnosed(api: &kube::Api<VLLMService>) -> Option<()> {
    let list = api.list(&Default::default()).await.ok()?;
    list.items
        .iter()
        .all(|vs| {
            let name = vs.name_any();
            let degraded = condition(vs, "Degraded");
            if name.starts_with("crash-") {
                degraded.is_some_and(|(_, r, m)| {
                    r == "KVCacheTooSmall" && m.contains("engineArgs.maxModelLen ≤ 2448")
                })
            } else if name.starts_with("oom-") {
                degraded.is_some_and(|(_, r, m)| r == "OOMKilled" && m.contains("exit code 137"))
            } else {
                is_available(vs)
                    && vs
                        .status
                        .as_ref()
                        .and_then(|s| s.engine.as_ref())
                        .and_then(|e| e.kv_cache_tokens)
                        == Some(538_320)
            }
        })
        .then_some(())
}
