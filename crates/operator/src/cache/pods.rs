//! Pods as the cache keeps them: a projection with the fields the operator
//! reads (metadata, status, and of the spec the node, the container names,
//! images and resources). With GPU accounting one watch sees every pod of the
//! cluster; the operator never writes a pod, so nothing else is parsed. No I/O.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use kube::{Resource, api::ObjectMeta};
use serde::Deserialize;

/// A Pod with only the fields the reconcile and the GPU count read.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "Pod")]
pub struct CachedPod {
    pub metadata: ObjectMeta,
    pub spec: Option<CachedPodSpec>,
    pub status: Option<PodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    pub node_name: Option<String>,
    #[serde(default)]
    pub containers: Vec<CachedContainer>,
    pub init_containers: Option<Vec<CachedContainer>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct CachedContainer {
    #[serde(default)]
    pub name: String,
    pub image: Option<String>,
    pub resources: Option<ResourceRequirements>,
}

impl CachedPod {
    /// A Pod with these fields, for the code that reads pods.
    pub fn to_pod(&self) -> Pod {
        let container = |c: &CachedContainer| Container {
            name: c.name.clone(),
            image: c.image.clone(),
            resources: c.resources.clone(),
            ..Container::default()
        };
        Pod {
            metadata: self.metadata.clone(),
            spec: self.spec.as_ref().map(|s| PodSpec {
                node_name: s.node_name.clone(),
                containers: s.containers.iter().map(container).collect(),
                init_containers: s
                    .init_containers
                    .as_ref()
                    .map(|c| c.iter().map(container).collect()),
                ..PodSpec::default()
            }),
            status: self.status.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cached_pod_keeps_what_the_operator_reads_of_a_pod() {
        let text = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"}, "uid": "u"},
            "spec": {"nodeName": "n1",
                "containers": [{"name": "vllm", "image": "i", "args": ["--x"],
                    "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "1"}}}],
                "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Running", "podIP": "198.18.0.9",
                "conditions": [{"type": "Ready", "status": "True"}]}});
        let cached: CachedPod = serde_json::from_value(text).unwrap();
        let pod = cached.to_pod();
        assert_eq!(pod.metadata.labels.unwrap()["a"], "b");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("n1"));
        assert_eq!(spec.containers[0].image.as_deref(), Some("i"));
        assert!(spec.containers[0].args.is_none(), "not kept");
        assert!(spec.volumes.is_none(), "not kept");
        assert_eq!(spec.init_containers.unwrap()[0].name, "i");
        let status = pod.status.unwrap();
        assert_eq!(status.pod_ip.as_deref(), Some("198.18.0.9"));
        assert_eq!(<CachedPod as Resource>::kind(&()), "Pod");
    }
}
