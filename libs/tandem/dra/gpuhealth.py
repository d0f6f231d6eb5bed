"""A GPU's health as both schedulers read it: the GPUs whose devices Kubernetes keeps from claims
(tainted NoSchedule or NoExecute), and the GPUs a Slurm drain reason names. The syncer acts on
both (tandem.syncer.gputaints); `kubectl tandem` shows them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tandem import keys
from tandem.dra.slices import NodeDevices
from tandem.dra.taints import NO_EXECUTE, DeviceTaint

# `GPU 3`, `GPUs 3,5`, `gpu:2-3`, `GPU#7`: a list of indices and ranges after the word.
_NAMED = re.compile(r"\bGPUs?\s*[:#=]?\s*([0-9]{1,4}(?:\s*[-,]\s*[0-9]{1,4})*)\b", re.IGNORECASE)
# A node has a few dozen GPU indices at most (tandem.dra.gres.MAX_INDEX bounds the bitmap).
MAX_NAMED = 64
# A reason is read this far for GPU names (Slurm keeps a reason of any length).
READ_AT_MOST = 800


@dataclass(frozen=True)
class TaintedGpu:
    """One GPU of the node that Kubernetes keeps from claims: Slurm's index, its device, and the
    taints that do it (NoSchedule or NoExecute)."""

    index: int
    device: str
    taints: tuple[DeviceTaint, ...]

    @property
    def evicts(self) -> bool:
        return any(t.effect == NO_EXECUTE for t in self.taints)


def tainted_gpus(devices: NodeDevices | str | None) -> tuple[TaintedGpu, ...]:
    """The node's GPUs and MIG slices whose taints keep them from claims, by Slurm index; the
    syncer's own mirror of a Slurm drain is not one (it would drain the node for its own drain)."""
    if not isinstance(devices, NodeDevices):
        return ()
    found = []
    for d in devices.devices:
        taints = tuple(t for t in d.taints if t.effective and t.key != keys.SLURM_GPU_TAINT_KEY)
        if taints:
            found.append(TaintedGpu(d.index, d.name, taints))
    return tuple(found)


def gpus_named(reason: str) -> tuple[int, ...]:
    """The GPU indices a drain reason names (the module's format); () when it names none. A
    reason the syncer wrote itself (`k8s: ...`) names none: it is Kubernetes' side already."""
    if reason.startswith("k8s:"):
        return ()
    named: set[int] = set()
    for m in _NAMED.finditer(reason[:READ_AT_MOST]):
        for part in m.group(1).replace(" ", "").split(","):
            first, _, last = part.partition("-")
            lo, hi = int(first), int(last or first)
            if hi < lo or hi - lo >= MAX_NAMED:
                continue
            named.update(range(lo, hi + 1))
            if len(named) > MAX_NAMED:
                return tuple(sorted(named)[:MAX_NAMED])
    return tuple(sorted(named))
