//! The conditions of the parts a VLLMService may ask for beside its pods,
//! pure: StorageReady (its claim), RouteReady (its Gateway) and
//! MonitoringReady (its ServiceMonitor and alerts), and the children that
//! someone else owns.

use kube::Resource;
use vllmservice_api::{Valid, condition_types as ct};

use super::conditions::{Cond, Feature, Status};
use crate::{
    names, optional_apis,
    reconcile::{
        done::{Done, Outcome},
        gateway,
        seen::{Seen, Storage},
    },
};

/// A child the apply step left alone because someone else owns that name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub kind: String,
    pub name: String,
}

impl Conflict {
    pub fn message(&self, namespace: &str) -> String {
        format!(
            "{} {namespace}/{} exists and is not controlled by this VLLMService; \
             the operator leaves it alone: delete or rename it, or rename the VLLMService",
            self.kind, self.name
        )
    }
}

/// The foreign children among `done`'s, in apply order.
pub fn conflicts(vs: &Valid<'_>, done: &Done) -> Vec<Conflict> {
    fn conflict<K: Resource<DynamicType = ()>>(o: &Outcome<K>, name: &str) -> Option<Conflict> {
        o.is_foreign().then(|| Conflict {
            kind: K::kind(&()).to_string(),
            name: name.to_string(),
        })
    }
    let name = names::child_name(vs);
    [
        conflict(&done.deployment, &name),
        conflict(&done.service, &name),
        conflict(&done.route, &name),
        conflict(&done.monitor, &name),
        conflict(&done.rule, &name),
        conflict(&done.scaled_object, &name),
    ]
    .into_iter()
    .flatten()
    .collect()
}

pub fn monitoring_conflict(done: &Done) -> bool {
    done.monitor.is_foreign() || done.rule.is_foreign()
}

/// RouteReady: the resolution of the gatewayRef, then the Gateway controller's verdict.
pub fn route_ready(vs: &Valid<'_>, done: &Done) -> Feature {
    let target = match done.resolution.target() {
        Ok(target) => target,
        Err(unresolved) => return unresolved,
    };
    match &done.route {
        Outcome::Live(live) => gateway::route_readiness(live, target),
        _ => Feature {
            status: Status::False,
            reason: "ResourceConflict".into(),
            message: format!(
                "HTTPRoute {} exists and is not controlled by this VLLMService",
                names::child_name(vs)
            ),
        },
    }
}

/// MonitoringReady from the spec and what the apply step did.
pub fn monitoring_ready(vs: &Valid<'_>, seen: &Seen, done: &Done) -> Feature {
    let name = names::child_name(vs);
    if !vs.spec.monitoring.enabled {
        return Feature::ready("MonitoringDisabled", "spec.monitoring.enabled is false");
    }
    if !seen.apis.prometheus {
        return Feature {
            status: Status::False,
            reason: "APINotInstalled".into(),
            message: optional_apis::not_installed(
                "Prometheus Operator",
                &optional_apis::PROMETHEUS_CRDS,
            ),
        };
    }
    let foreign: Vec<&str> = [
        done.monitor.is_foreign().then_some("ServiceMonitor"),
        done.rule.is_foreign().then_some("PrometheusRule"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !foreign.is_empty() {
        return Feature {
            status: Status::False,
            reason: "ResourceConflict".into(),
            message: format!(
                "{} {name} exists and is not controlled by this VLLMService",
                foreign.join(" and ")
            ),
        };
    }
    let alerts = if vs.spec.monitoring.alerts.enabled {
        format!(" and alerts in PrometheusRule {name}")
    } else {
        String::new()
    };
    Feature::ready(
        "Monitored",
        &format!("scraped through ServiceMonitor {name}{alerts}"),
    )
}

/// StorageReady: the claim the model is on, or the image that holds it.
pub fn storage_ready(vs: &Valid<'_>, seen: &Seen) -> Cond {
    let ns = kube::ResourceExt::namespace(&**vs).unwrap_or_default();
    let pvc = format!(
        "PersistentVolumeClaim {ns}/{}",
        vs.spec.storage.pvc_name.as_deref().unwrap_or_default()
    );
    match &seen.storage {
        Storage::Image => Cond::new(
            ct::STORAGE_READY,
            Status::True,
            "ImageVolume",
            format!(
                "the model is {}, mounted read-only at {}",
                names::volume_name(vs),
                vs.spec.storage.mount_path
            ),
        ),
        Storage::Missing => Cond::new(
            ct::STORAGE_READY,
            Status::False,
            "PVCNotFound",
            format!("{pvc} (spec.storage.pvcName) does not exist"),
        ),
        Storage::NotBound(phase) => Cond::new(
            ct::STORAGE_READY,
            Status::False,
            "PVCNotBound",
            format!("{pvc} is {phase}, not Bound to a volume"),
        ),
        Storage::Bound => Cond::new(
            ct::STORAGE_READY,
            Status::True,
            "PVCBound",
            format!("{pvc} is Bound"),
        ),
    }
}
