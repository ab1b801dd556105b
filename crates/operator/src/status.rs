//! Status as a pure function of what the reconcile observed. Deterministic:
//! the only time that enters is `now`, and only as the transition time of a
//! condition whose status flipped.

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use vllmservice_api::{Phase, VLLMService, VLLMServiceStatus, condition_types as ct};

use crate::{
    conditions::{Cond, Status, merge},
    diagnose::Finding,
    names,
};

/// The model PVC as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    Missing,
    /// Exists with this phase (Pending, Lost).
    NotBound(String),
    Bound,
}

/// A child the reconcile could not write because someone else owns that name.
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

/// The state of an optional feature (HTTPRoute, ServiceMonitor): its condition, ready to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Feature {
    pub status: Status,
    pub reason: String,
    pub message: String,
}

impl Feature {
    pub fn ready(reason: &str, message: &str) -> Self {
        Feature {
            status: Status::True,
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// The names status reports once an HTTPRoute is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteNames {
    pub route: String,
    pub gateway_name: String,
    pub gateway_namespace: String,
}

/// Everything the status is derived from.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    pub deployment: Option<&'a Deployment>,
    pub storage: Storage,
    pub conflicts: Vec<Conflict>,
    pub findings: Vec<Finding>,
    pub route: Feature,
    pub route_names: Option<RouteNames>,
    pub monitoring: Feature,
    pub service_monitor_name: Option<String>,
}

/// The status `vs` should have given what was observed.
pub fn desired(vs: &VLLMService, obs: &Observed<'_>, now: Timestamp) -> VLLMServiceStatus {
    let ns = vs.metadata.namespace.clone().unwrap_or_default();
    let generation = vs.metadata.generation.unwrap_or_default();
    let desired_replicas = vs.spec.replicas;
    let dep_status = obs
        .deployment
        .and_then(|d| d.status.clone())
        .unwrap_or_default();
    let ready_replicas = dep_status.ready_replicas.unwrap_or(0);
    let deployment_conflict = obs.conflicts.iter().find(|c| c.kind == "Deployment");

    let deployment_ready = match (deployment_conflict, obs.deployment) {
        (Some(c), _) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "ResourceConflict",
            c.message(&ns),
        ),
        (None, None) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "DeploymentNotFound",
            "the Deployment has not been created yet",
        ),
        (None, Some(d)) => deployment_condition(d, desired_replicas),
    };
    let storage_ready = {
        let pvc = format!("PersistentVolumeClaim {ns}/{}", vs.spec.storage.pvc_name);
        match &obs.storage {
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
    };
    let route_ready = Cond::new(
        ct::ROUTE_READY,
        obs.route.status,
        &obs.route.reason,
        &obs.route.message,
    );
    let monitoring_ready = Cond::new(
        ct::MONITORING_READY,
        obs.monitoring.status,
        &obs.monitoring.reason,
        &obs.monitoring.message,
    );

    let mut problems: Vec<(String, String)> = obs
        .conflicts
        .iter()
        .map(|c| ("ResourceConflict".to_string(), c.message(&ns)))
        .collect();
    problems.extend(
        obs.findings
            .iter()
            .map(|f| (f.reason.clone(), f.message.clone())),
    );
    let degraded = match problems.first() {
        Some((reason, _)) => Cond::new(
            ct::DEGRADED,
            Status::True,
            reason.clone(),
            problems
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        None => Cond::new(
            ct::DEGRADED,
            Status::False,
            "AsExpected",
            "no failures observed",
        ),
    };

    // Ordered by cause: without storage the pods cannot start, so that is said first.
    let parts = [
        &storage_ready,
        &deployment_ready,
        &route_ready,
        &monitoring_ready,
    ];
    let available = match parts.iter().find(|c| !c.is_true()) {
        None if obs.conflicts.is_empty() => Cond::new(
            ct::AVAILABLE,
            Status::True,
            "Available",
            format!("{ready_replicas}/{desired_replicas} replicas ready"),
        ),
        None => Cond::new(
            ct::AVAILABLE,
            Status::False,
            "ResourceConflict",
            degraded.message.clone(),
        ),
        Some(blocking) => Cond::new(
            ct::AVAILABLE,
            Status::False,
            blocking.reason.clone(),
            blocking.message.clone(),
        ),
    };
    let progressing = if degraded.is_true() {
        Cond::new(
            ct::PROGRESSING,
            Status::False,
            "Stalled",
            degraded.message.clone(),
        )
    } else if deployment_ready.is_true() {
        Cond::new(
            ct::PROGRESSING,
            Status::False,
            "Complete",
            "the rollout is complete",
        )
    } else {
        Cond::new(
            ct::PROGRESSING,
            Status::True,
            "RollingOut",
            deployment_ready.message.clone(),
        )
    };

    let phase = if available.is_true() {
        Phase::Running
    } else if degraded.is_true() {
        Phase::Failed
    } else {
        Phase::Pending
    };
    let message = if degraded.is_true() {
        &degraded.message
    } else {
        &available.message
    };
    let next = [
        available.clone(),
        progressing,
        degraded.clone(),
        deployment_ready,
        storage_ready,
        route_ready,
        monitoring_ready,
    ];
    let previous = vs
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    VLLMServiceStatus {
        observed_generation: Some(generation),
        conditions: merge(previous, &next, generation, now),
        phase: Some(phase),
        replicas: Some(dep_status.replicas.unwrap_or(0)),
        ready_replicas: Some(ready_replicas),
        ready: Some(format!("{ready_replicas}/{desired_replicas}")),
        selector: Some(names::selector_string(vs)),
        deployment_name: deployment_conflict.is_none().then(|| names::child_name(vs)),
        service_name: (!obs.conflicts.iter().any(|c| c.kind == "Service"))
            .then(|| names::child_name(vs)),
        http_route_name: obs.route_names.as_ref().map(|r| r.route.clone()),
        gateway_ref_name: obs.route_names.as_ref().map(|r| r.gateway_name.clone()),
        gateway_ref_namespace: obs
            .route_names
            .as_ref()
            .map(|r| r.gateway_namespace.clone()),
        service_monitor_name: obs.service_monitor_name.clone(),
        message: Some(message.clone()),
    }
}

fn deployment_condition(d: &Deployment, desired: i32) -> Cond {
    let generation = d.metadata.generation.unwrap_or_default();
    let s = d.status.clone().unwrap_or_default();
    let ready = s.ready_replicas.unwrap_or(0);
    let updated = s.updated_replicas.unwrap_or(0);
    let available = s.available_replicas.unwrap_or(0);
    let total = s.replicas.unwrap_or(0);
    if s.observed_generation.unwrap_or(0) < generation {
        return Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "RolloutPending",
            "the Deployment controller has not yet seen the latest Deployment spec",
        );
    }
    if updated >= desired && ready >= desired && available >= desired && total <= desired {
        let reason = if desired == 0 {
            "ScaledToZero"
        } else {
            "ReplicasReady"
        };
        return Cond::new(
            ct::DEPLOYMENT_READY,
            Status::True,
            reason,
            format!("{ready}/{desired} replicas ready"),
        );
    }
    Cond::new(
        ct::DEPLOYMENT_READY,
        Status::False,
        "ReplicasNotReady",
        format!("{ready}/{desired} replicas ready, {updated} updated to the latest spec"),
    )
}

/// The status of an object whose spec the operator cannot use (it bypassed
/// API-server validation): Failed, with the rule it breaks. Other conditions keep
/// their last values.
pub fn invalid(
    previous: Option<&VLLMServiceStatus>,
    generation: i64,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> VLLMServiceStatus {
    let next = [
        Cond::new(ct::AVAILABLE, Status::False, reason, message),
        Cond::new(ct::DEGRADED, Status::True, reason, message),
        Cond::new(
            ct::PROGRESSING,
            Status::False,
            reason,
            "waiting for a valid spec",
        ),
    ];
    let prev = previous.cloned().unwrap_or_default();
    VLLMServiceStatus {
        observed_generation: Some(generation),
        conditions: merge(&prev.conditions, &next, generation, now),
        phase: Some(Phase::Failed),
        message: Some(message.to_string()),
        ..prev
    }
}
