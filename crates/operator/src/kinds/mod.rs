//! The third-party kinds the operator writes: the Prometheus Operator's
//! `ServiceMonitor` and `PrometheusRule` (`monitoring.coreos.com/v1`,
//! [`prometheus`]) and KEDA's `ScaledObject` (`keda.sh/v1alpha1`, [`keda`]).
//!
//! **Hand-written, and only the fields the operator sets or reads.** No
//! maintained crate covers them for this kube: the `kcr_monitoring_coreos_com`
//! and `kcr_keda_sh` crates are built on kube 3 (k8s-openapi 0.27), whose
//! `Resource` kube 4's `Api` does not take, and would put a second kube in the
//! binary. Where the CRD embeds a Kubernetes type (`LabelSelector`, the HPA's
//! `HorizontalPodAutoscalerBehavior`), k8s-openapi's is used.
//!
//! A field not modelled is dropped when a live object is parsed, which is
//! harmless here: the apply step compares what it would write (these types,
//! serialized) with the live object parsed the same way, so only modelled
//! fields are compared, and it writes with a server-side apply of that same
//! JSON, which leaves the fields of other managers alone. Its one full write
//! (a replace, after an apply refused with "Duplicate value") cannot arise for
//! these kinds: every list the operator writes in them is atomic, or a map
//! keyed by a field it sets (`PrometheusRule` `spec.groups`, by name).
//!
//! Checked against the CRDs pinned in `hack/cluster/crds/go.mod` by
//! `tests/kinds.rs`: each kind's group, version, kind, plural and scope are the
//! CRD's, and what the builders make validates against the CRD's
//! `openAPIV3Schema` with unknown fields refused (the API server would prune a
//! misspelled field silently). The cluster tests (`tests/monitoring.rs`,
//! `tests/autoscaling.rs`) have the real API server and KEDA accept them.

pub mod keda;
pub mod prometheus;
