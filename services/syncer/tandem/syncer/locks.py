"""Node locks: while a Slurm node runs a job, its Kubernetes Node carries the lock taint and its
slurmd Pod the lock annotation, and no Pod that must not share the Node remains on it.

A lock is level-triggered: it is held while the Slurm node runs any job (or a prolog is locking
it) and released when neither is true, however that came about (epilog, crash, lost epilog).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from tandem import budget, keys, placeholder, slurmd
from tandem.events import EventRecorder
from tandem.keys import LockState
from tandem.kube import JSON, KubeClient, KubeError, pod_finished, pod_path, tolerates
from tandem.metrics import REGISTRY
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.cluster import ClusterView
from tandem.syncer.mirror import SlurmMirror

log = logging.getLogger(__name__)

LOCK_WAIT_SECONDS = REGISTRY.histogram(
    "tandem_lock_wait_seconds", "time a prolog waited for its Node's lock", ["strict"]
)
EVICTIONS = REGISTRY.counter("tandem_evictions_total", "Pods evicted to lock a Node", ["strict"])

# How long a prolog's hold counts while Slurm's listing has not caught up with its job.
HOLD_GRACE_SECONDS = 60.0
# How long a Node keeps a lock taint while no slurmd Pod is on it before the taint is removed.
ORPHAN_GRACE_SECONDS = 4.0
# A Pod whose eviction was refused (its PodDisruptionBudget allows no disruption now) is asked
# again this much later, not on every round: the budget changes on the scale of seconds.
EVICTION_RETRY_SECONDS = 2.0
_BUDGET = re.compile(r"disruption budget (\S+)")


class LockError(RuntimeError):
    """The lock could not be taken; the prolog must fail so Slurm drains the node."""


@dataclass(frozen=True)
class Blocker:
    """A Pod that kept a Node from being locked, and why it did not leave."""

    pod: JSON
    why: str = ""

    def __str__(self) -> str:
        return f"{_ref(self.pod)} ({self.why})" if self.why else _ref(self.pod)


class LockTimeout(LockError):
    """Pods were still on the Node when the prolog's time ran out."""

    def __init__(self, kube_node: str, timeout: float, blockers: list[Blocker]) -> None:
        self.kube_node = kube_node
        self.blockers = blockers
        names = ", ".join(str(b) for b in blockers)
        super().__init__(f"timed out after {timeout:.0f}s locking {kube_node}: still there: {names}")


@dataclass
class NodeLockView:
    slurm_node: str
    kube_node: str
    state: LockState
    job_ids: list[int] = field(default_factory=list)


class NodeLocker:
    """Takes and releases node locks. The syncer is the only writer of lock annotations and taints
    (one leader), so what it wrote is cached: a prolog on an already locked node costs no API call.
    Pods, Nodes and slurmd Pods are read from the informers (`cluster`); a prolog waiting for its
    Node to empty wakes on each Pod change. `reconcile_all` repairs any drift every few seconds."""

    def __init__(
        self,
        kube: KubeClient,
        mirror: SlurmMirror,
        cluster: ClusterView,
        scheduler_name: str,
        timeout: float,
        events: EventRecorder | None = None,
        drain: Callable[[str, str], None] = lambda slurm_node, reason: None,
    ) -> None:
        # `drain`: drain a Slurm node with a reason (SlurmRestClient.drain_node).
        self.drain = drain
        self.kube = kube
        self.mirror = mirror
        self.cluster = cluster
        self.slurmd_namespace = cluster.slurmd_namespace
        self.scheduler_name = scheduler_name
        self.timeout = timeout
        self.events = events
        # Events go out from here, never under a node's mutex: a slow API must not hold a lock.
        self._event_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lock-events")
        self._node_locks: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self._guard = threading.Lock()
        # job id -> when its prolog asked, per Slurm node.
        self._holds: defaultdict[str, dict[int, float]] = defaultdict(dict)
        # What we last wrote or read: Slurm node -> (Kubernetes Node, slurmd Pod uid), lock state,
        # and whether each Kubernetes Node carries the taint.
        self._slurmd: dict[str, tuple[str, str]] = {}
        self._state: dict[str, LockState] = {}
        self._tainted: dict[str, bool] = {}
        # Nodes with the lock taint and no slurmd Pod on them, and since when (monotonic).
        self._orphaned: dict[str, float] = {}
        # The job a node was last locked for (named in the unlock Event).
        self._locked_for: dict[str, int] = {}
        REGISTRY.gauge(
            "tandem_node_locks",
            "Slurm nodes by lock state (as last written or read)",
            ["state"],
            collect=self._count_states,
        )
        REGISTRY.gauge(
            "tandem_node_locks_idle",
            "Slurm nodes locked (taint on their Node) while Slurm runs no job there and no prolog holds them",
            collect=self._count_idle,
        )

    def _count_idle(self) -> dict[tuple[str, ...], float]:
        """What the safety net should have released: the TandemNodeLockedWhileIdle alert."""
        if not self.mirror.synced:
            return {(): 0.0}
        idle = 0
        for slurm_node, state in list(self._state.items()):
            node = self.mirror.node(slurm_node)
            held = self._holds.get(slurm_node) or self.mirror.jobs_on(slurm_node)
            if state != LockState.FALSE and not held and node is not None and not node.busy:
                idle += 1
        return {(): float(idle)}

    def _count_states(self) -> dict[tuple[str, ...], float]:
        counts: dict[tuple[str, ...], float] = {(s.value,): 0.0 for s in LockState}
        for state in list(self._state.values()):
            counts[(state.value,)] += 1
        return counts

    # -- the slurmd Pod and its Node ---------------------------------------------------------

    def slurmd_pod(self, slurm_node: str) -> JSON:
        pod = self.cluster.slurmd_pod(slurm_node)
        if pod is None:
            raise LockError(f"no slurmd Pod {self.slurmd_namespace}/{slurm_node} for Slurm node {slurm_node}")
        return pod

    def _learn(self, pod: JSON) -> tuple[str, LockState]:
        name = pod["metadata"]["name"]
        kube_node = _node_name(pod, name)
        self._slurmd[name] = (kube_node, str(pod["metadata"].get("uid", "")))
        self._state[name] = slurmd.lock_state_of(pod)
        return kube_node, self._state[name]

    def _known(self, slurm_node: str) -> tuple[str, str, LockState]:
        """(Kubernetes Node, slurmd Pod uid, lock state), read once and then kept."""
        if slurm_node not in self._slurmd or slurm_node not in self._state:
            self._learn(self.slurmd_pod(slurm_node))
        kube_node, uid = self._slurmd[slurm_node]
        return kube_node, uid, self._state[slurm_node]

    def _mutex(self, slurm_node: str) -> threading.Lock:
        with self._guard:
            return self._node_locks[slurm_node]

    # -- acquire -----------------------------------------------------------------------------

    def acquire(
        self, slurm_node: str, job_id: int, strict: bool, timeout: float | None = None
    ) -> NodeLockView:
        """Hold the node for the job and return once nothing that must leave is on its Node.

        The whole of it runs under the node's mutex: prologs of other jobs on the same node wait
        and then find the lock already taken, instead of repeating the work."""
        target = LockState.LOCKED_STRICT if strict else LockState.LOCKED
        began = time.monotonic()
        timeout = budget.lock_wait(None, cap=self.timeout) if timeout is None else max(0.0, timeout)
        deadline = began + timeout
        with self._mutex(slurm_node):
            waited = time.monotonic() - began
            self._holds[slurm_node][job_id] = time.monotonic()
            if len(self._holds[slurm_node]) == 1:
                # The first hold of a lock cycle reads the slurmd Pod afresh: it may have moved to
                # another Node (a NodeSet replaced a broken one) since we last looked.
                self._forget(slurm_node)
            try:
                kube_node, slurmd_uid, current = self._known(slurm_node)
                self._ensure_taint(kube_node, present=True)
                rounds = 0
                if not _satisfies(current, target):
                    if current == LockState.FALSE:
                        self._set_state(slurm_node, LockState.PENDING)
                    rounds = self._drain_pods(
                        slurm_node, kube_node, slurmd_uid, job_id, strict, began, deadline
                    )
                    self._set_state(slurm_node, target)
                    current = target
                    self._locked_for[slurm_node] = job_id
                    self._event(
                        node_ref(kube_node),
                        "Normal",
                        keys.NODE_LOCKED_EVENT,
                        f"Locked ({target.value}) for Slurm job {job_id} on Slurm node {slurm_node}",
                    )
            except Exception:
                self._forget(slurm_node)  # re-read next time rather than trust a half-done write
                raise
        LOCK_WAIT_SECONDS.observe(time.monotonic() - began, strict=str(strict).lower())
        log.info(
            "node locked",
            extra={
                "node": slurm_node,
                "kube_node": kube_node,
                "job": job_id,
                "lock": current.value,
                "rounds": rounds,
                "mutex_ms": round(waited * 1000, 1),
                "ms": round((time.monotonic() - began) * 1000, 1),
            },
        )
        return self._view(slurm_node, kube_node, current)

    def _drain_pods(
        self,
        slurm_node: str,
        kube_node: str,
        slurmd_uid: str,
        job_id: int,
        strict: bool,
        began: float,
        deadline: float,
    ) -> int:
        rounds = 0
        # Pod uid -> (why its eviction was refused, when to ask again).
        refused: dict[str, tuple[str, float]] = {}
        while True:
            rounds += 1
            blocking = self.blocking_pods(kube_node, strict, slurmd_uid)
            if not blocking:
                return rounds
            now = time.monotonic()
            if now >= deadline:
                blockers = [Blocker(p, refused.get(_uid(p), ("", 0.0))[0]) for p in blocking]
                self._report_blockers(blockers, slurm_node, kube_node, job_id, deadline - began)
                timeout = LockTimeout(kube_node, deadline - began, blockers)
                self._drain_blocked(slurm_node, job_id, timeout)
                raise timeout
            for p in blocking:
                # A Pod already on its way out (the taint manager deletes those that do not
                # tolerate the NoExecute taint; an earlier eviction) only has to finish leaving.
                if (p.get("metadata") or {}).get("deletionTimestamp"):
                    continue
                if refused.get(_uid(p), ("", 0.0))[1] > now:
                    continue
                why = self._evict(p, slurm_node, job_id, strict)
                if why:
                    refused[_uid(p)] = (why, now + EVICTION_RETRY_SECONDS)
            # Until a Pod of this Node changes, a refused eviction is due again, or time is up.
            # The test runs under the Pod informer's lock: it compares versions only. Whether a
            # Pod may stay can ask slurmrestd, which must never hold up the informer.
            seen = _versions(self._pods_here(kube_node, slurmd_uid))
            due = min([deadline, *(at for _, at in refused.values() if at > now)])

            def changed(seen: dict[str, str] = seen) -> bool:
                return _versions(self._pods_here(kube_node, slurmd_uid)) != seen

            self.cluster.wait_for(changed, max(0.0, due - time.monotonic()))

    def _drain_blocked(self, slurm_node: str, job_id: int, e: LockTimeout) -> None:
        """The prolog fails and Slurm drains the node as "Prolog error"; drained first with the
        Pods' names (and their PodDisruptionBudgets), the reason says what to fix. Slurm keeps
        the first reason."""
        blockers = ", ".join(str(b) for b in e.blockers)
        reason = f"k8s: job {job_id} could not lock {e.kube_node}: {blockers} did not leave"
        try:
            self.drain(slurm_node, reason)
        except SlurmApiError as err:
            log.warning(
                "cannot drain a node whose lock timed out", extra={"node": slurm_node, "error": str(err)}
            )
        else:
            log.warning(
                "node drained: lock timed out", extra={"node": slurm_node, "job": job_id, "reason": reason}
            )

    def _report_blockers(
        self, blockers: list[Blocker], slurm_node: str, kube_node: str, job_id: int, waited: float
    ) -> None:
        """Tell each Pod's owner, on the Pod, which Slurm job it kept off the Node."""
        for b in blockers:
            because = f": {b.why}" if b.why else ""
            self._event(
                b.pod,
                "Warning",
                "BlockedSlurmJob",
                f"Slurm job {job_id} could not lock Node {kube_node} (Slurm node {slurm_node}) within "
                f"{waited:.0f}s because this Pod did not leave{because}; the Slurm node is drained "
                "and the job runs elsewhere",
            )

    def _pods_here(self, kube_node: str, slurmd_uid: str) -> list[JSON]:
        """The Pods on a Node a lock may have to move: not finished, not the Node's slurmd Pod."""
        return [
            p
            for p in self.cluster.pods_on(kube_node)
            if not pod_finished(p) and (p.get("metadata") or {}).get("uid") != slurmd_uid
        ]

    def blocking_pods(self, kube_node: str, strict: bool, slurmd_uid: str) -> list[JSON]:
        blocking = []
        for p in self._pods_here(kube_node, slurmd_uid):
            if not tolerates(p, keys.LOCK_KEY, keys.LOCK_TAINT_VALUE, keys.LOCK_TAINT_EFFECT) or (
                strict and not self.may_share_strict_lock(p, kube_node)
            ):
                blocking.append(p)
        return blocking

    def may_share_strict_lock(self, pod: JSON, kube_node: str) -> bool:
        """Who stays under a placeholder's strict lock: DaemonSet Pods, the slurmd Pods (known by
        their namespace, which tenants cannot write to, not by a label any Pod can carry), and
        Tandem's own Pods: each placed for a placeholder job that runs on this Node, as Slurm says
        (a scheduler name or a job-id annotation alone is what any tenant can write)."""
        meta = pod.get("metadata") or {}
        if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
            return True
        if slurmd.slurm_node_of(pod, self.slurmd_namespace) is not None:
            return True
        return self._placed_by_tandem_here(pod, kube_node)

    def _placed_by_tandem_here(self, pod: JSON, kube_node: str) -> bool:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("schedulerName") != self.scheduler_name:
            return False
        recorded = keys.recorded_job_id(pod)
        if recorded is None:
            return False
        status = self.mirror.job(recorded)
        if status is None:
            try:
                status = self.mirror.refresh_job(recorded)
            except SlurmApiError:
                return False  # not known to be Tandem's: it may not stay
        ref = placeholder.pod_of(status.job) if status is not None else None
        if status is None or ref is None or ref.namespace != meta.get("namespace"):
            return False
        # A Pod's own job names its uid; a group's job names the group (members share it).
        if not ref.is_group and ref.uid != meta.get("uid"):
            return False
        return any(self.cluster.kube_node_of(n) == kube_node for n in status.job.nodes)

    def _evict(self, pod: JSON, slurm_node: str, job_id: int, strict: bool) -> str:
        """Evict through the Eviction API, which honours PodDisruptionBudgets. Returns why the
        eviction was refused, "" when it was not."""
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
                return ""  # already gone
            if e.status == 429:
                return _refusal(e)
            raise
        log.info("evicted", extra={"pod": _ref(pod), "node": slurm_node, "job": job_id})
        EVICTIONS.inc(strict=str(strict).lower())
        self._event(
            pod,
            "Warning",
            "Evicted",
            f"Slurm job {job_id} locks Node {pod['spec'].get('nodeName')} "
            f"(Slurm node {slurm_node}); Pods that do not tolerate {keys.LOCK_KEY} must leave",
        )
        return ""

    def _event(self, pod: JSON, type_: str, reason: str, message: str) -> None:
        if self.events is not None:
            self._event_pool.submit(self.events.record, pod, type_, reason, message)

    # -- release -----------------------------------------------------------------------------

    def release(self, slurm_node: str, job_id: int) -> NodeLockView:
        with self._mutex(slurm_node):
            self._holds[slurm_node].pop(job_id, None)
        return self.reconcile_node(slurm_node, ignore_job=job_id)

    def reconcile_node(self, slurm_node: str, ignore_job: int | None = None) -> NodeLockView:
        """Make the node's lock what its jobs say: released if nothing holds it, else tainted."""
        with self._mutex(slurm_node):
            return self._reconcile(slurm_node, ignore_job)

    def _reconcile(self, slurm_node: str, ignore_job: int | None = None) -> NodeLockView:
        """reconcile_node's work, under the node's mutex."""
        kube_node, _, state = self._known(slurm_node)
        if not self.mirror.synced:
            # An empty mirror (a restart before the first poll answered) knows no job: that
            # is not "the node runs nothing". The lock stays until Slurm has been read.
            log.info("lock kept: Slurm not read yet", extra={"node": slurm_node, "job": ignore_job})
            return self._view(slurm_node, kube_node, state)
        if self._holders(slurm_node, ignore_job):
            if state != LockState.FALSE:
                self._ensure_taint(kube_node, present=True)
            return self._view(slurm_node, kube_node, state)
        # Taint first, annotation last (as when locking): whoever reads `false` finds the
        # Node untainted. The taint is the Node's, and every Slurm node hosted there shares it: it
        # stays while another of them is locked.
        if not self._locked_neighbours(slurm_node, kube_node):
            self._ensure_taint(kube_node, present=False)
        if state != LockState.FALSE:
            self._set_state(slurm_node, LockState.FALSE)
            log.info("node unlocked", extra={"node": slurm_node, "kube_node": kube_node})
            last = self._locked_for.pop(slurm_node, None)
            self._event(
                node_ref(kube_node),
                "Normal",
                keys.NODE_UNLOCKED_EVENT,
                f"Unlocked: Slurm node {slurm_node} runs no job"
                + (f" (locked for Slurm job {last})" if last is not None else ""),
            )
        return self._view(slurm_node, kube_node, LockState.FALSE)

    def _locked_neighbours(self, slurm_node: str, kube_node: str) -> list[str]:
        """The other Slurm nodes on this Node whose lock is not false."""
        return [
            name
            for name in self.cluster.slurm_nodes_on(kube_node)
            if name != slurm_node and slurmd.lock_state_of(self.cluster.slurmd_pod(name)) != LockState.FALSE
        ]

    def reconcile_all(self) -> None:
        """The safety net: re-read every lock and taint, release those of idle nodes, restore taints."""
        if not (self.mirror.synced and self.cluster.synced):
            return
        tainted = self._tainted_nodes()
        for pod in self.cluster.slurmd_pods():
            name = pod["metadata"]["name"]
            mutex = self._mutex(name)
            # A node whose prolog or epilog holds its mutex is being settled by that call; waiting
            # here (up to a whole lock timeout behind a PodDisruptionBudget) would hold up every
            # other node's safety net. The next pass looks again.
            if not mutex.acquire(blocking=False):
                continue
            try:
                if not self._holds[name]:
                    # Nobody is locking it right now, so the listing is as new as our cache.
                    kube_node, _ = self._learn(pod)
                    self._tainted[kube_node] = kube_node in tainted
                kube_node, _, state = self._known(name)
                if state != LockState.FALSE or self._tainted.get(kube_node):
                    self._reconcile(name)
            except LockError:
                continue
            except KubeError as e:
                log.warning("cannot reconcile lock", extra={"node": name, "error": str(e)})
            finally:
                mutex.release()
        self._remove_stale_taints(tainted)

    def _remove_stale_taints(self, tainted: set[str]) -> None:
        """A lock taint on a Node that hosts no slurmd Pod: its slurmd Pod moved or was deleted
        while its node was locked (perhaps under another leader), and no Slurm node maps there now,
        so no release would ever reach it."""
        hosting = {slurmd.host_of(p) for p in self.cluster.slurmd_pods()} - {""}
        now = time.monotonic()
        # Orphaned on passes at least ORPHAN_GRACE_SECONDS apart: a slurmd Pod being re-created
        # on the same Node is on no Node for a moment.
        self._orphaned = {n: self._orphaned.get(n, now) for n in tainted - hosting}
        stale = sorted(n for n, since in self._orphaned.items() if now - since >= ORPHAN_GRACE_SECONDS)
        for kube_node in stale:
            self._tainted.pop(kube_node, None)  # the cache of what we wrote knows nothing of it
            try:
                self._ensure_taint(kube_node, present=False)
            except (KubeError, LockError) as e:
                log.warning(
                    "cannot remove a stale lock taint", extra={"kube_node": kube_node, "error": str(e)}
                )
            else:
                log.info(
                    "removed a lock taint from a Node no Slurm node maps to", extra={"kube_node": kube_node}
                )

    def _holders(self, slurm_node: str, ignore_job: int | None) -> set[int]:
        now = time.monotonic()
        holds = self._holds[slurm_node]
        running = {s.job_id for s in self.mirror.jobs_on(slurm_node)}
        for job_id, since in list(holds.items()):
            status = self.mirror.job(job_id)
            finished = status is not None and (status.gone or status.job.finished)
            if finished or (job_id not in running and now - since > HOLD_GRACE_SECONDS):
                del holds[job_id]
        node = self.mirror.node(slurm_node)
        busy = node is not None and node.busy
        holders = (set(holds) | running) - ({ignore_job} if ignore_job is not None else set())
        if not holders and busy and ignore_job is None:
            # Slurm says the node is busy but we know no job: trust Slurm until the mirror catches up.
            return {0}
        return holders

    # -- reading -------------------------------------------------------------------------------

    def get(self, slurm_node: str) -> NodeLockView:
        pod = self.slurmd_pod(slurm_node)
        return self._view(slurm_node, _node_name(pod, slurm_node), slurmd.lock_state_of(pod))

    def list(self) -> list[NodeLockView]:
        """Every Slurm node's lock; one whose slurmd Pod is on no Node yet shows no Node (before,
        that one Pod failed the whole listing)."""
        return [
            self._view(p["metadata"]["name"], slurmd.host_of(p), slurmd.lock_state_of(p))
            for p in sorted(self.cluster.slurmd_pods(), key=lambda p: str(p["metadata"]["name"]))
        ]

    def _view(self, slurm_node: str, kube_node: str, state: LockState) -> NodeLockView:
        holders = set(self._holds[slurm_node]) | {s.job_id for s in self.mirror.jobs_on(slurm_node)}
        return NodeLockView(slurm_node, kube_node, state, sorted(holders))

    # -- writes (each also updates the cache) ------------------------------------------------------

    def _forget(self, slurm_node: str) -> None:
        self._state.pop(slurm_node, None)
        kube_node = self._slurmd.get(slurm_node, ("", ""))[0]
        self._tainted.pop(kube_node, None)

    def _set_state(self, slurm_node: str, state: LockState) -> None:
        self.kube.merge_patch(
            pod_path(self.slurmd_namespace, slurm_node),
            {"metadata": {"annotations": {keys.LOCK_KEY: state.value}}},
        )
        self._state[slurm_node] = state

    def _tainted_nodes(self) -> set[str]:
        return {
            n["metadata"]["name"]
            for n in self.cluster.nodes.items()
            if any(t.get("key") == keys.LOCK_KEY for t in (n.get("spec") or {}).get("taints") or [])
        }

    def _ensure_taint(self, kube_node: str, present: bool) -> None:
        """Add or remove the lock taint; optimistic concurrency, since taints are one list."""
        if self._tainted.get(kube_node) == present:
            return
        node = self.cluster.node(kube_node)
        for _ in range(10):
            if node is None:
                node = self.kube.get(f"/api/v1/nodes/{kube_node}")
            taints = list((node.get("spec") or {}).get("taints") or [])
            if any(t.get("key") == keys.LOCK_KEY for t in taints) == present:
                self._tainted[kube_node] = present
                return
            if present:
                taints.append(
                    {"key": keys.LOCK_KEY, "value": keys.LOCK_TAINT_VALUE, "effect": keys.LOCK_TAINT_EFFECT}
                )
            else:
                taints = [t for t in taints if t.get("key") != keys.LOCK_KEY]
            ops = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": node["metadata"]["resourceVersion"],
                },
                {
                    "op": "add" if "taints" not in (node.get("spec") or {}) else "replace",
                    "path": "/spec/taints",
                    "value": taints,
                },
            ]
            try:
                self.kube.json_patch(f"/api/v1/nodes/{kube_node}", ops)
            except KubeError as e:
                if e.status not in (409, 422):
                    raise
                node = None  # changed since the cache saw it: read it afresh
                continue
            self._tainted[kube_node] = present
            return
        raise LockError(f"could not update the taints of {kube_node}: too many concurrent changes")


def node_ref(kube_node: str) -> JSON:
    """A Node as an Event's object; its uid is its name, as the kubelet's own Node Events have it
    (what `kubectl describe node` looks for)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": kube_node, "uid": kube_node}}


def _satisfies(current: LockState, target: LockState) -> bool:
    if current == LockState.LOCKED_STRICT:
        return True
    return current == LockState.LOCKED and target == LockState.LOCKED


def _node_name(slurmd_pod: JSON, slurm_node: str) -> str:
    node = slurmd.host_of(slurmd_pod)
    if not node:
        raise LockError(f"slurmd Pod for {slurm_node} is not on a Node")
    return node


def _versions(pods: list[JSON]) -> dict[str, str]:
    return {_uid(p): str((p.get("metadata") or {}).get("resourceVersion", "")) for p in pods}


def _uid(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _refusal(e: KubeError) -> str:
    """A 429 from the Eviction API in words: which PodDisruptionBudget, when the API says."""
    for cause in e.causes:
        found = _BUDGET.search(cause)
        if found:
            return f"its PodDisruptionBudget {found.group(1)} allows no disruption"
    return f"eviction refused: {e.message}"


def _ref(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
