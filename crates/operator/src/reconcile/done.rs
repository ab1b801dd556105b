//! What the apply step did to each child: plain data, read by the status
//! derivation.
//! Pure data.

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service, policy::v1::PodDisruptionBudget};

use crate::{
    kinds::{
        keda::ScaledObject,
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    reconcile::gateway::Resolution,
};

/// What the apply step left of one child.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Outcome<K> {
    /// Ours, as it is now (created, updated or unchanged).
    Live(K),
    /// A same-named object someone else controls; not touched.
    Foreign,
    /// Not wanted, and none of ours exists (any more).
    #[default]
    Absent,
    /// Its API is not installed.
    Untouched,
    /// An admission webhook refused it (KEDA's, e.g. because an HPA of someone
    /// else already scales the VLLMService); its message.
    Refused(String),
}

impl<K> Outcome<K> {
    pub fn live(&self) -> Option<&K> {
        match self {
            Outcome::Live(k) => Some(k),
            _ => None,
        }
    }

    pub fn is_foreign(&self) -> bool {
        matches!(self, Outcome::Foreign)
    }
}

/// What the apply step did to every child.
#[derive(Debug, Clone, Default)]
pub struct Done {
    /// Where `spec.gatewayRef` led (decided by the build step).
    pub resolution: Resolution,
    pub deployment: Outcome<Deployment>,
    pub service: Outcome<Service>,
    pub route: Outcome<HttpRoute>,
    pub monitor: Outcome<ServiceMonitor>,
    pub rule: Outcome<PrometheusRule>,
    pub pdb: Outcome<PodDisruptionBudget>,
    pub scaled_object: Outcome<ScaledObject>,
    /// Jobs with a download Job's name that are not the operator's: left alone.
    pub foreign_jobs: Vec<String>,
}
