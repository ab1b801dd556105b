//! The ClusterIP Service in front of the vLLM pods (port `http`, 8000 unless `spec.port` says otherwise).
//! Pure.

use k8s_openapi::{
    api::core::v1::{Service, ServicePort, ServiceSpec},
    apimachinery::pkg::util::intstr::IntOrString,
};
use vllmservice_api::Valid;

use super::deployment::PORT_NAME;
use crate::names;

/// The Service for `vs`: port `http` = spec.port, targeting the pods' `http` port.
pub fn service(vs: &Valid<'_>) -> Service {
    Service {
        metadata: names::child_meta(vs),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(names::selector_labels(vs)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.into()),
                port: vs.spec.port,
                target_port: Some(IntOrString::String(PORT_NAME.into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}
