//! Models fetched for the user (issue 17), on the local cluster's real node, by
//! the REAL `hf download` of huggingface_hub 0.36.2 and 2.4.0 (downloaderImage
//! `localhost/hf:0.36` / `localhost/hf:2`, hack/images/build.sh) against a
//! stand-in for the Hugging Face Hub served in the test's namespace
//! (huggingFace.endpoint, common/hub.rs; the real Hub is not reachable from this
//! machine): what the operator reads from the real clients' logs for a gated
//! repository, a missing repository and a missing revision, with each client.
//! vLLM itself is the simulator (`localhost/vllm-sim:dev`), serving what was
//! downloaded.

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
    Env, Operator, condition,
    hub::{self, CLIENTS},
    is_available,
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

/// Where downloads come from and what runs them: a client image of [`CLIENTS`] and the
/// stand-in Hub's endpoint.
#[derive(Clone, Copy)]
struct Via<'a> {
    client: &'a str,
    endpoint: &'a str,
}

impl Via<'_> {
    /// A `huggingFace` source of `repo` downloaded by this client from the stand-in Hub.
    fn source(&self, repo: &str) -> Value {
        json!({"repo": repo, "downloaderImage": self.client, "endpoint": self.endpoint})
    }

    /// `<base>-hf-0-36`, `<base>-hf-2`: an object or directory name per client.
    fn name(&self, base: &str) -> String {
        format!("{base}-{}", hub::short(self.client))
    }
}

/// A simulator service on claim `pvc` whose model is downloaded from `repo` at `revision` into
/// `dir`, by `via`'s client from the stand-in Hub.
fn fetching(
    name: &str,
    pvc: &str,
    dir: &str,
    repo: &str,
    revision: &str,
    token: bool,
    via: Via<'_>,
) -> Value {
    let mut vs = sim_service(name, pvc, json!([]));
    let mut hf = via.source(repo);
    hf["revision"] = json!(revision);
    if token {
        hf["tokenSecretRef"] = json!({"name": "hf-token", "key": "HF_TOKEN"});
    }
    vs["spec"]["modelPath"] = json!(format!("{MOUNT}/{dir}"));
    vs["spec"]["modelSource"] = json!({"huggingFace": hf});
    vs
}

/// The Jobs of `env` that VLLMService `owner` owns.
async fn jobs_of(env: &Env, owner: &str) -> Vec<Job> {
    env.api::<Job>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| j.owner_references().iter().any(|r| r.name == owner))
        .collect()
}

/// The image a Job's container runs.
fn job_image(job: &Job) -> String {
    job.spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0]
        .image
        .clone()
        .unwrap_or_default()
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

/// With each client (hf 0.36 and 2), a gated model with its token and a LoRA
/// adapter, both from the stand-in Hub: the Jobs run the client's image and
/// download them (ModelReady Downloading → Downloaded) before any pod exists,
/// then vLLM serves the model and the adapter; the token reaches the download
/// only through the Secret. Each client has its own claim: a Job is shared by
/// claim, directory, repository, revision and endpoint, not by image.
#[tokio::test]
async fn a_gated_model_and_an_adapter_are_downloaded_then_served() {
    let env = Env::new("fetch").await;
    let endpoint = hub::start(&env.client, &env.ns.name).await;
    let vias = CLIENTS.map(|client| Via {
        client,
        endpoint: &endpoint,
    });
    let mut volumes = Vec::new();
    for via in vias {
        volumes.push(model_pvc(&env, &via.name("models")).await);
    }
    token_secret(&env).await;
    let op = Operator::start(&env.ns.name).await;
    for via in vias {
        let name = via.name("qwen");
        let mut vs = fetching(
            &name,
            &via.name("models"),
            "llama",
            GATED,
            "main",
            true,
            via,
        );
        vs["spec"]["modelName"] = json!(name);
        vs["spec"]["loraAdapters"] =
            json!([{"name": "sql-lora", "huggingFace": via.source("org/sql-lora")}]);
        vs["spec"]["engineArgs"] = json!({"maxLoras": 2, "maxLoraRank": 16});
        env.create(vs).await;
    }
    // Watched together: each goes through Downloading while the other is watched.
    let names = vias.map(|via| via.name("qwen"));
    let runs = futures::future::join_all(
        names
            .iter()
            .map(|name| reasons_until(&env, name, is_available)),
    )
    .await;
    let mut uids = BTreeSet::new();
    for ((via, name), (reasons, trail, vs)) in vias.iter().zip(&names).zip(runs) {
        assert_eq!(
            reasons,
            ["Downloading", "Downloaded"],
            "{name}: ModelReady went:{trail}\n{}\n-- stand-in Hub:\n{}",
            jobs_yaml(&env),
            hub::log(&env)
        );
        let status = vs.status.clone().unwrap();
        assert_eq!(status.lora_adapters, ["sql-lora"]);
        let (_, _, message) = condition(&vs, "ModelReady").unwrap();
        assert!(
            message.contains(GATED) && message.contains("/data/models/llama"),
            "{message}"
        );

        // Two Jobs (model, adapter), both the client's, both complete before the Deployment was made.
        let jobs = jobs_of(&env, name).await;
        assert_eq!(jobs.len(), 2, "{name}: {}", jobs_yaml(&env));
        let deployment = env.api::<Deployment>().get(name).await.unwrap();
        let created = deployment.metadata.creation_timestamp.clone().unwrap().0;
        for job in &jobs {
            assert_eq!(job_image(job), via.client, "{}", job.name_any());
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
        uids.extend(jobs.iter().filter_map(|j| j.metadata.uid.clone()));
    }
    // The real clients asked the stand-in Hub (the simulator's hf asks no one) for each
    // repository's revision.
    let hub_log = hub::log(&env);
    for repo in [GATED, "org/sql-lora"] {
        assert!(
            hub_log.contains(&format!(
                "GET /api/models/{repo}/revision/main HTTP/1.1\" 200"
            )),
            "{repo}:\n{hub_log}"
        );
    }

    // After an operator restart the completed downloads are not run again.
    op.stop().await;
    let _op = Operator::start(&env.ns.name).await;
    for name in &names {
        env.patch_spec(
            name,
            json!({"monitoring": {"alerts": {"requestsWaiting": 11}}}),
        )
        .await;
        let vs = env
            .wait_for(name, "the new generation observed", |vs| {
                vs.status.as_ref().and_then(|s| s.observed_generation) == vs.metadata.generation
            })
            .await;
        assert_eq!(condition(&vs, "ModelReady").unwrap().1, "Downloaded");
        assert!(is_available(&vs));
    }
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

    // vLLM (the simulator) serves each model and its adapter, from the files the client wrote.
    for name in &names {
        let pod = pods_of(&env, name).await.remove(0);
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
        assert_eq!(ids, BTreeSet::from([name.as_str(), "sql-lora"]), "{models}");
        let request = json!({"model": "sql-lora", "prompt": "SELECT", "max_tokens": 3}).to_string();
        let (code, body) =
            testkit::http_request(&addr, "POST", "/v1/completions", Some(&request)).unwrap();
        assert_eq!(code, 200, "{body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["model"], "sql-lora", "{answer}");
    }

    // The token is in no status, event, Job, pod or argument.
    let everything = [
        jobs_yaml(&env),
        testkit::kubectl_ok(&["-n", &env.ns.name, "get", "events", "-o", "yaml"]),
        testkit::kubectl_ok(&["-n", &env.ns.name, "get", "deployments", "-o", "yaml"]),
    ]
    .join("\n");
    assert!(!everything.contains(TOKEN), "the token leaked");
    drop(volumes);
}

/// Each download failure says why in ModelReady and Available (with what to
/// do), no pod starts, with each client (their logs differ: 0.36 a traceback,
/// 2.x a one-line `Error: …` before it); adding the missing token runs the
/// download again.
#[tokio::test]
async fn download_failures_give_their_reason_and_a_fix_runs_again() {
    let env = Env::new("fetch-fail").await;
    let endpoint = hub::start(&env.client, &env.ns.name).await;
    let _model = model_pvc(&env, "models").await;
    token_secret(&env).await;
    let _op = Operator::start(&env.ns.name).await;
    let mut cases = Vec::new();
    for client in CLIENTS {
        let via = Via {
            client,
            endpoint: &endpoint,
        };
        for (base, repo, revision, reason, fix) in [
            ("gated", GATED, "main", "GatedRepo", "tokenSecretRef"),
            (
                "missing",
                "org/no-such-model",
                "main",
                "RepoNotFound",
                "modelSource.huggingFace.repo",
            ),
            (
                "revision",
                PUBLIC,
                "no-such-branch",
                "RevisionNotFound",
                "modelSource.huggingFace.revision",
            ),
        ] {
            let name = via.name(base);
            let vs = fetching(&name, "models", &name, repo, revision, false, via);
            cases.push((name, client, vs, reason, fix));
        }
    }
    for (_, _, vs, _, _) in &cases {
        env.create(vs.clone()).await;
    }
    for (name, client, _, reason, fix) in &cases {
        let vs = env
            .wait_for_within(
                name,
                &format!("ModelReady {reason}"),
                common::sim::START,
                |vs| condition(vs, "ModelReady").is_some_and(|c| c.1 == *reason),
            )
            .await;
        let (_, _, message) = condition(&vs, "ModelReady").unwrap();
        eprintln!("{name} ({client}): ModelReady {reason}: {message}");
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
        let jobs = jobs_of(&env, name).await;
        assert!(
            jobs.iter().all(|j| job_image(j) == *client),
            "{name}: {}",
            jobs_yaml(&env)
        );
    }
    // The token added: the failed Job is replaced by one that succeeds, with each client.
    for client in CLIENTS {
        let name = Via {
            client,
            endpoint: &endpoint,
        }
        .name("gated");
        env.patch_spec(
            &name,
            json!({"modelSource": {"huggingFace": {"tokenSecretRef": {"name": "hf-token", "key": "HF_TOKEN"}}}}),
        )
        .await;
    }
    for client in CLIENTS {
        let name = Via {
            client,
            endpoint: &endpoint,
        }
        .name("gated");
        env.wait_for_within(
            &name,
            "Available after the token",
            common::sim::START,
            is_available,
        )
        .await;
    }
}

/// Two services on one claim and path share one download; a new revision is
/// a new download, the pods are replaced once it is there, and the old Job
/// goes with its last owner.
#[tokio::test]
async fn a_shared_download_runs_once_and_a_new_revision_downloads_again() {
    let env = Env::new("fetch-share").await;
    let endpoint = hub::start(&env.client, &env.ns.name).await;
    // The newest client; the other downloads in this file's other tests.
    let via = Via {
        client: CLIENTS[1],
        endpoint: &endpoint,
    };
    let _model = model_pvc(&env, "models").await;
    let _op = Operator::start(&env.ns.name).await;
    let mut b = fetching("b", "models", "qwen", PUBLIC, "main", false, via);
    b["spec"]["modelName"] = json!("qwen-b");
    env.create(fetching("a", "models", "qwen", PUBLIC, "main", false, via))
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
    let endpoint = hub::start(&env.client, &env.ns.name).await;
    let via = Via {
        client: CLIENTS[0],
        endpoint: &endpoint,
    };
    let _model = model_pvc(&env, "models").await;
    let _op = Operator::start(&env.ns.name).await;
    let mut big = sim_service("big", "models", json!([]));
    big["spec"]["loraAdapters"] =
        json!([{"name": "big-lora", "huggingFace": via.source("org/big-lora")}]);
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
