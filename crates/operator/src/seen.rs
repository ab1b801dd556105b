//! What one reconcile saw of the world, gathered once by [`crate::read`]
//! before anything is built or written. Plain data: the builders and the
//! status derivation take it without doing any I/O themselves.

use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service},
    policy::v1::PodDisruptionBudget,
};

use crate::{
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
