"""The API writes a lock makes: the Node's taint, the slurmd Pod's lock annotation, evictions.

Each write is remembered (tandem.assume) with the resourceVersion the API server answered until the
informers show it, so the next pass, and a hook call waiting for its lock, act on what was written
rather than on a cache a few milliseconds old. Every error other than a refused eviction is raised
to the caller (the runner retries the node after its backoff).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from tandem import keys
from tandem.assume import AssumeCache
from tandem.keys import LockState
from tandem.kube import JSON, KubeClient, KubeError, pod_path

log = logging.getLogger(__name__)

# A Node's taints are one list: a write races others' (the taint manager, kubectl taint). A write
# refused for a changed Node is tried again this many times on a fresh read.
TAINT_TRIES = 5
_BUDGET = re.compile(r"disruption budget (\S+)")


def taint_key(kube_node: str) -> str:
    return f"taint/{kube_node}"


def lock_key(slurm_node: str) -> str:
    return f"lock/{slurm_node}"


class LockWrites:
    def __init__(
        self,
        kube: KubeClient,
        slurmd_namespace: str,
        cached_node: Callable[[str], JSON | None],
        assumed: AssumeCache[Any] | None = None,
    ) -> None:
        self.kube = kube
        self.slurmd_namespace = slurmd_namespace
        self.cached_node = cached_node
        self.assumed: AssumeCache[Any] = assumed if assumed is not None else AssumeCache()

    # -- what was written and the caches may not show yet ------------------------------------------

    def lock_of(self, slurmd_pod: JSON) -> LockState | None:
        """The lock annotation this syncer wrote on the slurmd Pod, while its cached copy is older."""
        meta = slurmd_pod.get("metadata") or {}
        value = self.assumed.get(lock_key(str(meta.get("name"))), str(meta.get("resourceVersion") or ""))
        return value if isinstance(value, LockState) else None

    def tainted(self, kube_node: str, node: JSON | None) -> bool | None:
        """Whether this syncer left the Node tainted, while its cached copy is older."""
        seen = str(((node or {}).get("metadata") or {}).get("resourceVersion") or "")
        value = self.assumed.get(taint_key(kube_node), seen)
        return value if isinstance(value, bool) else None

    # -- writes ----------------------------------------------------------------------------------

    def set_taint(self, kube_node: str, present: bool) -> None:
        """Add or remove the lock taint: a JSON patch that holds only if the Node is still the
        version read (taints are one list); on a conflict, read it afresh and try again."""
        node = self.cached_node(kube_node)
        for _ in range(TAINT_TRIES):
            if node is None:
                node = self.kube.get(f"/api/v1/nodes/{kube_node}")
            spec = node.get("spec") or {}
            taints = list(spec.get("taints") or [])
            version = str((node.get("metadata") or {}).get("resourceVersion") or "")
            if any(t.get("key") == keys.LOCK_KEY for t in taints) == present:
                self.assumed.assume(taint_key(kube_node), present, version)
                return
            if present:
                taints.append(
                    {"key": keys.LOCK_KEY, "value": keys.LOCK_TAINT_VALUE, "effect": keys.LOCK_TAINT_EFFECT}
                )
            else:
                taints = [t for t in taints if t.get("key") != keys.LOCK_KEY]
            ops: list[JSON] = [
                {"op": "test", "path": "/metadata/resourceVersion", "value": version},
                {"op": "replace" if "taints" in spec else "add", "path": "/spec/taints", "value": taints},
            ]
            try:
                answer = self.kube.json_patch(f"/api/v1/nodes/{kube_node}", ops)
            except KubeError as e:
                if e.status not in (409, 422):
                    raise
                node = None  # changed since it was read: read it afresh
                continue
            self.assumed.assume(taint_key(kube_node), present, _version(answer))
            return
        raise KubeError(
            409, "Conflict", f"could not update the taints of {kube_node}: too many concurrent changes"
        )

    def annotate(self, slurm_node: str, state: LockState) -> None:
        answer = self.kube.merge_patch(
            pod_path(self.slurmd_namespace, slurm_node),
            {"metadata": {"annotations": {keys.LOCK_KEY: state.value}}},
        )
        self.assumed.assume(lock_key(slurm_node), state, _version(answer))

    def evict(self, pod: JSON) -> str:
        """Evict through the Eviction API, which honours PodDisruptionBudgets. Returns why the
        eviction was refused, "" when it was not (or the Pod is already gone)."""
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        }
        try:
            self.kube.post(f"{pod_path(meta['namespace'], meta['name'])}/eviction", body)
        except KubeError as e:
            if e.status == 404:
                return ""
            if e.status == 429:
                return refusal(e)
            raise
        return ""


def refusal(e: KubeError) -> str:
    """A 429 from the Eviction API in words: which PodDisruptionBudget, when the API says."""
    for cause in e.causes:
        found = _BUDGET.search(cause)
        if found:
            return f"its PodDisruptionBudget {found.group(1)} allows no disruption"
    return f"eviction refused: {e.message}"


def _version(answer: object) -> str:
    """The resourceVersion the API server answered a write with ("" when it did not say)."""
    if not isinstance(answer, dict):
        return ""
    return str((answer.get("metadata") or {}).get("resourceVersion") or "")
