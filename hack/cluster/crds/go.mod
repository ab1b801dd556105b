// Test tooling only: pins the third-party CRDs installed on the local cluster.
// Nothing is built from this module; hack/cluster/crds.sh downloads the
// required modules into the Go module cache and prints their CRD YAML paths.
// gateway-api v1.5.1 matches the Rust crate gateway-api 0.22; keda v2.21.0 is the
// KEDA the autoscaling tests run (hack/tools/keda pins the same version).
module vllm-operator/hack/cluster/crds

go 1.26.0

require (
	github.com/kedacore/keda/v2 v2.21.0
	github.com/prometheus-operator/prometheus-operator v0.85.0
	sigs.k8s.io/gateway-api v1.5.1
)
