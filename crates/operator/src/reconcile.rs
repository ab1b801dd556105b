//! One reconcile of one VLLMService, as its pipeline: read → validate →
//! build → apply → status.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;
use kube::{
    Api, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::{controller::Action, reflector::ObjectRef},
};
use serde_json::json;
use vllmservice_api::{VLLMService, VLLMServiceStatus};

use crate::{
    apply::{self, FIELD_MANAGER},
    build,
    compact::{Compact, Unparsable},
    context::Context,
    cputime::ThreadCpu,
    error::{Error, Result},
    events, lean, read,
    route::Resolution,
    seen::DownloadState,
    settle, status,
};

pub async fn reconcile(obj: &Compact<VLLMService>, ctx: &Context) -> Result<Action> {
    let parsed = obj.expand();
    let vs = match &parsed {
        Ok(vs) => ctx.latest(vs),
        Err(unparsable) => {
            report_unreadable(obj.meta(), unparsable, ctx).await?;
            return Ok(Action::await_change());
        }
    };
    if vs.metadata.deletion_timestamp.is_some() {
        // Children go with their owner through garbage collection.
        return Ok(Action::await_change());
    }
    let mut seen = read::gather(&vs, ctx)?;
    let started = ThreadCpu::now();
    let validated = vllmservice_api::validate(&vs);
    let mut compute = started.elapsed();
    let spec = match validated {
        Ok(spec) => spec,
        Err(invalid) => return write_invalid(ctx, &vs, &invalid.to_string()).await,
    };
    seen.logs = read::logs(&spec, &seen, ctx, Timestamp::now()).await;
    (seen.downloads, seen.stale_jobs) = read::downloads(&spec, ctx).await?;
    let started = ThreadCpu::now();
    let want = build::all(&spec, &seen, &ctx.prometheus_address);
    compute += started.elapsed();
    // A running download's progress is in its log, which sends no events.
    let recheck = match seen.downloads.iter().any(|d| {
        matches!(
            d.state,
            DownloadState::Running { .. } | DownloadState::NotStarted
        )
    }) {
        true => Some(
            seen.logs
                .recheck_after
                .map_or(DOWNLOAD_RECHECK, |r| r.min(DOWNLOAD_RECHECK)),
        ),
        false => seen.logs.recheck_after,
    };
    let next = requeue(&want.resolution, recheck, ctx.resync);
    let done = match apply::converge(ctx, &vs, want, &seen).await {
        Ok(done) => done,
        // The API server refused an object built from a spec the CRD accepted (e.g. a
        // toleration or affinity it does not allow): a spec problem, reported in
        // status; retried when the spec changes, not in a loop.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 422 => {
            let message = format!(
                "the API server refused an object made from this spec: {}",
                e.message
            );
            return write_invalid(ctx, &vs, &message).await;
        }
        Err(e) => return Err(e),
    };
    let started = ThreadCpu::now();
    let now = Timestamp::now();
    let next_status = status::derive(&spec, &seen, &done, now);
    let held = settle::hold(
        vs.status.as_ref(),
        &next_status,
        done.deployment.live(),
        ctx.status_settle,
        now,
    );
    compute += started.elapsed() + done.compute;
    ctx.metrics.reconcile_compute.observe(compute.as_secs_f64());
    let key = ObjectRef::new(&vs.name_any()).within(&vs.namespace().unwrap_or_default());
    if let Some(left) = held {
        // A new service's first status waits for its pods (settle.rs); it is
        // looked at again when the window ends unless written before.
        ctx.metrics.status_writes_held.inc();
        ctx.wakeups.after(key, left);
        return Ok(next);
    }
    ctx.wakeups.cancel(&key);
    write_status(ctx, &vs, next_status).await?;
    Ok(next)
}

/// How often the progress of a running download is read again.
const DOWNLOAD_RECHECK: Duration = Duration::from_secs(10);

/// How long to wait before re-checking a missing Gateway or listener (SPEC section 3).
const GATEWAY_RETRY: Duration = Duration::from_secs(60);

/// When to look again without an event: the periodic safety net, sooner when
/// a Gateway or listener may appear by itself or a loading pod reaches its
/// startup budget (`recheck`), and only on a change when the gatewayRef is a
/// configuration error.
fn requeue(resolution: &Resolution, recheck: Option<Duration>, resync: Duration) -> Action {
    let resync = recheck.map_or(resync, |r| r.min(resync));
    match resolution {
        Resolution::Missing { .. } => Action::requeue(GATEWAY_RETRY.min(resync)),
        Resolution::WrongProtocol { .. } if recheck.is_none() => Action::await_change(),
        _ => Action::requeue(resync),
    }
}

/// An object stored in a shape our types cannot read (validation bypassed or an
/// older schema): reported as InvalidSpec in status; a change of the object retries.
async fn report_unreadable(meta: &ObjectMeta, invalid: &Unparsable, ctx: &Context) -> Result<()> {
    let ns = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let raw: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &ns,
        &ApiResource::erase::<VLLMService>(&()),
    );
    let Some(current) = raw.get_opt(&name).await? else {
        return Ok(());
    };
    // The status may still be readable when only the spec is broken.
    let previous = current
        .data
        .get("status")
        .and_then(|s| serde_json::from_str::<VLLMServiceStatus>(&s.to_string()).ok());
    let message = format!(
        "the object cannot be read as a VLLMService: {}",
        invalid.source
    );
    let generation = meta.generation.unwrap_or_default();
    let next = status::invalid(
        previous.as_ref(),
        generation,
        "InvalidSpec",
        &message,
        Timestamp::now(),
    );
    if previous.as_ref() != Some(&next) {
        // Not server-side apply: it needs the live object to match the schema, which
        // this one does not (the API server answers 500). A merge patch of the status
        // subresource does not touch the broken spec.
        let api: Api<VLLMService> = Api::namespaced(ctx.client.clone(), &ns);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match api
            .patch_status(&name, &params, &Patch::Merge(json!({ "status": next })))
            .await
        {
            Ok(_) => {}
            // The API server evaluates the CRD's CEL rules over the whole stored
            // object on a status write too, and a rule cannot read a field of the
            // wrong type ("invalid data, expected a map ... evaluating rule"): no
            // status can be written. The event says it instead.
            Err(kube::Error::Api(e)) if e.code == 422 => {
                let reference = ObjectReference {
                    api_version: Some(VLLMService::api_version(&()).into()),
                    kind: Some(VLLMService::kind(&()).into()),
                    name: Some(name.clone()),
                    namespace: Some(ns.clone()),
                    uid: meta.uid.clone(),
                    ..ObjectReference::default()
                };
                let note = format!(
                    "{message}; the API server refuses any status for this object until it is \
                     fixed ({})",
                    e.message
                );
                events::publish_about(
                    ctx,
                    &reference,
                    EventType::Warning,
                    "InvalidSpec",
                    &note,
                    None,
                )
                .await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Patches the status subresource unless `next` equals `previous`; true when it wrote.
async fn patch_status_if_changed(
    api: &Api<VLLMService>,
    name: &str,
    previous: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
) -> Result<bool> {
    if previous == Some(next) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": VLLMService::api_version(&()),
        "kind": VLLMService::kind(&()),
        "status": next,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    lean::patch_meta(api, name, Some("status"), &params, &Patch::Apply(body)).await?;
    Ok(true)
}

/// The status step's write: `next` through the status subresource when it
/// differs from what is stored, announcing transitions of Degraded and Available.
async fn write_status(ctx: &Context, vs: &VLLMService, next: VLLMServiceStatus) -> Result<()> {
    let api: Api<VLLMService> =
        Api::namespaced(ctx.client.clone(), &vs.namespace().unwrap_or_default());
    let previous = vs.status.as_ref();
    if patch_status_if_changed(&api, &vs.name_any(), previous, &next).await? {
        ctx.wrote_status(vs, &next);
        events::announce_transitions(ctx, vs, previous, &next).await;
    }
    Ok(())
}

/// Reports a spec the operator cannot use; retried when the object changes.
async fn write_invalid(ctx: &Context, vs: &VLLMService, message: &str) -> Result<Action> {
    let generation = vs.metadata.generation.unwrap_or_default();
    let next = status::invalid(
        vs.status.as_ref(),
        generation,
        "InvalidSpec",
        message,
        Timestamp::now(),
    );
    write_status(ctx, vs, next).await?;
    Ok(Action::await_change())
}
