//! The `ModelReady` condition, pure: how far the downloads of the model and
//! the LoRA adapters got, and what to do when one failed.

use vllmservice_api::{HuggingFace, Valid, condition_types as ct};

use crate::{
    diagnosis::hf_log::Failure,
    reconcile::{
        seen::{DownloadSeen, DownloadState},
        status::conditions::{Cond, Status},
    },
};

/// `ModelReady` for the downloads `seen`; None when the spec downloads nothing.
pub fn condition(vs: &Valid<'_>, downloads: &[DownloadSeen]) -> Option<Cond> {
    if downloads.is_empty() {
        return None;
    }
    let ns = vs.metadata.namespace.as_deref().unwrap_or_default();
    let claim = vs.spec.storage.pvc_name.as_deref().unwrap_or_default();
    // A failure first: it needs the user.
    if let Some((d, failure, evidence, pod)) = downloads.iter().find_map(|d| match &d.state {
        DownloadState::Failed {
            failure,
            evidence,
            pod,
            ..
        } => Some((d, *failure, evidence, pod)),
        _ => None,
    }) {
        let hf = source(vs, &d.field);
        let advice = advice(failure, d, hf, claim);
        let from = match pod {
            Some(p) => format!("pod {p} of Job {ns}/{}", d.name),
            None => format!("Job {ns}/{}", d.name),
        };
        let retry = if failure.is_permanent() {
            format!(
                "; the download runs again when the spec changes what it runs, or after kubectl \
                 delete job -n {ns} {}",
                d.name
            )
        } else {
            String::new()
        };
        return Some(Cond::new(
            ct::MODEL_READY,
            Status::False,
            failure.reason(),
            format!(
                "downloading {} to {} failed: {advice} ({from}: \"{evidence}\"){retry}",
                d.what, d.target
            ),
        ));
    }
    let pending: Vec<String> = downloads
        .iter()
        .filter_map(|d| match &d.state {
            DownloadState::Complete => None,
            DownloadState::NotStarted => Some(format!(
                "{} to {}: Job {ns}/{} is being created",
                d.what, d.target, d.name
            )),
            DownloadState::Running { progress, waiting } => {
                let how = match (progress, waiting) {
                    (_, Some(w)) => w.clone(),
                    (Some(p), None) => p.clone(),
                    (None, None) => "started".into(),
                };
                Some(format!(
                    "{} to {} (Job {ns}/{}): {how}",
                    d.what, d.target, d.name
                ))
            }
            // Reported above, before any pending one.
            DownloadState::Failed { .. } => None,
        })
        .collect();
    if !pending.is_empty() {
        return Some(Cond::new(
            ct::MODEL_READY,
            Status::False,
            "Downloading",
            format!("downloading {}", pending.join("; ")),
        ));
    }
    let all: Vec<String> = downloads
        .iter()
        .map(|d| format!("{} at {}", d.what, d.target))
        .collect();
    Some(Cond::new(
        ct::MODEL_READY,
        Status::True,
        "Downloaded",
        format!(
            "downloaded to PersistentVolumeClaim {ns}/{claim}: {}",
            all.join(", ")
        ),
    ))
}

/// The source of the download that `field` names.
fn source<'a>(vs: &'a Valid<'_>, field: &str) -> Option<&'a HuggingFace> {
    let s = &vs.spec;
    if field == "modelSource.huggingFace" {
        return s.model_source.as_ref()?.hugging_face.as_ref();
    }
    let index: usize = field
        .strip_prefix("loraAdapters[")?
        .split(']')
        .next()?
        .parse()
        .ok()?;
    s.lora_adapters.get(index)?.hugging_face.as_ref()
}

/// What to change for a failure.
fn advice(failure: Failure, d: &DownloadSeen, hf: Option<&HuggingFace>, claim: &str) -> String {
    let field = &d.field;
    let repo = hf.map_or("the repository", |h| h.repo.as_str());
    let revision = hf.map_or("the revision", |h| h.revision.as_str());
    let token = hf.and_then(|h| h.token_secret_ref.as_ref());
    match failure {
        Failure::GatedRepo => match token {
            Some(t) => format!(
                "{repo} is a gated repository and the Hub refused the token in Secret {} key \
                 {} ({field}.tokenSecretRef): accept the repository's terms on huggingface.co \
                 with that token's account, or use a token of an account that has",
                t.name, t.key
            ),
            None => format!(
                "{repo} is a gated repository: accept its terms on huggingface.co, put an \
                 access token of that account in a Secret and set {field}.tokenSecretRef"
            ),
        },
        Failure::RepoNotFound => format!(
            "the Hub has no repository {repo} that {} can see: check {field}.repo{}",
            if token.is_some() {
                "the token"
            } else {
                "an anonymous client"
            },
            if token.is_some() {
                ""
            } else {
                " (a private repository needs tokenSecretRef)"
            }
        ),
        Failure::RevisionNotFound => format!(
            "{repo} has no revision {revision}: set {field}.revision to one of its branches, \
             tags or commit ids"
        ),
        Failure::DiskFull => format!(
            "PersistentVolumeClaim {claim} (storage.pvcName) is full: give the claim more \
             space (or free some), then delete Job {} to download again",
            d.name
        ),
        Failure::DownloadError => format!(
            "the download exited with an error: see the Job's log; delete Job {} to run it \
             again",
            d.name
        ),
    }
}
