//! Rust types of the KEDA CRD the operator writes: `ScaledObject`
//! (`keda.sh/v1alpha1`).
//!
//! **Generated, do not edit.** `scaledobjects` is kopium's output for the CRD
//! manifest of the KEDA Go module pinned in `hack/cluster/crds/go.mod`. To
//! regenerate (after changing that pin or the kopium version), run
//! `hack/gen-types.sh`; `hack/gen-types.sh --check` (and the test
//! `crates/operator/tests/generated_types.rs`) fails when the checked-in file
//! differs from what it generates.

// The CRD's descriptions (Kubernetes' own, on the HPA behavior) are copied as
// they are, list continuations and all.
#[allow(clippy::doc_lazy_continuation)]
pub mod scaledobjects;
