//! Writes whose answer the operator does not need whole.
//!
//! The API server answers a write with the whole object it stored, every
//! manager's field sets included, which it encodes and sends and we parsed
//! only to drop it. These writes ask for the object's metadata instead
//! (`Accept: ...;as=PartialObjectMetadata`, the representation of metadata-only
//! lists and watches) and parse it without the field sets ([`Slim`]). A server that ignores the
//! request answers with the whole object, which parses the same way.
//!
//! The creates and applies of children keep kube's whole answer: it becomes
//! the live child the status step reads, and a second, field-set-skipping
//! parse of every child kind would add its deserializer to the binary again
//! (measured: +0.6 MB of code) to skip one field-set tree per create or apply.

use std::fmt::Debug;

use http::{HeaderValue, header::ACCEPT};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{
    Api, Resource,
    api::{Patch, PatchParams, PostParams},
    core::Request,
};
use serde::{Deserialize, Serialize};

use crate::slim::Slim;

/// The media type of an answer with the object's metadata only (JSON if refused).
pub const METADATA_ONLY: &str =
    "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json";

/// An answer read for its metadata only: the other fields are skipped, not built.
#[derive(Deserialize)]
struct MetaOnly {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Patches `name`, or its `subresource` (e.g. `status`); returns the object's metadata.
pub async fn patch_meta<K, P>(
    api: &Api<K>,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<ObjectMeta>
where
    K: Resource + Clone,
    P: Serialize + Debug,
{
    let url = Request::new(api.resource_url());
    let request = match subresource {
        Some(sub) => url.patch_subresource(sub, name, params, patch),
        None => url.patch(name, params, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    send(api, request, "patch").await
}

/// Creates `object`; returns the created object's metadata.
pub async fn create_meta<K>(
    api: &Api<K>,
    params: &PostParams,
    object: &K,
) -> kube::Result<ObjectMeta>
where
    K: Resource + Clone + Serialize,
{
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url())
        .create(params, body)
        .map_err(kube::Error::BuildRequest)?;
    send(api, request, "create").await
}

/// Sends `request` as `api`'s client does, asking for and reading the metadata only.
async fn send<K: Resource + Clone>(
    api: &Api<K>,
    mut request: http::Request<Vec<u8>>,
    verb: &'static str,
) -> kube::Result<ObjectMeta> {
    request
        .headers_mut()
        .insert(ACCEPT, HeaderValue::from_static(METADATA_ONLY));
    request.extensions_mut().insert(verb);
    let answer: Slim<MetaOnly> = api.clone().into_client().request(request).await?;
    Ok(answer.0.metadata)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_is_read_for_its_metadata_whole_or_partial() {
        let meta = json!({"name": "qwen", "namespace": "ns", "resourceVersion": "42",
            "managedFields": [{"manager": "vllmservice-operator", "operation": "Apply",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]});
        // What the API server answers with `as=PartialObjectMetadata`, and without it.
        let partial = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": meta});
        let whole = json!({"kind": "VLLMService", "apiVersion": "aiinfra.example.com/v1alpha1",
            "metadata": meta, "spec": {"model": {"name": "m"}},
            "status": {"phase": "Running", "conditions": [{"type": "Available"}]}});
        for answer in [partial, whole] {
            let read: Slim<MetaOnly> = serde_json::from_value(answer).unwrap();
            let m = read.0.metadata;
            assert_eq!(m.resource_version.as_deref(), Some("42"));
            let entry = &m.managed_fields.unwrap()[0];
            assert_eq!(entry.manager.as_deref(), Some("vllmservice-operator"));
            assert!(entry.fields_v1.is_none(), "field sets are skipped");
        }
    }
}
