//! The Gateway API, the Prometheus Operator and KEDA are optional in the cluster:
//! which CRDs each needs, and how installed ones are told from their CRDs'
//! conditions. No I/O: `runtime::discovery` reads and watches the CRDs.

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::Resource;
use serde::Deserialize;

/// CRDs of the Gateway API the operator uses.
pub const GATEWAY_CRDS: [&str; 2] = [
    "gateways.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
];
/// CRDs of the Prometheus Operator the operator uses.
pub const PROMETHEUS_CRDS: [&str; 2] = [
    "servicemonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
];

/// CRDs of KEDA the operator uses.
pub const KEDA_CRDS: [&str; 1] = ["scaledobjects.keda.sh"];

/// Every CRD that decides [`Apis`].
pub fn all_crds() -> impl Iterator<Item = &'static str> {
    GATEWAY_CRDS
        .into_iter()
        .chain(PROMETHEUS_CRDS)
        .chain(KEDA_CRDS)
}

/// Which optional APIs are installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Apis {
    pub gateway: bool,
    pub prometheus: bool,
    pub keda: bool,
}

impl Apis {
    /// Which APIs the CRDs `established` (names of Established CRDs) make installed.
    pub fn from_established(established: &[String]) -> Apis {
        let all = |names: &[&str]| names.iter().all(|n| established.iter().any(|e| e == n));
        Apis {
            gateway: all(&GATEWAY_CRDS),
            prometheus: all(&PROMETHEUS_CRDS),
            keda: all(&KEDA_CRDS),
        }
    }

    /// True when `name` is one of the CRDs that decide [`Apis`].
    pub fn is_relevant(name: &str) -> bool {
        all_crds().any(|crd| crd == name)
    }
}

/// A CRD as discovery reads it: its metadata and conditions. serde skips the
/// rest (the schema: hundreds of KB for the Gateway API's) without building
/// it, and no parser of a whole CRD is built into the binary.
#[derive(Resource, Clone, Debug, Deserialize)]
#[resource(inherit = "CustomResourceDefinition")]
pub struct CrdConditions {
    pub metadata: ObjectMeta,
    pub status: Option<CrdStatus>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CrdStatus {
    #[serde(default)]
    pub conditions: Vec<CrdCondition>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CrdCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

impl CrdConditions {
    /// Whether the CRD is Established (its API is served).
    pub fn is_established(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
    }
}

/// The condition message when a VLLMService asks for an API that is missing.
pub fn not_installed(api: &str, crds: &[&str]) -> String {
    format!(
        "the {api} is not installed in the cluster (CRDs {}); install it and the operator \
         picks it up without a restart",
        crds.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_crd_is_established_when_its_condition_says_so() {
        let crd = |status: &str| -> CrdConditions {
            serde_json::from_value(json!({
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "httproutes.gateway.networking.k8s.io"},
                "spec": {"group": "gateway.networking.k8s.io", "versions": [{"name": "v1",
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]},
                "status": {"conditions": [
                    {"type": "NamesAccepted", "status": "True"},
                    {"type": "Established", "status": status}]},
            }))
            .unwrap()
        };
        assert!(crd("True").is_established());
        assert!(!crd("False").is_established());
        let fresh: CrdConditions =
            serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap();
        assert!(!fresh.is_established());
        assert_eq!(
            CrdConditions::url_path(&(), None),
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        );
    }
}
