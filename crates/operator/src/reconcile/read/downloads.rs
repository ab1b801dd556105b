//! The read step's part for downloads: the Jobs of the downloads the spec
//! needs, from the cache, and through `pods/log` why a download pod failed
//! (read once per pod) or how far a running one got. I/O: log reads.

use k8s_openapi::api::{
    batch::v1::Job,
    core::v1::{ContainerStatus, Pod},
};
use kube::{Api, ResourceExt, api::LogParams};
use vllmservice_api::Valid;

use super::logs::{LOG_LIMIT_BYTES, LOG_TAIL_LINES, read_log, read_once};
use crate::{
    cache::{LogOutcome, LogPurpose},
    diagnosis::hf_log,
    error::Result,
    reconcile::{
        context::Context,
        downloads,
        seen::{DownloadSeen, DownloadState},
    },
};

/// Lines of a running download's log read for its progress (the bar's last redraw is near the end).
const PROGRESS_TAIL_LINES: i64 = 20;
/// The pod label the Job controller sets.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// The read step's part for the downloads `vs` needs: their Jobs from the
/// cache and, through `pods/log`, why a pod of one failed (read once per
/// pod) or how far a running one got. Also the download Jobs `vs` owns but
/// no longer needs.
pub async fn gather(vs: &Valid<'_>, ctx: &Context) -> Result<(Vec<DownloadSeen>, Vec<Job>)> {
    let ns = vs.namespace().unwrap_or_default();
    let wanted = downloads::wanted(vs);
    let stale = ctx
        .caches
        .jobs
        .store()?
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
        .filter(|j| downloads::is_download_job(&**j) && downloads::is_owned_by(&**j, vs))
        .filter(|j| !wanted.iter().any(|w| w.name == j.name_any()))
        .map(|j| (*j).clone())
        .collect();
    if wanted.is_empty() {
        return Ok((Vec::new(), stale));
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_store = ctx.caches.pods.store()?;
    let mut out = Vec::new();
    for w in wanted {
        let job = ctx.caches.jobs.get(&ns, &w.name)?;
        let state = match &job {
            None => DownloadState::NotStarted,
            Some(job) if job_condition(job, "Complete") => DownloadState::Complete,
            Some(job) => {
                let mut pods: Vec<Pod> = pod_store
                    .state()
                    .into_iter()
                    .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
                    .filter(|p| p.labels().get(JOB_NAME_LABEL) == Some(&w.name))
                    .map(|p| p.to_pod())
                    .collect();
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
        let params = LogParams {
            container: Some(downloads::CONTAINER_NAME.to_string()),
            limit_bytes: Some(LOG_LIMIT_BYTES),
            tail_lines: Some(LOG_TAIL_LINES),
            ..LogParams::default()
        };
        let outcome = read_once(
            ctx,
            api,
            (&uid, &name),
            LogPurpose::Download,
            "failed",
            &params,
            |log| LogOutcome::Download(hf_log::classify(log)),
        )
        .await;
        let classified = match outcome {
            LogOutcome::Download(c) => Some(c),
            _ => None,
        };
        let c = classified.unwrap_or_else(|| hf_log::Classified {
            failure: hf_log::Failure::DownloadError,
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
        let failed = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Failed"));
        let deadline = job.spec.as_ref().and_then(|s| s.active_deadline_seconds);
        let message = match (failed.and_then(|c| c.reason.as_deref()), deadline) {
            // The job controller stops the pod and says only "Job was active
            // longer than specified deadline": say which deadline and what to do.
            (Some("DeadlineExceeded"), Some(seconds)) => format!(
                "the download ran longer than its deadline of {seconds} s (the operator's \
                 --download-deadline-seconds); raise it, or delete Job {} to start again",
                job.name_any()
            ),
            _ => failed
                .and_then(|c| c.message.clone())
                .unwrap_or_else(|| "the Job failed".into()),
        };
        return DownloadState::Failed {
            failure: hf_log::Failure::DownloadError,
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
    if let Some(waiting) = why_waiting(pod) {
        return DownloadState::Running {
            progress: None,
            waiting: Some(waiting),
        };
    }
    let running = download_container(pod)
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some());
    let progress = match running {
        true => {
            let params = LogParams {
                container: Some(downloads::CONTAINER_NAME.to_string()),
                limit_bytes: Some(LOG_LIMIT_BYTES),
                tail_lines: Some(PROGRESS_TAIL_LINES),
                ..LogParams::default()
            };
            read_log(ctx, api, &pod.name_any(), &params, LogPurpose::Download)
                .await
                .and_then(|log| hf_log::progress(&log))
        }
        false => None,
    };
    DownloadState::Running {
        progress,
        waiting: None,
    }
}

/// Why a download pod does not run yet: not scheduled, or its container
/// waits for something other than its creation (an image pull, a volume).
fn why_waiting(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let mut conditions = status.conditions.iter().flatten();
    if let Some(c) = conditions.find(|c| c.type_ == "PodScheduled" && c.status == "False") {
        let why = c.message.as_deref().unwrap_or("no node fits");
        return Some(format!("pod {} is not scheduled: {why}", pod.name_any()));
    }
    let w = download_container(pod)?.state.as_ref()?.waiting.as_ref()?;
    let reason = w.reason.as_deref().filter(|r| *r != "ContainerCreating")?;
    Some(match &w.message {
        Some(m) => format!("pod {} waits: {reason}: {m}", pod.name_any()),
        None => format!("pod {} waits: {reason}", pod.name_any()),
    })
}

fn download_container(pod: &Pod) -> Option<&ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == downloads::CONTAINER_NAME)
}

/// The kubelet's account of how the download container ended.
fn terminated_message(pod: &Pod) -> Option<String> {
    let t = download_container(pod)?
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
