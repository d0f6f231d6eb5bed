"""The Slurm node -> Node mapping, in one place: a Slurm node is hosted on the Node its slurmd Pod
runs on.

A slurmd Pod is known by its namespace (which tenants cannot write to) and its label; its name is
the Slurm node's. The syncer owns the mapping at run time (its informers hold the Pods) and publishes
it on its stream; the CLI reads the same Pods with the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tandem import keys
from tandem.keys import LockState

Pod = Mapping[str, Any]


def slurm_node_of(pod: Pod, slurmd_namespace: str) -> str | None:
    """The Slurm node this Pod is the slurmd of; None for any other Pod (one carrying the label
    outside the slurmd namespace included: any tenant can write a label)."""
    meta = pod.get("metadata") or {}
    if meta.get("namespace") != slurmd_namespace:
        return None
    if (meta.get("labels") or {}).get(keys.SLURMD_POD_LABEL) != keys.SLURMD_POD_LABEL_VALUE:
        return None
    name = meta.get("name")
    return str(name) if name else None


def host_of(slurmd_pod: Pod | None) -> str:
    """The Node a slurmd Pod runs on; "" when there is no Pod or it is on no Node yet."""
    return str(((slurmd_pod or {}).get("spec") or {}).get("nodeName") or "")


def lock_state_of(slurmd_pod: Pod | None) -> LockState:
    """The lock annotation of a slurmd Pod; false when absent or not a lock state."""
    value = (((slurmd_pod or {}).get("metadata") or {}).get("annotations") or {}).get(keys.LOCK_KEY)
    try:
        return LockState(value) if value is not None else LockState.FALSE
    except ValueError:
        return LockState.FALSE


def hosting(pods: Iterable[Pod], slurmd_namespace: str) -> dict[str, Pod]:
    """Slurm node -> its slurmd Pod, among these Pods."""
    found: dict[str, Pod] = {}
    for pod in pods:
        name = slurm_node_of(pod, slurmd_namespace)
        if name is not None:
            found[name] = pod
    return found
