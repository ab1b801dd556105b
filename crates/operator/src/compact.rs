//! Objects as the controller's caches keep them: their metadata, parsed, and
//! the JSON text of everything else, parsed when a reconcile reads one.
//!
//! k8s-openapi's types keep every optional field inline (a `Container` is
//! 2 KiB before any of its strings), so a parsed Deployment of ~2.7 KB of
//! JSON takes ~17 KB of memory; held as [`Compact`] it takes its metadata
//! and that text. The caches (VLLMServices, Deployments, Services, PDBs,
//! Jobs, PVCs, Pods) held most of the operator's memory at 1,000 services
//! (BENCHMARKS.md). A watch event's spec and status are only scanned and
//! copied; the parse moves to the few objects a reconcile reads, which
//! measured saves memory, not CPU.
//!
//! The metadata stays parsed because the watch machinery (the reflector's
//! keys, owner references, labels) reads it from every object.

use std::{borrow::Cow, collections::BTreeMap, fmt, marker::PhantomData};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{
    Deserialize,
    de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor},
};
use serde_json::value::RawValue;

use crate::slim::Key;

/// A `K` held as its parsed metadata and the JSON text of its other fields.
pub struct Compact<K> {
    metadata: ObjectMeta,
    /// A JSON object with every top-level field but `apiVersion` and `kind`
    /// (in practice `spec` and `status`), as the API server sent them, and an
    /// empty `metadata` (types derived by kube require one; [`Compact::expand`]
    /// puts the parsed one in its place).
    rest: Box<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()> + DeserializeOwned> Compact<K> {
    /// The whole object. Fails only if the text the API server sent for
    /// the object's fields does not parse as `K`'s (a server or type bug).
    pub fn expand(&self) -> Result<K, Unparsable> {
        let mut object: K = self.project()?;
        *object.meta_mut() = self.metadata.clone();
        Ok(object)
    }

    /// The fields of the held text that `P` has (serde skips the others
    /// without building them): cheaper than [`Compact::expand`] when a caller
    /// reads a few fields. `P`'s metadata, if it has one, is empty.
    pub fn project<P: DeserializeOwned>(&self) -> Result<P, Unparsable> {
        serde_json::from_str(&self.rest).map_err(|source| Unparsable {
            object: format!(
                "{} {}/{}",
                K::kind(&()),
                self.metadata.namespace.as_deref().unwrap_or_default(),
                self.metadata.name.as_deref().unwrap_or_default()
            ),
            source,
        })
    }
}

impl<K> Compact<K> {
    /// Drops the top-level `field` (e.g. a Pod's `spec`, which no reconcile
    /// reads) from what is held. Kept whole if its text is not a plain map.
    pub fn without(&mut self, field: &str) {
        let Ok(fields) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(&self.rest) else {
            return;
        };
        if !fields.contains_key(field) {
            return;
        }
        let mut rest = String::with_capacity(self.rest.len());
        rest.push('{');
        for (key, value) in fields.into_iter().filter(|(k, _)| *k != field) {
            if rest.len() > 1 {
                rest.push(',');
            }
            push_field(&mut rest, key, value);
        }
        rest.push('}');
        self.rest = rest.into_boxed_str();
    }
}

/// How every held text starts: an empty `metadata`, for the types that require one.
const NO_METADATA: &str = r#"{"metadata":{}"#;

/// Appends `"key":value` to a JSON object's text.
fn push_field(rest: &mut String, key: &str, value: &RawValue) {
    rest.push_str(&serde_json::to_string(key).expect("a string serializes"));
    rest.push(':');
    rest.push_str(value.get());
}

/// A cached object whose fields do not parse as its kind's.
#[derive(Debug, thiserror::Error)]
#[error("the {object} the API server sent does not parse as one: {source}")]
pub struct Unparsable {
    /// Kind, namespace and name.
    pub object: String,
    pub source: serde_json::Error,
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Compact {
            metadata: self.metadata.clone(),
            rest: self.rest.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compact")
            .field("metadata", &self.metadata)
            .field("rest_bytes", &self.rest.len())
            .finish()
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Compact<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K> Deserialize<'de> for Compact<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(CompactVisitor(PhantomData))
    }
}

struct CompactVisitor<K>(PhantomData<fn() -> K>);

impl<'de, K> Visitor<'de> for CompactVisitor<K> {
    type Value = Compact<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut metadata = None;
        let mut rest = String::from(NO_METADATA);
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "metadata" => metadata = Some(map.next_value::<ObjectMeta>()?),
                "apiVersion" | "kind" => {
                    map.next_value::<IgnoredAny>()?;
                }
                field => {
                    // Needs serde_json's own deserializer (kube parses with it).
                    let value: Box<RawValue> = map.next_value()?;
                    rest.push(',');
                    push_field(&mut rest, field, &value);
                }
            }
        }
        rest.push('}');
        Ok(Compact {
            metadata: metadata.ok_or_else(|| de::Error::missing_field("metadata"))?,
            rest: rest.into_boxed_str(),
            kind: PhantomData,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slim::Slim;
    use k8s_openapi::api::{
        apps::v1::Deployment,
        core::v1::{Pod, Service},
    };
    use serde_json::json;
    use vllmservice_api::VLLMService;

    fn deployment() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "d", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": {"app": "x"},
                "annotations": {"aiinfra.example.com/applied-hash": "abc"},
                "ownerReferences": [{"apiVersion": "aiinfra.example.com/v1alpha1",
                    "kind": "VLLMService", "name": "x", "uid": "o1", "controller": true}],
                "managedFields": [{"manager": "vllmservice-operator", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
            },
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "x"}},
                "template": {
                    "metadata": {"labels": {"app": "x"}},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm:1",
                        "args": ["--model", "m \"quoted\" é"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
                }
            },
            "status": {"replicas": 2, "availableReplicas": 1,
                "conditions": [{"type": "Available", "status": "False"}]}
        })
    }

    #[test]
    fn expands_to_the_object_parsed_whole() {
        let text = deployment().to_string();
        let compact: Compact<Deployment> = serde_json::from_str(&text).unwrap();
        let whole: Deployment = serde_json::from_str(&text).unwrap();
        assert_eq!(compact.expand().unwrap(), whole);
        assert_eq!(compact.meta().name.as_deref(), Some("d"));
        // A clone expands the same.
        assert_eq!(compact.clone().expand().unwrap(), whole);
    }

    #[test]
    fn through_slim_the_field_sets_are_dropped_and_nothing_else() {
        let text = deployment().to_string();
        let compact: Slim<Compact<Deployment>> = serde_json::from_str(&text).unwrap();
        let slimmed: Slim<Deployment> = serde_json::from_str(&text).unwrap();
        let expanded = compact.0.expand().unwrap();
        assert_eq!(expanded, slimmed.0);
        let entries = expanded.metadata.managed_fields.unwrap();
        assert_eq!(entries[0].manager.as_deref(), Some("vllmservice-operator"));
        assert!(entries[0].fields_v1.is_none());
    }

    #[test]
    fn only_the_text_of_the_fields_is_held() {
        let compact: Compact<Service> = serde_json::from_str(
            r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":8000}]}}"#,
        )
        .unwrap();
        assert_eq!(
            &*compact.rest,
            r#"{"metadata":{},"spec":{"ports":[{"port":8000}]}}"#
        );
        let svc = compact.expand().unwrap();
        assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 8000);
    }

    /// kube's derived types (the VLLMService) require a `metadata`.
    #[test]
    fn a_vllmservice_expands_with_its_metadata_spec_and_status() {
        let text = json!({
            "apiVersion": "aiinfra.example.com/v1alpha1", "kind": "VLLMService",
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "u", "generation": 2},
            "spec": {"image": "vllm/vllm-openai:latest", "modelPath": "/m", "modelName": "m",
                     "storage": {"pvcName": "p", "mountPath": "/data"}},
            "status": {"phase": "Running"},
        })
        .to_string();
        let compact: Slim<Compact<VLLMService>> = serde_json::from_str(&text).unwrap();
        let whole: VLLMService = serde_json::from_str(&text).unwrap();
        let vs = compact.0.expand().unwrap();
        assert_eq!(vs.metadata, whole.metadata);
        assert_eq!(vs.spec.storage.pvc_name.as_deref(), Some("p"));
        assert_eq!(vs.status, whole.status);
        assert!(vs.status.is_some());
    }

    #[test]
    fn a_dropped_field_is_gone_and_the_others_stay() {
        let text = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"nodeName":"n1"},"status":{"phase":"Running"}}"#;
        let mut compact: Compact<Pod> = serde_json::from_str(text).unwrap();
        compact.without("spec");
        assert_eq!(
            &*compact.rest,
            r#"{"metadata":{},"status":{"phase":"Running"}}"#
        );
        let pod = compact.expand().unwrap();
        assert!(pod.spec.is_none());
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
        compact.without("spec");
        assert_eq!(
            &*compact.rest,
            r#"{"metadata":{},"status":{"phase":"Running"}}"#
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_fails_on_expand_and_metadata_is_required() {
        let compact: Compact<Service> =
            serde_json::from_str(r#"{"metadata":{"name":"s"},"spec":{"ports":"none"}}"#).unwrap();
        assert!(compact.expand().is_err());
        let missing = serde_json::from_str::<Compact<Service>>(r#"{"spec":{}}"#);
        assert!(missing.unwrap_err().to_string().contains("metadata"));
    }

    /// What kube parses: watch events (`type` first, as the API server sends
    /// them) and list pages, both from text.
    #[test]
    fn watch_events_and_list_pages_parse_as_kube_reads_them() {
        let line = format!(r#"{{"type":"MODIFIED","object":{}}}"#, deployment());
        let event: kube::core::WatchEvent<Slim<Compact<Deployment>>> =
            serde_json::from_str(&line).unwrap();
        let kube::core::WatchEvent::Modified(object) = event else {
            panic!("not a modification");
        };
        assert_eq!(object.0.expand().unwrap().spec.unwrap().replicas, Some(2));
        let page = json!({"apiVersion": "apps/v1", "kind": "DeploymentList",
            "metadata": {"resourceVersion": "9"}, "items": [deployment(), deployment()]});
        let list: kube::core::ObjectList<Slim<Compact<Deployment>>> =
            serde_json::from_str(&page.to_string()).unwrap();
        assert_eq!(list.items.len(), 2);
        assert_eq!(
            list.items[1].0.expand().unwrap().metadata.uid.as_deref(),
            Some("u1")
        );
    }
}
