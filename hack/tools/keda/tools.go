//go:build tools

// Package tools pins KEDA's operator and metrics adapter commands.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
