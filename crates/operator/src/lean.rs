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
use serde::{Deserialize, Serialize, de::DeserializeOwned};

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

/// Patches the `status` subresource of `name`; returns the object's metadata.
pub async fn patch_status<K, P>(
    api: &Api<K>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<ObjectMeta>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    let request = Request::new(api.resource_url())
        .patch_subresource("status", name, params, patch)
        .map_err(kube::Error::BuildRequest)?;
    let answer: Slim<MetaOnly> = send(api, request, "patch_status").await?;
    Ok(answer.0.metadata)
}

/// Creates `object`; returns the created object's metadata.
pub async fn create_meta<K>(
    api: &Api<K>,
    params: &PostParams,
    object: &K,
) -> kube::Result<ObjectMeta>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let answer: Slim<MetaOnly> = send(api, create_request(api, params, object)?, "create").await?;
    Ok(answer.0.metadata)
}

/// Patches `name`; returns the patched object's metadata.
pub async fn patch_meta<K, P>(
    api: &Api<K>,
    name: &str,
    params: &PatchParams,
    patch: &Patch<P>,
) -> kube::Result<ObjectMeta>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    P: Serialize + Debug,
{
    let request = Request::new(api.resource_url())
        .patch(name, params, patch)
        .map_err(kube::Error::BuildRequest)?;
    let answer: Slim<MetaOnly> = send(api, request, "patch").await?;
    Ok(answer.0.metadata)
}

fn create_request<K: Resource + Serialize>(
    api: &Api<K>,
    params: &PostParams,
    object: &K,
) -> kube::Result<http::Request<Vec<u8>>> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    Request::new(api.resource_url())
        .create(params, body)
        .map_err(kube::Error::BuildRequest)
}

/// Sends `request` as `api`'s client does, asking for the metadata only.
async fn send<K, A>(
    api: &Api<K>,
    mut request: http::Request<Vec<u8>>,
    verb: &'static str,
) -> kube::Result<A>
where
    K: Resource + Clone,
    A: DeserializeOwned,
{
    request
        .headers_mut()
        .insert(ACCEPT, HeaderValue::from_static(METADATA_ONLY));
    request.extensions_mut().insert(verb);
    api.clone().into_client().request(request).await
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
