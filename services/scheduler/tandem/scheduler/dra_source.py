"""What the scheduler reads of Dynamic Resource Allocation, from its informers: each Pod's GPU
claims (tandem.dra.claims), the claims and templates they name, the Nodes' devices as their
ResourceSlices publish them, the DeviceClasses' config. Plain values out, for decide."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from tandem.dra import claims as dra_claims
from tandem.dra import extended
from tandem.dra import slices as dra_slices
from tandem.dra.shape import at, items, obj
from tandem.kube import JSON

# The Pod informer's index of Pods by the claims and templates they name: `ns/<claim>` (named, or
# made from a template and recorded in the Pod's status) and `template:ns/<template>`.
BY_CLAIM = "claim"
# The ResourceSlice informer's index by the Node a slice's devices are on.
BY_SLICE_NODE = "node"
# The ResourceClaim informer's index of the claims made for a Pod's nvidia.com/gpu, by its uid.
BY_EXTENDED_OWNER = "extended-owner"


class Cache(Protocol):
    def get(self, key: str) -> JSON | None: ...

    def items(self) -> list[JSON]: ...

    def by_index(self, index: str, value: str) -> list[JSON]: ...


def claim_index(pod: JSON) -> list[str]:
    ns = str(at(pod, "metadata", "namespace") or "")
    found: list[str] = []
    for entry in items(at(pod, "spec", "resourceClaims"))[: dra_claims.MAX_POD_CLAIMS]:
        e = obj(entry)
        if e.get("resourceClaimName"):
            found.append(f"{ns}/{e['resourceClaimName']}")
        elif e.get("resourceClaimTemplateName"):
            found.append(f"template:{ns}/{e['resourceClaimTemplateName']}")
    for status in items(at(pod, "status", "resourceClaimStatuses"))[: dra_claims.MAX_POD_CLAIMS]:
        name = obj(status).get("resourceClaimName")
        if name:
            found.append(f"{ns}/{name}")
    return found


def slice_node_index(resource_slice: JSON) -> list[str]:
    node = at(resource_slice, "spec", "nodeName")
    return [str(node)] if node else []


@dataclass
class DraCaches:
    claims: Cache
    templates: Cache
    slices: Cache
    classes: Cache
    config: dra_claims.DraConfig

    def pod_gpus(self, pod: JSON) -> dra_claims.PodGpus | None:
        """What the Pod's claims ask Slurm for; None when it names no claim."""
        entries = items(at(pod, "spec", "resourceClaims"))
        if not entries:
            return None
        return dra_claims.pod_gpus(pod, self.claims_of([pod]), self._templates_of(pod), self.config)

    def claims_of(self, pods: Iterable[JSON]) -> dict[str, JSON]:
        """The claims these Pods name (by name: they share one namespace)."""
        found: dict[str, JSON] = {}
        for pod in pods:
            for key in claim_index(pod):
                if key.startswith("template:"):
                    continue
                claim = self.claims.get(key)
                if claim is not None:
                    found[key.partition("/")[2]] = claim
        return found

    def _templates_of(self, pod: JSON) -> dict[str, JSON]:
        found: dict[str, JSON] = {}
        for key in claim_index(pod):
            if key.startswith("template:"):
                template = self.templates.get(key.removeprefix("template:"))
                if template is not None:
                    found[key.partition("/")[2]] = template
        return found

    def devices(self, kube_nodes: Iterable[str]) -> dict[str, dra_slices.NodeDevices | str]:
        """Each Node's NVIDIA devices numbered as Slurm numbers them (or why they cannot be)."""
        return {
            node: dra_slices.node_devices(node, self.slices.by_index(BY_SLICE_NODE, node), self.config)
            for node in set(kube_nodes)
        }

    def most_shares(self) -> dict[str, int]:
        """The most of each shared capacity (shares, mps) one GPU of any Node publishes (none: no
        Node shares its GPUs that way); a tainted GPU counts, as it may come back."""
        nodes = {str(n) for s in self.slices.items() if (n := at(s, "spec", "nodeName"))}
        most: dict[str, int] = {}
        for found in self.devices(nodes).values():
            if not isinstance(found, str):
                for d in found.devices:
                    if d.shares:
                        most[d.capacity] = max(most.get(d.capacity, 0), d.shares)
        return most

    def whole_gpu_types(self, kube_node: str) -> frozenset[str]:
        """The Slurm GRES types of the whole GPUs the Node publishes (none when its ResourceSlices
        cannot be read): a MIG slice of one of them is a device of its own type."""
        found = self.devices((kube_node,))[kube_node]
        if isinstance(found, str):
            return frozenset()
        return frozenset(d.gres_type for d in found.devices if d.kind == "gpu" and d.gres_type)

    def extended_class(self) -> str:
        """The DeviceClass serving nvidia.com/gpu through DRA ("" when none does)."""
        return extended.mapped_class(self.classes.items())

    def has_devices(self, kube_node: str) -> bool:
        """The Node publishes NVIDIA devices (a ResourceSlice of NVIDIA's driver names it)."""
        return bool(self.slices.by_index(BY_SLICE_NODE, kube_node))

    def extended_claim(self, pod: JSON) -> JSON | None:
        """The claim made for the Pod's nvidia.com/gpu: the one its status names, else the oldest
        not being deleted (a second, made by a life that did not see the first, is left to the
        garbage collector with the Pod)."""
        key = extended.owner_key(
            str(at(pod, "metadata", "namespace") or ""), str(at(pod, "metadata", "uid") or "")
        )
        made = [
            c
            for c in self.claims.by_index(BY_EXTENDED_OWNER, key)
            if not at(c, "metadata", "deletionTimestamp")
        ]
        named = at(pod, "status", "extendedResourceClaimStatus", "resourceClaimName")
        for claim in made:
            if named and at(claim, "metadata", "name") == named:
                return claim
        made.sort(
            key=lambda c: (str(at(c, "metadata", "creationTimestamp") or ""), str(at(c, "metadata", "name")))
        )
        return made[0] if made else None

    def class_config(self) -> dict[str, tuple[JSON, ...]]:
        found: dict[str, tuple[JSON, ...]] = {}
        for name in (*dra_claims.DEVICE_CLASSES, self.extended_class()):
            device_class = self.classes.get(name)
            if device_class is not None:
                found[name] = tuple(dict(obj(c)) for c in items(at(device_class, "spec", "config")))
        return found
