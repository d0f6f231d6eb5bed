"""The writes the scheduler makes to ResourceClaims (DRA): the allocation Slurm chose, the claim for
a Pod's nvidia.com/gpu, and the removal of one that can no longer serve its Pod. Each is guarded by
what was read (a resourceVersion or a uid), as kube-scheduler's DRA plugin guards its own."""

from __future__ import annotations

import logging

from tandem import keys
from tandem.dra.allocation import FINALIZER
from tandem.dra.shape import at, items
from tandem.kube import JSON, KubeClient, KubeError, object_key
from tandem.scheduler.gpuclaims import ClaimWrite

log = logging.getLogger(__name__)


def claim_path(namespace: str, name: str = "") -> str:
    """A ResourceClaim's path (the collection's without a name)."""
    collection = (
        f"/apis/{keys.DRA_GROUP}/{keys.DRA_VERSIONS[0]}/namespaces/{namespace}/{keys.RESOURCE_CLAIMS}"
    )
    return f"{collection}/{name}" if name else collection


class ClaimApi:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    def allocate(self, pod: JSON, writes: tuple[ClaimWrite, ...]) -> None:
        """Each claim allocated the devices Slurm chose and reserved for the Pod, as kube-scheduler's
        DRA plugin does before its bind: the finalizer first (the claim cannot go while the Pod may
        use its devices), then the status, each guarded by the resourceVersion read. A crash in
        between leaves a state the next decision finishes (tandem.dra.allocation.claim_status)."""
        for write in writes:
            path = claim_path(write.namespace, write.name)
            version = str(at(write.claim, "metadata", "resourceVersion") or "")
            if write.needs_finalizer:
                finalizers = [str(f) for f in items(at(write.claim, "metadata", "finalizers"))]
                answer = self.kube.json_patch(
                    path,
                    [
                        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                        {"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, FINALIZER]},
                    ],
                )
                version = str(at(answer, "metadata", "resourceVersion") or "")
            if not write.status_written:
                self.kube.merge_patch(
                    f"{path}/status", {"metadata": {"resourceVersion": version}, "status": write.status}
                )
            log.info(
                "claim allocated",
                extra={"pod": object_key(pod), "claim": write.name, "devices": list(write.devices)},
            )

    def make(self, pod: JSON, manifest: JSON) -> JSON:
        """The claim for the Pod's nvidia.com/gpu (tandem.dra.extended), as kube-scheduler makes it;
        the claim as the API answered it."""
        namespace = str(at(pod, "metadata", "namespace") or "")
        answer = self.kube.post(claim_path(namespace), manifest)
        log.info(
            "claim made for the Pod's GPUs",
            extra={"pod": object_key(pod), "claim": at(answer, "metadata", "name")},
        )
        return answer

    def drop(self, claim: JSON, why: str) -> None:
        """A claim made for a Pod that cannot serve it now: its finalizer off (it holds no devices
        for a running container: the Pod is not bound), then deleted; the next decision makes anew."""
        name, namespace = str(at(claim, "metadata", "name")), str(at(claim, "metadata", "namespace"))
        path = claim_path(namespace, name)
        finalizers = [str(f) for f in items(at(claim, "metadata", "finalizers"))]
        try:
            if FINALIZER in finalizers:
                self.kube.json_patch(
                    path,
                    [
                        {"op": "test", "path": "/metadata/uid", "value": at(claim, "metadata", "uid")},
                        {
                            "op": "replace",
                            "path": "/metadata/finalizers",
                            "value": [f for f in finalizers if f != FINALIZER],
                        },
                    ],
                )
            self.kube.delete(path, {"preconditions": {"uid": at(claim, "metadata", "uid")}})
        except KubeError as e:
            if e.status != 404:
                raise
        log.info("stale claim deleted", extra={"claim": f"{namespace}/{name}", "why": why})
