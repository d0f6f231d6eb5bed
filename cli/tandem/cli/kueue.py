"""The Kueue Workload behind a Pod: its name and where Kueue's admission of it stands.

Kueue admits a Job (or a group of Pods) as one Workload, which names what it admits among its
owner references: the Job for a Job's Pods, the Pods themselves for a Pod group (a
LeaderWorkerSet's). A cluster without Kueue has no Workloads, and nothing shows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tandem.discovery import Versioned
from tandem.kube import JSON

WORKLOADS = Versioned("kueue.x-k8s.io", "workloads", ("v1beta2", "v1beta1"))


@dataclass(frozen=True)
class Workload:
    name: str
    # Finished, Evicted (preempted, or its quota taken back), Admitted, QuotaReserved or Pending.
    state: str

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


def state_of(workload: JSON) -> str:
    """The furthest of Kueue's conditions that holds; Pending while none does."""
    conditions = {
        str(c.get("type")): c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type")
    }

    def holds(kind: str) -> bool:
        return str((conditions.get(kind) or {}).get("status")) == "True"

    for kind in ("Finished", "Evicted", "Admitted", "QuotaReserved"):
        if holds(kind):
            return kind
    return "Pending"


def by_owner(workloads: Iterable[JSON]) -> dict[str, Workload]:
    """The uid of each object a Workload admits (its owners: a Job, or a group's Pods) -> it."""
    out: dict[str, Workload] = {}
    for wl in workloads:
        meta = wl.get("metadata") or {}
        view = Workload(str(meta.get("name", "")), state_of(wl))
        for owner in meta.get("ownerReferences") or []:
            if owner.get("uid"):
                out[str(owner["uid"])] = view
    return out


def of_pod(pod: JSON, workloads: Mapping[str, Workload]) -> Workload | None:
    """The Workload that admits the Pod: its own (a Pod group's member), else its owner's (a Job's)."""
    meta = pod.get("metadata") or {}
    uids = [str(meta.get("uid", "")), *(str(o.get("uid", "")) for o in meta.get("ownerReferences") or [])]
    return next((workloads[u] for u in uids if u in workloads), None)
