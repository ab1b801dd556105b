//! Names, labels, selectors and owner references of the children, and the
//! stable hashes some names and annotations carry: made here and nowhere
//! else. Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};
use vllmservice_api::VLLMService;

pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const NAME_VALUE: &str = "vllmservice";
pub const MANAGED_BY_VALUE: &str = "vllmservice-operator";

/// Whether an object carries this operator's managed-by label.
pub fn is_managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .is_some_and(|v| v == MANAGED_BY_VALUE)
}

/// The label selector string that finds every object this operator manages.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
}

/// The stable, immutable selector of the Deployment and Service: set once, never changed.
pub fn selector_labels(vs: &VLLMService) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), NAME_VALUE.to_string()),
        (INSTANCE_LABEL.to_string(), vs.name_any()),
    ])
}

/// `selector_labels` as a label selector string (for the scale subresource and pod lists).
pub fn selector_string(vs: &VLLMService) -> String {
    selector_labels(vs)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Labels of every child object: the user's `spec.labels`, then the operator's
/// keys, which win over user keys of the same name.
pub fn object_labels(vs: &VLLMService) -> BTreeMap<String, String> {
    let mut labels = vs.spec.labels.clone();
    labels.extend(operator_labels(vs));
    labels
}

/// The operator's own label keys on every child: the selector and `managed-by`.
pub fn operator_labels(vs: &VLLMService) -> BTreeMap<String, String> {
    let mut labels = selector_labels(vs);
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    labels
}

/// Every child has the VLLMService's name.
pub fn child_name(vs: &VLLMService) -> String {
    vs.name_any()
}

/// The controller owner reference to `vs`. A VLLMService read from the API
/// server has a name and a uid; one without (only a manifest rendered
/// offline) gets empty ones, which the API server would refuse, rather than
/// a panic.
pub fn owner_reference(vs: &VLLMService) -> OwnerReference {
    OwnerReference {
        api_version: VLLMService::api_version(&()).to_string(),
        kind: VLLMService::kind(&()).to_string(),
        name: vs.metadata.name.clone().unwrap_or_default(),
        uid: vs.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Metadata of a child: name, namespace, labels and the controller owner reference.
pub fn child_meta(vs: &VLLMService) -> ObjectMeta {
    ObjectMeta {
        name: Some(child_name(vs)),
        namespace: vs.namespace(),
        labels: Some(object_labels(vs)),
        owner_references: Some(vec![owner_reference(vs)]),
        ..ObjectMeta::default()
    }
}

/// The VLLMService a child or pod belongs to, read from its instance label.
pub fn instance_of(labels: &BTreeMap<String, String>) -> Option<&str> {
    (labels.get(NAME_LABEL).map(String::as_str) == Some(NAME_VALUE))
        .then(|| labels.get(INSTANCE_LABEL).map(String::as_str))
        .flatten()
}

/// The volume with the model, as messages name it.
pub fn volume_name(vs: &VLLMService) -> String {
    let s = &vs.spec;
    match (
        &s.storage.pvc_name,
        s.model_source.as_ref().and_then(|m| m.image.as_ref()),
    ) {
        (_, Some(image)) => format!("image {} (modelSource.image)", image.reference),
        (Some(pvc), None) => format!("PersistentVolumeClaim {pvc} (storage.pvcName)"),
        (None, None) => "the volume".into(),
    }
}

/// The vLLM container of the pods (its logs are read by this name).
pub const CONTAINER_NAME: &str = "vllm";

/// Size of the memory-backed /dev/shm when `spec.shmSize` is unset (as in vLLM's
/// own Kubernetes guide). It counts against the pod's memory, and a diagnosis
/// of a too small one names it.
pub const SHM_DEFAULT_SIZE: &str = "2Gi";

/// The name of the HorizontalPodAutoscaler KEDA makes for the ScaledObject of
/// `vs`: KEDA's own `keda-hpa-<name>` when it fits a label value (KEDA's webhook
/// refuses longer ones), else a shortened one with a hash of the full name,
/// which the ScaledObject then asks for.
pub fn hpa_name(vs: &VLLMService) -> String {
    const MAX: usize = 63;
    let name = default_hpa_name(vs);
    if name.len() <= MAX {
        return name;
    }
    let keep = &name[..MAX - 9];
    format!(
        "{}-{}",
        keep.trim_end_matches('-'),
        &content_hash(&name)[..8]
    )
}

pub fn default_hpa_name(vs: &VLLMService) -> String {
    format!("keda-hpa-{}", child_name(vs))
}

/// A short, stable hash of an object's JSON (16 hex digits): the same object
/// always hashes the same, any change of a field changes it.
pub fn content_hash<T: serde::Serialize>(object: &T) -> String {
    let json = serde_json::to_string(object).expect("Kubernetes objects serialize to JSON");
    Sha256::digest(json.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
