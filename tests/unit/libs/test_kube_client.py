"""What the Kubernetes client counts its requests by."""

from __future__ import annotations

import pytest

from tandem.kube import resource_of


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/ns/pods/p/binding", "pods/binding"),
        ("/api/v1/namespaces/ns/pods/p", "pods"),
        ("/api/v1/namespaces/ns/pods", "pods"),
        ("/api/v1/pods", "pods"),
        ("/api/v1/namespaces/ns/events", "events"),
        ("/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/g/status", "podgroups/status"),
        ("/api/v1/nodes/node-001", "nodes"),
        ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/tandem", "leases"),
        ("/api/v1/namespaces/ns", "namespaces"),
    ],
)
def test_a_request_is_counted_by_its_resource_never_by_a_name(path: str, resource: str) -> None:
    assert resource_of(path) == resource
