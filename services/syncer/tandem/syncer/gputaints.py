"""GPU health across both schedulers, one GPU at a time (issue 37).

Kubernetes -> Slurm: a GPU whose device is tainted NoSchedule or NoExecute (by its driver in the
ResourceSlice, or by a DeviceTaintRule), or that the kubelet reports Unhealthy in a Pod's status
(tandem.syncer.devicehealth), must not be given out by Slurm either. Slurm 24.11 and
26.05 cannot take one GRES index out of a live node: `scontrol update NodeName= Gres=` replaces the
node's count (a smaller count drops the highest indices, not the bad one) and only a new gres.conf
and a slurmd restart name indices. So the node sync drains the Slurm node with a reason naming the
GPUs (`cause`), under the ownership rules of a cordon drain: resumed when the last taint goes, and
only if the syncer's own Slurm user made it. A job asking for every GPU of the node pends; running
jobs keep running (a drain is NoSchedule's meaning), but a Slurm job holding a GPU tainted
NoExecute is cancelled (`evicted_jobs`), as Kubernetes evicts the Pods using it. The syncer's own
taint (below) never drains: it mirrors a Slurm drain already there.

Slurm -> Kubernetes: a Slurm node drained (or down) with a reason that names GPUs, as an admin or a
HealthCheckProgram writes it, gets a DeviceTaintRule per named GPU, effect NoSchedule, so that
kube-scheduler's own DRA Pods avoid those devices too; the rules go when Slurm resumes the node or
its reason names them no longer. The format (tandem.dra.gpuhealth.gpus_named): the word GPU or
GPUs, then Slurm GPU indices and ranges, optionally after ':', '#' or '=': `GPU 3`, `GPUs 3,5`,
`gpu:2-3`, `GPU#7 xid 79`.
A reason of the syncer's own (`k8s: ...`) is never mirrored back.

Pure: tandem.syncer.nodefacts reads the devices (with their taints) and the rules from the caches,
tandem.syncer.nodesync decides, tandem.syncer.nodeapply writes (tests/unit/syncer/test_gputaints.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tandem import keys
from tandem.dra.claims import DRIVER
from tandem.dra.gpuhealth import TaintedGpu, gpus_named
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON
from tandem.slurm.models import Node
from tandem.syncer import health
from tandem.syncer.facts import RunningJob

# A DNS subdomain is at most 253 characters.
_NAME_MAX = 253


def cause(kube_node: str, tainted: Sequence[TaintedGpu]) -> str:
    """`k8s: Node <name> has GPU 3 tainted: gpu-3 example.com/xid=79:NoSchedule` ("" for none):
    a `k8s: Node ` reason, so a cordon drain's rules hold (nodesync.CAUSE_PREFIXES)."""
    if not tainted:
        return ""
    indices = ",".join(str(g.index) for g in tainted)
    what = f"GPU {indices}" if len(tainted) == 1 else f"GPUs {indices}"
    taints = "; ".join(f"{g.device} {', '.join(str(t) for t in g.taints)}" for g in tainted)
    return health.capped(health.one_line(f"k8s: Node {kube_node} has {what} tainted: {taints}"))


def evicted_jobs(tainted: Sequence[TaintedGpu], jobs: Sequence[RunningJob]) -> tuple[tuple[int, int], ...]:
    """(job id, GPU index) of each Slurm job holding a GPU tainted NoExecute: cancelled, as
    Kubernetes' device taint eviction controller deletes the Pods using one. A placeholder is not
    one of them: its Pod's claim holds the device, so that controller evicts the Pod, and Tandem
    cancels its job as for any Pod deleted."""
    evicting = {g.index for g in tainted if g.evicts}
    found = []
    for job in jobs:
        hit = sorted(evicting.intersection(job.gpus))
        if hit and not job.placeholder:
            found.append((job.job_id, hit[0]))
    return tuple(found)


def rule_name(kube_node: str, index: int) -> str:
    """The DeviceTaintRule of one GPU a Slurm drain names."""
    suffix = f"-gpu-{index}"
    return f"tandem-slurm-{kube_node}"[: _NAME_MAX - len(suffix)].rstrip("-.") + suffix


@dataclass(frozen=True)
class RulesPlan:
    """The syncer's DeviceTaintRules of one Node to create (manifests) and delete (names)."""

    create: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.create or self.delete)


def wanted_rules(
    slurm: Node | None, slurm_node: str, kube_node: str, devices: NodeDevices | str | None
) -> dict[str, dict[str, Any]] | None:
    """Rule name -> manifest for each GPU the Slurm node's drain names that the Node publishes;
    None when nothing can be said (the Slurm node or the Node's devices not read)."""
    if slurm is None or not kube_node or not isinstance(devices, NodeDevices):
        return None
    if not (slurm.drained or slurm.state == "DOWN"):
        return {}
    by_index = devices.by_index()
    wanted: dict[str, dict[str, Any]] = {}
    for index in gpus_named(slurm.reason):
        device = by_index.get(index)
        if device is None:
            continue  # an index this Node does not publish: nothing to taint
        name = rule_name(kube_node, index)
        wanted[name] = {
            "apiVersion": "",  # the served version: nodeapply sets it
            "kind": "DeviceTaintRule",
            "metadata": {
                "name": name,
                "labels": {keys.MANAGED_BY_LABEL: keys.SYNCER_MANAGER, keys.SLURM_GPU_RULE_LABEL: slurm_node},
                "annotations": {keys.SLURM_GPU_RULE_REASON: slurm.reason[: health.REASON_MAX]},
            },
            "spec": {
                "deviceSelector": {"driver": DRIVER, "pool": devices.pool, "device": device.name},
                "taint": {"key": keys.SLURM_GPU_TAINT_KEY, "value": f"gpu-{index}", "effect": "NoSchedule"},
            },
        }
    return wanted


def plan_rules(wanted: Mapping[str, JSON] | None, existing: Sequence[JSON]) -> RulesPlan:
    """What makes the Node's rules of this Slurm node `wanted` (None: leave them as they are).
    A rule of that name whose selector or taint differs is deleted, then made again."""
    if wanted is None:
        return RulesPlan()
    have = {str((r.get("metadata") or {}).get("name")): r for r in existing}
    create, delete = [], []
    for name, manifest in sorted(wanted.items()):
        found = have.get(name)
        if found is not None and _same(found, manifest):
            continue
        if found is not None:
            delete.append(name)
        create.append(dict(manifest))
    delete += sorted(n for n in have if n not in wanted)
    return RulesPlan(tuple(create), tuple(delete))


def _same(rule: JSON, manifest: Mapping[str, Any]) -> bool:
    spec, want = rule.get("spec") or {}, manifest["spec"]
    taint = spec.get("taint") or {}
    return spec.get("deviceSelector") == want["deviceSelector"] and all(
        taint.get(k) == v for k, v in want["taint"].items()
    )
