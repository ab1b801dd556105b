//! Writing children: server-side apply with one field manager, after an
//! ownership check, and only when something differs from what is live.
//!
//! "Differs" means either the desired object changed since we last applied it
//! (an annotation carries a hash of what we applied, so removed fields are
//! noticed) or someone edited a field we set (the desired object is no longer
//! a subset of the live one). Fields other parties added are not our business.

use std::fmt::Debug;

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use sha2::{Digest, Sha256};

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

/// True when `obj` has a controller owner reference to the object with `owner_uid`.
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    obj.owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// Applies `desired` unless it is already live; never touches a foreign object.
/// Returns what it did and, unless the object is foreign, the live object.
///
/// `cached` is the object as the controller's watch last saw it. The cache can
/// lag behind the API server, so: an object the cache does not have is read
/// before it is created (a foreign object without our labels is never in the
/// cache), and an update of a cached object carries its `resourceVersion`, so a
/// stale copy makes the API server answer 409 and the object is read again.
pub async fn apply_owned<K>(
    api: &Api<K>,
    cached: Option<K>,
    desired: &K,
    owner_uid: &str,
) -> kube::Result<(Applied, Option<K>)>
where
    K: Resource + Serialize + DeserializeOwned + Clone + Debug,
{
    let name = desired.name_any();
    let desired = stamped(desired);
    let mut from_cache = cached.is_some();
    let mut live = match cached {
        Some(c) => Some(c),
        None => api.get_opt(&name).await?,
    };
    loop {
        let outcome = match &live {
            Some(live) if !is_controlled_by(live, owner_uid) => {
                return Ok((Applied::Foreign, None));
            }
            Some(live) if up_to_date(&desired, live) => {
                return Ok((Applied::Unchanged, Some(live.clone())));
            }
            Some(_) => Applied::Updated,
            None => Applied::Created,
        };
        let mut body = desired.clone();
        if let (true, Some(live)) = (from_cache, &live) {
            body["metadata"]["resourceVersion"] = live.resource_version().into();
        }
        let applied = api
            .patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await;
        match (applied, live) {
            (Ok(object), _) => return Ok((outcome, Some(object))),
            // The cached copy was stale: decide again on the object as it is now.
            (Err(kube::Error::Api(e)), _) if e.code == 409 && from_cache => {
                from_cache = false;
                live = api.get_opt(&name).await?;
            }
            // A hand edit can leave list entries owned by another manager next to ours
            // (e.g. a second Service port named "http"), which apply cannot remove and
            // the API server refuses. Replace the object with what we want, keeping the
            // labels and annotations others added.
            (Err(kube::Error::Api(e)), Some(live)) if e.code == 422 => {
                let replacement = replacement(&desired, &live);
                let params = kube::api::PostParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                let replaced = api.replace(&name, &params, &replacement).await?;
                return Ok((Applied::Updated, Some(replaced)));
            }
            (Err(e), _) => return Err(e),
        }
    }
}

/// `desired` as a full object replacing `live`: its resourceVersion, and the
/// labels and annotations of `live` that `desired` does not set.
fn replacement<K: Resource + Serialize + DeserializeOwned>(desired: &Value, live: &K) -> K {
    let mut replacement = desired.clone();
    let meta = &mut replacement["metadata"];
    meta["resourceVersion"] = live.resource_version().into();
    for key in ["labels", "annotations"] {
        let mut merged = serde_json::to_value(live.meta())
            .ok()
            .and_then(|m| m.get(key).cloned())
            .unwrap_or_else(|| Value::Object(Default::default()));
        if let (Value::Object(m), Some(Value::Object(ours))) = (&mut merged, meta.get(key)) {
            m.extend(ours.clone());
        }
        meta[key] = merged;
    }
    serde_json::from_value(replacement).expect("the desired object deserializes as its own kind")
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
        // the object we controlled no longer exists.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(Deleted::Absent),
        Err(e) => Err(e),
    }
}

/// The desired object as JSON with the hash annotation set.
fn stamped<K: Serialize>(desired: &K) -> Value {
    let mut v = serde_json::to_value(desired).expect("Kubernetes objects serialize to JSON");
    let hash = hex(&Sha256::digest(v.to_string().as_bytes())[..8]);
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
            matches!(key, QUANTITY | "sizeLimit")
                && quantity_value(d).is_some_and(|a| Some(a) == quantity_value(l))
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

/// The value of a Kubernetes quantity string ("500m", "16Gi", "1e3"), if it is one.
fn quantity_value(s: &str) -> Option<f64> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse().ok()?),
        _ => return None,
    };
    Some(n * mult)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn stamping_is_deterministic_and_tracks_changes() {
        let a = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let b = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let c = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 2}}));
        let h = |v: &Value| v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].clone();
        assert_eq!(h(&a), h(&b));
        assert_ne!(h(&a), h(&c));
    }
}
