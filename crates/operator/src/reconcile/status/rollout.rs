//! How the Deployment's rollout stands, pure: how many ready pods it must
//! keep, whether it replaces pods and how, its DeploymentReady condition, and
//! what an Unschedulable pod means during a rollout (with the numbers of free
//! resources and what to change).

use k8s_openapi::{api::apps::v1::Deployment, apimachinery::pkg::util::intstr::IntOrString};
use vllmservice_api::condition_types as ct;

use super::conditions::{Cond, Status};
use crate::{cache::placement::Capacity, diagnosis::workload::Finding};

/// How many ready pods a Deployment must keep during a rollout: desired −
/// maxUnavailable of its strategy (Kubernetes' defaults and rounding), and at
/// least 1 while any are desired.
pub fn min_ready(d: &Deployment, desired: i32) -> i32 {
    if desired <= 0 {
        return 0;
    }
    let strategy = d.spec.as_ref().and_then(|s| s.strategy.as_ref());
    let max_unavailable = match strategy.and_then(|s| s.type_.as_deref()) {
        Some("Recreate") => desired,
        _ => {
            let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
            // Unset is Kubernetes' default of 25 %; percentages round up for surge, down for unavailable.
            let scaled = |v: Option<&IntOrString>, round_up: bool| match v {
                Some(IntOrString::Int(n)) => *n,
                other => {
                    let pct: i64 = match other {
                        Some(IntOrString::String(p)) => {
                            p.trim_end_matches('%').parse().unwrap_or(25)
                        }
                        _ => 25,
                    };
                    let x = i64::from(desired) * pct;
                    (if round_up { (x + 99) / 100 } else { x / 100 }) as i32
                }
            };
            let surge = scaled(rolling.and_then(|r| r.max_surge.as_ref()), true);
            let unavailable = scaled(rolling.and_then(|r| r.max_unavailable.as_ref()), false);
            // As the Deployment controller does: both zero would never progress.
            if surge == 0 && unavailable == 0 {
                1
            } else {
                unavailable
            }
        }
    };
    (desired - max_unavailable).max(1)
}

/// The reason of a rollout whose new pod cannot be scheduled.
pub const ROLLOUT_BLOCKED: &str = "RolloutBlocked";

/// How a rollout under way replaces pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollout {
    /// New pods start beside the old ones.
    Surging,
    /// Old pods stop first.
    InPlace,
}

/// Whether `d` is replacing pods of an older template, and how: pods of an
/// older template still run, or (replacing in place, when they may all be
/// gone already) a later revision has not yet become available.
pub fn rollout_state(d: &Deployment, updated: i32) -> Option<Rollout> {
    let status = d.status.as_ref()?;
    let revision = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("deployment.kubernetes.io/revision"))
        .and_then(|r| r.parse::<i64>().ok())
        .unwrap_or(0);
    let completed =
        status.conditions.iter().flatten().any(|c| {
            c.type_ == "Progressing" && c.reason.as_deref() == Some("NewReplicaSetAvailable")
        });
    let old_pods_run = status.replicas.unwrap_or(0) > updated;
    if !(old_pods_run || (revision > 1 && !completed)) {
        return None;
    }
    let surge = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.as_ref());
    Some(match surge {
        Some(IntOrString::Int(0)) => Rollout::InPlace,
        _ if d
            .spec
            .as_ref()
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.type_.as_deref())
            == Some("Recreate") =>
        {
            Rollout::InPlace
        }
        _ => Rollout::Surging,
    })
}

/// An Unschedulable finding with the numbers of free resources, and, during
/// a rollout, as a blocked rollout with what to change; none while `stopping`
/// pods of the service (draining, still holding their resources) will make room.
pub fn scheduling(
    f: Finding,
    capacity: Option<&Capacity>,
    rollout: Option<Rollout>,
    stopping: usize,
) -> Option<Finding> {
    if f.reason != "Unschedulable" {
        return Some(f);
    }
    if rollout.is_some() && stopping > 0 {
        return None;
    }
    // The scheduler's verdict predates the room made since (its retry comes
    // within seconds): it lacked a resource the operator counts, and a pod fits now.
    let stale = capacity.is_some_and(|c| {
        c.fits(1)
            && c.per_pod
                .keys()
                .any(|r| f.message.contains(&format!("Insufficient {r}")))
    });
    if rollout.is_some() && stale {
        return None;
    }
    let numbers = capacity
        .map(|c| format!(" ({})", c.describe()))
        .unwrap_or_default();
    let resource = capacity
        .map(|c| c.scarce().0.to_string())
        .filter(|r| !r.is_empty());
    let free_one = resource
        .as_deref()
        .map(|r| format!("add a node with a free {r} or free one"))
        .unwrap_or_else(|| "add or free a node the pods may run on".into());
    let advice = match rollout {
        None => {
            return Some(Finding {
                message: format!("{}{numbers}; {free_one}", f.message),
                ..f
            });
        }
        Some(Rollout::Surging) => format!(
            "{free_one}, or set spec.rollout.strategy to Auto or OneAtATime to replace pods in \
             place; the old pods keep serving meanwhile"
        ),
        Some(Rollout::InPlace) => format!(
            "{free_one}, or lower what a pod requests (spec.resources) or widen where it may run \
             (nodeSelector, tolerations, affinity)"
        ),
    };
    Some(Finding {
        reason: ROLLOUT_BLOCKED.into(),
        message: format!("the rollout is blocked: {}{numbers}; {advice}", f.message),
    })
}

/// DeploymentReady of a Deployment that exists.
pub fn deployment_condition(d: &Deployment, desired: i32) -> Cond {
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
            format!("{ready}/{desired} pods run the current spec and are ready"),
        );
    }
    Cond::new(
        ct::DEPLOYMENT_READY,
        Status::False,
        "RolloutInProgress",
        format!("{updated}/{desired} pods run the current spec; {ready} pods ready in all"),
    )
}
