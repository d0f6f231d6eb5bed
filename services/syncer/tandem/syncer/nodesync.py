"""Node state both ways, one Slurm node at a time (as SUNK's syncer does, without the reconfigure).

Kubernetes -> Slurm: a Node cordoned, not Ready, being deleted or gone, or its slurmd Pod deleting or
not ready, drains the Slurm node with the reason `k8s: <why>` (again if someone resumes it while
the cause holds); when the cause clears, a drain of ours is resumed. So is a KillWait drain (a job
ended while its Pod still ran) once that Pod is gone or finished: nothing is left to keep off the
node. A drain is ours only if Slurm says the syncer's own Slurm user made it (`reason_set_by_user`)
with one of those reasons: an admin's drain, even worded like ours, and a lock-timeout drain (a Pod
its PodDisruptionBudget kept) are never touched.

Slurm -> Kubernetes: a Slurm node drained or down (any reason) shows on its Node as the annotation
`<prefix>drain` (the reason) and the condition `SlurmCordon`; both go when it is back.

`decide` is pure (tests/unit/test_nodesync.py); `NodeSync` reads the caches and carries it out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Protocol

from tandem import keys, placeholder, slurmd
from tandem.events import EventRecorder
from tandem.keys import LockState
from tandem.kube import JSON, KubeClient, KubeError, pod_finished, rfc3339
from tandem.metrics import REGISTRY
from tandem.runner import Requeue
from tandem.slurm.models import Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer import killwait
from tandem.syncer.cluster import ClusterView
from tandem.syncer.holds import HoldStore, KillWaitDrain, NodeMemory
from tandem.syncer.locking import (
    EVICTION_RETRY_SECONDS,
    Eviction,
    LockPlan,
    OrphanFacts,
    RunningJob,
    decide_lock,
    decide_orphan,
    may_share_strict_lock,
)
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.writes import LockWrites

log = logging.getLogger(__name__)

# Reasons this module writes start so; only those are resumed by it.
CAUSE_PREFIXES = ("k8s: Node ", "k8s: slurmd Pod ")
CONDITION = "SlurmCordon"

EVICTIONS = REGISTRY.counter("tandem_evictions_total", "Pods evicted to lock a Node", ["strict"])
NODE_SYNC_ACTIONS = REGISTRY.counter(
    "tandem_node_sync_actions_total",
    "drains, resumes and Node writes made to keep node state in sync",
    ["action"],
)


@dataclass(frozen=True)
class NodeFacts:
    slurm_node: str
    # The Slurm node as the mirror read it (None before the first poll).
    slurm: Node | None
    # The Node hosting its slurmd Pod ("" when none), and that Node (None when gone).
    kube_node_name: str
    kube_node: JSON | None
    slurmd_pod: JSON | None
    # When the Slurm node is drained at KillWait: the Pod the reason names, as cached (None: gone).
    killwait_pod: JSON | None = None
    # The Slurm user this syncer acts as: the only one whose drains it resumes.
    own_user: str = ""
    # -- the lock (tandem.syncer.locking) --
    # Whether Slurm has been read at all: an unread mirror knows no job.
    slurm_read: bool = True
    # The jobs Slurm has on the node, and those of the held jobs it says ended.
    jobs: tuple[RunningJob, ...] = ()
    ended: frozenset[int] = frozenset()
    # The lock annotation of the slurmd Pod and whether its Node has the lock taint, as this
    # syncer last wrote them until the caches show that write.
    lock: LockState = LockState.FALSE
    tainted: bool = False
    # The Pods on the Node that a lock may have to move: not finished, not the slurmd Pod.
    pods: tuple[JSON, ...] = ()
    # Uids of those that may stay under a strict lock; uid -> job id of those whose job the
    # mirror does not know yet (to look up before judging).
    sharers: frozenset[str] = frozenset()
    undetermined: Mapping[str, int] = field(default_factory=dict)
    # Whether another Slurm node hosted on the same Node is locked (it needs the taint too).
    neighbours_locked: bool = False
    # What the hook calls recorded for this node.
    memory: NodeMemory = field(default_factory=NodeMemory)
    # Whether the Pod of the KillWait drain recorded for this node still runs.
    killwait_running: bool = False


@dataclass(frozen=True)
class Plan:
    drain: str = ""  # a reason: drain the Slurm node
    resume: bool = False
    # The Node's drain annotation and SlurmCordon condition: (reason, True) to show, ("", False) to clear.
    show: tuple[str, bool] | None = None
    # The taint, the lock annotation, evictions (tandem.syncer.locking).
    lock: LockPlan = field(default_factory=LockPlan)
    # The KillWait drain recorded for this node: (job id, drained) once settled, `drain` being
    # its reason when this plan makes it.
    killwait: tuple[int, bool] | None = None


def cause(f: NodeFacts) -> str:
    """Why Kubernetes says the Slurm node must take no job ("" when nothing does)."""
    pod = f.slurmd_pod
    if pod is None:
        return ""  # not hosted anywhere known: nothing about it can be read here
    pod_meta = pod.get("metadata") or {}
    if pod_meta.get("deletionTimestamp"):
        return f"k8s: slurmd Pod {pod_meta.get('name')} is being deleted"
    node = f.kube_node
    name = f.kube_node_name
    if name and node is None:
        return f"k8s: Node {name} was deleted"
    if node is not None:
        meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
        if meta.get("deletionTimestamp"):
            return f"k8s: Node {name} is being deleted"
        if spec.get("unschedulable"):
            return f"k8s: Node {name} is cordoned"
        if not status.get("ready", True):
            return f"k8s: Node {name} is NotReady"
    if not (pod.get("status") or {}).get("ready", True):
        return f"k8s: slurmd Pod {pod_meta.get('name')} is not ready"
    return ""


def decide(f: NodeFacts, now: float = 0.0) -> Plan:
    """The node's state both ways and its lock, as of `now` (monotonic seconds). One drain per
    pass: a lock that timed out names the Pods to blame, which says more than the cause."""
    lock = decide_lock(f, now)
    if lock.drain:
        return Plan(
            drain=lock.drain, show=_shown(f, f.slurm, lock.drain, False) if f.slurm else None, lock=lock
        )
    drain = f.memory.killwait
    if drain is not None and f.slurm is not None:
        if not f.killwait_running:
            return replace(_decide_state(f), lock=lock, killwait=(drain.job_id, False))
        if f.slurm.drained and f.slurm.reason == drain.reason:
            return replace(_decide_state(f), lock=lock, killwait=(drain.job_id, True))
        show = _shown(f, f.slurm, drain.reason, False)
        return Plan(drain=drain.reason, show=show, lock=lock, killwait=(drain.job_id, True))
    return replace(_decide_state(f), lock=lock)


def _decide_state(f: NodeFacts) -> Plan:
    slurm = f.slurm
    if slurm is None:
        return Plan()
    why = cause(f)
    ours = drained_by_us(f) and (slurm.reason.startswith(CAUSE_PREFIXES) or killwait_pod_left(f))
    drain, resume = "", False
    if why and not slurm.drained:
        drain = why
    elif why and ours and slurm.reason != why:
        drain = why  # a different cause of ours: say the current one
    elif not why and slurm.drained and ours:
        resume = True
    show = _shown(f, slurm, drain, resume)
    return Plan(drain, resume, show)


def drained_by_us(f: NodeFacts) -> bool:
    """Whether Slurm records this syncer's own user as the one who set the reason: words alone
    can be anyone's (an admin's copy, a script's)."""
    return f.slurm is not None and bool(f.own_user) and f.slurm.reason_set_by == f.own_user


def killwait_pod_left(f: NodeFacts) -> bool:
    """Whether the Slurm node is drained at KillWait for a Pod that no longer runs there: gone,
    finished, or a new Pod of the same name (another job's, not on this Node)."""
    if f.slurm is None or not f.slurm.drained:
        return False
    named = keys.killwait_drain_of(f.slurm.reason)
    if named is None:
        return False
    pod = f.killwait_pod
    if pod is None or pod_finished(pod):
        return True
    recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.JOB_ID_ANNOTATION)
    on_this_node = bool(f.kube_node_name) and (pod.get("spec") or {}).get("nodeName") == f.kube_node_name
    return recorded != str(named[2]) and not on_this_node


def drained_for(nodes: Iterable[Node], pod: JSON) -> list[str]:
    """The Slurm nodes drained at KillWait for this Pod (to look at again when it goes)."""
    meta = pod.get("metadata") or {}
    who = (meta.get("namespace"), meta.get("name"))
    return [n.name for n in nodes if n.drained and (keys.killwait_drain_of(n.reason) or ())[:2] == who]


def _shown(f: NodeFacts, slurm: Node, drain: str, resume: bool) -> tuple[str, bool] | None:
    """What the Node should show after the plan, when it differs from what it shows."""
    if f.kube_node is None:
        return None
    cordoned = (slurm.drained or slurm.state == "DOWN" or bool(drain)) and not resume
    reason = (drain or slurm.reason or slurm.state.lower()) if cordoned else ""
    meta = f.kube_node.get("metadata") or {}
    annotation = (meta.get("annotations") or {}).get(keys.DRAIN_ANNOTATION)
    condition = (f.kube_node.get("status") or {}).get("slurmCordon")
    if cordoned and (annotation != reason or condition != reason):
        return (reason, True)
    if not cordoned and (annotation is not None or condition is not None):
        return ("", False)
    return None


class SlurmNodes(Protocol):
    """What the node sync changes in Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def drain_node(self, node: str, reason: str) -> None: ...

    def resume_node(self, node: str) -> None: ...


class FactsSource(Protocol):
    def facts(self, slurm_node: str) -> NodeFacts: ...

    def orphan(self, kube_node: str) -> OrphanFacts: ...


# A key of the node sync is a Slurm node's name, or this prefix and a Kubernetes Node's name for a
# Node that may carry a stale lock taint (Slurm node names cannot contain "/").
NODE_KEY_PREFIX = "node/"


def has_lock_taint(node: JSON | None) -> bool:
    return any(t.get("key") == keys.LOCK_KEY for t in ((node or {}).get("spec") or {}).get("taints") or [])


class CacheFacts:
    """The facts of one Slurm node, read from the syncer's caches and the hold store (no API
    call), with this syncer's own writes that the caches do not show yet."""

    def __init__(
        self,
        cluster: ClusterView,
        mirror: SlurmMirror,
        own_user: str,
        store: HoldStore | None = None,
        writes: LockWrites | None = None,
        scheduler_name: str = "",
    ) -> None:
        self.cluster, self.mirror, self.own_user = cluster, mirror, own_user
        self.store = store if store is not None else HoldStore()
        self.writes = (
            writes
            if writes is not None
            else LockWrites(cluster.pods.kube, cluster.slurmd_namespace, cluster.node)
        )
        self.scheduler_name = scheduler_name

    def facts(self, slurm_node: str) -> NodeFacts:
        pod = self.cluster.slurmd_pod(slurm_node)
        name = slurmd.host_of(pod)
        slurm = self.mirror.node(slurm_node)
        named = keys.killwait_drain_of(slurm.reason) if slurm is not None else None
        stuck = self.cluster.pod(named[0], named[1]) if named else None
        kube_node = self.cluster.node(name) if name else None
        memory = self.store.memory(slurm_node)
        statuses = self.mirror.jobs_on(slurm_node)
        ended = frozenset(j for j in memory.holds if (s := self.mirror.job(j)) is not None and s.ended)
        slurmd_uid = ((pod or {}).get("metadata") or {}).get("uid")
        pods = tuple(
            p
            for p in (self.cluster.pods_on(name) if name else ())
            if not pod_finished(p) and (p.get("metadata") or {}).get("uid") != slurmd_uid
        )
        sharers, undetermined = self._judge(pods, name)
        return NodeFacts(
            slurm_node,
            slurm,
            name,
            kube_node,
            pod,
            stuck,
            self.own_user,
            slurm_read=self.mirror.synced,
            jobs=tuple(RunningJob(s.job_id, placeholder.pod_of(s.job) is not None) for s in statuses),
            ended=ended,
            lock=self.lock_of(pod),
            tainted=self.tainted(name),
            pods=pods,
            sharers=sharers,
            undetermined=undetermined,
            neighbours_locked=any(
                self.lock_of(self.cluster.slurmd_pod(n)) != LockState.FALSE
                for n in (self.cluster.slurm_nodes_on(name) if name else ())
                if n != slurm_node
            ),
            memory=memory,
            killwait_running=self._still_runs(memory.killwait),
        )

    def _still_runs(self, drain: KillWaitDrain | None) -> bool:
        """Whether the Pod a KillWait drain is for is still there and not finished."""
        uid = str(((drain.pod if drain else {}).get("metadata") or {}).get("uid", ""))
        found = self.cluster.pod_by_uid(uid) if uid else None
        return found is not None and not pod_finished(found)

    def lock_of(self, slurmd_pod: JSON | None) -> LockState:
        """The slurmd Pod's lock annotation, or what this syncer wrote there since."""
        written = self.writes.lock_of(slurmd_pod) if slurmd_pod is not None else None
        return written if written is not None else slurmd.lock_state_of(slurmd_pod)

    def tainted(self, kube_node: str) -> bool:
        """Whether the Node carries the lock taint, or this syncer wrote so since."""
        node = self.cluster.node(kube_node) if kube_node else None
        written = self.writes.tainted(kube_node, node) if kube_node else None
        return written if written is not None else has_lock_taint(node)

    def waiting_on(self, kube_node: str) -> list[str]:
        """The Slurm nodes on this Node whose lock a Pod coming or going there may move on: those
        held or locked (a lock waits for Pods to leave)."""
        return [
            n
            for n in self.cluster.slurm_nodes_on(kube_node)
            if self.store.holds_of(n) or self.lock_of(self.cluster.slurmd_pod(n)) != LockState.FALSE
        ]

    def orphan(self, kube_node: str) -> OrphanFacts:
        tainted = self.tainted(kube_node)
        hosts = bool(self.cluster.slurm_nodes_on(kube_node))
        since = self.store.orphaned_since(
            kube_node, tainted and not hosts and self.cluster.node(kube_node) is not None
        )
        return OrphanFacts(kube_node, tainted, hosts, since)

    def _judge(self, pods: tuple[JSON, ...], kube_node: str) -> tuple[frozenset[str], dict[str, int]]:
        """Which Pods may share a strict lock; and those whose job the mirror does not know yet
        (uid -> job id), to read from Slurm before judging. Judged here, on a worker, never under an
        informer's lock: a judgement may wait for slurmrestd."""
        sharers: set[str] = set()
        undetermined: dict[str, int] = {}
        for p in pods:
            uid = str((p.get("metadata") or {}).get("uid", ""))
            recorded = keys.recorded_job_id(p)
            job = self.mirror.job(recorded) if recorded is not None else None
            ours = (p.get("spec") or {}).get("schedulerName") == self.scheduler_name
            if ours and recorded is not None and job is None and not self.store.recently_looked_up(recorded):
                undetermined[uid] = recorded
            elif may_share_strict_lock(
                p,
                kube_node,
                self.cluster.slurmd_namespace,
                self.scheduler_name,
                job,
                self.cluster.kube_node_of,
            ):
                sharers.add(uid)
        return frozenset(sharers), undetermined


def resync_keys(mirror: SlurmMirror, cluster: ClusterView, facts: CacheFacts) -> list[str]:
    """What the periodic resync looks at: every Slurm node (Slurm's and those a slurmd Pod names),
    and every Node with the lock taint and no slurmd Pod on it, whose taint no Slurm node's pass
    would ever reach."""
    slurm_nodes = {n.name for n in mirror.nodes()} | {
        str(p["metadata"]["name"]) for p in cluster.slurmd_pods()
    }
    hosting = {slurmd.host_of(p) for p in cluster.slurmd_pods()}
    stale = [
        NODE_KEY_PREFIX + str(n["metadata"]["name"])
        for n in cluster.nodes.items()
        if n["metadata"]["name"] not in hosting and facts.tainted(str(n["metadata"]["name"]))
    ]
    return sorted(slurm_nodes) + sorted(stale)


class NodeSync:
    """Carries the plan out for one Slurm node (a Runner's reconcile). Nothing waits in a pass: a
    write that fails goes back to the runner, which brings the node back after its backoff; a
    lock still waiting for Pods to leave comes back when one changes or at its next deadline."""

    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmNodes,
        facts: FactsSource,
        wrote: Callable[[Node], None] = lambda node: None,
        *,
        store: HoldStore | None = None,
        writes: LockWrites | None = None,
        events: EventRecorder | None = None,
        lookup: Callable[[int], object] = lambda job_id: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # `wrote`: told the Slurm node as this sync left it (the mirror's SlurmMirror.expect_node).
        # `lookup`: read a job from Slurm into the mirror (SlurmMirror.refresh_job).
        self.kube, self.slurm, self.facts, self.wrote = kube, slurm, facts, wrote
        self.store = store if store is not None else HoldStore()
        self.writes = writes if writes is not None else LockWrites(kube, "", lambda name: None)
        self.events, self.lookup, self.clock = events, lookup, clock
        # Events go out from here, never in a pass: a slow API must not hold a node up.
        self._event_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lock-events")

    def reconcile(self, key: str) -> Requeue:
        if key.startswith(NODE_KEY_PREFIX):
            return self._orphan(key[len(NODE_KEY_PREFIX) :])
        f = self.facts.facts(key)
        plan = decide(f, self.clock())
        try:
            self._apply(key, f, plan)
        except Exception as e:
            unreachable = isinstance(e, KubeError) and (e.status == 0 or e.status >= 500)
            self.store.passed(key, f.memory.seq, str(e) or type(e).__name__, unreachable)
            raise
        self.store.passed(key, f.memory.seq)
        return plan.lock.requeue_after

    def _apply(self, slurm_node: str, f: NodeFacts, plan: Plan) -> None:
        """The node's state, then its lock; the lock is carried out even when Slurm refused the
        state's drain or resume (the error still goes back to the runner)."""
        try:
            self._apply_state(slurm_node, f, plan)
        except SlurmApiError:
            self._apply_lock(slurm_node, f, plan.lock)
            raise
        self._apply_lock(slurm_node, f, plan.lock)

    def _apply_state(self, slurm_node: str, f: NodeFacts, plan: Plan) -> None:
        lock = plan.lock
        drain = f.memory.killwait
        if drain is not None and plan.killwait is not None and plan.drain == drain.reason:
            self._drain_at_killwait(slurm_node, f, drain)
        elif plan.drain:
            self._drain(slurm_node, f, plan.drain, timed_out=bool(lock.drain))
        elif plan.killwait is not None:
            self.store.killwait_settled(slurm_node, *plan.killwait)
        if plan.resume:
            self.slurm.resume_node(slurm_node)
            NODE_SYNC_ACTIONS.inc(action="resume")
            log.info(
                "resumed: the cause of its drain cleared",
                extra={"node": slurm_node, "reason": f.slurm.reason if f.slurm is not None else ""},
            )
            if f.slurm is not None:
                flags = tuple(x for x in f.slurm.flags if x != "DRAIN")
                self.wrote(replace(f.slurm, flags=flags, reason="", reason_set_by=""))
        if plan.show is not None and f.kube_node_name:
            self._show(f.kube_node_name, *plan.show)

    def _drain(self, slurm_node: str, f: NodeFacts, reason: str, timed_out: bool) -> None:
        try:
            self.slurm.drain_node(slurm_node, reason)
        except SlurmApiError as e:
            if not timed_out:
                raise
            # The prolog fails anyway, and Slurm drains the node as a prolog error.
            log.warning(
                "cannot drain a node whose lock timed out", extra={"node": slurm_node, "error": str(e)}
            )
            return
        NODE_SYNC_ACTIONS.inc(action="drain")
        log.warning(
            "node drained: lock timed out" if timed_out else "drained for Kubernetes",
            extra={"node": slurm_node, "reason": reason},
        )
        if f.slurm is not None:
            flags = f.slurm.flags if f.slurm.drained else (*f.slurm.flags, "DRAIN")
            self.wrote(replace(f.slurm, flags=flags, reason=reason, reason_set_by=f.own_user))

    def _drain_at_killwait(self, slurm_node: str, f: NodeFacts, drain: KillWaitDrain) -> None:
        """Just before KillWait: Slurm gives the node to no other job while the Pod runs there."""
        try:
            self._drain(slurm_node, f, drain.reason, timed_out=False)
        except SlurmApiError:
            self.store.killwait_settled(slurm_node, drain.job_id, drained=False, done=False)
            raise
        self.store.killwait_settled(slurm_node, drain.job_id, drained=True)
        message = killwait.drained_event(drain.job_id, slurm_node, drain.reason)
        self._event(dict(drain.pod), "Warning", "SlurmNodeDrained", message)

    def _apply_lock(self, slurm_node: str, f: NodeFacts, lock: LockPlan) -> None:
        if lock.taint is not None and f.kube_node_name and f.kube_node is not None:
            self.writes.set_taint(f.kube_node_name, lock.taint)
        if lock.annotate_first is not None:
            self.writes.annotate(slurm_node, lock.annotate_first)
        for job_id in lock.lookup:
            try:
                self.lookup(job_id)
            except SlurmApiError as e:
                log.warning("cannot look up a Pod's job", extra={"job": job_id, "error": str(e)})
            self.store.looked_up(job_id)
        for eviction in lock.evict:
            self._evict(slurm_node, eviction)
        if lock.annotate is not None:
            self.writes.annotate(slurm_node, lock.annotate)
            log.info(
                "node unlocked" if lock.annotate == LockState.FALSE else "node locked",
                extra={"node": slurm_node, "kube_node": f.kube_node_name, "lock": lock.annotate.value},
            )
        for event in lock.events:
            self._event(event.obj, event.type, event.reason, event.message)
        for job_id, failure in lock.fail:
            log.warning("lock failed", extra={"node": slurm_node, "job": job_id, "error": failure.message})
            self.store.fail(slurm_node, job_id, failure)
        if lock.forget:
            self.store.forget(slurm_node, lock.forget)
        if lock.locked_for is not None:
            self.store.locked(slurm_node, lock.locked_for or None)

    def _evict(self, slurm_node: str, eviction: Eviction) -> None:
        pod, strict = eviction.pod, str(eviction.strict).lower()
        why = self.writes.evict(pod)
        if why:
            uid = str((pod.get("metadata") or {}).get("uid", ""))
            self.store.refused(slurm_node, uid, why, self.clock() + EVICTION_RETRY_SECONDS)
            return
        meta = pod.get("metadata") or {}
        log.info(
            "evicted",
            extra={
                "pod": f"{meta.get('namespace')}/{meta.get('name')}",
                "node": slurm_node,
                "job": eviction.job_id,
            },
        )
        EVICTIONS.inc(strict=strict)
        self._event(
            pod,
            "Warning",
            "Evicted",
            f"Slurm job {eviction.job_id} locks Node {(pod.get('spec') or {}).get('nodeName')} "
            f"(Slurm node {slurm_node}); Pods that do not tolerate {keys.LOCK_KEY} must leave",
        )

    def _orphan(self, kube_node: str) -> Requeue:
        """A Node that may carry a lock taint no Slurm node maps to any more."""
        remove, after = decide_orphan(self.facts.orphan(kube_node), self.clock())
        if remove:
            self.writes.set_taint(kube_node, False)
            self.store.orphaned_since(kube_node, False)
            log.info("removed a lock taint from a Node no Slurm node maps to", extra={"kube_node": kube_node})
        return after

    def _event(self, obj: JSON, type_: str, reason: str, message: str) -> None:
        if self.events is not None:
            self._event_pool.submit(self.events.record, obj, type_, reason, message)

    def _show(self, kube_node: str, reason: str, cordoned: bool) -> None:
        path = f"/api/v1/nodes/{kube_node}"
        self.kube.merge_patch(
            path, {"metadata": {"annotations": {keys.DRAIN_ANNOTATION: reason if cordoned else None}}}
        )
        if cordoned:
            condition = {
                "type": CONDITION,
                "status": "True",
                "reason": "SlurmNodeDrained",
                "message": reason,
                "lastTransitionTime": rfc3339(),
                "lastHeartbeatTime": rfc3339(),
            }
        else:
            condition = {"type": CONDITION, "$patch": "delete"}
        self.kube.strategic_patch(f"{path}/status", {"status": {"conditions": [condition]}})
        NODE_SYNC_ACTIONS.inc(action="show" if cordoned else "clear")
