//! The apply step: write each child that differs from what should exist,
//! after an ownership check; delete the optional children no longer wanted.
//!
//! "Differs" means either the desired object changed since we last applied it
//! (an annotation carries a hash of what we applied, so removed fields are
//! noticed) or someone edited a field we set (the desired object is no longer
//! a subset of the live one). Fields other parties added are not our business.
//!
//! Never a takeover: an absent child is created with a create (POST), so if
//! someone else created it meanwhile the create fails with AlreadyExists and
//! their object is left alone; every update carries the resourceVersion it
//! was decided on, so a stale decision fails with 409 and is made again.

use std::{fmt::Debug, time::Duration};

use k8s_openapi::api::{batch::v1::Job, core::v1::ObjectReference};
use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use vllmservice_api::VLLMService;

pub use crate::done::{Done, Outcome};
use crate::{
    build::{Desired, Download, Want, download},
    context::Context,
    cputime::ThreadCpu,
    error::{Error, Result},
    events, lean,
    seen::Seen,
};

/// The one field manager every write of this operator uses.
pub const FIELD_MANAGER: &str = "vllmservice-operator";
/// Hash of the desired object this operator last applied to a child.
pub const APPLIED_HASH_ANNOTATION: &str = "aiinfra.example.com/applied-hash";

/// What [`apply_owned`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    Created,
    Updated,
    Unchanged,
    /// A same-named object exists that this VLLMService does not control; left alone.
    Foreign,
}

/// What [`delete_owned`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    Deleted,
    Absent,
    /// A same-named object exists that this VLLMService does not control; left alone.
    Foreign,
}

/// Writes every child of `vs` that differs from `want`, deletes the optional
/// children no longer wanted, and announces the writes as events: one for all
/// the children this reconcile created (even when a later child failed), one
/// per update or deletion.
pub async fn converge(ctx: &Context, vs: &VLLMService, want: Desired, seen: &Seen) -> Result<Done> {
    let mut tally = Tally::default();
    let done = async {
        let c = &mut tally;
        let foreign_jobs = downloads(ctx, vs, &want.downloads, seen, c).await?;
        let uid = vs.uid().unwrap_or_default();
        let deployment = match (want.hold_deployment, seen.deployment.clone()) {
            // Until the files are there: no pods yet, or the running ones left as they are.
            (true, None) => Outcome::Absent,
            (true, Some(d)) if is_controlled_by(&d, &uid) => Outcome::Live(d),
            (true, Some(_)) => Outcome::Foreign,
            (false, live) => child(ctx, vs, Want::Present(want.deployment), live, c).await?,
        };
        Ok(Done {
            resolution: want.resolution,
            deployment,
            service: child(
                ctx,
                vs,
                Want::Present(want.service),
                seen.service.clone(),
                c,
            )
            .await?,
            route: child(ctx, vs, want.route, seen.route.clone(), c).await?,
            monitor: child(ctx, vs, want.monitor, seen.monitor.clone(), c).await?,
            rule: child(ctx, vs, want.rule, seen.rule.clone(), c).await?,
            pdb: child(ctx, vs, want.pdb, seen.pdb.clone(), c).await?,
            scaled_object: refused_by_webhook(
                child(ctx, vs, want.scaled_object, seen.scaled_object.clone(), c).await,
            )?,
            foreign_jobs,
            compute: Duration::ZERO,
        })
    }
    .await;
    events::children_created(ctx, vs, &tally.created).await;
    done.map(|d| Done {
        compute: tally.compute,
        ..d
    })
}

/// A write an admission webhook refused, as an outcome the status reports
/// (KEDA's webhook refuses a second autoscaler of the same target, which only
/// a change elsewhere resolves), instead of a reconcile error that would stop
/// every other status update.
fn refused_by_webhook<K>(result: Result<Outcome<K>>) -> Result<Outcome<K>> {
    match result {
        Err(Error::Kube(kube::Error::Api(e)))
            if (400..500).contains(&e.code) && e.message.contains("admission webhook") =>
        {
            Ok(Outcome::Refused(e.message.clone()))
        }
        other => other,
    }
}

/// What one converge collects besides its outcomes: the children it created
/// (for the one event) and the time spent deciding, without API calls.
#[derive(Default)]
struct Tally {
    created: Vec<ObjectReference>,
    compute: Duration,
}

/// Creates the download Jobs that do not exist, joins the owners of those that
/// another VLLMService created, runs a failed one again once the spec asks
/// for a different Job (e.g. a token was added), and lets go of those the spec
/// no longer needs (deleted when this VLLMService was their only owner).
/// Returns the names of same-named Jobs that are not the operator's.
async fn downloads(
    ctx: &Context,
    vs: &VLLMService,
    want: &[Download],
    seen: &Seen,
    tally: &mut Tally,
) -> Result<Vec<String>> {
    let mut foreign = Vec::new();
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), &vs.namespace().unwrap_or_default());
    let uid = vs.uid().unwrap_or_default();
    for d in want {
        let live = seen
            .downloads
            .iter()
            .find(|s| s.name == d.name)
            .and_then(|s| s.job.clone());
        let live = match live {
            Some(job) => job,
            None => {
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match api.create(&params, &d.job).await {
                    Ok(_) => {
                        tally.created.push(events::child_ref::<Job>(vs, &d.name));
                        continue;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        match api.get_opt(&d.name).await? {
                            Some(job) => job,
                            None => continue,
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        if !download::is_download_job(&live) {
            // Someone else's Job of that name: reported by the status, never touched.
            foreign.push(d.name.clone());
            continue;
        }
        if live.metadata.deletion_timestamp.is_some() {
            // Being deleted (to run again, or by its last owner): created anew
            // once it is gone (its watch event brings the next reconcile).
            continue;
        }
        let failed = live
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Failed" && c.status == "True"));
        let hash = |j: &Job| j.annotations().get(download::JOB_HASH_ANNOTATION).cloned();
        if failed && hash(&live) != hash(&d.job) {
            delete_this(&api, &live).await?;
            events::child_written::<Job>(ctx, vs, &d.name, "Deleted", "deleted to run again").await;
            continue;
        }
        if !download::is_owned_by(&live, vs) {
            let owner = serde_json::to_value(download::owner(vs)).expect("serializes");
            let patch = json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": live.resource_version()},
                {"op": "add", "path": "/metadata/ownerReferences/-", "value": owner},
            ]);
            patch_owners(&api, &d.name, patch).await?;
        }
    }
    for job in &seen.stale_jobs {
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let owners = job.owner_references();
        let Some(index) = owners.iter().position(|r| r.uid == uid) else {
            continue;
        };
        if owners.len() == 1 {
            delete_this(&api, job).await?;
            events::child_written::<Job>(
                ctx,
                vs,
                &job.name_any(),
                "Deleted",
                "deleted: no longer needed",
            )
            .await;
            continue;
        }
        let patch = json!([
            {"op": "test", "path": format!("/metadata/ownerReferences/{index}/uid"), "value": uid},
            {"op": "remove", "path": format!("/metadata/ownerReferences/{index}")},
        ]);
        patch_owners(&api, &job.name_any(), patch).await?;
    }
    Ok(foreign)
}

/// Applies a JSON patch to the owner references of a download Job; a refused
/// `test` (409/422) or a Job gone (404) means it changed meanwhile, and its
/// watch event brings the next reconcile, which decides again.
async fn patch_owners(api: &Api<Job>, name: &str, patch: Value) -> Result<()> {
    let patch = Patch::Json::<()>(serde_json::from_value(patch).expect("a JSON patch"));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &patch).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 || e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Brings one child to `want`, starting from the cached copy `seen`.
async fn child<K>(
    ctx: &Context,
    vs: &VLLMService,
    want: Want<K>,
    seen: Option<K>,
    tally: &mut Tally,
) -> Result<Outcome<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Serialize
        + DeserializeOwned
        + Clone
        + Debug
        + 'static,
{
    let ns = vs.namespace().unwrap_or_default();
    let uid = vs.uid().unwrap_or_default();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    match want {
        Want::Untouched => Ok(Outcome::Untouched),
        Want::Present(desired) => {
            let name = desired.name_any();
            let (applied, live) =
                apply_owned_timed(&api, seen, &desired, &uid, &mut tally.compute).await?;
            match applied {
                Applied::Created => tally.created.push(events::child_ref::<K>(vs, &name)),
                Applied::Updated => {
                    events::child_written::<K>(ctx, vs, &name, "Updated", "updated").await
                }
                Applied::Unchanged | Applied::Foreign => {}
            }
            Ok(live.map_or(Outcome::Foreign, Outcome::Live))
        }
        Want::Absent => {
            let name = seen.as_ref().map(|s| s.name_any());
            match delete_owned(&api, seen, &uid).await? {
                Deleted::Deleted => {
                    let name = name.unwrap_or_default();
                    events::child_written::<K>(ctx, vs, &name, "Deleted", "deleted").await;
                    Ok(Outcome::Absent)
                }
                Deleted::Absent => Ok(Outcome::Absent),
                Deleted::Foreign => Ok(Outcome::Foreign),
            }
        }
    }
}

/// True when `obj` has a controller owner reference to the object with `owner_uid`.
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// How often one apply decides again after the API server said its view was stale.
const ATTEMPTS: usize = 4;

/// Makes `desired` live unless it already is; never touches a foreign object.
/// Returns what it did and, unless the object is foreign, the live object.
///
/// `cached` is the object as the controller's watch last saw it (None: absent).
/// The cache can lag behind the API server: a create of an object that exists
/// fails with AlreadyExists, and the object is then read to see whose it is; an
/// update carries the cached `resourceVersion`, so a stale copy is refused
/// with 409 and the object is read again.
/// The dynamic type of a statically typed kind.
fn desired_type<K: Resource>() -> K::DynamicType
where
    K::DynamicType: Default,
{
    K::DynamicType::default()
}

pub async fn apply_owned<K>(
    api: &Api<K>,
    cached: Option<K>,
    desired: &K,
    owner_uid: &str,
) -> kube::Result<(Applied, Option<K>)>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    K::DynamicType: Default,
{
    let mut compute = Duration::ZERO;
    apply_owned_timed(api, cached, desired, owner_uid, &mut compute).await
}

/// [`apply_owned`], adding the time its comparisons take (not its requests) to `compute`.
async fn apply_owned_timed<K>(
    api: &Api<K>,
    cached: Option<K>,
    desired: &K,
    owner_uid: &str,
    compute: &mut Duration,
) -> kube::Result<(Applied, Option<K>)>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
    K::DynamicType: Default,
{
    let name = desired.name_any();
    let started = ThreadCpu::now();
    let stamp = stamped(desired);
    *compute += started.elapsed();
    let mut live = cached;
    for _ in 0..ATTEMPTS {
        let Some(current) = live.take() else {
            let object = with_stamp(desired, &stamp);
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            match api.create(&params, &object).await {
                Ok(created) => return Ok((Applied::Created, Some(created))),
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    // Someone (maybe this operator, before the cache saw it) created it.
                    live = api.get_opt(&name).await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
        };
        if !is_controlled_by(&current, owner_uid) {
            return Ok((Applied::Foreign, None));
        }
        let started = ThreadCpu::now();
        let same = up_to_date(&stamp, &current);
        *compute += started.elapsed();
        if same {
            return Ok((Applied::Unchanged, Some(current)));
        }
        let resource_version = match own_fields_as_applied(api, &current).await? {
            Some(rv) => rv,
            None => {
                live = api.get_opt(&name).await?;
                continue;
            }
        };
        let mut body = stamp.clone();
        body["metadata"]["resourceVersion"] = resource_version.clone().into();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        match api.patch(&name, &params, &Patch::Apply(&body)).await {
            Ok(object) => return Ok((Applied::Updated, Some(object))),
            // The copy the decision was made on was stale: decide again on the object as it is.
            Err(kube::Error::Api(e)) if e.code == 409 => live = api.get_opt(&name).await?,
            Err(kube::Error::Api(e)) if is_duplicate_entry(&e) => {
                let replacement = replacement(&stamp, &current, resource_version);
                let params = PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PostParams::default()
                };
                match api.replace(&name, &params, &replacement).await {
                    Ok(object) => return Ok((Applied::Updated, Some(object))),
                    Err(kube::Error::Api(e)) if e.code == 409 => live = api.get_opt(&name).await?,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
    let kind = K::kind(&desired_type::<K>()).to_string();
    let message = format!(
        "{kind} {name} changed under the operator {ATTEMPTS} times in a row; retrying later"
    );
    Err(kube::Error::Api(
        kube::core::Status::failure(&message, "Conflict")
            .with_code(409)
            .boxed(),
    ))
}

/// The one refusal that replacing the object fixes: a hand edit (by another
/// field manager) added a list entry next to ours with the same key, e.g. a
/// second Service port named "http" (`spec.ports[1].name: Duplicate value:
/// "http"`). Apply merges lists by key and cannot remove the other manager's
/// entry, so every apply is refused; a replace with our list is accepted.
/// Every other 422 is the spec's problem and is reported, not worked around.
fn is_duplicate_entry(e: &kube::core::Status) -> bool {
    e.code == 422 && e.message.contains("Duplicate value")
}

/// Our entries in `live`'s managedFields made by a create or a replace (as
/// operation Update) would keep owning fields that a later apply leaves out,
/// so those fields would never be removed. Before the first apply they become
/// (part of) our apply entry. Returns the resourceVersion to apply on, or None
/// when `live` was stale (read it again).
async fn own_fields_as_applied<K>(api: &Api<K>, live: &K) -> kube::Result<Option<String>>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let rv = live.resource_version().unwrap_or_default();
    let entries = live.meta().managed_fields.as_deref().unwrap_or_default();
    let ours = |op: &str| {
        entries.iter().position(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER) && m.operation.as_deref() == Some(op)
        })
    };
    let Some(i) = ours("Update") else {
        return Ok(Some(rv));
    };
    let path = format!("/metadata/managedFields/{i}");
    let change = match ours("Apply") {
        Some(_) => json!({"op": "remove", "path": path}),
        None => json!({"op": "replace", "path": format!("{path}/operation"), "value": "Apply"}),
    };
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": format!("{path}/manager"), "value": FIELD_MANAGER},
        {"op": "test", "path": format!("{path}/operation"), "value": "Update"},
        change,
    ]))
    .expect("a valid JSON patch");
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match lean::patch_meta(
        api,
        &live.name_any(),
        None,
        &params,
        &Patch::<()>::Json(patch),
    )
    .await
    {
        Ok(patched) => Ok(Some(patched.resource_version.unwrap_or_default())),
        // A failed test (the object changed) or a conflict: read it again.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 422 => Ok(None),
        Err(e) => Err(e),
    }
}

/// `desired` as a full object replacing `live` (at `resource_version`):
/// everything of `live` that `desired` does not set is kept — labels,
/// annotations (e.g. `kubectl rollout restart`'s on the pod template) and
/// fields of other managers — and `desired` wins where both set a field; a
/// list is taken whole from `desired`, which is what removes the duplicate.
fn replacement<K: Resource + Serialize + DeserializeOwned>(
    desired: &Value,
    live: &K,
    resource_version: String,
) -> K {
    let mut merged = serde_json::to_value(live).expect("Kubernetes objects serialize to JSON");
    overlay(&mut merged, desired);
    let meta = &mut merged["metadata"];
    meta["resourceVersion"] = resource_version.into();
    if let Value::Object(m) = meta {
        m.remove("managedFields");
    }
    if let Value::Object(o) = &mut merged {
        o.remove("status");
    }
    // From text, not `from_value`: the one JSON reader every kind's parser is
    // built for (a second reader would build each kind's parser again).
    serde_json::from_str(&merged.to_string())
        .expect("the merged object deserializes as its own kind")
}

/// Sets every field of `top` in `base`, merging objects key by key.
fn overlay(base: &mut Value, top: &Value) {
    match (base, top) {
        (Value::Object(b), Value::Object(t)) => {
            for (k, tv) in t {
                match b.get_mut(k) {
                    Some(bv) if bv.is_object() && tv.is_object() => overlay(bv, tv),
                    _ => {
                        b.insert(k.clone(), tv.clone());
                    }
                }
            }
        }
        (b, t) => *b = t.clone(),
    }
}

/// Deletes the child `cached` (as the controller's watch last saw it) if this
/// VLLMService controls it; never touches a foreign object. An object the cache
/// does not have is not ours to delete yet: if it is ours and only not seen so
/// far, its watch event triggers the next reconcile, which deletes it.
pub async fn delete_owned<K>(
    api: &Api<K>,
    cached: Option<K>,
    owner_uid: &str,
) -> kube::Result<Deleted>
where
    K: Resource + DeserializeOwned + Clone + Debug,
{
    let Some(live) = cached else {
        return Ok(Deleted::Absent);
    };
    if !is_controlled_by(&live, owner_uid) {
        return Ok(Deleted::Foreign);
    }
    delete_this(api, &live).await
}

/// Deletes `live` (and, in the background, what it owns) if it is still the
/// object seen: the UID precondition spares a same-named successor.
async fn delete_this<K>(api: &Api<K>, live: &K) -> kube::Result<Deleted>
where
    K: Resource + DeserializeOwned + Clone + Debug,
{
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: live.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&live.name_any(), &dp).await {
        Ok(_) => Ok(Deleted::Deleted),
        // Gone, or replaced by another object of that name (the UID precondition):
        // the object seen no longer exists.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(Deleted::Absent),
        Err(e) => Err(e),
    }
}

/// The desired object as JSON with the hash annotation set.
fn stamped<K: Serialize>(desired: &K) -> Value {
    let mut v = serde_json::to_value(desired).expect("Kubernetes objects serialize to JSON");
    let hash = crate::build::content_hash(&v);
    let meta = v
        .as_object_mut()
        .and_then(|o| o.get_mut("metadata"))
        .and_then(Value::as_object_mut)
        .expect("objects have metadata");
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(a) = annotations {
        a.insert(APPLIED_HASH_ANNOTATION.into(), Value::String(hash));
    }
    v
}

/// `desired` with the hash annotation of its [`stamped`] JSON (`stamp`): the
/// same object, typed, without parsing the JSON back.
fn with_stamp<K: Resource + Clone>(desired: &K, stamp: &Value) -> K {
    let mut object = desired.clone();
    if let Some(hash) = stamp["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].as_str() {
        object
            .annotations_mut()
            .insert(APPLIED_HASH_ANNOTATION.into(), hash.to_string());
    }
    object
}

fn up_to_date<K: Serialize>(desired: &Value, live: &K) -> bool {
    let live = serde_json::to_value(live).expect("Kubernetes objects serialize to JSON");
    is_subset(desired, &live, "")
}

/// True when every field of `desired` has the same value in `live`. Zero
/// values (false, 0, "", [], {}) match an absent field, as the API server
/// omits them; quantities compare by value ("1000m" = "1").
pub fn is_subset(desired: &Value, live: &Value, key: &str) -> bool {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => d.iter().all(|(k, dv)| match l.get(k) {
            Some(lv) if matches!(key, "requests" | "limits") => is_subset(dv, lv, QUANTITY),
            Some(lv) => is_subset(dv, lv, k),
            None => is_zero(dv),
        }),
        (Value::Array(d), Value::Array(l)) => {
            d.len() == l.len() && d.iter().zip(l).all(|(dv, lv)| is_subset(dv, lv, key))
        }
        (Value::String(d), Value::String(l)) if d != l => {
            matches!(key, QUANTITY | "sizeLimit") && same_quantity(d, l)
        }
        (d, Value::Null) => is_zero(d),
        (d, l) => d == l,
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
    }
}

/// The key under which [`is_subset`] compares entries of resource lists.
const QUANTITY: &str = "\0quantity";

/// True when `a` and `b` are quantities of the same value ("500m" = "0.5").
fn same_quantity(a: &str, b: &str) -> bool {
    use kube_quantity::ParsedQuantity;
    match (ParsedQuantity::try_from(a), ParsedQuantity::try_from(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The object created is the stamped JSON, typed.
    #[test]
    fn the_created_object_carries_the_stamp() {
        let desired: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "x", "annotations": {"user": "kept"}},
            "spec": {"ports": [{"port": 8000}]},
        }))
        .unwrap();
        let stamp = stamped(&desired);
        let created = with_stamp(&desired, &stamp);
        assert_eq!(serde_json::to_value(&created).unwrap(), stamp);
        assert_eq!(created.annotations().len(), 2);
    }

    #[test]
    fn extra_live_fields_and_defaults_do_not_count_as_drift() {
        let desired = json!({"spec": {"replicas": 1, "template": {"spec": {"hostIPC": false,
            "containers": [{"name": "vllm", "args": ["--a"], "env": []}]}}}});
        let live = json!({"spec": {"replicas": 1, "progressDeadlineSeconds": 600,
            "template": {"spec": {"containers": [{"name": "vllm", "args": ["--a"],
            "terminationMessagePath": "/dev/termination-log"}]}}}});
        assert!(is_subset(&desired, &live, ""));
    }

    #[test]
    fn changed_values_and_removed_list_items_are_drift() {
        let desired = json!({"spec": {"image": "a:1", "args": ["--a", "--b"]}});
        assert!(!is_subset(
            &desired,
            &json!({"spec": {"image": "a:2", "args": ["--a", "--b"]}}),
            ""
        ));
        assert!(!is_subset(
            &desired,
            &json!({"spec": {"image": "a:1", "args": ["--a"]}}),
            ""
        ));
        assert!(!is_subset(&json!({"a": true}), &json!({}), ""));
    }

    #[test]
    fn quantities_compare_by_value_but_names_do_not() {
        let d = json!({"limits": {"cpu": "0.5", "memory": "1Gi"}});
        let l = json!({"limits": {"cpu": "500m", "memory": "1073741824"}});
        assert!(is_subset(&d, &l, ""));
        assert!(!is_subset(
            &json!({"image": "1"}),
            &json!({"image": "1.0"}),
            ""
        ));
        assert!(!is_subset(
            &json!({"limits": {"cpu": "1"}}),
            &json!({"limits": {"cpu": "2"}}),
            ""
        ));
    }

    #[test]
    fn only_webhook_refusals_become_outcomes() {
        let api = |code: u16, message: &str| -> Result<Outcome<()>> {
            Err(Error::Kube(kube::Error::Api(
                kube::core::Status::failure(message, "Forbidden")
                    .with_code(code)
                    .boxed(),
            )))
        };
        let denied = "admission webhook \"vscaledobject.kb.io\" denied the request: the \
                      workload 'qwen' of type 'aiinfra.example.com/VLLMService' is already \
                      managed by the hpa 'mine'";
        assert_eq!(
            refused_by_webhook(api(403, denied)).unwrap(),
            Outcome::Refused(denied.into())
        );
        assert_eq!(
            refused_by_webhook(api(400, denied)).unwrap(),
            Outcome::Refused(denied.into())
        );
        // RBAC's 403 and the API server's own errors stay errors.
        let rbac = "scaledobjects.keda.sh is forbidden: User \"x\" cannot create resource";
        assert!(refused_by_webhook(api(403, rbac)).is_err());
        assert!(refused_by_webhook(api(500, denied)).is_err());
        assert_eq!(
            refused_by_webhook(Ok(Outcome::<()>::Absent)).unwrap(),
            Outcome::Absent
        );
    }

    #[test]
    fn stamping_is_deterministic_and_tracks_changes() {
        let a = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let b = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let c = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 2}}));
        let h = |v: &Value| v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].clone();
        assert_eq!(h(&a), h(&b));
        assert_ne!(h(&a), h(&c));
    }
}
