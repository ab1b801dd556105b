//! How the Deployment replaces its pods, decided before each rollout: the
//! user's strategy, or for Auto a surge when a new pod fits beside the old
//! ones (free GPUs on the nodes the pods may use, when the operator counts
//! them) and one pod at a time when it does not. Pure: the decision reads what
//! the read step saw (capacity, unschedulable pods) and what the live
//! Deployment records of the last decision.
//!
//! The decision is made only when the pod template changes (a rollout
//! starts); while the template stays the same the live Deployment's
//! recorded decision is kept, so free GPUs coming and going cause no writes.
//! One exception: a surge whose new pod the scheduler has refused for
//! `--surge-unschedulable-seconds` turns into one pod at a time (without GPU
//! accounting, the default, that is how Auto learns there is no room).

use k8s_openapi::{
    api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment},
    apimachinery::pkg::util::intstr::IntOrString,
};
use vllmservice_api::{RolloutStrategy, Valid};

use crate::reconcile::seen::Seen;

/// Hash of the pod template the operator last applied (a rollout starts when it changes).
pub const TEMPLATE_HASH_ANNOTATION: &str = "aiinfra.example.com/template-hash";
/// The strategy the operator chose for the Deployment's current template.
pub const STRATEGY_ANNOTATION: &str = "aiinfra.example.com/rollout-strategy";
/// Why it chose it, when Auto replaces in place (shown in status during the rollout).
pub const REASON_ANNOTATION: &str = "aiinfra.example.com/rollout-reason";

/// How the pods are replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replace {
    /// New pods first: up to `max_surge` extra, at most `max_unavailable` missing.
    Surge {
        max_surge: i32,
        max_unavailable: i32,
    },
    /// Stop one old pod, then start its replacement.
    OneAtATime,
    /// Stop all, then start all.
    Recreate,
}

impl Replace {
    pub fn name(&self) -> &'static str {
        match self {
            Replace::Surge { .. } => "Surge",
            Replace::OneAtATime => "OneAtATime",
            Replace::Recreate => "Recreate",
        }
    }

    /// The Deployment strategy that does it.
    pub fn strategy(&self) -> DeploymentStrategy {
        let rolling = |surge: i32, unavailable: i32| DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::Int(surge)),
                max_unavailable: Some(IntOrString::Int(unavailable)),
            }),
        };
        match self {
            Replace::Surge {
                max_surge,
                max_unavailable,
            } => rolling(*max_surge, *max_unavailable),
            Replace::OneAtATime => rolling(0, 1),
            Replace::Recreate => DeploymentStrategy {
                type_: Some("Recreate".into()),
                rolling_update: None,
            },
        }
    }
}

/// The decision for one Deployment template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub replace: Replace,
    /// Why Auto did not surge, said in status while the rollout runs.
    pub reason: Option<String>,
}

/// Auto's surge: one new pod at a time, none missing.
const AUTO_SURGE: Replace = Replace::Surge {
    max_surge: 1,
    max_unavailable: 0,
};

/// The plan for the Deployment of `vs` whose pod template hashes to `template_hash`.
pub fn plan(vs: &Valid<'_>, seen: &Seen, template_hash: &str) -> Plan {
    let r = &vs.spec.rollout;
    let fixed = |replace| Plan {
        replace,
        reason: None,
    };
    match r.strategy {
        RolloutStrategy::Surge => fixed(Replace::Surge {
            max_surge: r.max_surge,
            max_unavailable: r.max_unavailable,
        }),
        RolloutStrategy::OneAtATime => fixed(Replace::OneAtATime),
        RolloutStrategy::Recreate => fixed(Replace::Recreate),
        RolloutStrategy::Auto => auto(vs, seen, template_hash),
    }
}

fn auto(vs: &Valid<'_>, seen: &Seen, template_hash: &str) -> Plan {
    let surge = Plan {
        replace: AUTO_SURGE,
        reason: None,
    };
    let Some(live) = &seen.deployment else {
        // The first pods: nothing to replace.
        return surge;
    };
    let outage = if vs.spec.replicas <= 1 {
        "; with 1 replica the service is unavailable until the new pod is ready"
    } else {
        ""
    };
    let in_place = |why: String| Plan {
        replace: Replace::OneAtATime,
        reason: Some(format!(
            "{why}: replacing in place, one pod at a time{outage}"
        )),
    };
    if let Some(kept) = recorded(live, template_hash) {
        // Without a count of free GPUs (or when the count was wrong) the surge
        // is tried: a surge pod the scheduler keeps refusing means there is no
        // room beside the old pods.
        return match (&kept.replace, &seen.unplaced) {
            (Replace::Surge { .. }, Some(u)) if surging(live) && u.waited_out() => {
                in_place(format!(
                    "surge pod {} unschedulable for {} s ({})",
                    u.pod,
                    u.waited.as_secs(),
                    u.message
                ))
            }
            _ => kept,
        };
    }
    match &seen.capacity {
        Some(c) if !c.fits(1) => {
            let (resource, _, _) = c.scarce();
            in_place(format!(
                "no free {resource} for a surge pod ({})",
                c.describe()
            ))
        }
        _ => surge,
    }
}

/// The Deployment has more pods than it wants: a surge is under way (not a
/// scale-up, whose new pods replace nothing).
fn surging(live: &Deployment) -> bool {
    let want = live.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let have = live.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    have > want
}

/// The plan recorded on `live` when it was made for the same template.
fn recorded(live: &Deployment, template_hash: &str) -> Option<Plan> {
    let a = live.metadata.annotations.as_ref()?;
    if a.get(TEMPLATE_HASH_ANNOTATION).map(String::as_str) != Some(template_hash) {
        return None;
    }
    let replace = match a.get(STRATEGY_ANNOTATION)?.as_str() {
        "Surge" => AUTO_SURGE,
        "OneAtATime" => Replace::OneAtATime,
        _ => return None,
    };
    Some(Plan {
        replace,
        reason: a.get(REASON_ANNOTATION).cloned(),
    })
}
