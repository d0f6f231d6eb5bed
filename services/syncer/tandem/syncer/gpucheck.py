"""Do a node's GPUs look the same to both sides? Slurm's GRES (what it allocates by index) against
the Node's ResourceSlices (what a claim is allocated): a Pod's claim gets the devices of the
indices Slurm chose, so where the two disagree a claim would be given the wrong GPUs. The node
sync shows the difference as the Node condition SlurmGpuMismatch, which keeps Pods that claim GPUs
off the Node (tandem.scheduler.eligibility) and which `kubectl tandem nodes` prints."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.dra import gres, slices
from tandem.dra.claims import DraConfig
from tandem.kube import JSON
from tandem.slurm.models import Node


def mismatch(slurm: Node | None, kube_node: str, node_slices: Sequence[JSON], cfg: DraConfig) -> str | None:
    """Why the Node's devices and the Slurm node's GPUs disagree, in one line; "" when they agree;
    None when there is nothing to compare: the Node publishes no NVIDIA ResourceSlice (a cluster
    whose Pods ask for nvidia.com/gpu only), or the Slurm node is not read yet."""
    if slurm is None or not kube_node or not node_slices:
        return None
    try:
        node_gres = gres.parse_gres(slurm.gres)
    except gres.GresError as e:
        return f"Slurm's GRES of {slurm.name}: {e}"
    return slices.agreement(slices.node_devices(kube_node, node_slices, cfg), node_gres).difference


def shown(node: JSON | None) -> str | None:
    """The difference the Node shows now (its condition's message); None when it shows none."""
    value = ((node or {}).get("status") or {}).get("gpuMismatch")
    return None if value is None else str(value)
