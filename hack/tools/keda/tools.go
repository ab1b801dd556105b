//go:build tools

// Package tools pins KEDA's operator, metrics adapter and admission webhooks commands.
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
	_ "github.com/kedacore/keda/v2/cmd/webhooks"
)
