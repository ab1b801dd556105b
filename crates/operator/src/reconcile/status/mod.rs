//! The status step's derivation, pure: conditions and phase from what the
//! read step saw and the apply step did, one function per condition.
//! Deterministic: the only time that enters is `now`, and only as the
//! transition time of a condition whose status flipped. [`write`] sends it.

pub mod autoscaling_ready;
pub mod conditions;
pub mod features;
pub mod model_ready;
pub mod rollout;
pub mod settle;
pub mod write;

use k8s_openapi::{api::apps::v1::Deployment, jiff::Timestamp};
use kube::ResourceExt;
use vllmservice_api::{
    EngineStatus, Phase, RolloutStrategy, VLLMServiceStatus, Valid, condition_types as ct,
};

use crate::{
    diagnosis::{
        masking, vllm_log,
        workload::{self, Finding},
    },
    names,
    reconcile::{
        build::{
            rollout::{REASON_ANNOTATION, STRATEGY_ANNOTATION},
            scaledobject::scales_to_zero,
        },
        done::{Done, Outcome},
        gateway::Resolution,
        seen::{EngineSeen, SCHEDULER_RETRY, Seen},
    },
};
use conditions::{Cond, Feature, Status, merge};
use features::Conflict;
use rollout::{ROLLOUT_BLOCKED, min_ready};

/// What several conditions read of the workload: the live Deployment and its
/// counts, the children someone else owns, and why pods do not run.
struct Workload<'a> {
    namespace: String,
    deployment: Option<&'a Deployment>,
    desired: i32,
    ready: i32,
    updated: i32,
    conflicts: Vec<Conflict>,
    /// Why pods do not run, from the Deployment, the pods and their logs.
    findings: Vec<Finding>,
    /// Pods of this service that are stopping (they still hold their GPUs).
    stopping: usize,
}

impl<'a> Workload<'a> {
    fn of(vs: &Valid<'_>, seen: &Seen, done: &'a Done) -> Self {
        let deployment = done.deployment.live();
        let status = deployment
            .and_then(|d| d.status.clone())
            .unwrap_or_default();
        let updated = status.updated_replicas.unwrap_or(0);
        let rollout = deployment.and_then(|d| rollout::rollout_state(d, updated));
        // A new pod that waits for the resources of stopping pods is not
        // blocked, nor one that waits while an in-place rollout has more pods
        // than it wants (the Deployment controller stops an old one next), nor
        // one the scheduler has not tried again since a pod went.
        let making_room = (rollout == Some(rollout::Rollout::InPlace)
            && status.replicas.unwrap_or(0) > vs.spec.replicas)
            || seen
                .pod_removed_ago
                .is_some_and(|ago| ago < SCHEDULER_RETRY);
        let stopping = seen
            .pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count()
            + usize::from(making_room);
        // Auto's surge waits for an unschedulable pod, then replaces in place
        // (`build::rollout`): not blocked.
        let auto_waits = vs.spec.rollout.strategy == RolloutStrategy::Auto
            && rollout == Some(rollout::Rollout::Surging);
        let findings = workload::findings(deployment, &seen.pods, &seen.logs.diagnoses)
            .into_iter()
            .filter(|f| !(auto_waits && f.reason == "Unschedulable"))
            .filter_map(|f| rollout::scheduling(f, seen.capacity.as_ref(), rollout, stopping))
            .collect();
        Workload {
            namespace: vs.namespace().unwrap_or_default(),
            deployment,
            desired: vs.spec.replicas,
            ready: status.ready_replicas.unwrap_or(0),
            updated,
            conflicts: features::conflicts(vs, done),
            findings,
            stopping,
        }
    }

    /// An annotation the operator keeps on the Deployment.
    fn annotation(&self, key: &str) -> Option<String> {
        self.deployment
            .and_then(|d| d.metadata.annotations.as_ref())
            .and_then(|a| a.get(key))
            .cloned()
    }
}

/// The status `vs` should have given what was seen and done.
pub fn derive(vs: &Valid<'_>, seen: &Seen, done: &Done, now: Timestamp) -> VLLMServiceStatus {
    let generation = vs.metadata.generation.unwrap_or_default();
    let w = Workload::of(vs, seen, done);
    let deployment_ready = deployment_ready(&w, done);
    let storage_ready = features::storage_ready(vs, seen);
    let model_ready = model_ready::condition(vs, &seen.downloads);
    let downloading = model_ready.as_ref().filter(|c| !c.is_true());
    let route = features::route_ready(vs, done);
    let monitoring = features::monitoring_ready(vs, seen, done);
    let scaling = autoscaling_ready::feature(vs, seen, done);
    let blocking = blocking(&w, done, downloading);
    let degraded = degraded(&problems(vs, &w, &blocking, &monitoring, &scaling, done));
    let route_ready = route.condition(ct::ROUTE_READY);
    let available = available(
        vs,
        seen,
        &w,
        [&storage_ready, &deployment_ready, &route_ready],
        downloading,
    );
    let progressing = progressing(&w, &blocking, downloading, &deployment_ready);
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
    let literals = masking::secret_literals(vs);
    let mask = |c: Cond| Cond {
        message: masking::mask_secrets(&c.message, &literals).into_owned(),
        ..c
    };
    let message = masking::mask_secrets(message, &literals).into_owned();
    let rolled_out = deployment_ready.is_true();
    let mut next = vec![
        available,
        progressing,
        degraded,
        deployment_ready,
        storage_ready,
    ];
    next.extend(model_ready.clone());
    next.extend([
        route_ready,
        monitoring.condition(ct::MONITORING_READY),
        scaling.condition(ct::AUTOSCALING_READY),
    ]);
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
    let deployment = w.deployment;
    let replicas = deployment.and_then(|d| d.status.as_ref()?.replicas);
    VLLMServiceStatus {
        observed_generation: Some(generation),
        conditions: merge(previous, &next, generation, now)
            .into_iter()
            // Not kept as someone else's condition once the spec downloads nothing.
            .filter(|c| model_ready.is_some() || c.type_ != ct::MODEL_READY)
            .collect(),
        phase: Some(phase),
        replicas: Some(replicas.unwrap_or(0)),
        ready_replicas: Some(w.ready),
        ready: Some(format!("{}/{}", w.ready, w.desired)),
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
        rollout_strategy: w.annotation(STRATEGY_ANNOTATION),
        message: Some(message),
        lora_adapters: served_adapters(vs, deployment, rolled_out),
        engine: match &seen.logs.engine {
            Some(e) => Some(engine_status(e)),
            // Read once per revision: carry what an earlier reconcile read.
            None => vs.status.as_ref().and_then(|s| s.engine.clone()),
        },
    }
}

/// DeploymentReady: whether every desired pod runs the current spec and is ready.
fn deployment_ready(w: &Workload<'_>, done: &Done) -> Cond {
    match (&done.deployment, w.deployment) {
        (Outcome::Foreign, _) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "ResourceConflict",
            w.conflicts[0].message(&w.namespace),
        ),
        (_, None) => Cond::new(
            ct::DEPLOYMENT_READY,
            Status::False,
            "DeploymentNotFound",
            "the Deployment has not been created yet",
        ),
        (_, Some(d)) => rollout::deployment_condition(d, w.desired),
    }
}

/// What blocks the rollout (Failed, Progressing=False): foreign children,
/// why pods do not run, foreign Jobs in a download's way, a failed download.
fn blocking(w: &Workload<'_>, done: &Done, downloading: Option<&Cond>) -> Vec<(String, String)> {
    let ns = &w.namespace;
    let mut blocking: Vec<(String, String)> = w
        .conflicts
        .iter()
        .map(|c| ("ResourceConflict".to_string(), c.message(ns)))
        .collect();
    blocking.extend(
        w.findings
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
    blocking
}

/// What is wrong (Degraded): what blocks the rollout, and what fails beside it.
fn problems(
    vs: &Valid<'_>,
    w: &Workload<'_>,
    blocking: &[(String, String)],
    monitoring: &Feature,
    scaling: &Feature,
    done: &Done,
) -> Vec<(String, String)> {
    let mut problems = blocking.to_vec();
    if monitoring.status == Status::False && !features::monitoring_conflict(done) {
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
                "PodDisruptionBudget {}/{} exists and is not controlled by this VLLMService; \
                 the operator leaves it alone: delete it, or set spec.disruptionBudget.enabled \
                 to false",
                w.namespace,
                names::child_name(vs)
            ),
        ));
    }
    problems
}

/// Degraded: every problem, the first one's reason.
fn degraded(problems: &[(String, String)]) -> Cond {
    match problems.first() {
        Some((reason, _)) => Cond::new(ct::DEGRADED, Status::True, reason.clone(), join(problems)),
        None => Cond::new(
            ct::DEGRADED,
            Status::False,
            "AsExpected",
            "no failures observed",
        ),
    }
}

fn join(items: &[(String, String)]) -> String {
    items
        .iter()
        .map(|(_, m)| m.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Available: whether enough pods serve, and through the route when one is
/// asked for; otherwise the first reason they do not.
fn available(
    vs: &Valid<'_>,
    seen: &Seen,
    w: &Workload<'_>,
    [storage_ready, deployment_ready, route_ready]: [&Cond; 3],
    downloading: Option<&Cond>,
) -> Cond {
    let unavailable =
        |reason: &str, message: &str| Cond::new(ct::AVAILABLE, Status::False, reason, message);
    let (desired, ready) = (w.desired, w.ready);
    let serving = w.deployment.map(|d| ready >= min_ready(d, desired));
    if !storage_ready.is_true() {
        return unavailable(&storage_ready.reason, &storage_ready.message);
    }
    if let Some(c) = downloading.filter(|_| w.deployment.is_none()) {
        // No pods before the files are there.
        return unavailable(&c.reason, &c.message);
    }
    if desired == 0 && w.deployment.is_some() {
        // Nothing answers requests at zero replicas.
        let message = if vs.spec.autoscaling.as_ref().is_some_and(scales_to_zero) {
            "scaled to zero by the autoscaler: no pod serves; the activation signal \
             (spec.autoscaling.activationQuery) brings it back"
        } else {
            "spec.replicas is 0: no pod serves"
        };
        return unavailable("ScaledToZero", message);
    }
    if serving != Some(true) {
        let Some(d) = w.deployment else {
            return unavailable(&deployment_ready.reason, &deployment_ready.message);
        };
        let needed = min_ready(d, desired);
        let counts =
            format!("{ready}/{desired} replicas ready; at least {needed} must be ready to serve");
        // A classified vLLM failure is also why the service does not serve.
        let engine_failure = w
            .findings
            .iter()
            .find(|f| vllm_log::REASONS.contains(&f.reason.as_str()));
        if let Some(f) = engine_failure {
            return unavailable(&f.reason, &format!("{counts}; {}", f.message));
        }
        // How far loads that overran their startup budget got, when their log says.
        let progress: Vec<String> = seen
            .logs
            .progress
            .iter()
            .map(|(pod, step)| format!("pod {pod} is still starting: {step}"))
            .collect();
        let message = match progress.is_empty() {
            true => counts,
            false => format!("{counts}; {}", progress.join("; ")),
        };
        return unavailable("ReplicasNotReady", &message);
    }
    if !route_ready.is_true() {
        return unavailable(&route_ready.reason, &route_ready.message);
    }
    if let Some(c) = w.conflicts.iter().find(|c| c.kind == "Service") {
        return unavailable("ResourceConflict", &c.message(&w.namespace));
    }
    let message = format!("{ready}/{desired} replicas ready");
    Cond::new(ct::AVAILABLE, Status::True, "Available", message)
}

/// Progressing: blocked, downloading, rolling out, or complete.
fn progressing(
    w: &Workload<'_>,
    blocking: &[(String, String)],
    downloading: Option<&Cond>,
    deployment_ready: &Cond,
) -> Cond {
    let progressing =
        |status, reason: &str, message: &str| Cond::new(ct::PROGRESSING, status, reason, message);
    if !blocking.is_empty() {
        let blocked = blocking.iter().any(|(r, _)| r == ROLLOUT_BLOCKED);
        let reason = if blocked { ROLLOUT_BLOCKED } else { "Stalled" };
        return progressing(Status::False, reason, &join(blocking));
    }
    if let Some(c) = downloading {
        let then = match w.deployment {
            Some(_) => "the pods are replaced once it is done",
            None => "the pods start once it is done",
        };
        let message = format!("{}; {then}", c.message);
        return progressing(Status::True, "Downloading", &message);
    }
    if deployment_ready.is_true() {
        return progressing(Status::False, "Complete", "the rollout is complete");
    }
    let mut why = w
        .annotation(REASON_ANNOTATION)
        .map(|r| format!("; {r}"))
        .unwrap_or_default();
    if w.stopping > 0 {
        why.push_str(&format!(
            "; waiting for {} stopping pod(s) to drain and free their resources",
            w.stopping
        ));
    }
    let message = format!("{}/{} pods updated{why}", w.updated, w.desired);
    progressing(Status::True, "RolloutInProgress", &message)
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
mod tests;
