//! What one reconcile saw of the world, gathered once by [`crate::reconcile::read`]
//! before anything is built or written. Plain data: the builders and the
//! status derivation take it without doing any I/O themselves.

use std::{collections::BTreeMap, time::Duration};

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{
    apps::v1::Deployment,
    autoscaling::v2::HorizontalPodAutoscaler,
    batch::v1::Job,
    core::v1::{Pod, Service},
    policy::v1::PodDisruptionBudget,
};

use crate::{
    cache::{CachedGateway, placement::Capacity},
    diagnosis::{
        hf_log::Failure,
        vllm_log::{Diagnosis, EngineInfo},
    },
    kinds::{
        keda::ScaledObject,
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    optional_apis::Apis,
};

/// Everything a reconcile of one VLLMService looks at.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The optional APIs installed.
    pub apis: Apis,
    /// The children with the VLLMService's name, as the caches hold them
    /// (ours or someone else's: the ownership check comes later).
    pub deployment: Option<Deployment>,
    pub service: Option<Service>,
    pub route: Option<HttpRoute>,
    pub monitor: Option<ServiceMonitor>,
    pub rule: Option<PrometheusRule>,
    pub pdb: Option<PodDisruptionBudget>,
    pub scaled_object: Option<ScaledObject>,
    /// The HorizontalPodAutoscaler KEDA made for the ScaledObject (looked up
    /// only with `spec.autoscaling`).
    pub hpa: Option<HorizontalPodAutoscaler>,
    /// Where the pods may run and what is free there; None when they ask for
    /// no extended resource or the operator cannot see the nodes.
    pub capacity: Option<Capacity>,
    /// The Gateway `spec.gatewayRef` points at.
    pub gateway: GatewaySeen,
    /// The model PVC.
    pub storage: Storage,
    /// The pods of this VLLMService (by its instance label).
    pub pods: Vec<Pod>,
    /// What their vLLM containers' logs say.
    pub logs: LogsSeen,
    /// The downloads the spec needs, in `downloads::wanted` order.
    pub downloads: Vec<DownloadSeen>,
    /// Download Jobs this VLLMService owns that its spec no longer needs.
    pub stale_jobs: Vec<Job>,
    /// The pod of this VLLMService that the scheduler has refused longest.
    pub unplaced: Option<Unplaced>,
    /// How long ago the last pod of this VLLMService went (within minutes).
    pub pod_removed_ago: Option<Duration>,
}

/// How long after a pod goes an unschedulable pod may still be waiting for
/// the scheduler's next try (it retries when a pod goes, after its backoff of
/// up to 10 s): until then the freed room may yet take it.
pub const SCHEDULER_RETRY: Duration = Duration::from_secs(15);

/// A pod the scheduler could not place (PodScheduled False, Unschedulable),
/// and how long Auto's surge waits for such a pod before it replaces in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unplaced {
    pub pod: String,
    /// The scheduler's message ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu").
    pub message: String,
    /// Since the pod became unschedulable.
    pub waited: Duration,
    /// `--surge-unschedulable-seconds`.
    pub patience: Duration,
}

impl Unplaced {
    /// The surge has waited long enough for this pod.
    pub fn waited_out(&self) -> bool {
        self.waited >= self.patience
    }
}

/// How often the progress of a running download is read again: its log
/// sends no events.
const DOWNLOAD_RECHECK: Duration = Duration::from_secs(10);

impl Seen {
    /// When to look again without an event: a download that runs or is about
    /// to, a load reaching its startup budget, or an unschedulable pod reaching
    /// the surge's patience or the end of the scheduler's retry after a pod went.
    pub fn recheck_after(&self) -> Option<Duration> {
        let unplaced = self.unplaced.as_ref().and_then(|u| {
            let patience = (!u.waited_out()).then(|| u.patience - u.waited);
            let retry = self
                .pod_removed_ago
                .filter(|ago| *ago < SCHEDULER_RETRY)
                .map(|ago| SCHEDULER_RETRY - ago);
            match (patience, retry) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        });
        let others = self.recheck_after_io();
        match (unplaced, others) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn recheck_after_io(&self) -> Option<Duration> {
        let downloading = self.downloads.iter().any(|d| {
            matches!(
                d.state,
                DownloadState::Running { .. } | DownloadState::NotStarted
            )
        });
        match downloading {
            true => Some(
                self.logs
                    .recheck_after
                    .map_or(DOWNLOAD_RECHECK, |r| r.min(DOWNLOAD_RECHECK)),
            ),
            false => self.logs.recheck_after,
        }
    }
}

/// One download the spec needs, as far as it got.
#[derive(Debug, Clone, PartialEq)]
pub struct DownloadSeen {
    /// The Job's name.
    pub name: String,
    /// What it fetches ("Qwen/Qwen2.5-1.5B-Instruct@main").
    pub what: String,
    /// The spec field it comes from ("modelSource.huggingFace").
    pub field: String,
    /// The directory it fills.
    pub target: String,
    /// The Job as the cache holds it.
    pub job: Option<Job>,
    pub state: DownloadState,
}

/// How far one download got.
#[derive(Debug, Clone, PartialEq)]
pub enum DownloadState {
    /// No Job yet.
    NotStarted,
    /// The Job runs: how far its log says it got, or why its pod waits.
    Running {
        progress: Option<String>,
        waiting: Option<String>,
    },
    /// The files are on the volume.
    Complete,
    /// A pod of the Job failed (`final`: the Job gave up).
    Failed {
        failure: Failure,
        evidence: String,
        pod: Option<String>,
        is_final: bool,
    },
}

/// What the vLLM containers' logs said, read once per container instance.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogsSeen {
    /// Per pod name: why its vllm container did not start.
    pub diagnoses: BTreeMap<String, Diagnosis>,
    /// Per pod name: how far a load that overran its startup budget got.
    pub progress: BTreeMap<String, String>,
    /// What vLLM reported about itself, from a Ready pod of the current revision.
    pub engine: Option<EngineSeen>,
    /// When to look again without an event: a load reaching its startup budget.
    pub recheck_after: Option<Duration>,
}

/// The engine's settings and the revision (pod-template-hash) they were read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineSeen {
    pub revision: String,
    pub info: EngineInfo,
}

/// The model PVC as observed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Storage {
    #[default]
    Missing,
    /// Exists with this phase (Pending, Lost).
    NotBound(String),
    Bound,
    /// No claim: the model is the OCI image of `modelSource.image`.
    Image,
}

/// The Gateway of `spec.gatewayRef`, as far as the operator can see it.
#[derive(Debug, Clone, Default)]
pub enum GatewaySeen {
    /// No gatewayRef, or the Gateway API is not installed.
    #[default]
    NotLooked,
    Found(Box<CachedGateway>),
    Missing,
    /// The operator watches some namespaces and the Gateway is in another.
    OutsideWatchedNamespace {
        watched: Vec<String>,
    },
}
