//! Pure builders: a VLLMService in, the objects that should exist out.
//! No client, no clock, no randomness: the same spec always builds the same
//! objects, which is what makes "apply only what differs" possible.

mod deployment;
mod httproute;
mod prometheusrule;
mod service;
mod servicemonitor;

pub use deployment::{SHM_DEFAULT_SIZE, deployment, vllm_args};
pub use httproute::httproute;
pub use prometheusrule::prometheusrule;
pub use service::service;
pub use servicemonitor::servicemonitor;

/// Every object the operator makes for `vs`, in apply order, as JSON: what
/// `vllmservice-operator render` prints and the controller applies.
pub fn all(vs: &vllmservice_api::VLLMService) -> Vec<serde_json::Value> {
    fn json<T: serde::Serialize>(o: T) -> serde_json::Value {
        serde_json::to_value(o).expect("Kubernetes objects serialize to JSON")
    }
    let mut out = vec![json(deployment(vs)), json(service(vs))];
    out.extend(httproute(vs).map(json));
    out.extend(servicemonitor(vs).map(json));
    out.extend(prometheusrule(vs).map(json));
    out
}
