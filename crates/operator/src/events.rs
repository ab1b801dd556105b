//! Kubernetes Events about a VLLMService: one naming the children a reconcile
//! created, one per child updated or deleted, one when it turns Degraded (it
//! starts failing), one when it turns Available from a written status that
//! said otherwise.
//! Best effort: a failure to publish is logged, not retried.

use k8s_openapi::{api::core::v1::ObjectReference, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{
    Resource, ResourceExt,
    runtime::events::{Event, EventType},
};
use vllmservice_api::{VLLMService, VLLMServiceStatus, condition_types as ct};

use crate::{
    diagnosis::masking::{MAX_EVENT_NOTE_BYTES, mask_for, mask_secrets, truncate},
    reconcile::{context::Context, status::conditions::Status},
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
    let note = mask_for(note, vs);
    publish_about(ctx, &vs.object_ref(&()), type_, reason, &note, child).await;
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
        note: Some(truncate(&mask_secrets(note, &[]), MAX_EVENT_NOTE_BYTES).into()),
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
    let kind_name = |c: &ObjectReference| {
        let (kind, name) = (c.kind.as_deref(), c.name.as_deref());
        format!("{} {}", kind.unwrap_or_default(), name.unwrap_or_default())
    };
    let names = children
        .iter()
        .map(kind_name)
        .collect::<Vec<_>>()
        .join(", ");
    tracing::info!(children = %names, "created");
    let (note, child) = (format!("created {names}"), Some(first.clone()));
    publish(ctx, vs, EventType::Normal, "Created", &note, child).await;
}

/// Announces transitions between two statuses (see [`transitions`]).
pub async fn announce_transitions(
    ctx: &Context,
    vs: &VLLMService,
    before: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
) {
    for t in transitions(before, next) {
        publish(ctx, vs, t.type_, &t.reason, &t.note, None).await;
    }
}

/// An event a status change calls for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

/// The events a status write from `before` (None: the object had no status)
/// to `next` calls for, pure: a Warning when Degraded turns True or changes
/// its reason (also in a first status), and a Normal event when Available
/// turns True from a written status that said otherwise. A new service whose
/// first status is already Available gets no Available event: nothing in
/// its history turned, its status says it, and its "created" event is
/// seconds older (the settle window); it saves one write per service.
pub fn transitions(
    before: Option<&VLLMServiceStatus>,
    next: &VLLMServiceStatus,
) -> Vec<Transition> {
    fn find<'a>(s: Option<&'a VLLMServiceStatus>, t: &str) -> Option<&'a Condition> {
        s.and_then(|s| s.conditions.iter().find(|c| c.type_ == t))
    }
    let mut out = Vec::new();
    if let Some(d) = find(Some(next), ct::DEGRADED) {
        let prev = find(before, ct::DEGRADED);
        let changed = prev.map(|p| (&p.status, &p.reason)) != Some((&d.status, &d.reason));
        if d.status == Status::True.as_str() && changed {
            out.push(Transition {
                type_: EventType::Warning,
                reason: d.reason.clone(),
                note: d.message.clone(),
            });
        }
    }
    if let (Some(a), Some(before)) = (find(Some(next), ct::AVAILABLE), before) {
        let prev = find(Some(before), ct::AVAILABLE).map(|p| p.status.as_str());
        if a.status == Status::True.as_str() && prev != Some(Status::True.as_str()) {
            out.push(Transition {
                type_: EventType::Normal,
                reason: "Available".into(),
                note: a.message.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(available: &str, degraded: (&str, &str)) -> VLLMServiceStatus {
        serde_json::from_value(json!({"conditions": [
            {"type": "Available", "status": available, "reason": "R", "message": "1/1 ready",
             "lastTransitionTime": "2026-12-04T00:00:00Z"},
            {"type": "Degraded", "status": degraded.0, "reason": degraded.1,
             "message": "the model path does not exist",
             "lastTransitionTime": "2026-12-04T00:00:00Z"}]}))
        .unwrap()
    }

    fn reasons(t: &[Transition]) -> Vec<&str> {
        t.iter().map(|t| t.reason.as_str()).collect()
    }

    #[test]
    fn a_first_status_that_is_available_announces_nothing_a_turn_to_available_does() {
        let ok = status("True", ("False", "AsExpected"));
        let pending = status("False", ("False", "AsExpected"));
        assert!(transitions(None, &ok).is_empty(), "first status, Available");
        assert!(
            transitions(None, &pending).is_empty(),
            "first status, Pending"
        );
        let turned = transitions(Some(&pending), &ok);
        assert_eq!(reasons(&turned), ["Available"]);
        assert_eq!(
            (turned[0].type_, turned[0].note.as_str()),
            (EventType::Normal, "1/1 ready")
        );
        assert!(transitions(Some(&ok), &ok).is_empty(), "still Available");
    }

    #[test]
    fn degraded_is_announced_when_it_turns_true_or_changes_reason_also_in_a_first_status() {
        let failing = status("False", ("True", "ModelNotFound"));
        let other = status("False", ("True", "OutOfMemory"));
        let ok = status("True", ("False", "AsExpected"));
        let first = transitions(None, &failing);
        assert_eq!(reasons(&first), ["ModelNotFound"]);
        assert_eq!(first[0].type_, EventType::Warning);
        assert!(transitions(Some(&failing), &failing).is_empty());
        assert_eq!(
            reasons(&transitions(Some(&failing), &other)),
            ["OutOfMemory"]
        );
        assert_eq!(reasons(&transitions(Some(&failing), &ok)), ["Available"]);
        assert_eq!(
            reasons(&transitions(Some(&ok), &failing)),
            ["ModelNotFound"]
        );
    }
}
