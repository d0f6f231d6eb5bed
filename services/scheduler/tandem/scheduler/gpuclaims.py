"""A Pod's GPUs by claim in the scheduler's two passes (tandem.dra does the reading): before the
submit, what its job asks Slurm for; before the bind, each claim's allocation naming the devices of
exactly the indices Slurm gave the job on the Pod's node, so the container gets the GPUs Slurm
counts as taken and no Slurm job gets them too. A Pod asking nvidia.com/gpu of a Node that serves
it through DRA gets a claim made for it, allocated the same way (tandem.dra.extended). Pure: plain
values in, writes or a reason out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem.dra import extended
from tandem.dra.allocation import FINALIZER, PodConsumer, claim_status, claim_status_of, split_indices
from tandem.dra.claims import ClaimRequest, PodGpus, shared_word
from tandem.dra.gres import Mismatch, NotSeen, job_gpu_indices, job_gpu_shares
from tandem.dra.shape import at, items
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON
from tandem.slurm.models import Job


@dataclass(frozen=True)
class ClaimWrite:
    """One of the Pod's claims to allocate and reserve for it before its bind."""

    claim: JSON  # as the cache holds it: its resourceVersion guards the writes
    status: dict[str, Any]
    devices: tuple[str, ...]
    # Only the finalizer is missing (the status was written before a crash): one write, not two.
    status_written: bool = False

    @property
    def name(self) -> str:
        return str(at(self.claim, "metadata", "name") or "")

    @property
    def namespace(self) -> str:
        return str(at(self.claim, "metadata", "namespace") or "")

    @property
    def needs_finalizer(self) -> bool:
        return FINALIZER not in [str(f) for f in items(at(self.claim, "metadata", "finalizers"))]


def _shares_on(
    job: Job, slurm_node: str, devices: NodeDevices | str | None, requests: Sequence[ClaimRequest]
) -> tuple[NodeDevices, dict[str, tuple[int, ...]]] | NotSeen | Mismatch:
    """The Node's devices and the GPU indices Slurm gave the job there, shared out over the Pod's
    claim requests; or what is not seen yet, or why they cannot be given."""
    if any(r.shares for r in requests):
        return _gpu_shared_on(job, slurm_node, devices, requests)
    indices = job_gpu_indices(job, slurm_node)
    if not isinstance(indices, tuple):
        return indices
    readable = _readable(devices, slurm_node)
    if not isinstance(readable, NodeDevices):
        return readable
    devices = readable
    shares = split_indices(requests, indices)
    if isinstance(shares, str):
        return Mismatch(f"Slurm job {job.job_id} on {slurm_node}: {shares}")
    return devices, shares


def _readable(devices: NodeDevices | str | None, slurm_node: str) -> NodeDevices | NotSeen | Mismatch:
    """The Node's devices, or that its ResourceSlices are not seen yet, or why they cannot be read."""
    if devices is None:
        return NotSeen(f"no ResourceSlice seen yet for the Node of {slurm_node}")
    if isinstance(devices, str):
        return Mismatch(devices)
    return devices


def _gpu_shared_on(
    job: Job, slurm_node: str, devices: NodeDevices | str | None, requests: Sequence[ClaimRequest]
) -> tuple[NodeDevices, dict[str, tuple[int, ...]]] | NotSeen | Mismatch:
    """Shares of a GPU: Slurm takes a job's shards (or MPS) from one GPU, so every request gets that
    one."""
    name = next(r.share_gres for r in requests if r.share_gres)
    held = job_gpu_shares(job, slurm_node, name)
    if not isinstance(held, tuple):
        return held
    readable = _readable(devices, slurm_node)
    if not isinstance(readable, NodeDevices):
        return readable
    devices = readable
    wanted = sum(r.shares for r in requests)
    on = ", ".join(f"{s.used} on GPU {s.index}" for s in held)
    if len(held) != 1 or held[0].used != wanted:
        return Mismatch(
            f"Slurm job {job.job_id} on {slurm_node} holds {shared_word(name)} {on}; the Pod's claims ask for"
            f" {wanted} of one GPU"
        )
    return devices, {r.pod_claim: (held[0].index,) for r in requests}


def claim_writes(
    pod: JSON,
    gpus: PodGpus,
    job: Job,
    slurm_node: str,
    devices: NodeDevices | str | None,
    claims: Mapping[str, JSON],
    class_config: Mapping[str, Sequence[JSON]],
) -> tuple[ClaimWrite, ...] | NotSeen | Mismatch:
    """The writes that give the Pod's claims the devices Slurm chose for its job on `slurm_node`
    (`devices`: that Node's, from its ResourceSlices; `claims`: the Pod's namespace's by name)."""
    found = _shares_on(job, slurm_node, devices, gpus.requests)
    if not isinstance(found, tuple):
        return found
    devices, shares = found
    consumer = PodConsumer(str(at(pod, "metadata", "name") or ""), str(at(pod, "metadata", "uid") or ""))
    writes: list[ClaimWrite] = []
    for request in gpus.requests:
        if not request.claim_name:
            return NotSeen(f"the ResourceClaim of spec.resourceClaims[{request.pod_claim}] is not made yet")
        claim = claims.get(request.claim_name)
        if claim is None:
            return NotSeen(f"ResourceClaim {request.claim_name} not seen yet")
        status = claim_status(
            claim,
            request,
            devices,
            shares[request.pod_claim],
            consumer,
            class_config.get(request.device_class, ()),
        )
        if isinstance(status, str):
            return Mismatch(status)
        write = ClaimWrite(claim, status.status, status.devices, status_written=status.unchanged)
        if not (write.status_written and not write.needs_finalizer):
            writes.append(write)
    return tuple(writes)


@dataclass(frozen=True)
class NewClaim:
    """The Pod's nvidia.com/gpu is served through DRA on its node and it has no claim yet: make it."""

    manifest: dict[str, Any]


@dataclass(frozen=True)
class StaleClaim:
    """The claim made for the Pod cannot serve this placement (allocated for another, made for
    another shape): it goes, and a new one is made."""

    claim: JSON
    why: str


@dataclass(frozen=True)
class ExtendedWrite:
    """The writes before the bind of a Pod whose nvidia.com/gpu is served through DRA: its claim's
    allocation, then the Pod's status naming the claim (None: written already)."""

    writes: tuple[ClaimWrite, ...]
    pod_status: dict[str, Any] | None


def extended_writes(
    pod: JSON,
    job: Job,
    slurm_node: str,
    devices: NodeDevices | str | None,
    device_class: str,
    claim: JSON | None,
    class_config: Sequence[JSON],
) -> ExtendedWrite | NewClaim | StaleClaim | NotSeen | Mismatch:
    """What gives the Pod's containers the devices Slurm chose for its job on `slurm_node`
    (tandem.dra.extended): `claim` is the one made for the Pod, if any."""
    gpus = extended.container_gpus(pod)
    if isinstance(gpus, str):
        return Mismatch(gpus)
    if claim is None:
        return NewClaim(extended.claim_manifest(pod, gpus, device_class))
    requests = extended.claim_requests(claim, gpus, device_class, "")
    if isinstance(requests, str):
        return StaleClaim(claim, requests)
    found = _shares_on(job, slurm_node, devices, requests)
    if not isinstance(found, tuple):
        return found
    devices, shares = found
    consumer = PodConsumer(str(at(pod, "metadata", "name") or ""), str(at(pod, "metadata", "uid") or ""))
    status = claim_status_of(
        claim, [(r, shares[r.pod_claim]) for r in requests], devices, consumer, class_config
    )
    if isinstance(status, str):
        if at(claim, "status", "allocation"):
            return StaleClaim(claim, status)
        return Mismatch(status)
    write = ClaimWrite(claim, status.status, status.devices, status_written=status.unchanged)
    writes = () if write.status_written and not write.needs_finalizer else (write,)
    pod_status = extended.pod_status(write.name, gpus)
    return ExtendedWrite(writes, None if extended.status_written(pod, pod_status) else pod_status)
