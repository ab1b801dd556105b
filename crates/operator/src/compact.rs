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
//!
//! The text is held compressed (LZ4, `lz4_flex`'s block format) against a
//! dictionary per kind: the text of the first object of that kind the
//! process held that is typical of its cache ([`Held`]). The children of
//! VLLMServices are made by one builder and differ in names, hashes, images
//! and numbers, so a Deployment's ~2.7 KB of text take ~0.1–0.3 KB beside
//! the dictionary (~1.7 KB with LZ4 alone); an object unlike the dictionary
//! still compresses as LZ4 alone would. A reconcile's read decompresses the
//! few objects it parses (under a microsecond each); a watch event
//! compresses one (about a microsecond). BENCHMARKS.md, "Ninth step".

use std::{
    any::TypeId,
    borrow::Cow,
    collections::BTreeMap,
    fmt,
    marker::PhantomData,
    sync::{Mutex, PoisonError},
};

use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        batch::v1::Job,
        core::v1::{PersistentVolumeClaim, Pod, Service},
        policy::v1::PodDisruptionBudget,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::Resource;
use serde::{
    Deserialize,
    de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor},
};
use serde_json::value::RawValue;
use vllmservice_api::VLLMService;

use crate::{names, slim::Key};

/// A `K` held as its parsed metadata and the JSON text of its other fields.
pub struct Compact<K> {
    metadata: ObjectMeta,
    /// A JSON object with every top-level field but `apiVersion` and `kind`
    /// (in practice `spec` and `status`), as the API server sent them, and an
    /// empty `metadata` (types derived by kube require one; [`Compact::expand`]
    /// puts the parsed one in its place); compressed ([`pack`]).
    rest: Box<[u8]>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()> + DeserializeOwned + Held> Compact<K> {
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
        unpack::<K>(&self.rest)
            .and_then(|text| serde_json::from_str(&text))
            .map_err(|source| Unparsable {
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

impl<K: Held> Compact<K> {
    /// Drops the top-level `field` (e.g. a Pod's `spec`, which no reconcile
    /// reads) from what is held. Kept whole if its text is not a plain map.
    pub fn without(&mut self, field: &str) {
        let Ok(text) = unpack::<K>(&self.rest) else {
            return;
        };
        let Ok(fields) = serde_json::from_str::<BTreeMap<&str, &RawValue>>(&text) else {
            return;
        };
        if !fields.contains_key(field) {
            return;
        }
        let mut rest = String::with_capacity(text.len());
        rest.push('{');
        for (key, value) in fields.into_iter().filter(|(k, _)| *k != field) {
            if rest.len() > 1 {
                rest.push(',');
            }
            push_field(&mut rest, key, value);
        }
        rest.push('}');
        self.rest = pack::<K>(&rest, false);
    }
}

/// Which objects of a kind may become its dictionary: one like those its
/// cache holds.
pub trait Held: 'static {
    /// Whether an object with this metadata is typical of the cache. Every
    /// object by default (the caches that are label-selected, or hold all).
    fn typical(_meta: &ObjectMeta) -> bool {
        true
    }
}

impl Held for VLLMService {}
impl Held for Deployment {}
impl Held for Service {}
impl Held for PersistentVolumeClaim {}
impl Held for PodDisruptionBudget {}
impl Held for Job {}

/// Pods: with GPU accounting one watch sees every pod in the cluster, and
/// the cache keeps the operator's.
impl Held for Pod {
    fn typical(meta: &ObjectMeta) -> bool {
        names::is_managed(meta)
    }
}

/// Whether a packed text was compressed against its kind's dictionary.
const PLAIN: u8 = 0;
const AGAINST_DICTIONARY: u8 = 1;

/// The held form of an object's text: a byte saying whether it was
/// compressed against `K`'s dictionary ([`dictionary`]; `seed` lets this text
/// become it when there is none yet), the text's length (u32, little-endian),
/// and the LZ4 block.
fn pack<K: Held>(text: &str, seed: bool) -> Box<[u8]> {
    pack_with(text, dictionary(TypeId::of::<K>(), seed.then_some(text)))
}

/// The text [`pack`] compressed. Fails only on bytes that `pack` did not make.
fn unpack<K: Held>(packed: &[u8]) -> Result<String, serde_json::Error> {
    unpack_with(packed, || dictionary(TypeId::of::<K>(), None))
}

// The compressor is not generic: one copy of it in the binary, not one per
// kind. The text comes back as a `str` so that it is parsed with the same
// serde_json reader as everything else (a slice reader would instantiate
// every kind's deserializer a second time: +0.8 MB of code, measured).
#[inline(never)]
fn pack_with(text: &str, dictionary: &[u8]) -> Box<[u8]> {
    let input = text.as_bytes();
    let mut out = vec![0; 5 + lz4_flex::block::get_maximum_output_size(input.len())];
    out[0] = if dictionary.is_empty() {
        PLAIN
    } else {
        AGAINST_DICTIONARY
    };
    let length = u32::try_from(input.len()).expect("an object's text is less than 4 GiB");
    out[1..5].copy_from_slice(&length.to_le_bytes());
    let written = lz4_flex::block::compress_into_with_dict(input, &mut out[5..], dictionary)
        .expect("the output has the maximum size");
    out.truncate(5 + written);
    out.into_boxed_slice()
}

#[inline(never)]
fn unpack_with(
    packed: &[u8],
    dictionary: fn() -> &'static [u8],
) -> Result<String, serde_json::Error> {
    let broken = || de::Error::custom("not a packed text");
    let (&flag, rest) = packed.split_first().ok_or_else(broken)?;
    let (length, block) = rest.split_first_chunk::<4>().ok_or_else(broken)?;
    let length = usize::try_from(u32::from_le_bytes(*length)).map_err(|_| broken())?;
    let dictionary = match flag {
        PLAIN => &[][..],
        AGAINST_DICTIONARY => dictionary(),
        _ => return Err(broken()),
    };
    let text = lz4_flex::block::decompress_with_dict(block, length, dictionary)
        .map_err(de::Error::custom)?;
    String::from_utf8(text).map_err(de::Error::custom)
}

/// Each kind's dictionary, set once and never changed (what was compressed
/// against it is decompressed against it): at most one per cached kind.
static DICTIONARIES: Mutex<Vec<(TypeId, &'static [u8])>> = Mutex::new(Vec::new());

/// The dictionary of the kind `kind`: the first `text` offered becomes it
/// (it lives as long as the process; there are as many as cached kinds).
/// Empty before one.
fn dictionary(kind: TypeId, first: Option<&str>) -> &'static [u8] {
    let mut all = DICTIONARIES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, dictionary)) = all.iter().find(|(k, _)| *k == kind) {
        return dictionary;
    }
    let Some(text) = first else {
        return &[];
    };
    let dictionary: &'static [u8] = Box::leak(text.as_bytes().into());
    all.push((kind, dictionary));
    dictionary
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
            .field("packed_bytes", &self.rest.len())
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

impl<'de, K: Held> Deserialize<'de> for Compact<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(CompactVisitor(PhantomData))
    }
}

struct CompactVisitor<K>(PhantomData<fn() -> K>);

impl<'de, K: Held> Visitor<'de> for CompactVisitor<K> {
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
        let metadata = metadata.ok_or_else(|| de::Error::missing_field("metadata"))?;
        Ok(Compact {
            rest: pack::<K>(&rest, K::typical(&metadata)),
            metadata,
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

    /// The text a [`Compact`] holds, uncompressed.
    fn held<K: Held>(c: &Compact<K>) -> String {
        unpack::<K>(&c.rest).unwrap()
    }

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
            held(&compact),
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
            held(&compact),
            r#"{"metadata":{},"status":{"phase":"Running"}}"#
        );
        let pod = compact.expand().unwrap();
        assert!(pod.spec.is_none());
        assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
        compact.without("spec");
        assert_eq!(
            held(&compact),
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

    /// A Job with a realistic amount of text (tests of other kinds set their
    /// own dictionaries; Jobs are this test's alone).
    fn job(name: &str, image: &str, model: &str) -> String {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {
                "backoffLimit": 4, "completionMode": "NonIndexed", "completions": 1,
                "manualSelector": false, "parallelism": 1, "podReplacementPolicy": "TerminatingOrFailed",
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": format!("uid-{name}")}},
                "suspend": false, "ttlSecondsAfterFinished": 600,
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/instance": name,
                        "app.kubernetes.io/managed-by": "vllmservice-operator",
                        "batch.kubernetes.io/job-name": name}},
                    "spec": {
                        "containers": [{"name": "download", "image": image,
                            "args": ["download", model, "--local-dir", format!("/data/models/{model}")],
                            "imagePullPolicy": "IfNotPresent",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                            "securityContext": {"allowPrivilegeEscalation": false,
                                "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": true,
                                "seccompProfile": {"type": "RuntimeDefault"}},
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File",
                            "volumeMounts": [{"mountPath": "/data/models", "name": "models"}]}],
                        "dnsPolicy": "ClusterFirst", "restartPolicy": "OnFailure",
                        "schedulerName": "default-scheduler", "securityContext": {},
                        "terminationGracePeriodSeconds": 30,
                        "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}]
                    }
                }
            },
            "status": {"active": 1, "ready": 0, "startTime": "2026-12-04T21:00:00Z",
                "uncountedTerminatedPods": {}}
        })
        .to_string()
    }

    #[test]
    fn objects_like_the_first_of_their_kind_are_held_in_a_fraction_of_their_text() {
        use k8s_openapi::api::batch::v1::Job;
        let first = job(
            "qwen-download",
            "python:3.12-slim",
            "Qwen/Qwen2.5-1.5B-Instruct",
        );
        let like = job(
            "llama-download",
            "python:3.13-slim",
            "meta-llama/Llama-3.1-8B",
        );
        let unlike = json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "other"}, "spec": {"template": {"spec": {"containers": []}}},
            "status": {"failed": 3}})
        .to_string();
        let held: Vec<Compact<Job>> = [&first, &like, &unlike]
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        // Each expands to what it was, whatever the dictionary.
        for (text, compact) in [&first, &like, &unlike].iter().zip(&held) {
            let whole: Job = serde_json::from_str(text).unwrap();
            assert_eq!(compact.expand().unwrap(), whole);
        }
        let like_text = held[1].project::<serde_json::Value>().unwrap().to_string();
        assert!(
            held[1].rest.len() * 5 < like_text.len(),
            "{} packed bytes for {} bytes of text",
            held[1].rest.len(),
            like_text.len()
        );
    }

    #[test]
    fn only_the_operators_pods_may_become_the_pod_dictionary() {
        let meta = |labels: serde_json::Value| -> ObjectMeta {
            serde_json::from_value(json!({"name": "p", "labels": labels})).unwrap()
        };
        let ours = meta(json!({names::MANAGED_BY_LABEL: names::MANAGED_BY_VALUE}));
        let theirs = meta(json!({names::MANAGED_BY_LABEL: "helm"}));
        assert!(<Pod as Held>::typical(&ours));
        assert!(!<Pod as Held>::typical(&theirs));
        assert!(!<Pod as Held>::typical(&meta(json!({}))));
        assert!(<Deployment as Held>::typical(&theirs));
    }

    #[test]
    fn a_packed_text_that_pack_did_not_make_is_refused() {
        for bytes in [&[][..], &[7, 1, 0, 0, 0, 0][..], &[PLAIN, 9][..]] {
            assert!(unpack::<Service>(bytes).is_err(), "{bytes:?}");
        }
        let packed = pack::<Service>(r#"{"spec":{}}"#, false);
        assert_eq!(unpack::<Service>(&packed).unwrap(), r#"{"spec":{}}"#);
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
