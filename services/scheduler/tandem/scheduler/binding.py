"""The bind of a group whose job runs: each unbound member matched to a free node of the job (of its
own component, for a het job) that its nodeSelector and node affinity accept, with the
ResourceClaim allocations of the GPUs Slurm chose on that node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tandem import keys, reasons
from tandem.dra import gres
from tandem.kube import JSON
from tandem.scheduler import (
    domains,
    gpuclaims,
    groups,
    growth,
    matching,
    podstate,
    validation,
)
from tandem.scheduler.actions import (
    Action,
    Bind,
    GpuFacts,
    MakeClaims,
    Observed,
    Pend,
    Placement,
    Refuse,
    Wait,
)
from tandem.scheduler.eligibility import affinity_matches, shape_of
from tandem.scheduler.gpuclaims import ClaimWrite
from tandem.slurm.models import JobStatus


def assign(
    o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]
) -> tuple[Placement, ...] | str:
    """Each unbound member's node, in rank order on the job's nodes no member runs on yet; or why
    no assignment can be made yet."""
    # The nodes the job holds, as Slurm counts them; while not known, as many as minCount asks.
    wanted = job.job.node_count or group.min_count
    if len(job.job.nodes) < wanted or any(len(c.nodes) < c.node_count for c in job.job.components):
        # Told of the allocation before all of it was read: binding now would place only part
        # of the group.
        return f"Slurm job {job.job_id}'s {wanted} nodes are not all known yet"
    hosts: dict[str, str] = {}
    for slurm_node in job.job.nodes:
        kube_node = o.hosts.get(slurm_node)
        if kube_node is None:
            return f"no Node known to host Slurm node {slurm_node} yet"
        hosts[slurm_node] = kube_node
    if not job.job.components:
        return _placed_on(live, job.job.nodes, hosts, o.node_labels)
    # A het job: each member on a node of its own component, sized for its kind.
    placements: list[Placement] = []
    for index, component in enumerate(job.job.components):
        mine = tuple(m for m in live if group.component_of(m) == index)
        placements.extend(_placed_on(mine, component.nodes, hosts, o.node_labels))
    return tuple(placements)


def _placed_on(
    members: tuple[JSON, ...],
    nodes: tuple[str, ...],
    hosts: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[Placement, ...]:
    """The unbound members, each on one of these nodes no member runs on yet whose Node its
    nodeSelector and required node affinity accept: in order when each would take any (the first
    on the batch host), else matched so that each gets one it takes (members Kueue's TAS pinned
    each to its Node). A member no free Node accepts now (relabelled since the submit) takes one
    left over, in order, as before."""
    taken = {str((m.get("spec") or {}).get("nodeName")) for m in members if podstate.bound(m)}
    free = [s for s in nodes if hosts[s] not in taken]
    unbound = [m for m in members if not podstate.bound(m)]
    by_shape: dict[str, list[str]] = {}  # one template's members are judged once
    takes = []
    for m in unbound:
        shape = shape_of(m)
        if shape not in by_shape:
            by_shape[shape] = [s for s in free if _accepts(m, hosts[s], labels)]
        takes.append(by_shape[shape])
    chosen = matching.distinct(takes)
    matched = set(chosen)
    left = iter([s for s in free if s not in matched])
    placed = [s if s is not None else next(left, None) for s in chosen]
    return tuple(Placement(m, s, hosts[s]) for m, s in zip(unbound, placed, strict=True) if s is not None)


def _accepts(pod: JSON, kube_node: str, labels: Mapping[str, Mapping[str, str]]) -> bool:
    known = labels.get(kube_node)
    return known is None or affinity_matches(pod, known, kube_node)


def bind(o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Action:
    placements = assign(o, group, job, live)
    if isinstance(placements, str):
        return Wait(placements)
    if not placements:
        unbound = tuple(m for m in live if not podstate.bound(m))
        if growth.outgrown(group, job):
            return Pend(unbound, reasons.REASON_GROUP_FULL, growth.outgrown_message(group, job))
        return Pend(
            unbound,
            reasons.REASON_GROUP_FULL,
            f"each of Slurm job {job.job_id}'s {len(job.job.nodes)} nodes already runs a member of the group",
        )
    writes: dict[str, tuple[ClaimWrite, ...]] = {}
    statuses: dict[str, dict[str, Any]] = {}
    new: list[tuple[JSON, dict[str, Any]]] = []
    stale: list[tuple[JSON, str]] = []
    for p in placements:
        match _gpu_writes(o.gpu, job, p):
            case None:
                continue
            case gres.NotSeen(why=why):
                return Wait(why)
            case gres.Mismatch(why=why):
                what = (
                    "the Pod's ResourceClaims"
                    if podstate.uid(p.pod) in o.gpu.gpus
                    else f"the Pod's {keys.GPU_RESOURCE}"
                )
                return Refuse(
                    live,
                    reasons.REASON_GPU_MISMATCH,
                    f"the GPUs Slurm gave job {job.job_id} cannot be given to {what}: {why}",
                )
            case gpuclaims.NewClaim(manifest=manifest):
                new.append((p.pod, manifest))
            case gpuclaims.StaleClaim(claim=claim, why=why):
                stale.append((claim, why))
            case gpuclaims.ExtendedWrite(writes=claim_writes, pod_status=pod_status):
                writes[podstate.uid(p.pod)] = claim_writes
                if pod_status is not None:
                    statuses[podstate.uid(p.pod)] = pod_status
            case tuple() as claim_writes:
                writes[podstate.uid(p.pod)] = claim_writes
    if new or stale:
        return MakeClaims(tuple(new), tuple(stale))
    ask = domains.asked(group, validation.pod_annotations(live[0]))
    return Bind(job, placements, writes, statuses, domains.landed(o.topology, ask, job.job.nodes))


def _gpu_writes(
    gpu: GpuFacts, job: JobStatus, p: Placement
) -> (
    tuple[ClaimWrite, ...]
    | gpuclaims.ExtendedWrite
    | gpuclaims.NewClaim
    | gpuclaims.StaleClaim
    | gres.NotSeen
    | gres.Mismatch
    | None
):
    """What gives the member the GPUs Slurm chose before its bind: its claims' allocations, or the
    claim its nvidia.com/gpu needs on a Node serving it through DRA; None when it needs neither."""
    gpus = gpu.gpus.get(podstate.uid(p.pod))
    devices = gpu.devices.get(p.kube_node)
    if gpus is not None and gpus.requests:
        return gpuclaims.claim_writes(
            p.pod, gpus, job.job, p.slurm_node, devices, gpu.claims, gpu.class_config
        )
    if _gpus_by_dra(gpu, p):
        return gpuclaims.extended_writes(
            p.pod,
            job.job,
            p.slurm_node,
            devices,
            gpu.extended_class,
            gpu.extended_claims.get(podstate.uid(p.pod)),
            gpu.class_config.get(gpu.extended_class, ()),
        )
    return None


def _gpus_by_dra(gpu: GpuFacts, p: Placement) -> bool:
    """The member asks nvidia.com/gpu and its Node serves it through DRA."""
    if not gpu.extended_class or p.kube_node not in gpu.dra_served:
        return False
    try:
        return validation.effective_requests(p.pod).get(keys.GPU_RESOURCE, 0) > 0
    except ValueError:
        return False
