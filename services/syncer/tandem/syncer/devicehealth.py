"""A device the kubelet reports Unhealthy (KEP-4680, GA in Kubernetes 1.37): in the status of each Pod
that holds it, `containerStatuses[].allocatedResourcesStatus[].resources[]`, a resource of a DRA
claim being `{resourceID: "<driver>/<pool>/<device>", health: Unhealthy}`. Such a GPU is as bad as a
tainted one: Slurm must not give it out either (tandem.syncer.gputaints reads it as a taint of its
own, `UNHEALTHY`, effect NoSchedule). Only a Pod on that Node can say so, and only while it holds
the device; the syncer's Pod cache keeps just these reports (`kept`).
"""

from __future__ import annotations

from collections.abc import Iterable

from tandem.dra.taints import NO_SCHEDULE, DeviceTaint
from tandem.kube import JSON

# How the drain reason names the kubelet's report (a taint key of no one's: it is not on the API).
UNHEALTHY = DeviceTaint("kubelet/device-health", "Unhealthy", NO_SCHEDULE)
# Far beyond the devices one Pod holds; a status listing more is not read past it.
MAX_REPORTED = 64


def kept(pod: JSON) -> list[str]:
    """The resource IDs the Pod's status reports Unhealthy (what the syncer's cache keeps of it)."""
    status = pod.get("status") or {}
    found: list[str] = []
    for container in [*(status.get("containerStatuses") or []), *(status.get("initContainerStatuses") or [])]:
        for allocated in (container or {}).get("allocatedResourcesStatus") or []:
            for resource in (allocated or {}).get("resources") or []:
                resource = resource or {}
                if resource.get("health") == "Unhealthy" and isinstance(resource.get("resourceID"), str):
                    found.append(resource["resourceID"][:512])
                if len(found) >= MAX_REPORTED:
                    return found
    return found


def unhealthy(pods: Iterable[JSON], driver: str, pool: str) -> set[str]:
    """The devices of this driver's `pool` that a Pod on the Node reports Unhealthy (as the cache
    keeps Pods: `status.unhealthyDevices`)."""
    prefix = f"{driver}/{pool}/"
    return {
        rid[len(prefix) :]
        for pod in pods
        for rid in (pod.get("status") or {}).get("unhealthyDevices") or []
        if isinstance(rid, str) and rid.startswith(prefix) and "/" not in rid[len(prefix) :]
    }
