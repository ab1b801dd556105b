//! The status step's derivation, pure: conditions and phase from what the
//! read step saw and the apply step did. Deterministic: the only time that
//! enters is `now`, and only as the transition time of a condition whose
//! status flipped.

pub mod autoscaling_ready;
pub mod conditions;
pub mod model_ready;
pub mod settle;
pub mod write;

use k8s_openapi::{
    api::apps::v1::Deployment, apimachinery::pkg::util::intstr::IntOrString, jiff::Timestamp,
};
use kube::{Resource, ResourceExt};
use vllmservice_api::{EngineStatus, Phase, VLLMServiceStatus, Valid, condition_types as ct};

use crate::{
    cache::placement::Capacity,
    diagnosis::{
        masking, vllm_log,
        workload::{self, Finding},
    },
    names, optional_apis,
    reconcile::{
        build::{
            rollout::{REASON_ANNOTATION, STRATEGY_ANNOTATION},
            scaledobject::scales_to_zero,
        },
        done::{Done, Outcome},
        gateway::{self, Resolution},
        seen::{EngineSeen, Seen, Storage},
        status::conditions::{Cond, Feature, Status, merge},
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
fn conflicts(vs: &Valid<'_>, done: &Done) -> Vec<Conflict> {
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

/// The status `vs` should have given what was seen and done.
pub fn derive(vs: &Valid<'_>, seen: &Seen, done: &Done, now: Timestamp) -> VLLMServiceStatus {
    let ns = vs.namespace().unwrap_or_default();
    let generation = vs.metadata.generation.unwrap_or_default();
    let desired_replicas = vs.spec.replicas;
    let deployment = done.deployment.live();
    let dep_status = deployment
        .and_then(|d| d.status.clone())
        .unwrap_or_default();
    let ready_replicas = dep_status.ready_replicas.unwrap_or(0);
    let updated_replicas = dep_status.updated_replicas.unwrap_or(0);
    let conflicts = conflicts(vs, done);
    let rollout = deployment.and_then(|d| rollout_state(d, updated_replicas));
    // Pods of this service that are stopping still hold their GPUs: a new pod
    // that waits for them is not blocked.
    let stopping = seen
        .pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    let findings: Vec<Finding> = workload::findings(deployment, &seen.pods, &seen.logs.diagnoses)
        .into_iter()
        .filter_map(|f| scheduling(f, seen.capacity.as_ref(), rollout, stopping))
        .collect();
    // A classified vLLM failure is also why the service does not serve.
    let engine_failure = findings
        .iter()
        .find(|f| vllm_log::REASONS.contains(&f.reason.as_str()));
    let annotation = |key: &str| {
        deployment
            .and_then(|d| d.metadata.annotations.as_ref())
            .and_then(|a| a.get(key))
            .cloned()
    };

    let deployment_ready = match (&done.deployment, deployment) {
        (Outcome::Foreign, _) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "ResourceConflict",
            conflicts[0].message(&ns),
        ),
        (_, None) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "DeploymentNotFound",
            "the Deployment has not been created yet",
        ),
        (_, Some(d)) => deployment_condition(d, desired_replicas),
    };
    let storage_ready = {
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
    };
    let model_ready = model_ready::condition(vs, &seen.downloads);
    let downloading = model_ready.as_ref().filter(|c| !c.is_true());
    let route = route_feature(vs, done);
    let route_ready = Cond::new(ct::ROUTE_READY, route.status, &route.reason, &route.message);
    let monitoring = monitoring_feature(vs, seen, done);
    let monitoring_ready = Cond::new(
        ct::MONITORING_READY,
        monitoring.status,
        &monitoring.reason,
        &monitoring.message,
    );
    let scaling = autoscaling_ready::feature(vs, seen, done);
    let autoscaling_ready = Cond::new(
        ct::AUTOSCALING_READY,
        scaling.status,
        &scaling.reason,
        &scaling.message,
    );

    // What blocks the rollout (Failed, Progressing=False) ...
    let mut blocking: Vec<(String, String)> = conflicts
        .iter()
        .map(|c| ("ResourceConflict".to_string(), c.message(&ns)))
        .collect();
    blocking.extend(
        findings
            .iter()
            .map(|f| (f.reason.clone(), f.message.clone())),
    );
    blocking.extend(done.foreign_jobs.iter().map(|name| {
        (
            "ResourceConflict".to_string(),
            format!(
                "Job {ns}/{name} exists and is not one of the operator's download Jobs; the \
                 operator leaves it alone and waits: delete or rename it"
            ),
        )
    }));
    if let Some(c) = downloading.filter(|c| c.reason != "Downloading") {
        blocking.push((c.reason.clone(), c.message.clone()));
    }
    // ... and, with it, what else is wrong (Degraded).
    let mut problems = blocking.clone();
    if monitoring.status == Status::False && !monitoring_conflict(done) {
        problems.push((monitoring.reason.clone(), monitoring.message.clone()));
    }
    // (A foreign ScaledObject is among the conflicts already.)
    if scaling.status == Status::False && !done.scaled_object.is_foreign() {
        problems.push((scaling.reason.clone(), scaling.message.clone()));
    }
    if done.pdb.is_foreign() {
        problems.push((
            "ResourceConflict".into(),
            format!(
                "PodDisruptionBudget {ns}/{} exists and is not controlled by this VLLMService; \
                 the operator leaves it alone: delete it, or set spec.disruptionBudget.enabled \
                 to false",
                names::child_name(vs)
            ),
        ));
    }
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

    let serving = deployment.map(|d| ready_replicas >= min_ready(d, desired_replicas));
    let available = if !storage_ready.is_true() {
        Cond::new(
            ct::AVAILABLE,
            Status::False,
            storage_ready.reason.clone(),
            storage_ready.message.clone(),
        )
    } else if let Some(c) = downloading.filter(|_| deployment.is_none()) {
        // No pods before the files are there.
        Cond::new(ct::AVAILABLE, Status::False, &c.reason, &c.message)
    } else if desired_replicas == 0 && deployment.is_some() {
        // Nothing answers requests at zero replicas.
        let message = if vs.spec.autoscaling.as_ref().is_some_and(scales_to_zero) {
            "scaled to zero by the autoscaler: no pod serves; the activation signal \
             (spec.autoscaling.activationQuery) brings it back"
        } else {
            "spec.replicas is 0: no pod serves"
        };
        Cond::new(ct::AVAILABLE, Status::False, "ScaledToZero", message)
    } else if serving != Some(true) {
        if deployment.is_none() {
            Cond::new(
                ct::AVAILABLE,
                Status::False,
                deployment_ready.reason.clone(),
                deployment_ready.message.clone(),
            )
        } else {
            let needed = deployment.map_or(1, |d| min_ready(d, desired_replicas));
            let counts = format!(
                "{ready_replicas}/{desired_replicas} replicas ready; at least {needed} must be \
                 ready to serve"
            );
            match engine_failure {
                Some(f) => Cond::new(
                    ct::AVAILABLE,
                    Status::False,
                    f.reason.clone(),
                    format!("{counts}; {}", f.message),
                ),
                None => {
                    // How far loads that overran their startup budget got, when their log says.
                    let progress: Vec<String> = seen
                        .logs
                        .progress
                        .iter()
                        .map(|(pod, step)| format!("pod {pod} is still starting: {step}"))
                        .collect();
                    let message = if progress.is_empty() {
                        counts
                    } else {
                        format!("{counts}; {}", progress.join("; "))
                    };
                    Cond::new(ct::AVAILABLE, Status::False, "ReplicasNotReady", message)
                }
            }
        }
    } else if !route_ready.is_true() {
        Cond::new(
            ct::AVAILABLE,
            Status::False,
            route_ready.reason.clone(),
            route_ready.message.clone(),
        )
    } else if let Some(c) = conflicts.iter().find(|c| c.kind == "Service") {
        Cond::new(
            ct::AVAILABLE,
            Status::False,
            "ResourceConflict",
            c.message(&ns),
        )
    } else {
        Cond::new(
            ct::AVAILABLE,
            Status::True,
            "Available",
            format!("{ready_replicas}/{desired_replicas} replicas ready"),
        )
    };
    let progressing = if !blocking.is_empty() {
        let reason = if blocking.iter().any(|(r, _)| r == ROLLOUT_BLOCKED) {
            ROLLOUT_BLOCKED
        } else {
            "Stalled"
        };
        Cond::new(
            ct::PROGRESSING,
            Status::False,
            reason,
            blocking
                .iter()
                .map(|(_, m)| m.as_str())
                .collect::<Vec<_>>()
                .join("; "),
        )
    } else if let Some(c) = downloading {
        let then = if deployment.is_some() {
            "the pods are replaced once it is done"
        } else {
            "the pods start once it is done"
        };
        Cond::new(
            ct::PROGRESSING,
            Status::True,
            "Downloading",
            format!("{}; {then}", c.message),
        )
    } else if deployment_ready.is_true() {
        Cond::new(
            ct::PROGRESSING,
            Status::False,
            "Complete",
            "the rollout is complete",
        )
    } else {
        let mut why = annotation(REASON_ANNOTATION)
            .map(|r| format!("; {r}"))
            .unwrap_or_default();
        if stopping > 0 {
            why.push_str(&format!(
                "; waiting for {stopping} stopping pod(s) to drain and free their resources"
            ));
        }
        Cond::new(
            ct::PROGRESSING,
            Status::True,
            "RolloutInProgress",
            format!("{updated_replicas}/{desired_replicas} pods updated{why}"),
        )
    };

    let phase = if available.is_true() {
        Phase::Running
    } else if !blocking.is_empty() {
        Phase::Failed
    } else {
        Phase::Pending
    };
    let message = if degraded.is_true() {
        &degraded.message
    } else {
        &available.message
    };
    // Messages may quote vLLM's log, which may echo its arguments and environment.
    let literals = secret_literals(vs);
    let mask = |c: Cond| Cond {
        message: masking::mask_secrets(&c.message, &literals).into_owned(),
        ..c
    };
    let message = masking::mask_secrets(message, &literals).into_owned();
    let mut next = vec![
        available.clone(),
        progressing,
        degraded.clone(),
        deployment_ready.clone(),
        storage_ready,
    ];
    next.extend(model_ready.clone());
    next.extend([route_ready, monitoring_ready, autoscaling_ready]);
    let next: Vec<Cond> = next.into_iter().map(mask).collect();
    let previous = vs
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let route_target = match &done.resolution {
        Resolution::Resolved(t) if done.route.live().is_some() => Some(t),
        _ => None,
    };
    VLLMServiceStatus {
        observed_generation: Some(generation),
        conditions: merge(previous, &next, generation, now)
            .into_iter()
            // Not kept as someone else's condition once the spec downloads nothing.
            .filter(|c| model_ready.is_some() || c.type_ != ct::MODEL_READY)
            .collect(),
        phase: Some(phase),
        replicas: Some(dep_status.replicas.unwrap_or(0)),
        ready_replicas: Some(ready_replicas),
        ready: Some(format!("{ready_replicas}/{desired_replicas}")),
        selector: Some(names::selector_string(vs)),
        deployment_name: deployment.map(|_| names::child_name(vs)),
        service_name: done.service.live().map(|_| names::child_name(vs)),
        http_route_name: route_target.map(|_| names::child_name(vs)),
        gateway_ref_name: route_target.map(|t| t.name.clone()),
        gateway_ref_namespace: route_target.map(|t| t.namespace.clone()),
        service_monitor_name: done.monitor.live().map(|_| names::child_name(vs)),
        disruption_budget_name: done.pdb.live().map(|_| names::child_name(vs)),
        disruptions_allowed: done
            .pdb
            .live()
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.disruptions_allowed),
        rollout_strategy: annotation(STRATEGY_ANNOTATION),
        message: Some(message),
        lora_adapters: served_adapters(vs, deployment, deployment_ready.is_true()),
        engine: match &seen.logs.engine {
            Some(e) => Some(engine_status(e)),
            // Read once per revision: carry what an earlier reconcile read.
            None => vs.status.as_ref().and_then(|s| s.engine.clone()),
        },
    }
}

/// The LoRA adapters the pods serve: the spec's once the Deployment runs the
/// current template on every pod, else what the status said before.
fn served_adapters(
    vs: &Valid<'_>,
    deployment: Option<&Deployment>,
    rolled_out: bool,
) -> Vec<String> {
    let current = deployment.is_some_and(|d| {
        let args = d
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| {
                p.containers
                    .iter()
                    .find(|c| c.name == crate::names::CONTAINER_NAME)
            })
            .and_then(|c| c.args.as_ref());
        args == Some(&crate::reconcile::build::vllm_args(vs))
    });
    if current && rolled_out {
        vs.spec
            .lora_adapters
            .iter()
            .map(|a| a.name.clone())
            .collect()
    } else {
        vs.status
            .as_ref()
            .map(|s| s.lora_adapters.clone())
            .unwrap_or_default()
    }
}

/// The spec's literal env values, which must never appear in status or events.
fn secret_literals<'a>(vs: &'a Valid<'_>) -> Vec<&'a str> {
    vs.spec
        .env
        .iter()
        .filter_map(|e| e.value.as_deref())
        .filter(|v| {
            // Short values ("1", "auto") are settings, not secrets, and would garble messages.
            v.len() >= 8
        })
        .collect()
}

fn engine_status(e: &EngineSeen) -> EngineStatus {
    let i = &e.info;
    EngineStatus {
        version: i.version.clone(),
        max_model_len: i.max_model_len,
        kv_cache_tokens: i.kv_cache_tokens,
        max_concurrency: i.max_concurrency,
        gpu_blocks: i.gpu_blocks,
        tensor_parallel_size: i.tensor_parallel_size,
        revision: Some(e.revision.clone()),
    }
}

/// The reason of a rollout whose new pod cannot be scheduled.
pub const ROLLOUT_BLOCKED: &str = "RolloutBlocked";

/// How a rollout under way replaces pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rollout {
    /// New pods start beside the old ones.
    Surging,
    /// Old pods stop first.
    InPlace,
}

/// Whether `d` is replacing pods of an older template, and how: pods of an
/// older template still run, or (replacing in place, when they may all be
/// gone already) a later revision has not yet become available.
fn rollout_state(d: &Deployment, updated: i32) -> Option<Rollout> {
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
fn scheduling(
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

fn monitoring_conflict(done: &Done) -> bool {
    done.monitor.is_foreign() || done.rule.is_foreign()
}

/// RouteReady: the resolution of the gatewayRef, then the Gateway controller's verdict.
fn route_feature(vs: &Valid<'_>, done: &Done) -> Feature {
    if let Some(f) = done.resolution.feature() {
        return f;
    }
    let Resolution::Resolved(target) = &done.resolution else {
        unreachable!("only a resolved gatewayRef has no feature of its own")
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
fn monitoring_feature(vs: &Valid<'_>, seen: &Seen, done: &Done) -> Feature {
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

#[cfg(test)]
mod tests {
    use super::{Finding, Rollout, derive, min_ready, rollout_state, scheduling};
    use crate::reconcile::{
        done::{Done, Outcome},
        gateway::Resolution,
        seen::{Seen, Storage},
    };
    use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
    use serde_json::json;
    use vllmservice_api::{Phase, VLLMService};

    /// Available, its reason and message, and the phase of a service whose
    /// Deployment has settled at `spec.replicas: 0`.
    fn at_zero(autoscaling: Option<serde_json::Value>) -> (String, String, String, Phase) {
        let mut spec = json!({"image": "i", "modelPath": "/m", "modelName": "m", "replicas": 0,
            "storage": {"pvcName": "p", "mountPath": "/data"}});
        if let Some(a) = autoscaling {
            spec["autoscaling"] = a;
        }
        let vs: VLLMService = serde_json::from_value(json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": spec}))
        .unwrap();
        let valid = vllmservice_api::validate(&vs).unwrap();
        let d = deployment(json!({"metadata": {"generation": 1},
            "spec": {"replicas": 0, "selector": {}, "template": {}},
            "status": {"observedGeneration": 1, "replicas": 0}}));
        let done = Done {
            resolution: Resolution::NotRequested,
            deployment: Outcome::Live(d),
            service: Outcome::Absent,
            route: Outcome::Absent,
            monitor: Outcome::Absent,
            rule: Outcome::Absent,
            pdb: Outcome::Absent,
            scaled_object: Outcome::Untouched,
            foreign_jobs: Vec::new(),
        };
        let mut seen = Seen {
            storage: Storage::Bound,
            ..Seen::default()
        };
        // KEDA is installed (AutoscalingReady is then Pending, not a problem).
        seen.apis.keda = true;
        let status = derive(&valid, &seen, &done, Timestamp::UNIX_EPOCH);
        let c = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .unwrap()
                .clone()
        };
        assert_eq!(c("DeploymentReady").status, "True", "{status:?}");
        assert_eq!(c("Degraded").status, "False", "{status:?}");
        let a = c("Available");
        (a.status, a.reason, a.message, status.phase.unwrap())
    }

    #[test]
    fn zero_replicas_are_not_available_but_pending() {
        let (status, reason, message, phase) = at_zero(None);
        assert_eq!(
            (status.as_str(), reason.as_str(), phase),
            ("False", "ScaledToZero", Phase::Pending)
        );
        assert!(message.contains("spec.replicas is 0"), "{message}");
        let (status, reason, message, phase) = at_zero(Some(json!({"minReplicas": 0,
            "maxReplicas": 2, "target": "1", "activationQuery": "sum(queue)"})));
        assert_eq!(
            (status.as_str(), reason.as_str(), phase),
            ("False", "ScaledToZero", Phase::Pending)
        );
        assert!(
            message.contains("autoscaler") && message.contains("activation"),
            "{message}"
        );
    }

    fn with_strategy(strategy: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({"spec": {"selector": {}, "template": {},
            "strategy": strategy}}))
        .unwrap()
    }

    #[test]
    fn min_ready_follows_the_rollout_strategy_with_kubernetes_rounding() {
        let default = with_strategy(json!({}));
        // 25 % of 1 and of 3 round down to 0 unavailable; of 4 to 1.
        assert_eq!(min_ready(&default, 1), 1);
        assert_eq!(min_ready(&default, 3), 3);
        assert_eq!(min_ready(&default, 4), 3);
        assert_eq!(min_ready(&default, 0), 0);
        let recreate = with_strategy(json!({"type": "Recreate"}));
        assert_eq!(
            min_ready(&recreate, 3),
            1,
            "never below 1 while any are desired"
        );
        let two = with_strategy(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 2, "maxSurge": "50%"}}));
        assert_eq!(min_ready(&two, 4), 2);
        let stuck = with_strategy(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 0}}));
        assert_eq!(
            min_ready(&stuck, 4),
            3,
            "both zero: the Deployment controller allows 1"
        );
    }

    fn deployment(v: serde_json::Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_rollout_is_under_way_while_old_pods_run_or_a_later_revision_is_not_available() {
        let surge =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}});
        let in_place =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}});
        let d = |revision: &str, strategy: &serde_json::Value, replicas: i32, reason: &str| {
            deployment(json!({
                "metadata": {"annotations": {"deployment.kubernetes.io/revision": revision}},
                "spec": {"selector": {}, "template": {}, "strategy": strategy},
                "status": {"replicas": replicas, "updatedReplicas": 1,
                    "conditions": [{"type": "Progressing", "status": "True", "reason": reason}]}}))
        };
        // The first pods of a new service: no rollout.
        assert_eq!(
            rollout_state(&d("1", &surge, 1, "NewReplicaSetCreated"), 1),
            None
        );
        assert_eq!(
            rollout_state(&d("2", &surge, 3, "ReplicaSetUpdated"), 1),
            Some(Rollout::Surging)
        );
        // In place, the old pod may be gone already.
        assert_eq!(
            rollout_state(&d("2", &in_place, 1, "ReplicaSetUpdated"), 1),
            Some(Rollout::InPlace)
        );
        assert_eq!(
            rollout_state(&d("2", &in_place, 1, "NewReplicaSetAvailable"), 1),
            None
        );
        let unschedulable = || Finding {
            reason: "Unschedulable".into(),
            message: "pod p cannot be scheduled: 0/4 nodes are available".into(),
        };
        let f = scheduling(unschedulable(), None, None, 0).unwrap();
        assert_eq!(f.reason, "Unschedulable");
        let f = scheduling(unschedulable(), None, Some(Rollout::Surging), 0).unwrap();
        assert_eq!(f.reason, "RolloutBlocked");
        assert!(f.message.contains("OneAtATime"), "{}", f.message);
        assert_eq!(
            scheduling(unschedulable(), None, Some(Rollout::Surging), 1),
            None,
            "a stopping pod of the service will make room"
        );
        let f = scheduling(unschedulable(), None, Some(Rollout::InPlace), 0).unwrap();
        assert!(
            !f.message.contains("OneAtATime") && f.message.contains("spec.resources"),
            "{}",
            f.message
        );
    }
}
