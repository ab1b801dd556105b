//go:build tools

// Package tools pins the helm command that hack/tools/helm.sh builds.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
