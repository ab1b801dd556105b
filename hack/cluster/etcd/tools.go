//go:build tools

// Package tools pins the etcd server command (the root package of
// go.etcd.io/etcd/server/v3 is package main).
package tools

import _ "go.etcd.io/etcd/server/v3"
