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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from tandem import keys, slurmd
from tandem.keys import LockState
from tandem.kube import JSON, KubeClient, pod_finished, rfc3339
from tandem.metrics import REGISTRY
from tandem.runner import Requeue
from tandem.slurm.models import Node
from tandem.syncer.cluster import ClusterView
from tandem.syncer.holds import NodeMemory
from tandem.syncer.locking import LockPlan, RunningJob, decide_lock
from tandem.syncer.mirror import SlurmMirror

log = logging.getLogger(__name__)

# Reasons this module writes start so; only those are resumed by it.
CAUSE_PREFIXES = ("k8s: Node ", "k8s: slurmd Pod ")
CONDITION = "SlurmCordon"

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


@dataclass(frozen=True)
class Plan:
    drain: str = ""  # a reason: drain the Slurm node
    resume: bool = False
    # The Node's drain annotation and SlurmCordon condition: (reason, True) to show, ("", False) to clear.
    show: tuple[str, bool] | None = None
    # The taint, the lock annotation, evictions (tandem.syncer.locking).
    lock: LockPlan = field(default_factory=LockPlan)


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


class CacheFacts:
    """The facts of one Slurm node, read from the syncer's caches (no API call)."""

    def __init__(self, cluster: ClusterView, mirror: SlurmMirror, own_user: str) -> None:
        self.cluster, self.mirror, self.own_user = cluster, mirror, own_user

    def facts(self, slurm_node: str) -> NodeFacts:
        pod = self.cluster.slurmd_pod(slurm_node)
        name = slurmd.host_of(pod)
        slurm = self.mirror.node(slurm_node)
        named = keys.killwait_drain_of(slurm.reason) if slurm is not None else None
        stuck = self.cluster.pod(named[0], named[1]) if named else None
        kube_node = self.cluster.node(name) if name else None
        return NodeFacts(slurm_node, slurm, name, kube_node, pod, stuck, self.own_user)


class NodeSync:
    """Carries the plan out for one Slurm node (a Runner's reconcile)."""

    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmNodes,
        facts: FactsSource,
        wrote: Callable[[Node], None] = lambda node: None,
    ) -> None:
        # `wrote`: told the Slurm node as this sync left it (the mirror's SlurmMirror.expect_node).
        self.kube, self.slurm, self.facts, self.wrote = kube, slurm, facts, wrote

    def reconcile(self, slurm_node: str) -> Requeue:
        f = self.facts.facts(slurm_node)
        plan = decide(f)
        if plan.drain:
            self.slurm.drain_node(slurm_node, plan.drain)
            NODE_SYNC_ACTIONS.inc(action="drain")
            log.info("drained for Kubernetes", extra={"node": slurm_node, "reason": plan.drain})
            if f.slurm is not None:
                flags = f.slurm.flags if f.slurm.drained else (*f.slurm.flags, "DRAIN")
                self.wrote(replace(f.slurm, flags=flags, reason=plan.drain, reason_set_by=f.own_user))
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
        return None

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
