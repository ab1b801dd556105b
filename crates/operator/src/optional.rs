//! The Gateway API, the Prometheus Operator and KEDA are optional in the cluster.
//! Which of them is installed is read from their CRDs; the controller watches
//! the CRDs and rebuilds its watches when that changes, so installing one
//! later needs no operator restart. Pure: the CRDs are read by the controller.

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

/// The condition message when a VLLMService asks for an API that is missing.
pub fn not_installed(api: &str, crds: &[&str]) -> String {
    format!(
        "the {api} is not installed in the cluster (CRDs {}); install it and the operator \
         picks it up without a restart",
        crds.join(", ")
    )
}
