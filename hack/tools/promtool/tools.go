//go:build tools

// Package tools pins the promtool command.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
