//! The Deployments and Services the operator owns, and the claims services
//! mount, as the caches keep them. No I/O.
//!
//! A child's spec is read by the reconcile of its VLLMService only, once per
//! reconcile, and then whole (the apply step compares every field the
//! operator sets with what should be there, to find hand edits). So the cache
//! keeps the spec as the JSON text the API server sent, and the read step
//! parses it into the typed object. k8s-openapi's types hold every optional
//! field inline: a typed vLLM Deployment took about 19 KB in memory, its JSON
//! about 3 KB (at 1,000 services, the difference was most of the operator's heap).
//! The text is taken as serde_json hands it over unparsed (`RawValue`): a list
//! response's items and a watch event's object, whose type the API server
//! writes first, reach it directly.

use k8s_openapi::api::{
    apps::v1::{Deployment, DeploymentStatus},
    core::v1::{PersistentVolumeClaim, Service, ServiceStatus},
};
use kube::{Resource, api::ObjectMeta};
use serde::Deserialize;
use serde_json::value::RawValue;

/// A Deployment with its spec as JSON text.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "Deployment")]
pub struct CachedDeployment {
    pub metadata: ObjectMeta,
    spec: Option<Box<RawValue>>,
    pub status: Option<DeploymentStatus>,
}

/// A Service with its spec as JSON text.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "Service")]
pub struct CachedService {
    pub metadata: ObjectMeta,
    spec: Option<Box<RawValue>>,
    pub status: Option<ServiceStatus>,
}

/// A PersistentVolumeClaim with the one field read: whether it is bound.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "PersistentVolumeClaim")]
pub struct CachedClaim {
    pub metadata: ObjectMeta,
    pub status: Option<ClaimStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClaimStatus {
    pub phase: Option<String>,
}

/// A spec kept as text that no longer parses as its type: the API server
/// sent it, so only a value newer than k8s-openapi knows can cause it.
#[derive(Debug, thiserror::Error)]
#[error("the {kind} {name}'s spec cannot be read: {source}")]
pub struct UnreadableSpec {
    kind: &'static str,
    name: String,
    source: serde_json::Error,
}

fn parse<T: serde::de::DeserializeOwned>(
    spec: &Option<Box<RawValue>>,
    kind: &'static str,
    meta: &ObjectMeta,
) -> Result<Option<T>, UnreadableSpec> {
    spec.as_ref()
        .map(|raw| serde_json::from_str(raw.get()))
        .transpose()
        .map_err(|source| UnreadableSpec {
            kind,
            name: meta.name.clone().unwrap_or_default(),
            source,
        })
}

impl CachedDeployment {
    /// The typed Deployment.
    pub fn typed(&self) -> Result<Deployment, UnreadableSpec> {
        Ok(Deployment {
            metadata: self.metadata.clone(),
            spec: parse(&self.spec, "Deployment", &self.metadata)?,
            status: self.status.clone(),
        })
    }
}

impl CachedService {
    /// The typed Service.
    pub fn typed(&self) -> Result<Service, UnreadableSpec> {
        Ok(Service {
            metadata: self.metadata.clone(),
            spec: parse(&self.spec, "Service", &self.metadata)?,
            status: self.status.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cached_deployment_reads_back_as_the_typed_object() {
        let text = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "namespace": "ns", "annotations": {"a": "b"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}},
                "template": {"spec": {"containers": [{"name": "vllm", "args": ["--port", "8000"]}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}
        })
        .to_string();
        let typed: Deployment = serde_json::from_str(&text).unwrap();
        let cached: CachedDeployment = serde_json::from_str(&text).unwrap();
        assert_eq!(cached.typed().unwrap(), typed);
        assert_eq!(<CachedDeployment as Resource>::kind(&()), "Deployment");
    }

    /// As the watch delivers it: a watch event, whose type the API server
    /// writes before its object (Go's field order), so that serde hands the
    /// object's parts to the projection as text, unbuffered.
    #[test]
    fn a_cached_service_reads_from_a_watch_event() {
        let line = r#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","namespace":"ns"},"spec":{"ports":[{"port":8000}],"clusterIP":"198.19.0.10"}}}"#;
        let event: kube::core::WatchEvent<CachedService> = serde_json::from_str(line).unwrap();
        let kube::core::WatchEvent::Added(cached) = event else {
            panic!("an ADDED event");
        };
        let spec = cached.typed().unwrap().spec.unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("198.19.0.10"));
    }

    #[test]
    fn a_spec_the_types_cannot_read_is_an_error_naming_the_object() {
        let cached: CachedDeployment =
            serde_json::from_str(r#"{"metadata": {"name": "d"}, "spec": {"replicas": "many"}}"#)
                .unwrap();
        let e = cached.typed().unwrap_err().to_string();
        assert!(
            e.starts_with("the Deployment d's spec cannot be read"),
            "{e}"
        );
    }

    #[test]
    fn a_cached_claim_keeps_its_phase() {
        let claim: CachedClaim = serde_json::from_str(
            r#"{"metadata": {"name": "c"}, "spec": {"resources": {}}, "status": {"phase": "Bound"}}"#,
        )
        .unwrap();
        assert_eq!(claim.status.unwrap().phase.as_deref(), Some("Bound"));
    }
}
