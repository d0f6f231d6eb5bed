"""The Slurm GPU indices a job got on a node -> the ResourceClaim status Tandem writes.

Tandem is the allocator for the claims of the Pods it schedules (kube-scheduler never sees them),
so it writes what kube-scheduler's DRA plugin would: `status.allocation` naming one device per
allocated GPU, restricted to the node, with the DeviceClass's and the claim's configuration, and
the Pod in `status.reservedFor`, in one status write. The devices are the ones Slurm chose (its
`IDX:`), looked up by index in the node's ResourceSlices; kube-scheduler's allocator would pick
its own (k8s.io/dynamic-resource-allocation structured/internal/stable/allocator_stable.go is the
shape followed here).

An MPS share of a GPU also gets the limit its container runs under: NVIDIA's GpuConfig with the
MPS strategy and the active thread percentage the share is of the GPU's MPS count, as the last
configuration of its request. NVIDIA's kubelet plugin applies, of the configurations naming a
request, the last (cmd/gpu-kubelet-plugin/device_state.go, prepareDevices), so no configuration
of the claim or its class can raise it past what Slurm counted.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.dra.claims import DRIVER, MAX_DEVICES, MPS_CAPACITY, ClaimRequest, shared_word
from tandem.dra.shape import at, items, obj
from tandem.dra.slices import NodeDevices, SlicedDevice

# k8s.io/api/resource/v1 ResourceClaimReservedForMaxSize.
MAX_RESERVED_FOR = 256
# The finalizer kube-scheduler adds before it allocates (k8s.io/api/resource/v1 Finalizer): the
# claim cannot vanish while a Pod may be using its devices. Tandem adds it too, with a metadata
# update before the status write.
FINALIZER = "resource.kubernetes.io/delete-protection"

Obj = Mapping[str, Any]
# A share's id is derived, not drawn: the same claim, request and device always get the same one,
# so a status rewritten after a crash says what the first write said.
_SHARE_IDS = uuid.UUID("3f1c9a2e-5b7d-4e61-8a0f-2c4d6e8b1a93")
# NVIDIA's driver's configuration API (api/nvidia.com/resource/v1beta1).
GPU_CONFIG_API = "resource.nvidia.com/v1beta1"


@dataclass(frozen=True)
class PodConsumer:
    name: str
    uid: str

    def reference(self) -> dict[str, str]:
        # ResourceClaimConsumerReference: the core group is "" and omitted.
        return {"resource": "pods", "name": self.name, "uid": self.uid}


@dataclass(frozen=True)
class ClaimStatus:
    """The claim's new `status` (allocation and reservedFor); `unchanged` when it already says so."""

    status: dict[str, Any]
    devices: tuple[str, ...]
    unchanged: bool = False


def split_indices(
    requests: Sequence[ClaimRequest], indices: Sequence[int]
) -> dict[str, tuple[int, ...]] | str:
    """Slurm's indices for the Pod on its node, shared out over the Pod's claims in the Pod's order,
    ascending: {pod claim name: indices}; else why they do not fit the claims."""
    wanted = sum(r.count for r in requests)
    ordered = sorted(indices)
    if len(set(ordered)) != len(ordered):
        return "Slurm's indices repeat one"
    if len(ordered) != wanted:
        return f"Slurm allocated {len(ordered)} GPUs on the node, the Pod's claims ask for {wanted}"
    shares: dict[str, tuple[int, ...]] = {}
    start = 0
    for r in requests:
        shares[r.pod_claim] = tuple(ordered[start : start + r.count])
        start += r.count
    return shares


def claim_status(
    claim: Obj,
    request: ClaimRequest,
    node: NodeDevices,
    indices: Sequence[int],
    pod: PodConsumer,
    class_config: Sequence[Obj] = (),
) -> ClaimStatus | str:
    """The status that allocates `claim`'s request the devices of Slurm's `indices` on `node` and
    reserves it for `pod`; else why not, in one line. `class_config`: the DeviceClass's
    spec.config (copied in as FromClass, as kube-scheduler does)."""
    return claim_status_of(claim, ((request, indices),), node, pod, class_config)


def claim_status_of(
    claim: Obj,
    shares: Sequence[tuple[ClaimRequest, Sequence[int]]],
    node: NodeDevices,
    pod: PodConsumer,
    class_config: Sequence[Obj] = (),
) -> ClaimStatus | str:
    """claim_status for a claim of several requests, each given its share of Slurm's indices (the
    claim Tandem makes for a Pod's `nvidia.com/gpu` has one per container)."""
    name = str(at(claim, "metadata", "name") or "")
    results: list[dict[str, Any]] = []
    config: list[dict[str, Any]] = []
    limits: list[dict[str, Any]] = []
    for request, indices in shares:
        chosen = _devices(name, request, node, indices)
        if isinstance(chosen, str):
            return chosen
        uid = str(at(claim, "metadata", "uid") or name)
        results += [_result(uid, request, node, device) for device in chosen]
        config += _class_config(request, class_config)
        limits += [_mps_limit(request, device) for device in chosen if request.capacity == MPS_CAPACITY]
    allocation: dict[str, Any] = {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node.node]}]}
            ]
        },
    }
    config += _claim_config(claim, [request for request, _ in shares])
    config += limits  # last: the one NVIDIA's driver applies
    if config:
        allocation["devices"]["config"] = config
    devices = tuple(str(r["device"]) for r in results)
    status = obj(claim.get("status"))
    reserved = [dict(obj(r)) for r in items(status.get("reservedFor"))]
    if not any(str(r.get("uid") or "") == pod.uid for r in reserved):
        if len(reserved) >= MAX_RESERVED_FOR:
            return f"ResourceClaim {name} is reserved for {len(reserved)} consumers already"
        reserved.append(pod.reference())
    existing = status.get("allocation")
    if existing:
        held = sorted(
            (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in (obj(r) for r in items(at(existing, "devices", "results")))
        )
        if held != sorted((node.driver, node.pool, device) for device in devices):
            names = ", ".join(device for _, _, device in held) or "no device"
            return f"ResourceClaim {name} is allocated already, to {names}"
        # Written before (a crash between the write and the bind): keep what is there.
        was_reserved = any(str(obj(r).get("uid") or "") == pod.uid for r in items(status.get("reservedFor")))
        return ClaimStatus(
            status={**status, "allocation": existing, "reservedFor": reserved},
            devices=devices,
            unchanged=was_reserved,
        )
    return ClaimStatus(status={**status, "allocation": allocation, "reservedFor": reserved}, devices=devices)


def _result(claim_uid: str, request: ClaimRequest, node: NodeDevices, device: SlicedDevice) -> dict[str, Any]:
    """One device's DeviceRequestAllocationResult. A sharable GPU's names the share and what it
    consumes (KEP-5075): the request's shares, or all of them for a whole GPU, which is what Slurm
    counts while a job holds it whole."""
    result: dict[str, Any] = {
        "request": request.request,
        "driver": node.driver,
        "pool": node.pool,
        "device": device.name,
    }
    if device.shares:
        result["shareID"] = str(uuid.uuid5(_SHARE_IDS, f"{claim_uid}/{request.request}/{device.name}"))
        result["consumedCapacity"] = {device.capacity: str(request.shares or device.shares)}
    return result


def mps_percentage(shares: int, per_gpu: int) -> int:
    """The CUDA MPS active thread percentage of `shares` of a GPU's `per_gpu` MPS count (at least 1,
    as slices._shares reads it; `shares` at most that, as _devices checks): rounded down, as Slurm's
    share must not be exceeded, but at least 1 (0 is not a limit MPS takes)."""
    return max(1, shares * 100 // per_gpu)


def _mps_limit(request: ClaimRequest, device: SlicedDevice) -> dict[str, Any]:
    """The device configuration that limits the request's container to its MPS share of `device`."""
    return {
        "source": "FromClaim",
        "requests": [request.request],
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": GPU_CONFIG_API,
                "kind": "GpuConfig",
                "sharing": {
                    "strategy": "MPS",
                    "mpsConfig": {
                        "defaultActiveThreadPercentage": mps_percentage(request.shares, device.shares)
                    },
                },
            },
        },
    }


def _devices(
    name: str, request: ClaimRequest, node: NodeDevices, indices: Sequence[int]
) -> list[SlicedDevice] | str:
    """The devices of Slurm's `indices` for one request of claim `name`; else why not."""
    if len(set(indices)) != len(indices):
        return f"Slurm's indices for ResourceClaim {name} repeat one"
    if len(indices) != request.count:
        return f"ResourceClaim {name} asks for {request.count} devices, Slurm gave it {len(indices)}"
    if request.count > MAX_DEVICES:
        return f"ResourceClaim {name} asks for {request.count} devices, more than {MAX_DEVICES}"
    by_index = node.by_index()
    chosen = []
    for index in sorted(indices):
        device = by_index.get(index)
        if device is None:
            return (
                f"Slurm gave index {index} on Node {node.node}, its ResourceSlice has no device of that index"
            )
        if device.kind != request.kind:
            return (
                f"Slurm gave index {index} ({device.name}, a {device.kind}) to a request for a {request.kind}"
            )
        if request.gres_type and device.gres_type != request.gres_type:
            return (
                f"Slurm gave index {index} ({device.name}, {device.gres_type})"
                f" to a request for {request.gres_type}"
            )
        if device.tainted:
            # Device taints are for the allocator to respect; Slurm does not know them.
            return f"device {device.name} (Slurm index {index}) on Node {node.node} is tainted"
        if request.shares and (request.capacity != device.capacity or request.shares > device.shares):
            if not device.capacity:
                has = "is not sharable"
            else:
                published = device.shares if device.capacity == request.capacity else "no"
                has = f"publishes {published} {request.capacity}"
            return (
                f"Slurm gave {request.shares} {shared_word(request.share_gres)} of index {index} to"
                f" ResourceClaim {name}; {device.name} {has}"
            )
        chosen.append(device)
    return chosen


def _class_config(request: ClaimRequest, class_config: Sequence[Obj]) -> list[dict[str, Any]]:
    return [
        {"source": "FromClass", "requests": [request.request], **_device_configuration(c)}
        for c in class_config
    ]


def _claim_config(claim: Obj, requests: Sequence[ClaimRequest]) -> list[dict[str, Any]]:
    names = {r.request for r in requests}
    config: list[dict[str, Any]] = []
    for raw in items(at(claim, "spec", "devices", "config")):
        c = obj(raw)
        applies = [str(r) for r in items(c.get("requests"))]
        # A config naming requests applies to those only; none named: to every request.
        if applies and not names & set(applies):
            continue
        entry: dict[str, Any] = {"source": "FromClaim", **_device_configuration(c)}
        if applies:
            entry["requests"] = applies
        config.append(entry)
    return config


def _device_configuration(c: Obj) -> dict[str, Any]:
    # DeviceConfiguration is inlined: today its one member is `opaque` (driver + parameters).
    return {k: v for k, v in c.items() if k not in ("requests", "source")}
