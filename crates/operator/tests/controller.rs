//! The controller against the local control plane: what it makes, how status
//! follows the world, what it leaves alone, and that it is quiet when idle.

mod common;

use common::{Env, Operator, WAIT, condition, gpu_service, is_available};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
    events::v1::Event,
    node::v1::RuntimeClass,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;
use testkit::wait_until;
use vllmservice_api::VLLMService;

fn spec_example() -> serde_json::Value {
    // The Go operator's README example, verbatim but for the namespace (each test has its own).
    json!({
        "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
        "metadata": {"name": "qwen-demo"},
        "spec": {
            "image": "vllm/vllm-openai:latest",
            "modelPath": "/data/models/Qwen2.5-1.5B-Instruct",
            "modelName": "qwen2.5-1.5b-instruct",
            "replicas": 1, "port": 8000,
            "runtimeClassName": "nvidia", "schedulerName": "volcano",
            "nodeSelector": {"kubernetes.io/hostname": "master-01"},
            "resources": {
                "requests": {"cpu": "2", "memory": "8Gi", "volcano.sh/vgpu-number": "1"},
                "limits": {"cpu": "4", "memory": "16Gi", "volcano.sh/vgpu-number": "1"}},
            "storage": {"pvcName": "qwen-model-pvc", "mountPath": "/data/models", "readOnly": true},
            "gatewayRef": {"name": "llm-gateway", "namespace": "ai-demo", "sectionName": "http",
                           "host": "llm.example.local"}
        }
    })
}

#[tokio::test]
async fn spec_example_builds_the_deployment_and_service_of_the_spec() {
    let env = Env::new("ctl-spec").await;
    env.bound_pvc("qwen-model-pvc").await;
    let vs = env.create(spec_example()).await;

    let deployments = env.api::<Deployment>();
    let d = wait_until(WAIT, "Deployment qwen-demo", || async {
        deployments.get_opt("qwen-demo").await.ok().flatten()
    })
    .await;
    let owner = &d.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("VLLMService", Some(true))
    );
    assert_eq!(owner.uid, vs.uid().unwrap());
    let labels = d.labels();
    assert_eq!(labels["app.kubernetes.io/name"], "vllmservice");
    assert_eq!(labels["app.kubernetes.io/instance"], "qwen-demo");
    assert_eq!(
        labels["app.kubernetes.io/managed-by"],
        "vllmservice-operator"
    );
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.progress_deadline_seconds, Some(600));
    assert_eq!(
        serde_json::to_value(&spec.selector).unwrap(),
        json!({"matchLabels": {"app.kubernetes.io/instance": "qwen-demo",
                               "app.kubernetes.io/name": "vllmservice"}})
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.scheduler_name.as_deref(), Some("volcano"));
    assert_eq!(pod.runtime_class_name.as_deref(), Some("nvidia"));
    assert_eq!(
        pod.node_selector.unwrap()["kubernetes.io/hostname"],
        "master-01"
    );
    assert_eq!(pod.host_ipc, None);
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
    // preStop 10 s + drain 30 s + 10 s to exit.
    assert_eq!(pod.termination_grace_period_seconds, Some(50));
    assert_eq!(pod.enable_service_links, Some(false));
    let c = &pod.containers[0];
    assert_eq!(c.name, "vllm");
    assert_eq!(c.image.as_deref(), Some("vllm/vllm-openai:latest"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        c.args.clone().unwrap(),
        [
            "--model",
            "/data/models/Qwen2.5-1.5B-Instruct",
            "--served-model-name",
            "qwen2.5-1.5b-instruct",
            "--host",
            "0.0.0.0",
            "--port",
            "8000",
            "--dtype",
            "auto",
            "--max-model-len",
            "4096",
            "--gpu-memory-utilization",
            "0.75",
            "--max-num-seqs",
            "8",
            "--shutdown-timeout",
            "30",
        ]
    );
    let pre_stop = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref());
    assert_eq!(
        pre_stop.and_then(|p| p.sleep.as_ref()).map(|s| s.seconds),
        Some(10)
    );
    let port = &c.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("http"), 8000)
    );
    let res = c.resources.clone().unwrap();
    assert_eq!(res.limits.unwrap()["volcano.sh/vgpu-number"].0, "1");
    assert_eq!(res.requests.unwrap()["memory"].0, "8Gi");
    let mounts = c.volume_mounts.clone().unwrap();
    let model = mounts.iter().find(|m| m.name == "model-storage").unwrap();
    assert_eq!(
        (model.mount_path.as_str(), model.read_only),
        ("/data/models", Some(true))
    );
    assert!(mounts.iter().any(|m| m.mount_path == "/dev/shm"));
    let volumes = pod.volumes.unwrap();
    let pvc = volumes.iter().find(|v| v.name == "model-storage").unwrap();
    let pvc = pvc.persistent_volume_claim.as_ref().unwrap();
    assert_eq!(
        (pvc.claim_name.as_str(), pvc.read_only),
        ("qwen-model-pvc", Some(true))
    );
    let shm = volumes
        .iter()
        .find(|v| v.name == "dshm")
        .unwrap()
        .empty_dir
        .clone()
        .unwrap();
    assert_eq!(shm.medium.as_deref(), Some("Memory"));
    let readiness = c
        .readiness_probe
        .clone()
        .expect("readiness probe on by default");
    let get = readiness.http_get.unwrap();
    assert_eq!(get.path.as_deref(), Some("/health"));
    assert_eq!(serde_json::to_value(&get.port).unwrap(), json!("http"));
    assert_eq!(
        (
            readiness.initial_delay_seconds,
            readiness.period_seconds,
            readiness.timeout_seconds,
            readiness.failure_threshold
        ),
        (Some(30), Some(30), Some(5), Some(3))
    );
    let startup = c
        .startup_probe
        .clone()
        .expect("startup probe on by default");
    assert_eq!(
        (startup.period_seconds, startup.failure_threshold),
        (Some(10), Some(60))
    );
    assert!(c.liveness_probe.is_none(), "liveness is opt-in");

    let svc = wait_until(WAIT, "Service qwen-demo", || async {
        env.api::<Service>()
            .get_opt("qwen-demo")
            .await
            .ok()
            .flatten()
    })
    .await;
    let s = svc.spec.unwrap();
    assert_eq!(s.type_.as_deref(), Some("ClusterIP"));
    let p = &s.ports.unwrap()[0];
    assert_eq!((p.name.as_deref(), p.port), (Some("http"), 8000));
    assert_eq!(serde_json::to_value(&p.target_port).unwrap(), json!("http"));
    assert_eq!(s.selector.unwrap().len(), 2);

    // No volcano scheduler here: the pod waits, and the status says why.
    let vs = env
        .wait_for("qwen-demo", "status of the generation", |vs| {
            vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
        })
        .await;
    let st = vs.status.clone().unwrap();
    assert_eq!(st.deployment_name.as_deref(), Some("qwen-demo"));
    assert_eq!(st.service_name.as_deref(), Some("qwen-demo"));
    assert_eq!(
        st.selector.as_deref(),
        Some("app.kubernetes.io/instance=qwen-demo,app.kubernetes.io/name=vllmservice")
    );
    assert_eq!(condition(&vs, "StorageReady").unwrap().1, "PVCBound");
    assert_ne!(condition(&vs, "Available").unwrap().0, "True");

    // One event names every child the reconcile created (not one per child).
    let created = wait_until(WAIT, "the Created event", || async {
        let evs = env.api::<Event>().list(&ListParams::default()).await.ok()?;
        let created: Vec<Event> = evs
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("Created"))
            .collect();
        (!created.is_empty()).then_some(created)
    })
    .await;
    assert_eq!(created.len(), 1, "{created:#?}");
    assert_eq!(
        created[0].note.as_deref(),
        Some("created Deployment qwen-demo, Service qwen-demo")
    );
    assert_eq!(
        created[0].related.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Deployment")
    );
}

#[tokio::test]
async fn service_becomes_available_follows_changes_and_is_quiet_when_idle() {
    let mut env = Env::new("ctl-life").await;
    env.bound_pvc("models").await;
    env.create(gpu_service("qwen", "models")).await;
    let vs = env.wait_for("qwen", "Available", is_available).await;
    let st = vs.status.clone().unwrap();
    assert_eq!(st.phase.map(|p| p.to_string()).as_deref(), Some("Running"));
    assert_eq!(
        (st.ready_replicas, st.ready.as_deref()),
        (Some(1), Some("1/1"))
    );
    for t in [
        "DeploymentReady",
        "StorageReady",
        "RouteReady",
        "MonitoringReady",
    ] {
        assert_eq!(condition(&vs, t).unwrap().0, "True", "{t}");
    }
    assert_eq!(condition(&vs, "Degraded").unwrap().0, "False");
    let pods = env.api::<Pod>().list(&ListParams::default()).await.unwrap();
    assert!(pods.items.iter().all(|p| {
        p.spec
            .as_ref()
            .unwrap()
            .node_name
            .as_deref()
            .is_some_and(|n| n.starts_with("gpu-node-"))
    }));

    // Changes flow to the Deployment.
    env.patch_spec(
        "qwen",
        json!({"replicas": 2, "image": "vllm/vllm-openai:v0.11.1",
                                  "engineArgs": {"maxNumSeqs": 16}}),
    )
    .await;
    let vs = env
        .wait_for("qwen", "2/2 ready after the change", |vs| {
            is_available(vs) && vs.status.as_ref().unwrap().ready.as_deref() == Some("2/2")
        })
        .await;
    let d = env.api::<Deployment>().get("qwen").await.unwrap();
    let c = &d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(c.image.as_deref(), Some("vllm/vllm-openai:v0.11.1"));
    let args = c.args.clone().unwrap();
    let i = args.iter().position(|a| a == "--max-num-seqs").unwrap();
    assert_eq!(args[i + 1], "16");
    assert_eq!(condition(&vs, "Available").unwrap().0, "True");

    // kubectl scale goes through the scale subresource.
    testkit::kubectl_ok(&[
        "-n",
        &env.ns.name,
        "scale",
        "vllmservice",
        "qwen",
        "--replicas=3",
    ]);
    wait_until(WAIT, "the Deployment to scale to 3", || async {
        let d = env.api::<Deployment>().get("qwen").await.ok()?;
        (d.spec?.replicas == Some(3)).then_some(())
    })
    .await;
    env.wait_for("qwen", "3/3", |vs| {
        is_available(vs) && vs.status.as_ref().unwrap().ready.as_deref() == Some("3/3")
    })
    .await;

    // Idle: reconciles without a change send no write at all.
    env.assert_idle_reconcile_writes_nothing("qwen").await;

    // A restarted operator re-reconciles everything and writes nothing.
    let old = std::mem::replace(&mut env.operator, Operator::start(&env.ns.name).await);
    old.stop().await;
    wait_until(
        WAIT,
        "the restarted operator to reconcile, and finish",
        || async {
            let m = &env.operator.metrics;
            (m.reconciles.get() >= 1 && m.reconciles_in_flight.get() == 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        env.operator.metrics.write_total(),
        0,
        "writes after a restart: {:?}",
        env.operator.metrics.writes_by_kind()
    );

    // Deleting the VLLMService takes its children with it.
    env.api::<VLLMService>()
        .delete("qwen", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_until(
        WAIT,
        "the Deployment and Service to be garbage-collected",
        || async {
            let d = env.api::<Deployment>().get_opt("qwen").await.ok()?;
            let s = env.api::<Service>().get_opt("qwen").await.ok()?;
            (d.is_none() && s.is_none()).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn hand_edits_of_owned_fields_are_reverted_and_foreign_fields_kept() {
    let env = Env::new("ctl-drift").await;
    env.bound_pvc("models").await;
    env.create(gpu_service("drift", "models")).await;
    env.wait_for("drift", "Available", is_available).await;

    let deployments = env.api::<Deployment>();
    deployments
        .patch(
            "drift",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "drift", "annotations": {"team.example.com/owner": "ml"}},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "vllm", "image": "evil/image:1"}]}}}
            })),
        )
        .await
        .unwrap();
    // The drift triggers a reconcile through the Deployment watch.
    let d = wait_until(WAIT, "the image to be reverted", || async {
        let d = deployments.get("drift").await.ok()?;
        let image = d.spec.as_ref()?.template.spec.as_ref()?.containers[0]
            .image
            .clone()?;
        (image == "vllm/vllm-openai:v0.11.0").then_some(d)
    })
    .await;
    assert_eq!(
        d.annotations()
            .get("team.example.com/owner")
            .map(String::as_str),
        Some("ml"),
        "an annotation another tool added is left alone"
    );
}

#[tokio::test]
async fn a_foreign_deployment_with_the_same_name_is_left_alone_and_reported() {
    let env = Env::new("ctl-foreign").await;
    env.bound_pvc("models").await;
    let foreign: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "taken", "labels": {"app": "other"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "other"}},
                 "template": {"metadata": {"labels": {"app": "other"}},
                              "spec": {"containers": [{"name": "c", "image": "other:1"}]}}}
    }))
    .unwrap();
    let foreign = env
        .api::<Deployment>()
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    env.create(gpu_service("taken", "models")).await;

    let vs = env
        .wait_for("taken", "Degraded=True/ResourceConflict", |vs| {
            condition(vs, "Degraded").is_some_and(|c| c.0 == "True" && c.1 == "ResourceConflict")
        })
        .await;
    let (_, _, message) = condition(&vs, "DeploymentReady").unwrap();
    assert!(
        message.contains("is not controlled by this VLLMService"),
        "{message}"
    );
    assert_eq!(
        vs.status
            .as_ref()
            .unwrap()
            .phase
            .map(|p| p.to_string())
            .as_deref(),
        Some("Failed")
    );
    assert_eq!(condition(&vs, "Available").unwrap().0, "False");
    // The rest of the reconcile went on: the Service is ours.
    let svc = env.api::<Service>().get("taken").await.unwrap();
    assert_eq!(svc.owner_references()[0].uid, vs.uid().unwrap());

    let events = wait_until(WAIT, "a ResourceConflict event", || async {
        let evs = env.api::<Event>().list(&ListParams::default()).await.ok()?;
        evs.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("ResourceConflict"))
    })
    .await;
    assert_eq!(events.type_.as_deref(), Some("Warning"));

    // Deleting the VLLMService does not take the foreign Deployment with it.
    env.api::<VLLMService>()
        .delete("taken", &DeleteParams::foreground())
        .await
        .unwrap();
    // Foreground deletion: gone only once the garbage collector has dealt with
    // every object that names the VLLMService as its owner.
    wait_until(WAIT, "the VLLMService to be gone", || async {
        let gone = env
            .api::<VLLMService>()
            .get_opt("taken")
            .await
            .ok()?
            .is_none();
        gone.then_some(())
    })
    .await;
    let after = env.api::<Deployment>().get("taken").await.unwrap();
    assert_eq!(
        after.metadata.generation, foreign.metadata.generation,
        "spec never modified"
    );
    assert_eq!(after.labels(), foreign.labels());
    assert!(after.owner_references().is_empty());
    let managers: Vec<_> = after
        .managed_fields()
        .iter()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m == "vllmservice-operator"),
        "the operator wrote to it: {managers:?}"
    );
}

#[tokio::test]
async fn a_missing_pvc_is_reported_and_its_creation_noticed_through_the_watch() {
    let env = Env::new("ctl-pvc").await;
    env.create(gpu_service("waits", "later")).await;
    let vs = env
        .wait_for("waits", "StorageReady=False", |vs| {
            condition(vs, "StorageReady").is_some_and(|c| c.0 == "False")
        })
        .await;
    let (_, reason, message) = condition(&vs, "StorageReady").unwrap();
    assert_eq!(reason, "PVCNotFound");
    assert!(message.contains("later"), "{message}");
    assert_eq!(condition(&vs, "Available").unwrap().1, "PVCNotFound");

    // The periodic resync is 5 minutes; seeing this within the wait proves the PVC watch.
    env.bound_pvc("later").await;
    env.wait_for("waits", "StorageReady=True after the PVC is bound", |vs| {
        condition(vs, "StorageReady").is_some_and(|c| c.0 == "True" && c.1 == "PVCBound")
    })
    .await;
}

#[tokio::test]
async fn an_unschedulable_service_is_degraded_with_the_schedulers_reason() {
    let env = Env::new("ctl-sched").await;
    env.bound_pvc("models").await;
    let mut body = gpu_service("greedy", "models");
    body["spec"]["resources"] = json!({"limits": {"nvidia.com/gpu": "9"}});
    env.create(body).await;
    let vs = env
        .wait_for("greedy", "Degraded=True/Unschedulable", |vs| {
            condition(vs, "Degraded").is_some_and(|c| c.1 == "Unschedulable")
        })
        .await;
    let (_, _, message) = condition(&vs, "Degraded").unwrap();
    assert!(message.contains("Insufficient nvidia.com/gpu"), "{message}");
    assert_eq!(
        vs.status
            .as_ref()
            .unwrap()
            .phase
            .map(|p| p.to_string())
            .as_deref(),
        Some("Failed")
    );
}

#[tokio::test]
async fn image_pull_and_crash_loop_failures_surface_in_status() {
    let env = Env::new("ctl-fail").await;
    env.bound_pvc("models").await;
    let mut pull = gpu_service("pull", "models");
    pull["spec"]["image"] = json!("registry.example.com/vllm:missing");
    pull["spec"]["podAnnotations"] = json!({
        "sim.vllm.example.com/waiting-reason": "ImagePullBackOff",
        "sim.vllm.example.com/waiting-message": "Back-off pulling image"});
    env.create(pull).await;
    let mut crash = gpu_service("crash", "models");
    crash["spec"]["podAnnotations"] = json!({
        "sim.vllm.example.com/waiting-reason": "CrashLoopBackOff",
        "sim.vllm.example.com/last-terminated-reason": "OOMKilled",
        "sim.vllm.example.com/last-terminated-exit-code": "137"});
    env.create(crash).await;

    let vs = env
        .wait_for("pull", "Degraded=True/ImagePullBackOff", |vs| {
            condition(vs, "Degraded").is_some_and(|c| c.1 == "ImagePullBackOff")
        })
        .await;
    let message = condition(&vs, "Degraded").unwrap().2;
    assert!(
        message.contains("registry.example.com/vllm:missing"),
        "{message}"
    );
    assert_eq!(
        vs.status.as_ref().unwrap().message.as_deref(),
        Some(message.as_str())
    );

    // An OOMKilled last state is its own reason (no log needed), with the limit to raise.
    let vs = env
        .wait_for("crash", "Degraded=True/OOMKilled", |vs| {
            condition(vs, "Degraded").is_some_and(|c| c.1 == "OOMKilled")
        })
        .await;
    let message = condition(&vs, "Degraded").unwrap().2;
    assert!(
        message.contains("resources.limits.memory 16Gi (exit code 137)"),
        "{message}"
    );
    let available = condition(&vs, "Available").unwrap();
    assert_eq!(
        (available.0.as_str(), available.1.as_str()),
        ("False", "OOMKilled")
    );
    assert_eq!(
        env.operator.metrics.log_reads("diagnosis"),
        0,
        "no log read for an OOM kill"
    );
}

#[tokio::test]
async fn runtime_class_example_runs_when_the_class_exists() {
    // The README example's runtimeClassName, on the default scheduler and fake GPUs.
    let env = Env::new("ctl-rtc").await;
    let rc_name = format!("nvidia-{}", env.ns.name);
    let rc: RuntimeClass =
        serde_json::from_value(json!({"metadata": {"name": rc_name}, "handler": "nvidia"}))
            .unwrap();
    let rcs: Api<RuntimeClass> = Api::all(env.client.clone());
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    env.bound_pvc("models").await;
    let mut body = gpu_service("rtc", "models");
    body["spec"]["runtimeClassName"] = json!(rc_name);
    env.create(body).await;
    env.wait_for("rtc", "Available", is_available).await;
    rcs.delete(&rc_name, &DeleteParams::default())
        .await
        .unwrap();
}

/// Every reconcile is one observation of the reconcile-duration histogram,
/// as controller-runtime exports it.
#[tokio::test]
async fn every_reconcile_is_timed() {
    let env = Env::new("ctl-duration").await;
    env.bound_pvc("models").await;
    env.create(gpu_service("qwen", "models")).await;
    env.wait_for("qwen", "Available", is_available).await;
    let text = env.operator.metrics.encode();
    let value = |series: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
    };
    let count = value("vllmservice_operator_reconcile_duration_seconds_count");
    let sum = value("vllmservice_operator_reconcile_duration_seconds_sum");
    let reconciles = value("vllmservice_operator_reconciles_total");
    // Reconciles still running are counted, not yet timed.
    assert!(
        count >= 1.0 && count <= reconciles,
        "{count} timed of {reconciles}"
    );
    assert!(sum > 0.0, "reconciles took {sum} s in all");
}
