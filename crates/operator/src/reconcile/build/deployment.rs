//! The vLLM Deployment: one `vllm serve` container per pod, the model volume,
//! probes, drain settings and the rollout strategy decided for it.
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::{
        apps::v1::{Deployment, DeploymentSpec},
        core::v1::{
            Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, ImageVolumeSource,
            Lifecycle, LifecycleHandler, PersistentVolumeClaimVolumeSource, PodSpec,
            PodTemplateSpec, Probe as CoreProbe, SleepAction, Volume, VolumeMount,
        },
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
        util::intstr::IntOrString,
    },
};
use vllmservice_api::{Probe, ProbeKind, Valid};

use super::{
    pod::{container_security, non_empty, non_empty_vec, pod_base, set},
    rollout::{self, REASON_ANNOTATION, STRATEGY_ANNOTATION, TEMPLATE_HASH_ANNOTATION},
};
use crate::{
    names,
    reconcile::{downloads, seen::Seen},
};

pub const PORT_NAME: &str = "http";
pub const MODEL_VOLUME: &str = "model-storage";
pub const SHM_VOLUME: &str = "dshm";

/// The vLLM server arguments in the Go operator's order (model, served name,
/// port, engine arguments), then tensor parallelism and the
/// drain timeout, then the user's extra args.
pub fn vllm_args(vs: &Valid<'_>) -> Vec<String> {
    let s = &vs.spec;
    let e = &s.engine_args;
    let mut args = vec![
        "--model".to_string(),
        s.model_path.clone(),
        "--served-model-name".into(),
        s.model_name.clone(),
        "--host".into(),
        "0.0.0.0".into(),
        "--port".into(),
        s.port.to_string(),
        "--dtype".into(),
        e.dtype.as_str().into(),
        "--max-model-len".into(),
        e.max_model_len.to_string(),
        "--gpu-memory-utilization".into(),
        e.gpu_memory_utilization.clone(),
        "--max-num-seqs".into(),
        e.max_num_seqs.to_string(),
    ];
    if let Some(tp) = e.tensor_parallel_size {
        args.extend(["--tensor-parallel-size".to_string(), tp.to_string()]);
    }
    // vLLM's own default (0) aborts in-flight requests on SIGTERM.
    if s.shutdown.drain_seconds > 0 {
        args.extend([
            "--shutdown-timeout".to_string(),
            s.shutdown.drain_seconds.to_string(),
        ]);
    }
    let adapters = &s.lora_adapters;
    if !adapters.is_empty() {
        args.push("--enable-lora".into());
        if let Some(n) = e.max_loras {
            args.extend(["--max-loras".to_string(), n.to_string()]);
        }
        if let Some(r) = e.max_lora_rank {
            args.extend(["--max-lora-rank".to_string(), r.to_string()]);
        }
        args.push("--lora-modules".into());
        args.extend(
            adapters
                .iter()
                .map(|a| format!("{}={}", a.name, a.served_path(&s.storage.mount_path))),
        );
    }
    args.extend(e.extra_args.iter().cloned());
    args
}

/// An HTTP GET probe on the `http` port when `on`.
fn probe<K: ProbeKind>(p: &Probe<K>, on: bool) -> Option<CoreProbe> {
    on.then(|| CoreProbe {
        http_get: Some(HTTPGetAction {
            path: Some(p.path.clone()),
            port: IntOrString::String(PORT_NAME.into()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(p.initial_delay_seconds),
        period_seconds: Some(p.period_seconds),
        timeout_seconds: Some(p.timeout_seconds),
        failure_threshold: Some(p.failure_threshold),
        ..CoreProbe::default()
    })
}

/// A preStop sleep, so that the pod leaves the Service's endpoints (and
/// kube-proxy's and Gateways' tables) before vLLM gets SIGTERM. The kubelet's
/// own sleep: the image needs no shell.
fn pre_stop(vs: &Valid<'_>) -> Option<Lifecycle> {
    let seconds = vs.spec.shutdown.pre_stop_seconds;
    (seconds > 0).then(|| Lifecycle {
        pre_stop: Some(LifecycleHandler {
            sleep: Some(SleepAction {
                seconds: i64::from(seconds),
            }),
            ..LifecycleHandler::default()
        }),
        ..Lifecycle::default()
    })
}

/// The user's pod annotations and, when the operator downloads files, which
/// downloads the pods use: a new revision to download changes the template,
/// so the pods are replaced once it is on the volume.
fn pod_annotations(vs: &Valid<'_>) -> BTreeMap<String, String> {
    let mut annotations = vs.spec.pod_annotations.clone();
    let downloads: Vec<String> = downloads::wanted(vs).into_iter().map(|d| d.name).collect();
    if !downloads.is_empty() {
        annotations.insert(downloads::PODS_ANNOTATION.into(), downloads.join(","));
    }
    annotations
}

/// The volume with the model: the claim, or the OCI image of `modelSource.image`.
fn model_volume(vs: &Valid<'_>) -> Volume {
    let s = &vs.spec;
    let image = s.model_source.as_ref().and_then(|m| m.image.as_ref());
    match (image, &s.storage.pvc_name) {
        (Some(image), _) => Volume {
            name: MODEL_VOLUME.into(),
            image: Some(ImageVolumeSource {
                reference: Some(image.reference.clone()),
                pull_policy: image.pull_policy.map(|p| p.as_str().to_string()),
            }),
            ..Volume::default()
        },
        (None, claim) => Volume {
            name: MODEL_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                // Validation requires a claim unless the model is an image;
                // an empty name would be refused by the API server, not panic here.
                claim_name: claim.clone().unwrap_or_default(),
                read_only: Some(s.storage.read_only),
            }),
            ..Volume::default()
        },
    }
}

/// The Deployment for `vs`; `seen` decides how a changed template rolls out.
pub fn deployment(vs: &Valid<'_>, seen: &Seen) -> Deployment {
    let s = &vs.spec;
    let container = Container {
        name: names::CONTAINER_NAME.into(),
        image: Some(s.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vllm_args(vs)),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.into()),
            container_port: s.port,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        env: non_empty_vec(&s.env),
        resources: s.resources.clone(),
        volume_mounts: Some(vec![
            VolumeMount {
                name: MODEL_VOLUME.into(),
                mount_path: s.storage.mount_path.clone(),
                // An image volume is always read-only.
                read_only: Some(s.storage.read_only || s.storage.pvc_name.is_none()),
                sub_path: s.storage.sub_path.clone(),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: SHM_VOLUME.into(),
                mount_path: "/dev/shm".into(),
                ..VolumeMount::default()
            },
        ]),
        // Without a startup/readiness probe a model server is "Ready" before the
        // model has loaded, so both are on unless explicitly disabled.
        startup_probe: probe(&s.startup_probe, s.startup_probe.enabled != Some(false)),
        readiness_probe: probe(&s.readiness_probe, s.readiness_probe.enabled != Some(false)),
        liveness_probe: probe(&s.liveness_probe, s.liveness_probe.enabled == Some(true)),
        security_context: Some(container_security(vs)),
        lifecycle: pre_stop(vs),
        ..Container::default()
    };
    let pod = PodSpec {
        containers: vec![container],
        volumes: Some(vec![
            model_volume(vs),
            Volume {
                name: SHM_VOLUME.into(),
                empty_dir: Some(EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: Some(
                        s.shm_size
                            .clone()
                            .unwrap_or_else(|| Quantity(names::SHM_DEFAULT_SIZE.into())),
                    ),
                }),
                ..Volume::default()
            },
        ]),
        scheduler_name: Some(set(&s.scheduler_name).unwrap_or_else(|| "default-scheduler".into())),
        runtime_class_name: set(&s.runtime_class_name),
        host_ipc: s.host_ipc.then_some(true),
        restart_policy: Some("Always".into()),
        dns_policy: Some("ClusterFirst".into()),
        termination_grace_period_seconds: Some(
            s.termination_grace_period_seconds
                .unwrap_or_else(|| s.shutdown.grace_period_seconds()),
        ),
        ..pod_base(vs)
    };
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(names::object_labels(vs)),
            annotations: non_empty(&pod_annotations(vs)),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    let template_hash = names::content_hash(&template);
    let plan = rollout::plan(vs, seen, &template_hash);
    let mut annotations = BTreeMap::from([
        (TEMPLATE_HASH_ANNOTATION.to_string(), template_hash),
        (
            STRATEGY_ANNOTATION.to_string(),
            plan.replace.name().to_string(),
        ),
    ]);
    if let Some(reason) = plan.reason {
        annotations.insert(REASON_ANNOTATION.to_string(), reason);
    }
    Deployment {
        metadata: ObjectMeta {
            annotations: Some(annotations),
            ..names::child_meta(vs)
        },
        spec: Some(DeploymentSpec {
            replicas: Some(s.replicas),
            selector: LabelSelector {
                match_labels: Some(names::selector_labels(vs)),
                ..LabelSelector::default()
            },
            strategy: Some(plan.replace.strategy()),
            revision_history_limit: Some(10),
            progress_deadline_seconds: Some(600),
            template,
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}
