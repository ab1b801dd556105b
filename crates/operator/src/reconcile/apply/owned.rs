//! Writes of one child, never a takeover: an absent child is created with a
//! create (POST), so if someone else created it meanwhile the create fails
//! with AlreadyExists and their object is left alone; every update carries
//! the resourceVersion it was decided on, so a stale decision fails with 409
//! and is made again. I/O: creates, applies, replaces and deletes.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};

use super::{
    FIELD_MANAGER,
    drift::{stamped, up_to_date, with_stamp},
};

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
    let name = desired.name_any();
    let stamp = stamped(desired);
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
        if up_to_date(&stamp, &current) {
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
                let replacement = replacement(&stamp, &current, resource_version)
                    .map_err(kube::Error::SerdeError)?;
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
    let kind = K::kind(&K::DynamicType::default()).to_string();
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
/// Told by the refusal's cause, `FieldValueDuplicate`, not by its wording.
fn is_duplicate_entry(e: &kube::core::Status) -> bool {
    e.code == 422 && crate::error::has_cause(e, "FieldValueDuplicate")
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
    match api
        .patch_metadata(&live.name_any(), &params, &Patch::<()>::Json(patch))
        .await
    {
        Ok(patched) => Ok(Some(patched.metadata.resource_version.unwrap_or_default())),
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
) -> serde_json::Result<K> {
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
    serde_json::from_value(merged)
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
pub(super) async fn delete_this<K>(api: &Api<K>, live: &K) -> kube::Result<Deleted>
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
