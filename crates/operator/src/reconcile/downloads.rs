//! Which downloads a VLLMService needs: `hf download` of `spec.modelSource.huggingFace` into
//! `spec.modelPath`, and of each Hugging Face LoRA adapter into
//! `<storage.mountPath>/loras/<name>`, on the service's claim.
//!
//! A Job is named after what it downloads and where to (claim, sub-path,
//! directory, repository, revision), not after the VLLMService, so that
//! services sharing a claim and a path share one download: each of them is
//! an owner of the Job, and it goes when the last of them does. A completed
//! Job is the record that the files are there (it survives operator restarts
//! and is not run again); a new revision is a new Job.

//!
//! The read step looks for their Jobs and the build step makes them; both
//! take the list from here. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use vllmservice_api::{HuggingFace, VLLMService, Valid};

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

/// One download the spec needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
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
    /// The claim it writes to.
    pub claim: String,
    /// The repository and revision, and how to authenticate.
    pub source: HuggingFace,
}

/// Every download `vs` needs, the model's first. Downloads need a claim
/// (validation refuses a Hugging Face source without `storage.pvcName`).
pub fn wanted(vs: &Valid<'_>) -> Vec<Wanted> {
    let s = &vs.spec;
    let Some(claim) = s.storage.pvc_name.as_deref() else {
        return Vec::new();
    };
    let want = |hf: &HuggingFace, target: &str, what: String, field: String| Wanted {
        name: job_name(claim, s.storage.sub_path.as_deref(), target, hf),
        what,
        field,
        target: target.to_string(),
        claim: claim.to_string(),
        source: hf.clone(),
    };
    let mut out = Vec::new();
    if let Some(hf) = s
        .model_source
        .as_ref()
        .and_then(|m| m.hugging_face.as_ref())
    {
        let what = format!("{}@{}", hf.repo, hf.revision);
        out.push(want(
            hf,
            &s.model_path,
            what,
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
            out.push(want(hf, &target, what, field));
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

/// The Job's name: `hf-<repo name>-<hash of claim, sub-path, directory, repository, revision
/// and endpoint>`. (A mirror's repository of the same name may hold other files; without an
/// endpoint the key is the one from before the field existed, so no Job is renamed.)
pub fn job_name(claim: &str, sub_path: Option<&str>, target: &str, hf: &HuggingFace) -> String {
    let mut key = [
        claim,
        sub_path.unwrap_or(""),
        target,
        &hf.repo,
        &hf.revision,
    ]
    .join("\n");
    if let Some(endpoint) = &hf.endpoint {
        key = format!("{key}\n{endpoint}");
    }
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
