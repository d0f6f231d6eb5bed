"""The writes the scheduler makes to Pods: job id, toleration, conditions, binding, deletion."""

from __future__ import annotations

from typing import Any

from tandem import keys
from tandem.assume import AssumeCache, version_of
from tandem.kube import JSON, KubeClient, KubeError, pod_path, rfc3339, tolerates

LOCK_TOLERATION = {"key": keys.LOCK_KEY, "operator": "Exists", "effect": keys.LOCK_TAINT_EFFECT}


def _path(pod: JSON) -> str:
    meta = pod["metadata"]
    return pod_path(meta["namespace"], meta["name"])


class PodApi:
    def __init__(self, kube: KubeClient, written: AssumeCache[tuple[str, str]] | None = None) -> None:
        self.kube = kube
        # The conditions this process wrote that the informer does not show yet: the memory's
        # (tandem.scheduler.assumed.Assumed.conditions), which forgets them.
        self.written: AssumeCache[tuple[str, str]] = written if written is not None else AssumeCache()

    def record_job(self, pod: JSON, job_id: int) -> JSON:
        """Write the job id and, in the same call, the toleration that keeps every lock from
        evicting this Pod (adding tolerations is allowed before and after binding)."""
        patch: dict[str, Any] = {
            "metadata": {
                "annotations": {keys.JOB_ID_ANNOTATION: str(job_id)},
                # Only if nobody changed the Pod since we read it: tolerations are one list.
                "resourceVersion": pod["metadata"]["resourceVersion"],
            }
        }
        if not tolerates(pod, keys.LOCK_KEY, keys.LOCK_TAINT_VALUE, keys.LOCK_TAINT_EFFECT):
            patch["spec"] = {"tolerations": [*(pod["spec"].get("tolerations") or []), LOCK_TOLERATION]}
        return self.kube.merge_patch(_path(pod), patch)

    def set_group_scheduled(self, podgroup: JSON, scheduled: bool, reason: str, message: str) -> bool:
        """The PodGroup's PodGroupScheduled condition; no write when already so. True if written."""
        meta = podgroup["metadata"]
        status = "True" if scheduled else "False"
        wanted = (status, reason, message)
        uid = "podgroup/" + str(meta.get("uid", ""))
        for c in (podgroup.get("status") or {}).get("conditions") or []:
            if (
                c.get("type") == keys.PODGROUP_SCHEDULED
                and (c.get("status"), c.get("reason"), c.get("message")) == wanted
            ):
                return False
        if self.written.get(uid, _version(podgroup)) == (status + reason, message):
            return False
        written = {
            "type": keys.PODGROUP_SCHEDULED,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(),
            "observedGeneration": meta.get("generation"),
        }
        # In the version it was read in (the informer's: whichever the cluster serves).
        resource = (
            keys.COMPOSITE_RESOURCE if podgroup.get("kind") == keys.COMPOSITE_KIND else keys.PODGROUP_RESOURCE
        )
        path = (
            f"/apis/{podgroup['apiVersion']}/namespaces/{meta['namespace']}/{resource}/{meta['name']}/status"
        )
        answer = self.kube.strategic_patch(path, {"status": {"conditions": [written]}})
        self.written.assume(uid, (status + reason, message), version_of(answer))
        return True

    def set_disrupted(self, pod: JSON, reason: str, message: str) -> None:
        """The DisruptionTarget condition, before the Pod is deleted for another's sake: its
        workload can tell the deletion from a failure (a Job's podFailurePolicy)."""
        written = {
            "type": keys.DISRUPTION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(),
        }
        self.kube.strategic_patch(f"{_path(pod)}/status", {"status": {"conditions": [written]}})

    def nominate(self, pod: JSON, node: str) -> None:
        """status.nominatedNodeName (KEP-5278): where the Pod will run once its prolog passed."""
        self.kube.strategic_patch(f"{_path(pod)}/status", {"status": {"nominatedNodeName": node or None}})

    def extended_claim_status(self, pod: JSON, status: JSON) -> None:
        """status.extendedResourceClaimStatus (KEP-5004): which request of its claim each container
        gets. The kubelet prepares the claim from it, so it is written before the bind."""
        self.kube.strategic_patch(f"{_path(pod)}/status", {"status": {"extendedResourceClaimStatus": status}})

    def set_unscheduled(self, pod: JSON, reason: str, message: str) -> bool:
        """PodScheduled=False with reason and message; no write when already so. True if written."""
        uid = str(pod["metadata"].get("uid", ""))
        scheduled = condition(pod, "PodScheduled") or {}
        # Bound since: what was written before no longer holds (the memory forgets it).
        if scheduled.get("status") != "True" and self.written.get(uid, _version(pod)) == (reason, message):
            return False
        for c in (pod.get("status") or {}).get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == reason
                and c.get("message") == message
            ):
                return False
        written = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(),
            "lastProbeTime": None,
        }
        answer = self.kube.strategic_patch(f"{_path(pod)}/status", {"status": {"conditions": [written]}})
        self.written.assume(uid, (reason, message), version_of(answer))
        return True

    def bind(self, pod: JSON, node: str, job_id: int) -> None:
        """Bind, recording the job id in the same request: the API server copies a Binding's
        annotations onto the Pod (a Pod alone that tolerates the lock has no write before this)."""
        meta = pod["metadata"]
        self.kube.post(
            f"{_path(pod)}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                    "annotations": {keys.JOB_ID_ANNOTATION: str(job_id)},
                },
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            },
        )

    def delete(self, pod: JSON) -> None:
        """Delete with the Pod's own grace period, only if it is still the same Pod."""
        try:
            self.kube.delete(_path(pod), {"preconditions": {"uid": pod["metadata"]["uid"]}})
        except KubeError as e:
            if not e.not_found and not e.conflict:
                raise


def _version(obj: JSON) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


def condition(pod: JSON, type_: str) -> JSON | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None
