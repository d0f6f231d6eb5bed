//go:build tools

// Package tools pins the LeaderWorkerSet controller so `go build sigs.k8s.io/lws/cmd` builds it at
// one version (`go install` cannot: the proxy refuses its version list).
package tools

import (
	_ "sigs.k8s.io/lws/cmd"
)
