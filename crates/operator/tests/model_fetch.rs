//! Models fetched for the user (issue 17), on the local cluster's real node
//! with the simulator's image: its `hf` command plays `hf download` against a
//! fixture directory in the image that stands in for the Hugging Face Hub
//! (the real Hub is not reachable from this machine), with the Hub client's
//! own error texts for a gated repository, a missing repository and a missing
//! revision (crates/vllm-sim/README.md).

mod common;

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::{
    apps::v1::Deployment,
    batch::v1::Job,
    core::v1::{Pod, Secret},
};
use kube::{
    ResourceExt,
    api::{ListParams, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;

use common::{
    Env, Operator, condition, is_available,
    sim::{MOUNT, model_pvc, pods_of, sim_service},
};

/// The token the fixture Hub accepts for its gated repository.
const TOKEN: &str = "hf_simulated_test_token_0123456789";
const GATED: &str = "meta-llama/Llama-3.1-8B-Instruct";
const PUBLIC: &str = "Qwen/Qwen2.5-0.5B-Instruct";

async fn token_secret(env: &Env) {
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "hf-token"},
        "stringData": {"HF_TOKEN": TOKEN}
    }))
    .unwrap();
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

/// A simulator service whose model is downloaded from `repo` at `revision` into `dir`.
fn fetching(name: &str, dir: &str, repo: &str, revision: &str, token: bool) -> Value {
    let mut vs = sim_service(name, "models", json!([]));
    let mut hf = json!({"repo": repo, "revision": revision});
    if token {
        hf["tokenSecretRef"] = json!({"name": "hf-token", "key": "HF_TOKEN"});
    }
    vs["spec"]["modelPath"] = json!(format!("{MOUNT}/{dir}"));
    vs["spec"]["modelSource"] = json!({"huggingFace": hf});
    vs
}

/// Every ModelReady reason of `name` the status goes through until `done`,
/// and, for a failure message, each change with its resourceVersion and message.
async fn reasons_until(
    env: &Env,
    name: &str,
    done: impl Fn(&VLLMService) -> bool,
) -> (Vec<String>, String, VLLMService) {
    let api = env.api::<VLLMService>();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(api, config).applied_objects().boxed();
    let mut reasons: Vec<String> = Vec::new();
    let mut trail = String::new();
    let deadline = tokio::time::Instant::now() + common::sim::START * 2;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("{name}: timed out; ModelReady reasons seen: {reasons:?}"))
            .expect("watch")
            .expect("the watch goes on");
        if let Some((_, reason, message)) = condition(&next, "ModelReady")
            && reasons.last() != Some(&reason)
        {
            let rv = next
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default();
            trail.push_str(&format!("\n  rv {rv}: {reason}: {message}"));
            reasons.push(reason);
        }
        if done(&next) {
            return (reasons, trail, next);
        }
    }
}

fn pod_ip(pod: &Pod) -> String {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap()
}

fn jobs_yaml(env: &Env) -> String {
    testkit::kubectl_ok(&["-n", &env.ns.name, "get", "jobs,pods,vllm", "-o", "yaml"])
}

/// A gated model with its token and a LoRA adapter, both from the Hub: the
/// Job downloads them (ModelReady Downloading → Downloaded) before any pod
/// exists, then vLLM serves the model and the adapter; the token reaches the
/// download only through the Secret.
#[tokio::test]
async fn a_gated_model_and_an_adapter_are_downloaded_then_served() {
    let env = Env::new("fetch").await;
    let _model = model_pvc(&env, "models").await;
    token_secret(&env).await;
    let op = Operator::start(&env.ns.name).await;
    let mut vs = fetching("qwen", "llama", GATED, "main", true);
    vs["spec"]["loraAdapters"] =
        json!([{"name": "sql-lora", "huggingFace": {"repo": "org/sql-lora"}}]);
    vs["spec"]["engineArgs"] = json!({"maxLoras": 2, "maxLoraRank": 16});
    env.create(vs).await;
    let (reasons, trail, vs) = reasons_until(&env, "qwen", is_available).await;
    assert_eq!(
        reasons,
        ["Downloading", "Downloaded"],
        "ModelReady went:{trail}\n{}",
        jobs_yaml(&env)
    );
    let status = vs.status.clone().unwrap();
    assert_eq!(status.lora_adapters, ["sql-lora"]);
    let (_, _, message) = condition(&vs, "ModelReady").unwrap();
    assert!(
        message.contains(GATED) && message.contains("/data/models/llama"),
        "{message}"
    );

    // Two Jobs (model, adapter), both complete before the Deployment was made.
    let jobs = env
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 2, "{}", jobs_yaml(&env));
    let deployment = env.api::<Deployment>().get("qwen").await.unwrap();
    let created = deployment.metadata.creation_timestamp.clone().unwrap().0;
    for job in &jobs {
        let done = job
            .status
            .as_ref()
            .and_then(|s| s.completion_time.clone())
            .unwrap()
            .0;
        assert!(
            done <= created,
            "{} completed at {done}, Deployment made at {created}",
            job.name_any()
        );
    }

    // After an operator restart the completed downloads are not run again.
    op.stop().await;
    let uids: BTreeSet<String> = jobs.iter().filter_map(|j| j.metadata.uid.clone()).collect();
    let _op = Operator::start(&env.ns.name).await;
    env.patch_spec(
        "qwen",
        json!({"monitoring": {"alerts": {"requestsWaiting": 11}}}),
    )
    .await;
    let vs = env
        .wait_for("qwen", "the new generation observed", |vs| {
            vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
        })
        .await;
    assert_eq!(condition(&vs, "ModelReady").unwrap().1, "Downloaded");
    assert!(is_available(&vs));
    let after: BTreeSet<String> = env
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|j| j.metadata.uid.clone())
        .collect();
    assert_eq!(uids, after, "no download ran again");

    // vLLM (the simulator) serves the model and the adapter.
    let pod = pods_of(&env, "qwen").await.remove(0);
    let addr = format!("{}:8000", pod_ip(&pod));
    let (code, models) = testkit::http_request(&addr, "GET", "/v1/models", None).unwrap();
    assert_eq!(code, 200, "{models}");
    let models: Value = serde_json::from_str(&models).unwrap();
    let ids: BTreeSet<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        BTreeSet::from([common::sim::MODEL, "sql-lora"]),
        "{models}"
    );
    let request = json!({"model": "sql-lora", "prompt": "SELECT", "max_tokens": 3}).to_string();
    let (code, body) =
        testkit::http_request(&addr, "POST", "/v1/completions", Some(&request)).unwrap();
    assert_eq!(code, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["model"], "sql-lora", "{answer}");

    // The token is in no status, event, Job, pod or argument.
    let everything = [
        jobs_yaml(&env),
        testkit::kubectl_ok(&["-n", &env.ns.name, "get", "events", "-o", "yaml"]),
        testkit::kubectl_ok(&["-n", &env.ns.name, "get", "deployments", "-o", "yaml"]),
    ]
    .join("\n");
    assert!(!everything.contains(TOKEN), "the token leaked");
}

/// Each download failure says why in ModelReady and Available (with what to
/// do), no pod starts; adding the missing token runs the download again.
#[tokio::test]
async fn download_failures_give_their_reason_and_a_fix_runs_again() {
    let env = Env::new("fetch-fail").await;
    let _model = model_pvc(&env, "models").await;
    token_secret(&env).await;
    let _op = Operator::start(&env.ns.name).await;
    let cases = [
        (
            "gated",
            fetching("gated", "gated", GATED, "main", false),
            "GatedRepo",
            "tokenSecretRef",
        ),
        (
            "missing",
            fetching("missing", "missing", "org/no-such-model", "main", false),
            "RepoNotFound",
            "modelSource.huggingFace.repo",
        ),
        (
            "revision",
            fetching("revision", "revision", PUBLIC, "no-such-branch", false),
            "RevisionNotFound",
            "modelSource.huggingFace.revision",
        ),
    ];
    for (_, vs, _, _) in &cases {
        env.create(vs.clone()).await;
    }
    for (name, _, reason, fix) in &cases {
        let vs = env
            .wait_for(name, &format!("ModelReady {reason}"), |vs| {
                condition(vs, "ModelReady").is_some_and(|c| c.1 == *reason)
            })
            .await;
        let (_, _, message) = condition(&vs, "ModelReady").unwrap();
        eprintln!("{name}: ModelReady {reason}: {message}");
        assert!(message.contains(fix), "{name}: {message}");
        let available = condition(&vs, "Available").unwrap();
        assert_eq!(
            (available.0.as_str(), available.1.as_str()),
            ("False", *reason)
        );
        assert_eq!(condition(&vs, "Degraded").unwrap().1, *reason);
        assert!(
            env.api::<Deployment>()
                .get_opt(name)
                .await
                .unwrap()
                .is_none(),
            "{name}: no pods before the model"
        );
    }
    // The token added: the failed Job is replaced by one that succeeds.
    env.patch_spec(
        "gated",
        json!({"modelSource": {"huggingFace": {"tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"}}}}),
    )
    .await;
    env.wait_for("gated", "Available after the token", is_available)
        .await;
}

/// Two services on one claim and path share one download; a new revision is
/// a new download, the pods are replaced once it is there, and the old Job
/// goes with its last owner.
#[tokio::test]
async fn a_shared_download_runs_once_and_a_new_revision_downloads_again() {
    let env = Env::new("fetch-share").await;
    let _model = model_pvc(&env, "models").await;
    let _op = Operator::start(&env.ns.name).await;
    let mut b = fetching("b", "qwen", PUBLIC, "main", false);
    b["spec"]["modelName"] = json!("qwen-b");
    env.create(fetching("a", "qwen", PUBLIC, "main", false))
        .await;
    env.create(b).await;
    env.wait_for("a", "Available", is_available).await;
    env.wait_for("b", "Available", is_available).await;
    let jobs = env
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 1, "{}", jobs_yaml(&env));
    let first = jobs[0].name_any();
    let owners: BTreeSet<String> = jobs[0]
        .owner_references()
        .iter()
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(owners, BTreeSet::from(["a".to_string(), "b".to_string()]));

    // b goes: the Job stays for a.
    env.api::<VLLMService>()
        .delete("b", &Default::default())
        .await
        .unwrap();
    let api = env.api::<Job>();
    let deadline = tokio::time::Instant::now() + common::sim::START;
    loop {
        let job = api.get(&first).await.unwrap();
        let owners: Vec<String> = job
            .owner_references()
            .iter()
            .map(|r| r.name.clone())
            .collect();
        if owners == ["a"] {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "owners stayed {owners:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }

    // A new revision: a second Job, then new pods that see its files.
    let old_pod = pods_of(&env, "a").await.remove(0).name_any();
    env.patch_spec(
        "a",
        json!({"modelSource": {"huggingFace": {"revision": "v2"}}}),
    )
    .await;
    let vs = env
        .wait_for("a", "new pods after the v2 download", |vs| {
            is_available(vs)
                && vs
                    .status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation == vs.metadata.generation)
                && condition(vs, "Progressing").is_some_and(|c| c.1 == "Complete")
        })
        .await;
    assert_eq!(condition(&vs, "ModelReady").unwrap().1, "Downloaded");
    let pod = pods_of(&env, "a")
        .await
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .unwrap();
    assert_ne!(pod.name_any(), old_pod);
    let revision = testkit::kubectl_ok(&[
        "-n",
        &env.ns.name,
        "exec",
        &pod.name_any(),
        "-c",
        "vllm",
        "--",
        "/bin/busybox",
        "cat",
        &format!("{MOUNT}/qwen/REVISION"),
    ]);
    assert_eq!(revision.trim(), "v2");
    // The main Job had a as its last owner: gone.
    let deadline = tokio::time::Instant::now() + common::sim::START;
    while api
        .get_opt(&first)
        .await
        .unwrap()
        .is_some_and(|j| j.metadata.deletion_timestamp.is_none())
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old Job {first} stayed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// An adapter vLLM cannot load (rank above maxLoraRank, or no adapter at its
/// path) is diagnosed from vLLM's log with the fix.
#[tokio::test]
async fn a_lora_adapter_vllm_cannot_load_is_diagnosed_with_the_fix() {
    let env = Env::new("fetch-lora").await;
    let _model = model_pvc(&env, "models").await;
    let _op = Operator::start(&env.ns.name).await;
    let mut big = sim_service("big", "models", json!([]));
    big["spec"]["loraAdapters"] =
        json!([{"name": "big-lora", "huggingFace": {"repo": "org/big-lora"}}]);
    big["spec"]["engineArgs"] = json!({"maxLoraRank": 16});
    let mut missing = sim_service("missing", "models", json!([]));
    missing["spec"]["loraAdapters"] =
        json!([{"name": "nope", "path": format!("{MOUNT}/loras/nope")}]);
    env.create(big).await;
    env.create(missing).await;
    for (name, reason, fix) in [
        (
            "big",
            "LoRARankTooLarge",
            "spec.engineArgs.maxLoraRank to 64",
        ),
        ("missing", "LoRAAdapterNotFound", "/data/models/loras/nope"),
    ] {
        let vs = env
            .wait_for(name, reason, |vs| {
                condition(vs, "Degraded").is_some_and(|c| c.1 == reason)
            })
            .await;
        let (_, _, message) = condition(&vs, "Degraded").unwrap();
        assert!(message.contains(fix), "{name}: {message}");
        assert!(
            vs.status.unwrap().lora_adapters.is_empty(),
            "{name}: nothing is served"
        );
    }
}

/// `modelSource.image` instead of a claim: the API server takes the
/// Deployment with its image volume and the service becomes Available, with
/// StorageReady saying where the model comes from. On kwok's nodes: the real
/// node's containerd (Debian's 1.6) cannot mount image volumes (README).
#[tokio::test]
async fn a_model_image_is_mounted_instead_of_a_claim() {
    let env = Env::new("fetch-image").await;
    let _op = Operator::start(&env.ns.name).await;
    let mut vs = common::gpu_service("qwen", "unused");
    vs["spec"]["storage"] = json!({"mountPath": "/data/models"});
    vs["spec"]["modelPath"] = json!("/data/models");
    vs["spec"]["modelSource"] = json!({"image": {"reference": "registry.example.local/models/qwen:1", "pullPolicy": "IfNotPresent"}});
    env.create(vs).await;
    // This file's other tests start simulator pods and download Jobs on the real
    // node at the same time; on two cores that can take longer than WAIT.
    let vs = env
        .wait_for_within("qwen", "Available", common::sim::START, is_available)
        .await;
    let storage = condition(&vs, "StorageReady").unwrap();
    assert_eq!(storage.1, "ImageVolume", "{storage:?}");
    assert!(
        storage.2.contains("registry.example.local/models/qwen:1"),
        "{storage:?}"
    );
    assert!(
        condition(&vs, "ModelReady").is_none(),
        "nothing is downloaded"
    );
    let deployment = env.api::<Deployment>().get("qwen").await.unwrap();
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    let volume = &pod.volumes.unwrap()[0];
    let image = volume.image.as_ref().expect("an image volume");
    assert_eq!(
        image.reference.as_deref(),
        Some("registry.example.local/models/qwen:1")
    );
    assert!(volume.persistent_volume_claim.is_none());
    assert_eq!(
        pod.containers[0].volume_mounts.as_ref().unwrap()[0].read_only,
        Some(true)
    );
    let jobs = env
        .api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(jobs.is_empty());
}
