//! The Gateway API and the Prometheus Operator are optional in the cluster.
//! Which of them is installed is read from their CRDs; the controller watches
//! the CRDs and rebuilds its watches when that changes, so installing one
//! later needs no operator restart.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};

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

/// Which optional APIs are installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Apis {
    pub gateway: bool,
    pub prometheus: bool,
}

impl Apis {
    /// Reads the CRDs. An API counts as installed when all its CRDs are Established.
    pub async fn discover(client: &Client) -> kube::Result<Apis> {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut established = Vec::new();
        for name in GATEWAY_CRDS.iter().chain(&PROMETHEUS_CRDS) {
            let ok = crds.get_opt(name).await?.is_some_and(|crd| {
                crd.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            established.push((*name, ok));
        }
        let all = |names: &[&str]| {
            names
                .iter()
                .all(|n| established.iter().any(|(e, ok)| e == n && *ok))
        };
        Ok(Apis {
            gateway: all(&GATEWAY_CRDS),
            prometheus: all(&PROMETHEUS_CRDS),
        })
    }

    /// True when `name` is one of the CRDs that decide [`Apis`].
    pub fn is_relevant(name: &str) -> bool {
        GATEWAY_CRDS.contains(&name) || PROMETHEUS_CRDS.contains(&name)
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
