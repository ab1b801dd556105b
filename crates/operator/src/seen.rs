//! What one reconcile saw of the world, gathered once by [`crate::read`]
//! before anything is built or written. Plain data: the builders and the
//! status derivation take it without doing any I/O themselves.

use std::{collections::BTreeMap, time::Duration};

use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
    policy::v1::PodDisruptionBudget,
};

use crate::{
    enginelog::{Diagnosis, EngineInfo},
    optional::Apis,
    placement::Capacity,
    prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor},
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
    /// Where the pods may run and what is free there; None when they ask for
    /// no extended resource or the operator cannot see the nodes.
    pub capacity: Option<Capacity>,
    /// The Gateway `spec.gatewayRef` points at.
    pub gateway: GatewaySeen,
    /// The model PVC.
    pub storage: Storage,
    /// The pods of this VLLMService (by its instance label).
    pub pods: Vec<Pod>,
    /// What their vLLM containers' logs say (`read::logs`).
    pub logs: LogsSeen,
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
}

/// The Gateway of `spec.gatewayRef`, as far as the operator can see it.
#[derive(Debug, Clone, Default)]
pub enum GatewaySeen {
    /// No gatewayRef, or the Gateway API is not installed.
    #[default]
    NotLooked,
    Found(Box<Gateway>),
    Missing,
    /// The operator watches one namespace and the Gateway is in another.
    OutsideWatchedNamespace {
        watched: String,
    },
}
