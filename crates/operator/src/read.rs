//! The read step: everything one reconcile looks at, gathered once from the
//! controller's watch caches (no request to the API server). A cache that
//! holds no complete list yet is an error that names it, so a missing RBAC
//! rule is reported instead of a child being taken for absent. After
//! validation, [`logs`] adds what failing vLLM containers' logs say: the one
//! read step that sends requests (`pods/log`), bounded to one per container
//! instance.

use std::time::Duration;

use k8s_openapi::{
    api::{
        batch::v1::Job,
        core::v1::{ContainerStateTerminated, ContainerStatus, Pod},
    },
    jiff::Timestamp,
};
use kube::{Api, ResourceExt, api::LogParams};
use serde::de::DeserializeOwned;
use vllmservice_api::{VLLMService, Valid};

use crate::{
    build::{self, CONTAINER_NAME, SHM_DEFAULT_SIZE, download},
    compact::{Compact, Held},
    context::{Cache, Context, LogOutcome, LogPurpose, expanded},
    enginelog::{self, Ended, Facts},
    error::{Error, Result},
    hflog, names,
    route::Target,
    seen::{DownloadSeen, DownloadState, EngineSeen, GatewaySeen, LogsSeen, Seen, Storage},
};

/// What `vs` depends on and what exists of its children.
pub fn gather(vs: &VLLMService, ctx: &Context) -> Result<Seen> {
    let ns = vs.namespace().unwrap_or_default();
    let name = names::child_name(vs);
    let caches = &ctx.caches;
    let storage = match &vs.spec.storage.pvc_name {
        None => Storage::Image,
        Some(claim) => {
            let pvc = expanded(caches.pvcs.store()?, &ns, claim)?;
            match pvc.and_then(|p| p.status).and_then(|s| s.phase) {
                None => Storage::Missing,
                Some(phase) if phase == "Bound" => Storage::Bound,
                Some(phase) => Storage::NotBound(phase),
            }
        }
    };
    let pod_store = caches.pods.store()?;
    let pods = caches
        .pod_index
        .pods_of(&ns, &name)
        .iter()
        .filter_map(|p| expanded(pod_store, &ns, p).transpose())
        .collect::<Result<_, _>>()?;
    let gateway = match (&vs.spec.gateway_ref, &caches.gateways) {
        (Some(r), Some(gateways)) => {
            let target = Target::of(vs, r);
            match &ctx.namespace {
                Some(watched) if *watched != target.namespace => {
                    GatewaySeen::OutsideWatchedNamespace {
                        watched: watched.clone(),
                    }
                }
                _ => match expanded(gateways.store()?, &target.namespace, &target.name)? {
                    Some(gw) => GatewaySeen::Found(Box::new(gw)),
                    None => GatewaySeen::Missing,
                },
            }
        }
        _ => GatewaySeen::NotLooked,
    };
    Ok(Seen {
        apis: ctx.apis,
        deployment: expanded(caches.deployments.store()?, &ns, &name)?,
        service: expanded(caches.services.store()?, &ns, &name)?,
        route: child(caches.routes.as_ref(), &ns, &name)?,
        monitor: child(caches.monitors.as_ref(), &ns, &name)?,
        rule: child(caches.rules.as_ref(), &ns, &name)?,
        pdb: expanded(caches.pdbs.store()?, &ns, &name)?,
        scaled_object: child(caches.scaled_objects.as_ref(), &ns, &name)?,
        // Only a service that asks for autoscaling needs (the RBAC of) this cache.
        hpa: match &vs.spec.autoscaling {
            Some(_) => expanded(
                caches.hpas.store()?,
                &ns,
                &build::scaledobject::hpa_name(vs),
            )?,
            None => None,
        },
        capacity: caches.placement.as_ref().and_then(|p| p.capacity(&vs.spec)),
        gateway,
        storage,
        pods,
        logs: Default::default(),
        downloads: Vec::new(),
        stale_jobs: Vec::new(),
    })
}

/// Lines of a running download's log read for its progress (the bar's last redraw is near the end).
const PROGRESS_TAIL_LINES: i64 = 20;
/// The pod label the Job controller sets.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// The read step's part for the downloads `vs` needs: their Jobs from the
/// cache and, through `pods/log`, why a pod of one failed (read once per
/// pod) or how far a running one got. Also the download Jobs `vs` owns but
/// no longer needs.
pub async fn downloads(vs: &Valid<'_>, ctx: &Context) -> Result<(Vec<DownloadSeen>, Vec<Job>)> {
    let ns = vs.namespace().unwrap_or_default();
    let wanted = build::downloads(vs);
    let jobs = ctx.caches.jobs.store()?;
    let stale = jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
        .filter(|j| download::is_download_job(&**j) && download::is_owned_by(&**j, vs))
        .filter(|j| !wanted.iter().any(|w| w.name == j.name_any()))
        .map(|j| j.expand())
        .collect::<Result<_, _>>()?;
    if wanted.is_empty() {
        return Ok((Vec::new(), stale));
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_store = ctx.caches.pods.store()?;
    let mut out = Vec::new();
    for w in wanted {
        let job = expanded(jobs, &ns, &w.name)?;
        let state = match &job {
            None => DownloadState::NotStarted,
            Some(job) if job_condition(job, "Complete") => DownloadState::Complete,
            Some(job) => {
                let mut pods: Vec<Pod> = pod_store
                    .state()
                    .into_iter()
                    .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|p| p.labels().get(JOB_NAME_LABEL) == Some(&w.name))
                    .map(|p| p.expand())
                    .collect::<Result<_, _>>()?;
                // Newest first.
                pods.sort_by(|a, b| {
                    (&b.metadata.creation_timestamp, &b.metadata.name)
                        .cmp(&(&a.metadata.creation_timestamp, &a.metadata.name))
                });
                download_state(ctx, &api, job, &pods).await
            }
        };
        out.push(DownloadSeen {
            name: w.name,
            what: w.what,
            field: w.field,
            target: w.target,
            job,
            state,
        });
    }
    Ok((out, stale))
}

fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// How far a Job that has not completed got, from its pods (newest first).
async fn download_state(ctx: &Context, api: &Api<Pod>, job: &Job, pods: &[Pod]) -> DownloadState {
    let is_final = job_condition(job, "Failed");
    let failed = pods
        .iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"));
    if let Some(pod) = failed {
        let (uid, name) = (pod.metadata.uid.clone().unwrap_or_default(), pod.name_any());
        let memory = &ctx.caches.pod_logs;
        let classified = match memory.get(&uid, LogPurpose::Download, "failed") {
            Some(LogOutcome::Download(c)) => Some(c),
            Some(_) => None,
            None => {
                memory.put(&uid, LogPurpose::Download, "failed", LogOutcome::Failed);
                let params = LogParams {
                    container: Some(download::CONTAINER_NAME.to_string()),
                    limit_bytes: Some(LOG_LIMIT_BYTES),
                    tail_lines: Some(LOG_TAIL_LINES),
                    ..LogParams::default()
                };
                let c = read_log(ctx, api, &name, &params, LogPurpose::Download)
                    .await
                    .map(|log| hflog::classify(&log));
                if let Some(c) = &c {
                    memory.put(
                        &uid,
                        LogPurpose::Download,
                        "failed",
                        LogOutcome::Download(c.clone()),
                    );
                }
                c
            }
        };
        let c = classified.unwrap_or_else(|| hflog::Classified {
            failure: hflog::Failure::DownloadError,
            evidence: terminated_message(pod).unwrap_or_else(|| "its log could not be read".into()),
        });
        return DownloadState::Failed {
            failure: c.failure,
            evidence: c.evidence,
            pod: Some(name),
            is_final,
        };
    }
    if is_final {
        let message = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Failed"))
            .and_then(|c| c.message.clone())
            .unwrap_or_else(|| "the Job failed".into());
        return DownloadState::Failed {
            failure: hflog::Failure::DownloadError,
            evidence: message,
            pod: None,
            is_final,
        };
    }
    let Some(pod) = pods.first() else {
        return DownloadState::Running {
            progress: None,
            waiting: None,
        };
    };
    let unscheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        });
    if let Some(c) = unscheduled {
        let waiting = format!(
            "pod {} is not scheduled: {}",
            pod.name_any(),
            c.message.as_deref().unwrap_or("no node fits")
        );
        return DownloadState::Running {
            progress: None,
            waiting: Some(waiting),
        };
    }
    let cs = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == download::CONTAINER_NAME));
    let state = cs.and_then(|c| c.state.as_ref());
    if let Some(w) = state.and_then(|s| s.waiting.as_ref())
        && w.reason.as_deref() != Some("ContainerCreating")
    {
        let reason = w.reason.clone().unwrap_or_default();
        let waiting = match &w.message {
            Some(m) => format!("pod {} waits: {reason}: {m}", pod.name_any()),
            None => format!("pod {} waits: {reason}", pod.name_any()),
        };
        return DownloadState::Running {
            progress: None,
            waiting: Some(waiting),
        };
    }
    if state.is_some_and(|s| s.running.is_some()) {
        let params = LogParams {
            container: Some(download::CONTAINER_NAME.to_string()),
            limit_bytes: Some(LOG_LIMIT_BYTES),
            tail_lines: Some(PROGRESS_TAIL_LINES),
            ..LogParams::default()
        };
        let progress = read_log(ctx, api, &pod.name_any(), &params, LogPurpose::Download)
            .await
            .and_then(|log| hflog::progress(&log));
        return DownloadState::Running {
            progress,
            waiting: None,
        };
    }
    DownloadState::Running {
        progress: None,
        waiting: None,
    }
}

/// The kubelet's account of how the download container ended.
fn terminated_message(pod: &Pod) -> Option<String> {
    let t = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == download::CONTAINER_NAME)?
        .state
        .as_ref()?
        .terminated
        .as_ref()?;
    Some(format!(
        "the download container exited with code {}{}",
        t.exit_code,
        t.reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    ))
}

/// The object `name` from `cache`, whole (None when the kind's API is not installed).
fn child<K>(cache: Option<&Cache<Compact<K>>>, ns: &str, name: &str) -> Result<Option<K>>
where
    K: kube::Resource<DynamicType = ()> + DeserializeOwned + Held,
{
    match cache {
        Some(c) => Ok(expanded(c.store()?, ns, name)?),
        None => Ok(None),
    }
}

impl From<crate::context::NotSynced> for Error {
    fn from(e: crate::context::NotSynced) -> Self {
        Error::CacheNotSynced(e)
    }
}

/// The most a log read returns: the API server stops after this many bytes.
pub const LOG_LIMIT_BYTES: i64 = 64 * 1024;
/// Lines of a failed container's log tail that are read (the error is at its end).
const LOG_TAIL_LINES: i64 = 400;
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
pub async fn logs(vs: &Valid<'_>, seen: &Seen, ctx: &Context, now: Timestamp) -> LogsSeen {
    let facts = facts_of(vs);
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let memory = &ctx.caches.pod_logs;
    let mut out = LogsSeen::default();
    let mut pods: Vec<&Pod> = seen
        .pods
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
            if let Some(d) = enginelog::diagnose("", &ended, &facts) {
                out.diagnoses.insert(name.to_string(), d);
            }
            continue;
        }
        let outcome = match memory.get(uid, LogPurpose::Diagnosis, &key) {
            Some(o) => o,
            None => {
                // Remembered before the read: a failed or slow read is not repeated either.
                memory.put(uid, LogPurpose::Diagnosis, &key, LogOutcome::Failed);
                let params = LogParams {
                    container: Some(CONTAINER_NAME.to_string()),
                    previous,
                    limit_bytes: Some(LOG_LIMIT_BYTES),
                    tail_lines: Some(LOG_TAIL_LINES),
                    ..LogParams::default()
                };
                let outcome = match read_log(ctx, &api, name, &params, LogPurpose::Diagnosis).await
                {
                    Some(log) => LogOutcome::Diagnosed {
                        diagnosis: enginelog::diagnose(&log, &ended, &facts),
                        progress: enginelog::progress(&log),
                    },
                    None => LogOutcome::Failed,
                };
                memory.put(uid, LogPurpose::Diagnosis, &key, outcome.clone());
                outcome
            }
        };
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
    let memory = &ctx.caches.pod_logs;
    let info = match memory.get(uid, LogPurpose::Engine, &key) {
        Some(LogOutcome::Engine(info)) => info,
        Some(_) => return None,
        None => {
            memory.put(uid, LogPurpose::Engine, &key, LogOutcome::Failed);
            // The start of the log: the start-up lines come first.
            let params = LogParams {
                container: Some(CONTAINER_NAME.to_string()),
                limit_bytes: Some(LOG_LIMIT_BYTES),
                ..LogParams::default()
            };
            let log = read_log(ctx, api, name, &params, LogPurpose::Engine).await?;
            let info = enginelog::engine_info(&log);
            memory.put(
                uid,
                LogPurpose::Engine,
                &key,
                LogOutcome::Engine(info.clone()),
            );
            info
        }
    };
    (!info.is_empty()).then_some(EngineSeen { revision, info })
}

/// One `pods/log` request, counted; None when it fails (logged without the log's text).
async fn read_log(
    ctx: &Context,
    api: &Api<Pod>,
    pod: &str,
    params: &LogParams,
    purpose: LogPurpose,
) -> Option<String> {
    ctx.metrics.record_log_read(purpose.as_str());
    match tokio::time::timeout(LOG_READ_TIMEOUT, api.logs(pod, params)).await {
        Ok(Ok(log)) => Some(log),
        Ok(Err(e)) => {
            tracing::info!(pod, purpose = purpose.as_str(), error = %e, "reading the vLLM log failed");
            None
        }
        Err(_) => {
            tracing::info!(
                pod,
                purpose = purpose.as_str(),
                "reading the vLLM log timed out"
            );
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
        .find(|c| c.name == CONTAINER_NAME)
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
            .map_or_else(|| SHM_DEFAULT_SIZE.to_string(), |q| q.0.clone()),
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
