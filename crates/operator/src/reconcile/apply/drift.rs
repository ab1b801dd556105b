//! Whether a child differs from what should exist, pure: the desired object
//! carries a hash of itself (so removed fields are noticed), and someone's
//! edit of a field the operator sets shows as the desired object no longer
//! being a subset of the live one. Fields other parties added do not count.

use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde_json::Value;

use super::APPLIED_HASH_ANNOTATION;

/// The desired object as JSON with the hash annotation set.
pub(super) fn stamped<K: Serialize>(desired: &K) -> Value {
    let mut v = serde_json::to_value(desired).expect("Kubernetes objects serialize to JSON");
    let hash = crate::names::content_hash(&v);
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
pub(super) fn with_stamp<K: Resource + Clone>(desired: &K, stamp: &Value) -> K {
    let mut object = desired.clone();
    if let Some(hash) = stamp["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].as_str() {
        object
            .annotations_mut()
            .insert(APPLIED_HASH_ANNOTATION.into(), hash.to_string());
    }
    object
}

pub(super) fn up_to_date<K: Serialize>(desired: &Value, live: &K) -> bool {
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
    fn stamping_is_deterministic_and_tracks_changes() {
        let a = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let b = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 1}}));
        let c = stamped(&json!({"metadata": {"name": "x"}, "spec": {"a": 2}}));
        let h = |v: &Value| v["metadata"]["annotations"][APPLIED_HASH_ANNOTATION].clone();
        assert_eq!(h(&a), h(&b));
        assert_ne!(h(&a), h(&c));
    }
}
