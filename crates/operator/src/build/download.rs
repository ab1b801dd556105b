//! The download Jobs: `hf download` of `spec.modelSource.huggingFace` into
//! `spec.modelPath`, and of each Hugging Face LoRA adapter into
//! `<storage.mountPath>/loras/<name>`, on the service's claim.
//!
//! A Job is named after what it downloads and where to (claim, sub-path,
//! directory, repository, revision), not after the VLLMService, so that
//! services sharing a claim and a path share one download: each of them is
//! an owner of the Job, and it goes when the last of them does. A completed
//! Job is the record that the files are there (it survives operator restarts
//! and is not run again); a new revision is a new Job.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        batch::v1::{Job, JobSpec},
        core::v1::{
            Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
            PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, SecretKeySelector, Volume,
            VolumeMount,
        },
    },
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference},
};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use vllmservice_api::{HuggingFace, VLLMService, Valid};

use super::deployment::{container_security, non_empty, non_empty_vec, pod_security, set};
use crate::names;

/// On the pods: the download Jobs (comma-separated names) whose files they use.
pub const PODS_ANNOTATION: &str = "aiinfra.example.com/downloads";
/// On a Job: a hash of its pod template; a failed Job whose template is no
/// longer what the spec asks for (say, a token was added) is run again.
pub const JOB_HASH_ANNOTATION: &str = "aiinfra.example.com/job-hash";
/// On a Job: what it downloads, for people and messages (`repo@revision`).
pub const SOURCE_ANNOTATION: &str = "aiinfra.example.com/source";
/// The `app.kubernetes.io/name` of download Jobs and their pods (not
/// `vllmservice`: they belong to no single service's pods).
pub const NAME_VALUE: &str = "vllmservice-download";
/// The container that runs `hf download`.
pub const CONTAINER_NAME: &str = "download";
/// How often a failed download pod is retried before the Job fails.
pub const BACKOFF_LIMIT: i32 = 1;

const VOLUME: &str = "model-storage";
const TMP_VOLUME: &str = "tmp";

/// One download the spec needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Download {
    /// The Job's name.
    pub name: String,
    /// What it fetches, for messages: "Qwen/Qwen2.5-1.5B-Instruct@main" or
    /// "LoRA adapter sql-lora (org/sql-lora@main)".
    pub what: String,
    /// The spec field it comes from: "modelSource.huggingFace" or
    /// "loraAdapters[0].huggingFace".
    pub field: String,
    /// The directory it fills, in the container.
    pub target: String,
    /// The Job as it should be created.
    pub job: Job,
}

/// Every download `vs` needs, the model's first.
pub fn downloads(vs: &Valid<'_>) -> Vec<Download> {
    let s = &vs.spec;
    let mut out = Vec::new();
    if let Some(hf) = s
        .model_source
        .as_ref()
        .and_then(|m| m.hugging_face.as_ref())
    {
        out.push(download(
            vs,
            hf,
            &s.model_path,
            format!("{}@{}", hf.repo, hf.revision),
            "modelSource.huggingFace".into(),
        ));
    }
    for (i, adapter) in s.lora_adapters.iter().enumerate() {
        if let Some(hf) = &adapter.hugging_face {
            let target = adapter.served_path(&s.storage.mount_path);
            let what = format!(
                "LoRA adapter {} ({}@{})",
                adapter.name, hf.repo, hf.revision
            );
            let field = format!("loraAdapters[{i}].huggingFace");
            out.push(download(vs, hf, &target, what, field));
        }
    }
    out
}

/// A lowercase DNS-label fragment of a repository's name ("Qwen2.5-1.5B" → "qwen2-5-1-5b").
fn slug(repo: &str) -> String {
    let name = repo.rsplit('/').next().unwrap_or(repo);
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(40);
    out.trim_matches('-').to_string()
}

/// The Job's name: `hf-<repo name>-<hash of claim, sub-path, directory, repository and revision>`.
pub fn job_name(claim: &str, sub_path: Option<&str>, target: &str, hf: &HuggingFace) -> String {
    let key = [
        claim,
        sub_path.unwrap_or(""),
        target,
        &hf.repo,
        &hf.revision,
    ]
    .join("\n");
    let hash: String = Sha256::digest(key.as_bytes())[..5]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    match slug(&hf.repo) {
        s if s.is_empty() => format!("hf-{hash}"),
        s => format!("hf-{s}-{hash}"),
    }
}

/// An owner reference to `vs` that is not a controller reference: a shared
/// Job has several owners and no controller.
pub fn owner(vs: &VLLMService) -> OwnerReference {
    OwnerReference {
        controller: None,
        ..names::owner_reference(vs)
    }
}

fn download(
    vs: &Valid<'_>,
    hf: &HuggingFace,
    target: &str,
    what: String,
    field: String,
) -> Download {
    let s = &vs.spec;
    let claim = s
        .storage
        .pvc_name
        .clone()
        .expect("validated: downloads need storage.pvcName");
    let name = job_name(&claim, s.storage.sub_path.as_deref(), target, hf);
    let mut env = vec![
        // The image's user may have no home: the hf client keeps its settings there.
        EnvVar {
            name: "HOME".into(),
            value: Some("/tmp".into()),
            ..EnvVar::default()
        },
        EnvVar {
            name: "HF_HUB_DISABLE_TELEMETRY".into(),
            value: Some("1".into()),
            ..EnvVar::default()
        },
    ];
    if let Some(secret) = &hf.token_secret_ref {
        // From the Secret, never as an argument: arguments show in the pod spec and in ps.
        env.push(EnvVar {
            name: "HF_TOKEN".into(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: secret.name.clone(),
                    key: secret.key.clone(),
                    optional: Some(false),
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let container = Container {
        name: CONTAINER_NAME.into(),
        image: Some(
            hf.downloader_image
                .clone()
                .unwrap_or_else(|| s.image.clone()),
        ),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(
            [
                "hf",
                "download",
                &hf.repo,
                "--revision",
                &hf.revision,
                "--local-dir",
                target,
            ]
            .map(String::from)
            .to_vec(),
        ),
        env: Some(env),
        volume_mounts: Some(vec![
            VolumeMount {
                name: VOLUME.into(),
                mount_path: s.storage.mount_path.clone(),
                sub_path: s.storage.sub_path.clone(),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: TMP_VOLUME.into(),
                mount_path: "/tmp".into(),
                ..VolumeMount::default()
            },
        ]),
        security_context: Some(container_security(vs)),
        ..Container::default()
    };
    let labels = BTreeMap::from([
        (names::NAME_LABEL.to_string(), NAME_VALUE.to_string()),
        (
            names::MANAGED_BY_LABEL.to_string(),
            names::MANAGED_BY_VALUE.to_string(),
        ),
    ]);
    // Where the serving pods may run, so that the claim can be mounted there too.
    let pod = PodSpec {
        containers: vec![container],
        volumes: Some(vec![
            Volume {
                name: VOLUME.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim,
                    read_only: Some(false),
                }),
                ..Volume::default()
            },
            Volume {
                name: TMP_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
        ]),
        restart_policy: Some("Never".into()),
        node_selector: non_empty(&s.node_selector),
        tolerations: non_empty_vec(&s.tolerations),
        affinity: s.affinity.clone(),
        image_pull_secrets: non_empty_vec(&s.image_pull_secrets),
        service_account_name: set(&s.service_account_name),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(pod_security(vs)),
        ..PodSpec::default()
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    let hash = super::content_hash(&template);
    let source = format!("{}@{}", hf.repo, hf.revision);
    let job = Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: vs.namespace(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (JOB_HASH_ANNOTATION.to_string(), hash),
                (SOURCE_ANNOTATION.to_string(), source),
            ])),
            owner_references: Some(vec![owner(vs)]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(BACKOFF_LIMIT),
            template,
            ..JobSpec::default()
        }),
        status: None,
    };
    Download {
        name,
        what,
        field,
        target: target.to_string(),
        job,
    }
}

/// Whether `job` has `vs` among its owners.
pub fn is_owned_by<K: Resource>(job: &K, vs: &VLLMService) -> bool {
    let uid = vs.meta().uid.as_deref().unwrap_or_default();
    job.owner_references().iter().any(|r| r.uid == uid)
}

/// Whether `job` is one of this operator's download Jobs.
pub fn is_download_job<K: Resource>(job: &K) -> bool {
    job.labels().get(names::NAME_LABEL).map(String::as_str) == Some(NAME_VALUE)
        && names::is_managed(job.meta())
}
