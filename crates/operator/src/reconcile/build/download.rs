//! The download Jobs: one per download the spec needs
//! ([`crate::reconcile::downloads`]), running `hf download` into the
//! service's claim.
//! Pure.

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
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::ResourceExt;
use vllmservice_api::Valid;

use super::{
    Defaults,
    pod::{container_security, pod_base},
};
use crate::{
    names,
    reconcile::downloads::{
        self, BACKOFF_LIMIT, CONTAINER_NAME, JOB_HASH_ANNOTATION, NAME_VALUE, SOURCE_ANNOTATION,
        Wanted, owner,
    },
};

const VOLUME: &str = "model-storage";
const TMP_VOLUME: &str = "tmp";

/// One download the spec needs, and its Job as it should be created.
#[derive(Debug, Clone, PartialEq)]
pub struct Download {
    pub want: Wanted,
    pub job: Job,
}

/// Every download `vs` needs with its Job, the model's first.
pub fn downloads(vs: &Valid<'_>, defaults: &Defaults) -> Vec<Download> {
    downloads::wanted(vs)
        .into_iter()
        .map(|want| Download {
            job: job(vs, &want, defaults.download_deadline_seconds),
            want,
        })
        .collect()
}

/// The Job that runs `want`, stopped after `deadline_seconds`.
fn job(vs: &Valid<'_>, want: &Wanted, deadline_seconds: i64) -> Job {
    let s = &vs.spec;
    let (hf, target) = (&want.source, want.target.as_str());
    let fixed = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    };
    let mut env = vec![
        // The image's user may have no home: the hf client keeps its settings there.
        fixed("HOME", "/tmp"),
        fixed("HF_HUB_DISABLE_TELEMETRY", "1"),
        // huggingface_hub 1.x and 2.x print no per-file lines by default, so their progress
        // bar (`\r` redraws, no newline until the end) never reaches the pod log; with
        // HF_DEBUG each file's "Downloading '…'" line ends a redraw's line, as 0.36's INFO lines
        // do. It also keeps the full traceback of a failure. The Authorization header of the
        // request lines it adds is printed as <TOKEN>.
        fixed("HF_DEBUG", "1"),
        // 1.x and 2.x would ask PyPI for a newer huggingface_hub on every start.
        fixed("HF_HUB_DISABLE_UPDATE_CHECK", "1"),
    ];
    if let Some(endpoint) = &hf.endpoint {
        env.push(fixed("HF_ENDPOINT", endpoint));
    }
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
                    claim_name: want.claim.clone(),
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
        ..pod_base(vs)
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    let hash = names::content_hash(&template);
    let source = format!("{}@{}", hf.repo, hf.revision);
    Job {
        metadata: ObjectMeta {
            name: Some(want.name.clone()),
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
            active_deadline_seconds: Some(deadline_seconds),
            template,
            ..JobSpec::default()
        }),
        status: None,
    }
}
