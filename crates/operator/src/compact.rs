//! Objects as the controller's caches keep them: the part of their metadata
//! the watches read, parsed, and the JSON text of everything else, parsed
//! when a reconcile reads one.
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
//! Every kind the operator watches is held this way (the optional APIs'
//! kinds, KEDA's HPAs and the GPU count's nodes too), which also keeps the
//! binary small: a kind's whole parser is built once, for the text, and not
//! again for the watch's adapters (`slim`'s filter, and serde's buffered
//! form that kube's watch events may take), which each built every nested
//! type's parser again (BENCHMARKS.md, "Tenth step").
//!
//! The part of the metadata the watch machinery reads from every object
//! stays parsed: the reflector's keys (name, namespace, uid,
//! resourceVersion), the generation, the owner references, the timestamps,
//! and the labels of the kinds whose watches map or filter by label
//! ([`Held::LABELS_READ`]). The rest of it (annotations, managed fields,
//! finalizers, the generated name; the labels of the other kinds) joins the
//! text: parsed, each label or annotation map is a 544-byte B-tree node
//! before its strings, and in the bench those fields were ~3.2 KB of a
//! Deployment's ~3.8 KB of parsed metadata (BENCHMARKS.md, "Tenth step").
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

use gateway_api::apis::standard::{gateways::Gateway, httproutes::HttpRoute};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        autoscaling::v2::HorizontalPodAutoscaler,
        batch::v1::Job,
        core::v1::{Node, PersistentVolumeClaim, Pod, Service},
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

use crate::{
    keda::scaledobjects::ScaledObject,
    names,
    prometheus::{prometheusrules::PrometheusRule, servicemonitors::ServiceMonitor},
    slim::Key,
};

/// A `K` held as the part of its metadata the watches read, parsed, and the
/// JSON text of everything else.
pub struct Compact<K> {
    /// What [`held_apart`] leaves.
    metadata: ObjectMeta,
    /// A JSON object with every top-level field but `apiVersion` and `kind`
    /// (in practice `spec` and `status`), as the API server sent them, and a
    /// `metadata` with what [`held_apart`] took (types derived by kube require
    /// one; [`Compact::expand`] joins the two parts); compressed ([`pack`]).
    rest: Box<[u8]>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource<DynamicType = ()> + DeserializeOwned + Held> Compact<K> {
    /// The whole object. Fails only if the text the API server sent for
    /// the object's fields does not parse as `K`'s (a server or type bug).
    pub fn expand(&self) -> Result<K, Unparsable> {
        let mut object: K = self.project()?;
        let mut metadata = self.metadata.clone();
        held_apart::<K>(object.meta_mut(), &mut metadata);
        *object.meta_mut() = metadata;
        Ok(object)
    }

    /// The fields of the held text that `P` has (serde skips the others
    /// without building them): cheaper than [`Compact::expand`] when a caller
    /// reads a few fields. `P`'s metadata, if it has one, holds only what
    /// [`held_apart`] took.
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
            push_field(&mut rest, key, value.get());
        }
        rest.push('}');
        self.rest = pack::<K>(&rest, false);
    }
}

/// How a kind's objects are held: which may become its dictionary, and
/// which parts of the metadata the operator reads.
pub trait Held: 'static {
    /// Whether an object with this metadata is typical of the cache. Every
    /// object by default (the caches that are label-selected, or hold all).
    fn typical(_meta: &ObjectMeta) -> bool {
        true
    }

    /// Whether the watches read the labels of cached objects (a mapper to
    /// the VLLMService or a filter): then they stay parsed. Otherwise only
    /// [`Compact::expand`] reads them.
    const LABELS_READ: bool = false;

    /// Whether the apply step reads who manages objects of this kind
    /// (`managedFields`: the kinds it applies). Otherwise none are held.
    const MANAGERS_READ: bool = true;
}

/// Only their status is applied, without reading who manages it.
impl Held for VLLMService {
    const MANAGERS_READ: bool = false;
}
impl Held for Deployment {}
impl Held for Service {}
/// Read, never written.
impl Held for PersistentVolumeClaim {
    const MANAGERS_READ: bool = false;
}
impl Held for PodDisruptionBudget {}
impl Held for HttpRoute {}
impl Held for ServiceMonitor {}
impl Held for PrometheusRule {}
impl Held for ScaledObject {}
/// Read, never written (the one a VLLMService's `gatewayRef` names).
impl Held for Gateway {
    const MANAGERS_READ: bool = false;
}
/// KEDA's; mapped to the VLLMService by the ScaledObject's label.
impl Held for HorizontalPodAutoscaler {
    const LABELS_READ: bool = true;
    const MANAGERS_READ: bool = false;
}
/// The GPU count's: every node, read once per event (`context::Placement`).
impl Held for Node {
    const MANAGERS_READ: bool = false;
}
/// The download Jobs are told from others by their labels.
impl Held for Job {
    const LABELS_READ: bool = true;
}

/// Pods: with GPU accounting one watch sees every pod in the cluster, and
/// the cache keeps the operator's (its label). A pod's instance label maps
/// it to its VLLMService, and a download pod's Job label to its Job. The
/// operator never writes a pod.
impl Held for Pod {
    fn typical(meta: &ObjectMeta) -> bool {
        names::is_managed(meta)
    }
    const LABELS_READ: bool = true;
    const MANAGERS_READ: bool = false;
}

/// Moves the parts of `from`'s metadata that are held as text into `to`:
/// annotations, managed fields, finalizers, the generated name, the self
/// link, the deletion grace period and, unless `K`'s watches read them
/// ([`Held::LABELS_READ`]), the labels. Splits parsed metadata (`to` empty)
/// and joins it again ([`Compact::expand`]: `from` parsed from the text).
fn held_apart<K: Held>(from: &mut ObjectMeta, to: &mut ObjectMeta) {
    to.annotations = from.annotations.take();
    to.managed_fields = from.managed_fields.take();
    to.finalizers = from.finalizers.take();
    to.generate_name = from.generate_name.take();
    to.self_link = from.self_link.take();
    to.deletion_grace_period_seconds = from.deletion_grace_period_seconds.take();
    if !K::LABELS_READ {
        to.labels = from.labels.take();
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

/// Appends `"key":value` (`value` JSON text) to the text of a JSON object
/// being written (`{` and the fields so far).
fn push_field(rest: &mut String, key: &str, value: &str) {
    if rest.len() > 1 {
        rest.push(',');
    }
    rest.push_str(&serde_json::to_string(key).expect("a string serializes"));
    rest.push(':');
    rest.push_str(value);
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
        let mut rest = String::from("{");
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "metadata" => {
                    let mut parsed = map.next_value::<ObjectMeta>()?;
                    if !K::MANAGERS_READ {
                        parsed.managed_fields = None;
                    }
                    let typical = K::typical(&parsed);
                    let mut apart = ObjectMeta::default();
                    held_apart::<K>(&mut parsed, &mut apart);
                    let text = serde_json::to_string(&apart).map_err(de::Error::custom)?;
                    push_field(&mut rest, "metadata", &text);
                    metadata = Some((parsed, typical));
                }
                "apiVersion" | "kind" => {
                    map.next_value::<IgnoredAny>()?;
                }
                field => {
                    // Needs serde_json's own deserializer (kube parses with it).
                    let value: Box<RawValue> = map.next_value()?;
                    push_field(&mut rest, field, value.get());
                }
            }
        }
        rest.push('}');
        let (metadata, typical) = metadata.ok_or_else(|| de::Error::missing_field("metadata"))?;
        Ok(Compact {
            rest: pack::<K>(&rest, typical),
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
                "generation": 3, "generateName": "d-", "selfLink": "/apis/apps/v1/d",
                "creationTimestamp": "2026-12-05T00:00:00Z",
                "deletionTimestamp": "2026-12-05T00:01:00Z", "deletionGracePeriodSeconds": 0,
                "finalizers": ["example.com/keep"],
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

    /// Every field of `ObjectMeta` is set in the fixture, so that the
    /// comparison with the object parsed whole covers each.
    #[test]
    fn the_watches_metadata_stays_parsed_and_the_rest_is_text() {
        let whole: Deployment = serde_json::from_value(deployment()).unwrap();
        let meta = serde_json::to_value(&whole.metadata).unwrap();
        assert_eq!(meta.as_object().unwrap().len(), 15, "every field: {meta}");
        let compact: Compact<Deployment> = serde_json::from_value(deployment()).unwrap();
        let parsed = compact.meta();
        assert_eq!(
            serde_json::to_value(parsed).unwrap(),
            json!({
                "name": "d", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "generation": 3, "creationTimestamp": "2026-12-05T00:00:00Z",
                "deletionTimestamp": "2026-12-05T00:01:00Z",
                "ownerReferences": whole.metadata.owner_references,
            })
        );
        assert!(
            held(&compact).contains(r#""annotations":{"aiinfra.example.com/applied-hash":"abc"}"#)
        );
        assert_eq!(compact.expand().unwrap(), whole);

        // Pods keep their labels parsed (the watches map them by label);
        // nobody reads who manages a pod.
        let mut pod = deployment();
        pod["kind"] = json!("Pod");
        pod["apiVersion"] = json!("v1");
        pod["spec"] = json!({"containers": []});
        pod["status"] = json!({"phase": "Running"});
        let compact: Compact<Pod> = serde_json::from_value(pod.clone()).unwrap();
        assert_eq!(compact.meta().labels, whole.metadata.labels);
        assert!(compact.meta().annotations.is_none());
        let mut pod: Pod = serde_json::from_value(pod).unwrap();
        pod.metadata.managed_fields = None;
        assert_eq!(compact.expand().unwrap(), pod);
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
