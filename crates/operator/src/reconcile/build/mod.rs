//! The build step, pure: a validated VLLMService (and what the read step saw)
//! in, the objects that should exist out. No client, no clock, no randomness:
//! the same input always builds the same objects, which is what makes "apply
//! only what differs" possible.

mod deployment;
pub mod download;
mod httproute;
mod pdb;
mod pod;
mod prometheusrule;
pub mod promql;
pub mod rollout;
pub mod scaledobject;
mod service;
mod servicemonitor;

use gateway_api::apis::standard::httproutes::HttpRoute;
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service, policy::v1::PodDisruptionBudget};
use vllmservice_api::Valid;

pub use deployment::{deployment, vllm_args};
pub use download::{Download, downloads};
pub use httproute::httproute;
pub use pdb::disruption_budget;
pub use prometheusrule::prometheusrule;
pub use scaledobject::{DEFAULT_PROMETHEUS_ADDRESS, scaledobject};

/// What the operator's own settings (its flags) put into the objects it builds.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// Where KEDA queries Prometheus unless the spec says otherwise.
    pub prometheus_address: String,
    /// How long a download Job may run before Kubernetes stops it
    /// (`activeDeadlineSeconds`): a stalled download does not hold its claim
    /// and keep the service waiting forever.
    pub download_deadline_seconds: i64,
    /// How long rollout strategy Auto waits for a surge pod the scheduler
    /// cannot place before it replaces the pods in place, one at a time.
    pub surge_unschedulable_seconds: u64,
}

/// A minute: the scheduler places a waiting pod within seconds of something
/// freeing up, and a rollout should not stall much longer than that.
pub const DEFAULT_SURGE_UNSCHEDULABLE_SECONDS: u64 = 60;

/// 12 hours: a 700 GB model at 200 Mbit/s takes about 8.
pub const DEFAULT_DOWNLOAD_DEADLINE_SECONDS: i64 = 12 * 3600;

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            prometheus_address: DEFAULT_PROMETHEUS_ADDRESS.to_string(),
            download_deadline_seconds: DEFAULT_DOWNLOAD_DEADLINE_SECONDS,
            surge_unschedulable_seconds: DEFAULT_SURGE_UNSCHEDULABLE_SECONDS,
        }
    }
}
pub use service::service;
pub use servicemonitor::{monitoring_labels, servicemonitor};

use crate::{
    kinds::{
        keda::ScaledObject,
        prometheus::{PrometheusRule, ServiceMonitor},
    },
    reconcile::{
        gateway::{self, Resolution},
        seen::{DownloadState, Seen},
    },
};

/// Whether a child of an optional kind should exist.
#[derive(Debug, Clone, PartialEq)]
pub enum Want<K> {
    /// Created or updated to this.
    Present(K),
    /// Deleted if it is ours.
    Absent,
    /// Its API is not installed: nothing to read, write or delete.
    Untouched,
}

impl<K> Want<K> {
    /// `object` if its API is `installed`, Absent when it is None.
    fn optional(installed: bool, object: Option<K>) -> Want<K> {
        match (installed, object) {
            (false, _) => Want::Untouched,
            (true, Some(o)) => Want::Present(o),
            (true, None) => Want::Absent,
        }
    }
}

/// Every child of one VLLMService as it should be.
#[derive(Debug, Clone)]
pub struct Desired {
    pub deployment: Deployment,
    /// Leave the Deployment as it is (or absent) until every download is
    /// complete: pods must not start on files that are not there yet.
    pub hold_deployment: bool,
    /// The download Jobs the spec needs.
    pub downloads: Vec<Download>,
    pub service: Service,
    /// Where `spec.gatewayRef` led; decides `route`.
    pub resolution: Resolution,
    pub route: Want<HttpRoute>,
    pub monitor: Want<ServiceMonitor>,
    pub rule: Want<PrometheusRule>,
    pub pdb: Want<PodDisruptionBudget>,
    pub scaled_object: Want<ScaledObject>,
}

/// The children `vs` should have, given what the read step saw and the
/// operator's `defaults`.
pub fn all(vs: &Valid<'_>, seen: &Seen, defaults: &Defaults) -> Desired {
    let resolution = gateway::resolve(vs, seen);
    let route = match (&resolution, seen.apis.gateway) {
        (_, false) => Want::Untouched,
        // Resolved implies a gatewayRef, hence a route; were it not so, no route.
        (Resolution::Resolved(_), true) => httproute(vs).map_or(Want::Absent, Want::Present),
        (_, true) => Want::Absent,
    };
    let hold_deployment = seen
        .downloads
        .iter()
        .any(|d| d.state != DownloadState::Complete);
    Desired {
        deployment: deployment(vs, seen),
        hold_deployment,
        downloads: downloads(vs, defaults),
        service: service(vs),
        resolution,
        route,
        monitor: Want::optional(seen.apis.prometheus, servicemonitor(vs)),
        rule: Want::optional(seen.apis.prometheus, prometheusrule(vs)),
        pdb: Want::optional(true, disruption_budget(vs)),
        scaled_object: Want::optional(
            seen.apis.keda,
            scaledobject(vs, &defaults.prometheus_address),
        ),
    }
}

/// Every object the operator can make for `vs`, in apply order, as JSON, as
/// if every optional API were installed and the Gateway resolved: what
/// `vllmservice-operator render` prints (with the operator's `defaults`).
pub fn objects(vs: &Valid<'_>, defaults: &Defaults) -> Vec<serde_json::Value> {
    fn json<T: serde::Serialize>(o: T) -> serde_json::Value {
        serde_json::to_value(o).expect("Kubernetes objects serialize to JSON")
    }
    let mut out: Vec<serde_json::Value> = downloads(vs, defaults)
        .into_iter()
        .map(|d| json(d.job))
        .collect();
    out.extend([json(deployment(vs, &Seen::default())), json(service(vs))]);
    out.extend(disruption_budget(vs).map(json));
    out.extend(httproute(vs).map(json));
    out.extend(servicemonitor(vs).map(json));
    out.extend(prometheusrule(vs).map(json));
    out.extend(scaledobject(vs, &defaults.prometheus_address).map(json));
    out
}
