"""A syncer with real informer caches and a fake API server that writes into them: a patch, a taint
or an eviction shows in the caches (and fires their callbacks) as a watch event would. A hook
call that waits on the caches for its lock would hang on an API mock that never reflects its
writes. `Stack` wires the node sync as tandem.syncer.main does: hold store, work queue, runner,
hook calls, servicer (its node credentials reviewed by a stand-in API server)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any
from unittest import mock

from tandem import jobtoken, keys, placeholder
from tandem.keys import LockState
from tandem.kube import JSON, KubeError, object_key
from tandem.nodetoken import TokenReviewer, unverified_claims
from tandem.runner import Runner
from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.broker import Batch, Subscription
from tandem.syncer.cluster import ClusterView, slim_daemonset, slim_node, slim_pod
from tandem.syncer.holds import HoldStore
from tandem.syncer.lockcalls import NodeLocks
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodeapply import NodeSync
from tandem.syncer.nodefacts import NODE_KEY_PREFIX, CacheFacts, resync_keys
from tandem.syncer.service import SyncerServicer
from tandem.syncer.writes import LockWrites
from tandem.workqueue import WorkQueue
from tests.unit.node_credentials import node_token, review

SLURMD_NS = "slurm"

# The job key the tests' placeholders are signed with (tandem.jobtoken).
JOB_KEY = b"k" * 32


# The binding of the placeholder jobs these tests submit (their AdminComment: `bound`).
BINDING = "0b" * 16


def take_now(sub: Subscription) -> Batch | None:
    """The batch a subscription has queued now (the stream's own wait, on a loop of its own)."""
    assert not sub.queue.empty(), "no batch queued"
    return asyncio.run(sub.take())


def bound(reference: str) -> str:
    """A placeholder job's AdminComment, bound to BINDING as the scheduler writes it."""
    return placeholder.admin_comment(reference, BINDING)


def token_for(reference: str, binding: str = BINDING) -> str:
    """A placeholder's own credential, as its script presents it (bound to BINDING)."""
    return jobtoken.token(JOB_KEY, reference, binding)


def node_token_for(slurm_node: str) -> str:
    """The credential of `slurm_node`'s slurmd Pod (as `_slurmd` makes it), as its prolog and
    epilog present it."""
    return node_token(slurm_node, uid=f"uid-{slurm_node}", namespace=SLURMD_NS)


def api_server_review(token: str) -> JSON:
    """The API server's TokenReview of a token node_token made: it vouches for the Pod the token
    names (the tests' tokens are unsigned; a real one names its Pod the same way)."""
    bound = (unverified_claims(token) or {})["kubernetes.io"]
    return review(token, pod=bound["pod"]["name"], uid=bound["pod"]["uid"], namespace=bound["namespace"])


def _pod(name: str, node: str, namespace: str = "apps", **meta: Any) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            **meta,
        },
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


def _slurmd(slurm_node: str, node: str, lock: LockState = LockState.FALSE) -> JSON:
    return _pod(
        slurm_node,
        node,
        namespace=SLURMD_NS,
        labels={keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
        annotations={keys.LOCK_KEY: lock.value},
    )


def _daemonset(name: str, namespace: str, uid: str, tolerations: list[JSON], version: str = "1") -> JSON:
    """A DaemonSet as the API server has it: its Pod template's tolerations are what count."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": version},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "agent"}], "tolerations": tolerations},
            },
        },
        "status": {"numberReady": 3},
    }


def _mirror(synced: bool, jobs: tuple[Job, ...] = (), nodes: tuple[Node, ...] | None = None) -> SlurmMirror:
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = list(jobs)
    slurm.list_nodes.return_value = (
        list(nodes) if nodes is not None else [Node("cpu-001", "ALLOCATED" if jobs else "IDLE")]
    )
    slurm.get_job_components.return_value = []
    mirror = SlurmMirror(slurm, poll_interval=60)
    if synced:
        mirror.poll_once()
    return mirror


class FakeKube:
    """The API calls the syncer makes, answered from and written into the caches."""

    def __init__(self) -> None:
        self.cluster: ClusterView | None = None
        self.calls: list[tuple[str, str, Any]] = []
        self.rv = 100
        self.evict_refusal: KubeError | None = None  # what every eviction gets, when set
        self.evicted_leave_after = 0.1  # the kubelet takes a moment to let a Pod go
        self.failure: KubeError | None = None  # every write fails so, when set
        self._lock = threading.Lock()

    def _next_rv(self) -> str:
        with self._lock:
            self.rv += 1
            return str(self.rv)

    def _view(self) -> ClusterView:
        assert self.cluster is not None
        return self.cluster

    def get(self, path: str, params: Any = None) -> JSON:
        self.calls.append(("get", path, None))
        if path.startswith("/api/v1/nodes/"):
            node = self._view().node(path.rsplit("/", 1)[1])
            if node is None:
                raise KubeError(404, "NotFound", path)
            return node
        raise KubeError(404, "NotFound", path)

    def merge_patch(self, path: str, body: Any) -> JSON:
        self.calls.append(("merge_patch", path, body))
        if self.failure is not None:
            raise self.failure
        parts = path.split("/")
        if "pods" in parts:
            namespace, name = parts[4], parts[6]
            cached = self._view().pod(namespace, name)
            if cached is None:
                raise KubeError(404, "NotFound", path)
            meta = dict(cached["metadata"])
            annotations = {**(meta.get("annotations") or {}), **body["metadata"].get("annotations", {})}
            meta["annotations"] = {k: v for k, v in annotations.items() if v is not None}
            meta["resourceVersion"] = self._next_rv()
            return self._store_pod({**cached, "metadata": meta})
        return {}

    def strategic_patch(self, path: str, body: Any) -> JSON:
        self.calls.append(("strategic_patch", path, body))
        return {}

    def json_patch(self, path: str, ops: list[JSON]) -> JSON:
        self.calls.append(("json_patch", path, ops))
        if self.failure is not None:
            raise self.failure
        name = path.rsplit("/", 1)[1]
        node = self._view().node(name)
        if node is None:
            raise KubeError(404, "NotFound", path)
        if ops[0]["value"] != node["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified")
        fresh = {
            "metadata": {**node["metadata"], "resourceVersion": self._next_rv()},
            "spec": {**node["spec"], "taints": ops[1]["value"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        informer = self._view().nodes
        with informer._lock:
            old = informer._put(name, slim_node(fresh))
        informer.on_change(name, old, informer.get(name))
        return fresh

    def post(self, path: str, body: Any, params: Any = None) -> JSON:
        self.calls.append(("post", path, body))
        if path.endswith("/eviction"):
            if self.evict_refusal is not None:
                raise self.evict_refusal
            meta = body["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            # The watch shows the deletion a moment after the API answered; the Pod goes later.
            threading.Timer(self.evicted_leave_after / 4, self._deleting, [key]).start()
            threading.Timer(self.evicted_leave_after, self.remove_pod, [key]).start()
        return {}

    def _store_pod(self, pod: JSON) -> JSON:
        informer = self._view().pods
        key = object_key(pod)
        with informer._lock:
            old = informer._put(key, slim_pod(pod))
            new = informer.get(key)
        informer.on_change(key, old, new)
        return pod

    def _deleting(self, key: str) -> None:
        namespace, name = key.split("/")
        pod = self._view().pod(namespace, name)
        if pod is not None:
            meta = {
                **pod["metadata"],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "resourceVersion": self._next_rv(),
            }
            self._store_pod({**pod, "metadata": meta})

    def evictions(self) -> list[str]:
        return [
            path.split("/")[-2]
            for verb, path, _ in self.calls
            if verb == "post" and path.endswith("/eviction")
        ]

    def remove_pod(self, key: str) -> None:
        informer = self._view().pods
        with informer._lock:
            old = informer._put(key, None)
        if old is not None:
            informer.on_change(key, old, None)

    # -- what the tests look at --

    def taint_writes(self) -> list[tuple[str, list[JSON]]]:
        return [(path, ops) for verb, path, ops in self.calls if verb == "json_patch"]

    def annotations_written(self) -> list[tuple[str, str]]:
        return [
            (path.rsplit("/", 1)[1], body["metadata"]["annotations"][keys.LOCK_KEY])
            for verb, path, body in self.calls
            if verb == "merge_patch" and "/pods/" in path
        ]

    def reads(self) -> list[str]:
        return [path for verb, path, _ in self.calls if verb == "get"]


class World:
    """The caches of a ClusterView, filled by hand, and the fake API that writes into them."""

    def __init__(self) -> None:
        self.kube = FakeKube()
        self.cluster = ClusterView(self.kube, SLURMD_NS)  # type: ignore[arg-type]
        self.kube.cluster = self.cluster
        for informer in (self.cluster.pods, self.cluster.nodes):
            for synced in informer._synced:
                synced.set()

    def add_pod(self, pod: JSON) -> None:
        self.kube._store_pod(pod)

    def remove_pod(self, key: str) -> None:
        self.kube.remove_pod(key)

    def add_node(self, name: str, tainted: bool = False) -> None:
        spec = {"taints": [{"key": keys.LOCK_KEY, "effect": "NoExecute"}]} if tainted else {}
        node = {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}
        with self.cluster.nodes._lock:
            old = self.cluster.nodes._put(name, slim_node(node))
            new = self.cluster.nodes.get(name)
        self.cluster.nodes.on_change(name, old, new)

    def add_daemonset(self, daemonset: JSON) -> None:
        """As the DaemonSet informer's watch shows it (slimmed, its callback fired)."""
        informer = self.cluster.daemonsets
        key = object_key(daemonset)
        with informer._lock:
            old = informer._put(key, slim_daemonset(daemonset))
            new = informer.get(key)
        informer.on_change(key, old, new)

    def remove_daemonset(self, key: str) -> None:
        informer = self.cluster.daemonsets
        with informer._lock:
            old = informer._put(key, None)
        if old is not None:
            informer.on_change(key, old, None)

    def lock_of(self, slurm_node: str) -> str:
        pod = self.cluster.slurmd_pod(slurm_node)
        assert pod is not None
        return str(pod["metadata"]["annotations"].get(keys.LOCK_KEY))

    def tainted(self, name: str) -> bool:
        node = self.cluster.node(name)
        return any(
            t.get("key") == keys.LOCK_KEY for t in ((node or {}).get("spec") or {}).get("taints") or []
        )


class Stack:
    """The node sync and the hook calls over a World, wired as tandem.syncer.main wires them, its
    runner started (the caches count as read)."""

    def __init__(
        self,
        world: World,
        mirror: SlurmMirror,
        events: Any = None,
        slurm: Any = None,
        scheduler_name: str = "tandem",
        cap: float = 0.0,
        workers: int = 4,
    ) -> None:
        self.world, self.mirror = world, mirror
        self.slurm = slurm if slurm is not None else mock.Mock()
        self.events = events
        cluster = world.cluster
        self.holds = HoldStore(on_change=cluster.wake)
        self.writes = LockWrites(world.kube, SLURMD_NS, cluster.node)  # type: ignore[arg-type]
        self.facts = CacheFacts(cluster, mirror.state, "tandem", self.holds, self.writes, scheduler_name)
        self.queue = WorkQueue(backoff_base=0.05, backoff_cap=0.5)
        self.sync = NodeSync(
            world.kube,  # type: ignore[arg-type]
            self.slurm,
            self.facts,
            mirror.expect_node,
            store=self.holds,
            writes=self.writes,
            events=events,
            lookup=mirror.refresh_job,
        )
        self.locks = NodeLocks(self.holds, self.queue, cluster, self.facts, mirror, cap=cap)
        self.servicer = SyncerServicer(
            mirror,
            self.locks,
            self.slurm,
            cluster,
            terminating_timeout=5,
            job_keys=lambda: [JOB_KEY],
            node_tokens=TokenReviewer(api_server_review),
        )
        self.servicer.active = True
        cluster.on_slurm_node_changed = self.queue.add
        cluster.on_node_pods_changed = self._pods_changed
        cluster.on_node_without_slurmd = lambda kube_node: self.queue.add(NODE_KEY_PREFIX + kube_node)
        mirror.state.on_node_changed(self.queue.add)
        self.stop = threading.Event()
        Runner("node-sync", self.queue, self.sync.reconcile, workers).start_workers()

    def _pods_changed(self, kube_node: str) -> None:
        for slurm_node in self.facts.waiting_on(kube_node):
            self.queue.add(slurm_node)

    def resync(self) -> None:
        for key in resync_keys(self.mirror.state, self.world.cluster, self.facts):
            self.queue.add(key)

    def close(self) -> None:
        self.stop.set()
        self.queue.shutdown()


def whole_listing_slurm() -> mock.Mock:
    """A stand-in Slurm that lists jobs only whole (GET /jobs), as before the light listing: for
    tests of what a poll does with a listing, not of how it asks."""
    slurm = mock.Mock()
    slurm.all_job_states.side_effect = SlurmApiError("GET jobs/state: not served", 404)
    return slurm
