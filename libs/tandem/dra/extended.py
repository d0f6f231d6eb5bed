"""`nvidia.com/gpu` served through DRA (KEP-5004, GA in Kubernetes 1.37): what Tandem writes so
that a Pod asking the extended resource gets exactly the GPUs Slurm allocated its job.

A Node that has no `nvidia.com/gpu` in its allocatable (no device plugin) serves the resource
through DRA when a DeviceClass names it in `spec.extendedResourceName` (NVIDIA's chart sets it on
`gpu.nvidia.com`). kube-scheduler then makes the Pod a claim of its own before the bind; Tandem,
the Pod's scheduler, does what it does (pkg/scheduler/framework/plugins/dynamicresources/
extendeddynamicresources.go), with Slurm's devices instead of its allocator's:
    1. create the claim: generateName `<pod>-extended-resources-`, annotation
       `resource.kubernetes.io/extended-resource-claim: "true"`, the Pod its controller owner, one
       request per container that asks, named `container-<i>-request-<j>` (i over the init
       containers then the containers, j the resource's place among the container's sorted
       request names);
    2. allocate it the devices of Slurm's indices and reserve it for the Pod (tandem.dra.allocation,
       as for any claim: finalizer, then status);
    3. write `status.extendedResourceClaimStatus` on the Pod (which request serves which
       container: the kubelet reads it to hand the devices to the container);
    4. bind.
Kubernetes' ResourceClaim controller frees and deletes the claim when the Pod ends (its owner).

Init containers that run to completion are left out: kube-scheduler lets them reuse the
devices of the containers after them, which is a plan Slurm's one allocation per job cannot
follow; a Node serving GPUs through DRA does not take such a Pod (tandem.scheduler.eligibility).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tandem import keys
from tandem.dra.claims import DEVICE_CLASSES, MAX_DEVICES, ClaimRequest
from tandem.dra.shape import at, items, obj
from tandem.quantity import parse_quantity

Obj = Mapping[str, Any]

CLAIM_SUFFIX = "-extended-resources-"
# The part of the Pod's name the claim's generateName keeps: the apiserver keeps 58 characters of
# a generateName and adds 5 (names.SimpleNameGenerator), so a longer prefix would be cut anyway.
_NAME_PREFIX = 58 - len(CLAIM_SUFFIX)


@dataclass(frozen=True)
class ContainerGpus:
    """One container's `nvidia.com/gpu`, as one request of the Pod's claim."""

    container: str
    request: str  # container-<i>-request-<j>
    count: int


def mapped_class(classes: Iterable[Obj], resource: str = keys.GPU_RESOURCE) -> str:
    """The DeviceClass that serves `resource` through DRA ("" for none): of the classes naming it,
    the newest, then the first by name (k8s.io/api/resource/v1 DeviceClassSpec.ExtendedResourceName)."""
    named = [c for c in classes if at(c, "spec", "extendedResourceName") == resource]
    if not named:
        return ""
    newest = max(str(at(c, "metadata", "creationTimestamp") or "") for c in named)
    return min(
        str(at(c, "metadata", "name") or "")
        for c in named
        if str(at(c, "metadata", "creationTimestamp") or "") == newest
    )


def served_by_dra(allocatable: Mapping[str, int], resource: str = keys.GPU_RESOURCE) -> bool:
    """The Node serves `resource` through DRA (when a class maps it): no device plugin offers it."""
    return allocatable.get(resource, 0) <= 0


def container_gpus(pod: Obj, resource: str = keys.GPU_RESOURCE) -> tuple[ContainerGpus, ...] | str:
    """The requests of the Pod's claim, container by container; else why Tandem cannot make it."""
    spec = obj(pod.get("spec"))
    found: list[ContainerGpus] = []
    containers = [(c, True) for c in items(spec.get("initContainers"))]
    containers += [(c, False) for c in items(spec.get("containers"))]
    for i, (raw, init) in enumerate(containers):
        container = obj(raw)
        resources = obj(container.get("resources"))
        # The apiserver copies a limit to a request it lacks: the names kube-scheduler sorts.
        requests = {**obj(resources.get("limits")), **obj(resources.get("requests"))}
        if resource not in requests:
            continue
        try:
            count = parse_quantity(str(requests[resource]))
        except ValueError:
            return f"container {container.get('name')!r}: {resource} {requests[resource]!r} is not a quantity"
        if count == 0:
            continue
        if count != int(count) or not 0 < count <= MAX_DEVICES:
            return (
                f"container {container.get('name')!r}: {resource} {requests[resource]!r}"
                f" is not a count from 1 to {MAX_DEVICES}"
            )
        if init and container.get("restartPolicy") != "Always":
            return (
                f"init container {container.get('name')!r} asks for {resource}: Tandem gives DRA's GPUs"
                " to containers and sidecars only"
            )
        j = sorted(str(name) for name in requests).index(resource)
        found.append(
            ContainerGpus(str(container.get("name") or ""), f"container-{i}-request-{j}", int(count))
        )
    if sum(c.count for c in found) > MAX_DEVICES:
        return f"asks for more than {MAX_DEVICES} {resource} on one node"
    return tuple(found)


def claim_manifest(pod: Obj, gpus: Iterable[ContainerGpus], device_class: str) -> dict[str, Any]:
    """The claim to create for the Pod (kube-scheduler's shape, so quota and the ResourceClaim
    controller count it as the Pod's)."""
    meta = obj(pod.get("metadata"))
    return {
        "apiVersion": f"{keys.DRA_GROUP}/{keys.DRA_VERSIONS[0]}",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{str(meta.get('name') or '')[:_NAME_PREFIX]}{CLAIM_SUFFIX}",
            "namespace": meta.get("namespace"),
            "annotations": {keys.EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": g.request,
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": g.count,
                        },
                    }
                    for g in sorted(gpus, key=lambda g: g.request)
                ]
            }
        },
    }


def owner_index(claim: Obj) -> list[str]:
    """`<namespace>/<uid>` of the Pod a claim was made for under this protocol (the informer's
    index). The namespace is the claim's own: an owner reference names no namespace, and a claim
    in another namespace naming a Pod's uid is never that Pod's (ownerKey)."""
    if at(claim, "metadata", "annotations", keys.EXTENDED_CLAIM_ANNOTATION) != "true":
        return []
    for ref in items(at(claim, "metadata", "ownerReferences")):
        r = obj(ref)
        if (
            r.get("controller") is True
            and r.get("kind") == "Pod"
            and r.get("apiVersion") == "v1"
            and r.get("uid")
        ):
            return [owner_key(str(at(claim, "metadata", "namespace") or ""), str(r["uid"]))]
    return []


def owner_key(namespace: str, uid: str) -> str:
    return f"{namespace}/{uid}"


def claim_requests(
    claim: Obj, gpus: Iterable[ContainerGpus], device_class: str, gres_type: str
) -> tuple[ClaimRequest, ...] | str:
    """The claim's requests as tandem.dra reads any claim's, checked against what the Pod asks;
    else how the claim differs (made for another shape: it is replaced, not used)."""
    name = str(at(claim, "metadata", "name") or "")
    wanted = {g.request: g.count for g in gpus}
    has: dict[str, tuple[str, int]] = {}
    for raw in items(at(claim, "spec", "devices", "requests")):
        exactly = obj(obj(raw).get("exactly"))
        has[str(obj(raw).get("name") or "")] = (
            str(exactly.get("deviceClassName") or ""),
            exactly.get("count", 1),
        )
    if has != {request: (device_class, count) for request, count in wanted.items()}:
        return f"ResourceClaim {name} asks for other devices than the Pod's {keys.GPU_RESOURCE}"
    kind = DEVICE_CLASSES.get(device_class, "")
    return tuple(
        ClaimRequest(
            pod_claim=request,
            claim_name=name,
            request=request,
            device_class=device_class,
            kind=kind,
            count=count,
            gres_type=gres_type,
        )
        for request, count in sorted(wanted.items())
    )


def pod_status(
    claim_name: str, gpus: Iterable[ContainerGpus], resource: str = keys.GPU_RESOURCE
) -> dict[str, Any]:
    """The Pod's `status.extendedResourceClaimStatus`: which request of the claim each container gets."""
    return {
        "resourceClaimName": claim_name,
        "requestMappings": [
            {"containerName": g.container, "resourceName": resource, "requestName": g.request}
            for g in sorted(gpus, key=lambda g: g.request)
        ],
    }


def status_written(pod: Obj, status: Mapping[str, Any]) -> bool:
    return bool(at(pod, "status", "extendedResourceClaimStatus") == status)
