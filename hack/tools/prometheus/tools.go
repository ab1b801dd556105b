//go:build tools

// Package tools pins the prometheus server command.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
