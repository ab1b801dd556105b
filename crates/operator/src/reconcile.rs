//! One reconcile of one VLLMService: read → validate → build → apply → status.

use k8s_openapi::{
    api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod},
    jiff::Timestamp,
};
use kube::{
    Api, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams},
    core::DeserializeGuard,
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::Store,
    },
};
use serde_json::json;
use vllmservice_api::{VLLMService, VLLMServiceStatus, condition_types as ct};

use std::{fmt::Debug, time::Duration};

use serde::{Serialize, de::DeserializeOwned};

use crate::{
    apply::{self, Applied, Deleted, FIELD_MANAGER},
    build,
    conditions::Status,
    controller::{Cache, Context, cached},
    diagnose,
    error::{Error, Result},
    names, optional, route,
    status::{self, Conflict, Feature, Observed, RouteNames, Storage},
};

pub async fn reconcile(obj: &DeserializeGuard<VLLMService>, ctx: &Context) -> Result<Action> {
    let vs = match &obj.0 {
        Ok(vs) => ctx.latest(vs),
        Err(invalid) => {
            report_unreadable(invalid, ctx).await?;
            return Ok(Action::await_change());
        }
    };
    let vs = &*vs;
    if vs.metadata.deletion_timestamp.is_some() {
        // Children go with their owner through garbage collection.
        return Ok(Action::await_change());
    }
    // Children are read from the watches' caches: right after a start, wait for their first list.
    ctx.caches.settle().await;
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<VLLMService> = Api::namespaced(ctx.client.clone(), &ns);

    if let Err(invalid) = vllmservice_api::validate(vs) {
        write_invalid(&api, vs, &invalid.to_string(), ctx).await?;
        return Ok(Action::await_change());
    }

    match converge(vs, &api, ctx).await {
        // The API server refused an object built from a spec the CRD accepted (e.g. a
        // runtimeClassName or env name it does not allow): a spec problem, reported
        // in status; retried when the spec changes, not in a loop.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 422 => {
            let message = format!(
                "the API server refused an object made from this spec: {}",
                e.message
            );
            write_invalid(&api, vs, &message, ctx).await?;
            Ok(Action::await_change())
        }
        other => other,
    }
}

/// Applies every child and writes the status.
async fn converge(vs: &VLLMService, api: &Api<VLLMService>, ctx: &Context) -> Result<Action> {
    let ns = vs.namespace().unwrap_or_default();
    let uid = vs.uid().unwrap_or_default();
    let mut conflicts = Vec::new();

    let caches = &ctx.caches;
    let deployment = build::deployment(vs);
    let live_deployment = apply_child(
        ctx,
        vs,
        &uid,
        deployment,
        caches.deployments.store(),
        &mut conflicts,
    )
    .await?;
    let service = build::service(vs);
    apply_child(
        ctx,
        vs,
        &uid,
        service,
        caches.services.store(),
        &mut conflicts,
    )
    .await?;
    let (route, route_names, requeue) = reconcile_route(ctx, vs, &uid, &mut conflicts).await?;
    let (monitoring, service_monitor_name) =
        reconcile_monitoring(ctx, vs, &uid, &mut conflicts).await?;

    let pvc_name = &vs.spec.storage.pvc_name;
    let pvc = match caches.pvcs.store() {
        Some(store) => cached(store, &ns, pvc_name),
        None => {
            Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
                .get_opt(pvc_name)
                .await?
        }
    };
    let storage = match pvc.and_then(|p| p.status).and_then(|s| s.phase) {
        None => Storage::Missing,
        Some(phase) if phase == "Bound" => Storage::Bound,
        Some(phase) => Storage::NotBound(phase),
    };
    let pods: Vec<Pod> = match (live_deployment.is_some(), caches.pods.store()) {
        (false, _) => Vec::new(),
        (true, Some(store)) => {
            let selector = names::selector_labels(vs);
            store
                .state()
                .iter()
                .filter(|p| {
                    p.metadata.namespace.as_deref() == Some(ns.as_str())
                        && selector.iter().all(|(k, v)| p.labels().get(k) == Some(v))
                })
                .map(|p| (**p).clone())
                .collect()
        }
        (true, None) => {
            Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                .list(&ListParams::default().labels(&names::selector_string(vs)))
                .await?
                .items
        }
    };

    let observed = Observed {
        deployment: live_deployment.as_ref(),
        storage,
        conflicts,
        findings: diagnose::findings(live_deployment.as_ref(), &pods),
        route,
        route_names,
        monitoring,
        service_monitor_name,
    };
    let next = status::desired(vs, &observed, Timestamp::now());
    write_status(api, vs, next, ctx).await?;
    Ok(match requeue {
        Requeue::Resync => Action::requeue(ctx.resync),
        Requeue::After(d) => Action::requeue(d.min(ctx.resync)),
        Requeue::OnChange => Action::await_change(),
    })
}

/// When to look again without an event.
enum Requeue {
    /// The periodic safety net.
    Resync,
    /// Something may appear by itself (a Gateway, a listener).
    After(Duration),
    /// Only a change can help (a configuration error); watches still trigger.
    OnChange,
}

/// How long to wait before re-checking a missing Gateway or listener (SPEC section 3).
const GATEWAY_RETRY: Duration = Duration::from_secs(60);

/// Applies one child, records the outcome, and returns the live object unless it is foreign.
/// `cache` is the watch cache of its kind.
async fn apply_child<K>(
    ctx: &Context,
    vs: &VLLMService,
    uid: &str,
    desired: K,
    cache: Option<&Store<K>>,
    conflicts: &mut Vec<Conflict>,
) -> Result<Option<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug
        + 'static,
{
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let live = cache.and_then(|c| cached(c, &ns, &desired.name_any()));
    let (applied, live) = apply::apply_owned(&api, live, &desired, uid).await?;
    record(ctx, vs, &desired, &applied, conflicts).await;
    Ok(live)
}

/// The HTTPRoute: deleted when not wanted or not resolvable, applied when the
/// gatewayRef resolves; RouteReady from the Gateway controller's verdict.
async fn reconcile_route(
    ctx: &Context,
    vs: &VLLMService,
    uid: &str,
    conflicts: &mut Vec<Conflict>,
) -> Result<(Feature, Option<RouteNames>, Requeue)> {
    let name = names::child_name(vs);
    let routes = ctx.caches.routes.as_ref().and_then(Cache::store);
    let Some(gateway_ref) = &vs.spec.gateway_ref else {
        if ctx.apis.gateway {
            delete_child(ctx, vs, &name, routes, uid).await?;
        }
        let f = Feature::ready("RouteNotRequired", "spec.gatewayRef is not set");
        return Ok((f, None, Requeue::Resync));
    };
    if !ctx.apis.gateway {
        let f = Feature {
            status: Status::False,
            reason: "APINotInstalled".into(),
            message: optional::not_installed("Gateway API", &optional::GATEWAY_CRDS),
        };
        return Ok((f, None, Requeue::Resync));
    }
    let target = route::Target::of(vs, gateway_ref);
    let unresolved = |reason: &str, message: String| Feature {
        status: Status::False,
        reason: reason.into(),
        message,
    };
    let gateways = ctx.caches.gateways.as_ref().and_then(Cache::store);
    let (feature, requeue) = match route::resolve(&ctx.client, gateways, &target).await? {
        route::Resolution::Missing { reason, message } => {
            (unresolved(reason, message), Requeue::After(GATEWAY_RETRY))
        }
        route::Resolution::WrongProtocol { message } => (
            unresolved("UnsupportedProtocol", message),
            Requeue::OnChange,
        ),
        route::Resolution::Resolved => {
            let desired = build::httproute(vs).expect("gatewayRef is set");
            let feature = match apply_child(ctx, vs, uid, desired, routes, conflicts).await? {
                Some(live) => route::route_readiness(&live, &target),
                None => unresolved(
                    "ResourceConflict",
                    format!("HTTPRoute {name} exists and is not controlled by this VLLMService"),
                ),
            };
            let names = RouteNames {
                route: name,
                gateway_name: target.name,
                gateway_namespace: target.namespace,
            };
            return Ok((feature, Some(names), Requeue::Resync));
        }
    };
    delete_child(ctx, vs, &name, routes, uid).await?;
    Ok((feature, None, requeue))
}

/// The ServiceMonitor and PrometheusRule: applied when monitoring (and its alerts)
/// are on, deleted when off.
async fn reconcile_monitoring(
    ctx: &Context,
    vs: &VLLMService,
    uid: &str,
    conflicts: &mut Vec<Conflict>,
) -> Result<(Feature, Option<String>)> {
    let name = names::child_name(vs);
    let (monitors, rules) = (
        ctx.caches.monitors.as_ref().and_then(Cache::store),
        ctx.caches.rules.as_ref().and_then(Cache::store),
    );
    let Some(desired) = build::servicemonitor(vs) else {
        if ctx.apis.prometheus {
            delete_child(ctx, vs, &name, monitors, uid).await?;
            delete_child(ctx, vs, &name, rules, uid).await?;
        }
        let f = Feature::ready("MonitoringDisabled", "spec.monitoring.enabled is false");
        return Ok((f, None));
    };
    if !ctx.apis.prometheus {
        let f = Feature {
            status: Status::False,
            reason: "APINotInstalled".into(),
            message: optional::not_installed("Prometheus Operator", &optional::PROMETHEUS_CRDS),
        };
        return Ok((f, None));
    }
    let before = conflicts.len();
    let monitor = apply_child(ctx, vs, uid, desired, monitors, conflicts).await?;
    match build::prometheusrule(vs) {
        Some(rule) => {
            apply_child(ctx, vs, uid, rule, rules, conflicts).await?;
        }
        None => delete_child(ctx, vs, &name, rules, uid).await?,
    }
    if conflicts.len() > before {
        let kinds: Vec<_> = conflicts[before..]
            .iter()
            .map(|c| c.kind.as_str())
            .collect();
        let f = Feature {
            status: Status::False,
            reason: "ResourceConflict".into(),
            message: format!(
                "{} {name} exists and is not controlled by this VLLMService",
                kinds.join(" and ")
            ),
        };
        return Ok((f, monitor.map(|_| name)));
    }
    let alerts = if vs.spec.monitoring.alerts.enabled {
        format!(" and alerts in PrometheusRule {name}")
    } else {
        String::new()
    };
    let f = Feature::ready(
        "Monitored",
        &format!("scraped through ServiceMonitor {name}{alerts}"),
    );
    Ok((f, Some(name)))
}

/// Deletes a child this VLLMService controls (as its watch cache `cache` shows
/// it, or the API server when the cache is not filled); a foreign one is left alone.
async fn delete_child<K>(
    ctx: &Context,
    vs: &VLLMService,
    name: &str,
    cache: Option<&Store<K>>,
    uid: &str,
) -> Result<()>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + DeserializeOwned
        + Clone
        + Debug
        + 'static,
{
    let ns = vs.namespace().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let live = match cache {
        Some(store) => cached(store, &ns, name),
        None => api.get_opt(name).await?,
    };
    if apply::delete_owned(&api, live, uid).await? == Deleted::Deleted {
        let kind = K::kind(&K::DynamicType::default()).to_string();
        let child = ObjectReference {
            api_version: Some(K::api_version(&K::DynamicType::default()).to_string()),
            kind: Some(kind.clone()),
            name: Some(name.into()),
            namespace: vs.namespace(),
            ..ObjectReference::default()
        };
        let note = format!("{kind} {name} deleted");
        tracing::info!(kind, child = name, "deleted");
        publish(ctx, vs, EventType::Normal, "Deleted", &note, Some(child)).await;
    }
    Ok(())
}

/// Records what applying a child did: an event for a change, a conflict for a foreign object.
async fn record<K: Resource>(
    ctx: &Context,
    vs: &VLLMService,
    child: &K,
    applied: &Applied,
    conflicts: &mut Vec<Conflict>,
) where
    K::DynamicType: Default,
{
    let dt = K::DynamicType::default();
    let kind = K::kind(&dt).to_string();
    let name = child.name_any();
    let (reason, verb) = match applied {
        Applied::Created => ("Created", "created"),
        Applied::Updated => ("Updated", "updated"),
        Applied::Unchanged => return,
        Applied::Foreign => {
            conflicts.push(Conflict { kind, name });
            return;
        }
    };
    let reference = ObjectReference {
        api_version: Some(K::api_version(&dt).to_string()),
        kind: Some(kind.clone()),
        name: Some(name.clone()),
        namespace: vs.namespace(),
        ..ObjectReference::default()
    };
    let note = format!("{kind} {name} {verb}");
    tracing::info!(kind, child = name, "{verb}");
    publish(ctx, vs, EventType::Normal, reason, &note, Some(reference)).await;
}

/// The API server refuses an event whose note is longer than this (in characters).
pub const MAX_EVENT_NOTE: usize = 1024;

/// `text` cut to at most `max` characters, ending in "…" when cut.
pub fn truncate(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.chars().count() <= max {
        return text.into();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut.into()
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
        note: Some(truncate(note, MAX_EVENT_NOTE).into()),
        action: "Reconcile".into(),
        secondary: child,
    };
    if let Err(e) = ctx.recorder.publish(&event, &vs.object_ref(&())).await {
        tracing::warn!(name = vs.name_any(), error = %e, "publishing an event failed");
    }
}

/// An object stored in a shape our types cannot read (validation bypassed or an
/// older schema): reported as InvalidSpec in status; a change of the object retries.
async fn report_unreadable(
    invalid: &kube::core::error_boundary::InvalidObject,
    ctx: &Context,
) -> Result<()> {
    let meta = &invalid.metadata;
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
        .and_then(|s| serde_json::from_value::<VLLMServiceStatus>(s.clone()).ok());
    let message = format!(
        "the object cannot be read as a VLLMService: {}",
        invalid.error
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
        api.patch_status(&name, &params, &Patch::Merge(json!({ "status": next })))
            .await?;
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
    api.patch_status(name, &params, &Patch::Apply(body)).await?;
    Ok(true)
}

/// Writes `next` through the status subresource when it differs from what is
/// stored, and announces transitions of Degraded and Available as events.
async fn write_status(
    api: &Api<VLLMService>,
    vs: &VLLMService,
    next: VLLMServiceStatus,
    ctx: &Context,
) -> Result<()> {
    let previous = vs.status.as_ref();
    if patch_status_if_changed(api, &vs.name_any(), previous, &next).await? {
        ctx.wrote_status(vs, &next);
        announce_transitions(ctx, vs, previous, &next).await;
    }
    Ok(())
}

async fn announce_transitions(
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

#[cfg(test)]
mod tests {
    use super::{MAX_EVENT_NOTE, truncate};

    #[test]
    fn event_notes_are_cut_to_the_api_servers_limit_on_a_character_boundary() {
        assert_eq!(truncate("short", MAX_EVENT_NOTE), "short");
        let exact = "x".repeat(MAX_EVENT_NOTE);
        assert_eq!(truncate(&exact, MAX_EVENT_NOTE), exact);
        let long = "é".repeat(3000);
        let cut = truncate(&long, MAX_EVENT_NOTE);
        assert_eq!(cut.chars().count(), MAX_EVENT_NOTE);
        assert!(cut.ends_with('…'));
        assert!(long.starts_with(cut.trim_end_matches('…')));
    }
}
