//go:build tools

// Package tools pins the Kubernetes control plane (apiserver, controller-manager, scheduler) and
// kubectl so `go build` can build them from the kubernetes module at one version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
