//! Kubernetes Events about a VLLMService: one naming the children a reconcile
//! created, one per child updated or deleted, one when it turns Degraded or
//! Available, one when it starts failing.
//! Best effort: a failure to publish is logged, not retried.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Resource, ResourceExt,
    runtime::events::{Event, EventType},
};
use vllmservice_api::{VLLMService, VLLMServiceStatus, condition_types as ct};

use crate::{
    conditions::Status,
    context::Context,
    text::{MAX_EVENT_NOTE_BYTES, truncate},
};

/// Publishes an event about `vs` (and the child it concerns, if any).
pub async fn publish(
    ctx: &Context,
    vs: &VLLMService,
    type_: EventType,
    reason: &str,
    note: &str,
    child: Option<ObjectReference>,
) {
    publish_about(ctx, &vs.object_ref(&()), type_, reason, note, child).await;
}

/// Publishes an event about an object by its reference (also one the typed
/// cache cannot read), and the child it concerns, if any.
pub async fn publish_about(
    ctx: &Context,
    about: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
    child: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, MAX_EVENT_NOTE_BYTES).into()),
        action: "Reconcile".into(),
        secondary: child,
    };
    if let Err(e) = ctx.recorder.publish(&event, about).await {
        tracing::warn!(name = about.name, error = %e, "publishing an event failed");
    }
}

/// A reference to the child `name` of kind `K` in `vs`'s namespace.
pub fn child_ref<K: Resource>(vs: &VLLMService, name: &str) -> ObjectReference
where
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    ObjectReference {
        api_version: Some(K::api_version(&dt).to_string()),
        kind: Some(K::kind(&dt).to_string()),
        name: Some(name.into()),
        namespace: vs.namespace(),
        ..ObjectReference::default()
    }
}

/// A Normal event saying a child was created, updated or deleted (`verb`).
pub async fn child_written<K: Resource>(
    ctx: &Context,
    vs: &VLLMService,
    name: &str,
    reason: &str,
    verb: &str,
) where
    K::DynamicType: Default,
{
    let kind = K::kind(&K::DynamicType::default()).to_string();
    tracing::info!(kind, child = name, "{verb}");
    let note = format!("{kind} {name} {verb}");
    let child = Some(child_ref::<K>(vs, name));
    publish(ctx, vs, EventType::Normal, reason, &note, child).await;
}

/// One Normal event naming every child a reconcile created, e.g. "created
/// Deployment qwen, Service qwen" (nothing when it created none), about the
/// first of them.
pub async fn children_created(ctx: &Context, vs: &VLLMService, children: &[ObjectReference]) {
    let Some(first) = children.first() else {
        return;
    };
    let names: Vec<String> = children
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                c.kind.as_deref().unwrap_or_default(),
                c.name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let note = format!("created {}", names.join(", "));
    tracing::info!(children = %names.join(", "), "created");
    publish(
        ctx,
        vs,
        EventType::Normal,
        "Created",
        &note,
        Some(first.clone()),
    )
    .await;
}

/// Announces transitions between two statuses: a Warning when Degraded turns
/// True or changes its reason, a Normal event when Available turns True.
pub async fn announce_transitions(
    ctx: &Context,
    vs: &VLLMService,
    before: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
) {
    let find = |s: Option<&VLLMServiceStatus>, t: &str| {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == t).cloned())
    };
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
