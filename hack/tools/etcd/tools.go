//go:build tools

// Package tools records the command hack/build-control-plane.sh builds, so
// that `go mod tidy` keeps its dependencies in go.mod and go.sum.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
