"""Which version of an API group serves a resource, asked of the apiserver (discovery) rather than
configured: Tandem follows the cluster's Kubernetes release. Kubernetes 1.36 serves PodGroups in
scheduling.k8s.io/v1alpha2 only, 1.37 in v1beta1 (and v1alpha3 beside it)."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.kube import KubeClient, KubeError


@dataclass(frozen=True)
class Versioned:
    group: str
    resource: str
    # Preferred first: the newest stability level.
    versions: tuple[str, ...]

    def served(self, kube: KubeClient) -> str | None:
        """ "group/version" of the first version that serves the resource; None if none does."""
        for version in self.versions:
            try:
                found = kube.get(f"/apis/{self.group}/{version}")
            except KubeError as e:
                if e.status == 404:
                    continue
                raise
            if any(r.get("name") == self.resource for r in found.get("resources") or []):
                return f"{self.group}/{version}"
        return None
