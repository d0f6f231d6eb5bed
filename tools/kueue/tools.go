//go:build tools

// Package tools pins the Kueue controller manager so `go build sigs.k8s.io/kueue/cmd/kueue` builds
// it at one version, with the dependency versions Kueue's own go.mod asks for.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
