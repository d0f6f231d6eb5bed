//go:build tools

// Package tools pins kube-apiserver and kubectl so `go build` can build them from the kubernetes
// module at one version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
