//go:build tools

// Package tools pins the Kubernetes control plane (apiserver, controller-manager, scheduler),
// kubectl, and the real Node's kubelet and kube-proxy so `go build` can build them from the
// kubernetes module at one version.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
