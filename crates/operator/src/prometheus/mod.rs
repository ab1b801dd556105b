//! Rust types of the Prometheus Operator CRDs the operator writes:
//! `ServiceMonitor` and `PrometheusRule` (`monitoring.coreos.com/v1`).
//!
//! **Generated, do not edit.** Both modules are kopium's output for the CRD
//! manifests of the prometheus-operator Go module pinned in
//! `hack/cluster/crds/go.mod`. To regenerate (after changing that pin or the
//! kopium version), run `hack/gen-types.sh`; `hack/gen-types.sh --check` (and
//! the test `crates/operator/tests/generated_types.rs`) fails when the
//! checked-in files differ from what it generates.

pub mod prometheusrules;
pub mod servicemonitors;
