//! One reconcile of one VLLMService: read → validate → build → apply → status.

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Service},
    },
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{
        controller::Action,
        events::{Event, EventType},
    },
};
use serde_json::json;
use vllmservice_api::{VLLMService, VLLMServiceStatus, condition_types as ct};

use crate::{
    apply::{self, Applied, FIELD_MANAGER},
    build,
    conditions::Status,
    controller::Context,
    diagnose,
    error::Result,
    names,
    status::{self, Conflict, Feature, Observed, Storage},
};

pub async fn reconcile(obj: &DeserializeGuard<VLLMService>, ctx: &Context) -> Result<Action> {
    let vs = match &obj.0 {
        Ok(vs) => vs,
        Err(invalid) => {
            // Stored in a shape our types cannot read (validation bypassed or an
            // older schema). Report it; a change of the object retries.
            let meta = &invalid.metadata;
            let (ns, name) = (
                meta.namespace.clone().unwrap_or_default(),
                meta.name.clone().unwrap_or_default(),
            );
            let raw: Api<DynamicObject> = Api::namespaced_with(
                ctx.client.clone(),
                &ns,
                &ApiResource::erase::<VLLMService>(&()),
            );
            let Some(current) = raw.get_opt(&name).await? else {
                return Ok(Action::await_change());
            };
            // The status may still be readable when only the spec is broken.
            let previous = current
                .data
                .get("status")
                .and_then(|s| serde_json::from_value::<VLLMServiceStatus>(s.clone()).ok());
            let message = format!(
                "the object cannot be read as a VLLMService: {}",
                invalid.error
            );
            let next = status::invalid(
                previous.as_ref(),
                meta.generation.unwrap_or_default(),
                "InvalidSpec",
                &message,
                Timestamp::now(),
            );
            if previous.as_ref() != Some(&next) {
                let api: Api<VLLMService> = Api::namespaced(ctx.client.clone(), &ns);
                api.patch_status(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(status_body(&next)),
                )
                .await?;
            }
            return Ok(Action::await_change());
        }
    };
    if vs.metadata.deletion_timestamp.is_some() {
        // Children go with their owner through garbage collection.
        return Ok(Action::await_change());
    }
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<VLLMService> = Api::namespaced(ctx.client.clone(), &ns);

    if let Err(invalid) = vllmservice_api::validate(vs) {
        write_invalid(&api, vs, &invalid.to_string(), ctx).await?;
        return Ok(Action::await_change());
    }

    let uid = vs.uid().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &ns);
    let mut conflicts = Vec::new();

    let deployment = build::deployment(vs);
    let applied = apply::apply_owned(&deployments, &deployment, &uid).await?;
    record(
        ctx,
        vs,
        ("apps/v1", "Deployment"),
        &deployment.name_any(),
        &applied,
        &mut conflicts,
    )
    .await;
    let service = build::service(vs);
    let applied = apply::apply_owned(&services, &service, &uid).await?;
    record(
        ctx,
        vs,
        ("v1", "Service"),
        &service.name_any(),
        &applied,
        &mut conflicts,
    )
    .await;

    let live_deployment = if conflicts.iter().any(|c| c.kind == "Deployment") {
        None
    } else {
        deployments.get_opt(&deployment.name_any()).await?
    };
    let pvc = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
        .get_opt(&vs.spec.storage.pvc_name)
        .await?;
    let storage = match pvc.and_then(|p| p.status).and_then(|s| s.phase) {
        None => Storage::Missing,
        Some(phase) if phase == "Bound" => Storage::Bound,
        Some(phase) => Storage::NotBound(phase),
    };
    let pods = if live_deployment.is_some() {
        Api::<Pod>::namespaced(ctx.client.clone(), &ns)
            .list(&ListParams::default().labels(&names::selector_string(vs)))
            .await?
            .items
    } else {
        Vec::new()
    };

    let observed = Observed {
        deployment: live_deployment.as_ref(),
        storage,
        conflicts,
        findings: diagnose::findings(live_deployment.as_ref(), &pods),
        route: Feature::ready("RouteNotRequired", "spec.gatewayRef is not set"),
        monitoring: Feature::ready("MonitoringDisabled", "spec.monitoring.enabled is false"),
    };
    let next = status::desired(vs, &observed, Timestamp::now());
    write_status(&api, vs, next, ctx).await?;
    Ok(Action::requeue(ctx.resync))
}

/// Records what applying a child did: an event for a change, a conflict for a foreign object.
async fn record(
    ctx: &Context,
    vs: &VLLMService,
    (api_version, kind): (&str, &'static str),
    name: &str,
    applied: &Applied,
    conflicts: &mut Vec<Conflict>,
) {
    let (reason, verb) = match applied {
        Applied::Created => ("Created", "created"),
        Applied::Updated => ("Updated", "updated"),
        Applied::Unchanged => return,
        Applied::Foreign => {
            conflicts.push(Conflict {
                kind,
                name: name.to_string(),
            });
            return;
        }
    };
    let child = ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(name.into()),
        namespace: vs.namespace(),
        ..ObjectReference::default()
    };
    let note = format!("{kind} {name} {verb}");
    publish(ctx, vs, EventType::Normal, reason, &note, Some(child)).await;
}

/// Publishes an event about `vs` (and the child it concerns, if any). Events are
/// best effort: a failure is logged, not retried.
pub async fn publish(
    ctx: &Context,
    vs: &VLLMService,
    type_: EventType,
    reason: &str,
    note: &str,
    child: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.into()),
        action: "Reconcile".into(),
        secondary: child,
    };
    if let Err(e) = ctx.recorder.publish(&event, &vs.object_ref(&())).await {
        tracing::warn!(name = vs.name_any(), error = %e, "publishing an event failed");
    }
}

/// Writes `next` through the status subresource when it differs from what is
/// stored, and announces transitions of Degraded and Available as events.
async fn write_status(
    api: &Api<VLLMService>,
    vs: &VLLMService,
    next: VLLMServiceStatus,
    ctx: &Context,
) -> Result<()> {
    if vs.status.as_ref() == Some(&next) {
        return Ok(());
    }
    api.patch_status(
        &vs.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(status_body(&next)),
    )
    .await?;
    announce_transitions(ctx, vs, &next).await;
    Ok(())
}

/// A server-side-apply body for the status subresource.
fn status_body(status: &VLLMServiceStatus) -> serde_json::Value {
    json!({
        "apiVersion": VLLMService::api_version(&()),
        "kind": VLLMService::kind(&()),
        "status": status,
    })
}

async fn announce_transitions(ctx: &Context, vs: &VLLMService, next: &VLLMServiceStatus) {
    let find = |s: Option<&VLLMServiceStatus>, t: &str| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == t).cloned())
    };
    let before = vs.status.as_ref();
    if let Some(d) = find(Some(next), ct::DEGRADED) {
        let prev = find(before, ct::DEGRADED);
        let changed = prev.as_ref().map(|p| (&p.status, &p.reason)) != Some((&d.status, &d.reason));
        if d.status == Status::True.as_str() && changed {
            publish(ctx, vs, EventType::Warning, &d.reason, &d.message, None).await;
        }
    }
    if let Some(a) = find(Some(next), ct::AVAILABLE) {
        let prev = find(before, ct::AVAILABLE).map(|p| p.status);
        if a.status == Status::True.as_str() && prev.as_deref() != Some("True") {
            publish(ctx, vs, EventType::Normal, "Available", &a.message, None).await;
        }
    }
}

async fn write_invalid(
    api: &Api<VLLMService>,
    vs: &VLLMService,
    message: &str,
    ctx: &Context,
) -> Result<()> {
    let generation = vs.metadata.generation.unwrap_or_default();
    let next = status::invalid(
        vs.status.as_ref(),
        generation,
        "InvalidSpec",
        message,
        Timestamp::now(),
    );
    write_status(api, vs, next, ctx).await
}
