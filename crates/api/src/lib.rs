//! The `VLLMService` custom resource: Rust types, defaults, validation and CRD generation.
//!
//! No I/O happens here: the CRD is generated and evaluated in memory; the operator crate reads
//! and writes these types.

pub mod rules;
mod schema;
pub mod v1alpha1;
pub mod validate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use v1alpha1::*;
pub use validate::{FieldError, InvalidSpec, Passed, Valid, validate, validate_spec};

/// The command that regenerates the checked-in CRD, named in its header and in the drift test.
pub const CRD_REGENERATE_COMMAND: &str =
    "cargo run -p vllmservice-operator -- crd > config/crd/vllmservice.yaml";

/// The VLLMService CustomResourceDefinition, as installed in a cluster.
pub fn crd() -> CustomResourceDefinition {
    let mut crd = VLLMService::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // Rules on metadata.name can only sit at the root of the schema.
        let rules = schema.x_kubernetes_validations.get_or_insert_with(Vec::new);
        rules.push(
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::ValidationRule {
                rule: rules::NAME_CEL.into(),
                message: Some(rules::messages::NAME.into()),
                ..Default::default()
            },
        );
    }
    crd
}

/// [`crd`] as YAML, with a header saying it is generated.
pub fn crd_yaml() -> String {
    let body = serde_saphyr::to_string(&crd()).expect("a CRD always serializes to YAML");
    format!(
        "# Generated from crates/api by vllmservice-operator; do not edit.\n\
         # Regenerate with: {CRD_REGENERATE_COMMAND}\n\
         {body}"
    )
}
