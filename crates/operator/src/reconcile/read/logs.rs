//! The read step's part for the vLLM containers' logs, through the API
//! server (`pods/log`): why a container failed, how far a slow load got, and
//! the engine's settings once it runs. I/O: log reads, at most one per
//! container instance and purpose (remembered in `cache::PodLogs`).

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod},
    jiff::Timestamp,
};
use kube::{Api, ResourceExt, api::LogParams};
use vllmservice_api::{VLLMService, Valid};

use crate::{
    cache::{LogOutcome, LogPurpose},
    diagnosis::vllm_log::{self, Ended, Facts},
    names,
    reconcile::{
        context::Context,
        seen::{EngineSeen, LogsSeen},
    },
};

/// The most a log read returns: the API server stops after this many bytes.
pub const LOG_LIMIT_BYTES: i64 = 64 * 1024;
/// Lines of a failed container's log tail that are read (the error is at its end).
pub const LOG_TAIL_LINES: i64 = 400;
/// A log read that takes longer is given up (and not repeated for that instance).
const LOG_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The label the Deployment controller puts on a ReplicaSet's pods.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// The read step's second half, after validation: what the vLLM containers'
/// logs say, through the API server (`pods/log`). A container's log is read
/// only when it terminated with an error, restarted, or has run past its
/// startup budget without becoming Ready, and then once per container
/// instance; a Ready pod of a revision not yet in `status.engine` is read once
/// for the engine's settings. Healthy pods cost nothing. What a read found is
/// remembered in `Caches::pod_logs`, so later reconciles reuse it.
pub async fn gather(vs: &Valid<'_>, pods: &[Pod], ctx: &Context, now: Timestamp) -> LogsSeen {
    let facts = facts_of(vs);
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut out = LogsSeen::default();
    let mut pods: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for pod in &pods {
        let (Some(uid), Some(name)) = (pod.metadata.uid.as_deref(), pod.metadata.name.as_deref())
        else {
            continue;
        };
        let Some(cs) = vllm_status(pod) else { continue };
        let Some(look) = what_to_read(cs, &facts, now) else {
            continue;
        };
        let (key, ended, previous) = match look {
            Look::Wait(after) => {
                out.recheck_after = Some(out.recheck_after.map_or(after, |a| a.min(after)));
                continue;
            }
            Look::Read {
                key,
                ended,
                previous,
            } => (key, ended, previous),
        };
        if matches!(&ended, Ended::Exited { reason: Some(r), .. } if r == "OOMKilled") {
            // The kubelet's verdict says it all; no read.
            if let Some(d) = vllm_log::diagnose("", &ended, &facts) {
                out.diagnoses.insert(name.to_string(), d);
            }
            continue;
        }
        let params = LogParams {
            previous,
            tail_lines: Some(LOG_TAIL_LINES),
            ..log_params()
        };
        let outcome = read_once(
            ctx,
            &api,
            (uid, name),
            LogPurpose::Diagnosis,
            &key,
            &params,
            |log| LogOutcome::Diagnosed {
                diagnosis: vllm_log::diagnose(log, &ended, &facts),
                progress: vllm_log::progress(log),
            },
        )
        .await;
        if let LogOutcome::Diagnosed {
            diagnosis,
            progress,
        } = outcome
        {
            match diagnosis {
                Some(d) => {
                    out.diagnoses.insert(name.to_string(), d);
                }
                None if matches!(ended, Ended::Running { .. }) => {
                    if let Some(p) = progress {
                        out.progress.insert(name.to_string(), p);
                    }
                }
                None => {}
            }
        }
    }
    out.engine = engine(vs, &pods, ctx, &api).await;
    out
}

/// What to do about one vllm container.
enum Look {
    /// Read the log of this instance (`key`), which ended as `ended`.
    Read {
        key: String,
        ended: Ended,
        previous: bool,
    },
    /// Nothing yet; look again after this long (a load reaching its budget).
    Wait(Duration),
}

/// Whether (and which instance of) a vllm container's log tells something:
/// None for a healthy or still-loading container.
fn what_to_read(cs: &ContainerStatus, facts: &Facts, now: Timestamp) -> Option<Look> {
    if cs.ready {
        return None;
    }
    let id = |container_id: &Option<String>, restarts: i32| {
        container_id
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| format!("restart-{restarts}"))
    };
    let ran = |t: &ContainerStateTerminated| match (&t.started_at, &t.finished_at) {
        (Some(s), Some(f)) => Some(f.0.as_second() - s.0.as_second()),
        _ => None,
    };
    let state = cs.state.as_ref();
    if let Some(t) = state.and_then(|s| s.terminated.as_ref())
        && (t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"))
    {
        return Some(Look::Read {
            key: id(&t.container_id, cs.restart_count),
            ended: Ended::Exited {
                code: t.exit_code,
                reason: t.reason.clone(),
                ran_seconds: ran(t),
            },
            previous: false,
        });
    }
    if let Some(t) = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref())
        && cs.restart_count > 0
    {
        return Some(Look::Read {
            key: id(&t.container_id, cs.restart_count - 1),
            ended: Ended::Exited {
                code: t.exit_code,
                reason: t.reason.clone(),
                ran_seconds: ran(t),
            },
            previous: true,
        });
    }
    let started = state?.running.as_ref()?.started_at.as_ref()?.0;
    let budget = facts.startup_budget()?;
    let running = now.as_second() - started.as_second();
    if running < budget {
        return Some(Look::Wait(Duration::from_secs(
            u64::try_from(budget - running).unwrap_or(0) + 1,
        )));
    }
    Some(Look::Read {
        key: format!("overdue-{}", id(&cs.container_id, cs.restart_count)),
        ended: Ended::Running {
            for_seconds: running,
        },
        previous: false,
    })
}

/// The engine's settings from a Ready pod of the current revision, unless the
/// status already has that revision's (read once per revision).
async fn engine(
    vs: &Valid<'_>,
    pods: &[&Pod],
    ctx: &Context,
    api: &Api<Pod>,
) -> Option<EngineSeen> {
    // The newest pod's template hash is the current revision: a rollout's new
    // ReplicaSet creates its pods after the old ones.
    let newest = pods.iter().max_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    })?;
    let revision = newest.labels().get(POD_TEMPLATE_HASH)?.clone();
    let known = vs
        .status
        .as_ref()
        .and_then(|s| s.engine.as_ref())
        .and_then(|e| e.revision.as_ref());
    if known == Some(&revision) {
        return None;
    }
    let (pod, cs) = pods.iter().find_map(|p| {
        let cs = vllm_status(p)?;
        let current = p.labels().get(POD_TEMPLATE_HASH) == Some(&revision);
        let running = cs.state.as_ref().is_some_and(|s| s.running.is_some());
        (current && cs.ready && running).then_some((*p, cs))
    })?;
    let uid = pod.metadata.uid.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    let key = cs
        .container_id
        .clone()
        .unwrap_or_else(|| format!("restart-{}", cs.restart_count));
    // The start of the log: the start-up lines come first.
    let outcome = read_once(
        ctx,
        api,
        (uid, name),
        LogPurpose::Engine,
        &key,
        &log_params(),
        |log| LogOutcome::Engine(vllm_log::engine_info(log)),
    )
    .await;
    let LogOutcome::Engine(info) = outcome else {
        return None;
    };
    (!info.is_empty()).then_some(EngineSeen { revision, info })
}

/// The vllm container's log, at most [`LOG_LIMIT_BYTES`] of it.
fn log_params() -> LogParams {
    LogParams {
        container: Some(names::CONTAINER_NAME.to_string()),
        limit_bytes: Some(LOG_LIMIT_BYTES),
        ..LogParams::default()
    }
}

/// What `judge` makes of the log of one container instance (`key`) of `pod`
/// (uid, name), for `purpose`: read at most once, remembered in
/// `cache::PodLogs`. It is remembered as failed before the read, so that a
/// failed or slow read is not repeated either.
pub async fn read_once(
    ctx: &Context,
    api: &Api<Pod>,
    (uid, pod): (&str, &str),
    purpose: LogPurpose,
    key: &str,
    params: &LogParams,
    judge: impl FnOnce(&str) -> LogOutcome,
) -> LogOutcome {
    let memory = &ctx.caches.pod_logs;
    if let Some(known) = memory.get(uid, purpose, key) {
        return known;
    }
    memory.put(uid, purpose, key, LogOutcome::Failed);
    let outcome = read_log(ctx, api, pod, params, purpose)
        .await
        .map_or(LogOutcome::Failed, |log| judge(&log));
    memory.put(uid, purpose, key, outcome.clone());
    outcome
}

/// One `pods/log` request, counted; None when it fails (logged without the log's text).
pub async fn read_log(
    ctx: &Context,
    api: &Api<Pod>,
    pod: &str,
    params: &LogParams,
    purpose: LogPurpose,
) -> Option<String> {
    ctx.metrics.record_log_read(purpose.as_str());
    let purpose = purpose.as_str();
    match tokio::time::timeout(LOG_READ_TIMEOUT, api.logs(pod, params)).await {
        Ok(Ok(log)) => Some(log),
        Ok(Err(e)) => {
            tracing::info!(pod, purpose, error = %e, "reading the vLLM log failed");
            None
        }
        Err(_) => {
            tracing::info!(pod, purpose, "reading the vLLM log timed out");
            None
        }
    }
}

fn vllm_status(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == names::CONTAINER_NAME)
}

/// The spec values a diagnosis names.
pub fn facts_of(vs: &VLLMService) -> Facts {
    let s = &vs.spec;
    let probe = &s.startup_probe;
    Facts {
        model_path: s.model_path.clone(),
        volume: names::volume_name(vs),
        mount_path: s.storage.mount_path.clone(),
        gpu_memory_utilization: s.engine_args.gpu_memory_utilization.clone(),
        shm_size: s
            .shm_size
            .as_ref()
            .map_or_else(|| names::SHM_DEFAULT_SIZE.to_string(), |q| q.0.clone()),
        memory_limit: s
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get("memory"))
            .map(|q| q.0.clone()),
        startup_probe: probe.is_enabled().then_some((
            probe.initial_delay_seconds,
            probe.period_seconds,
            probe.failure_threshold,
        )),
    }
}
