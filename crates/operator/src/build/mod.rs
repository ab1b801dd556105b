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
