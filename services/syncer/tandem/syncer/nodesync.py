"""Node state both ways, one Slurm node at a time (as SUNK's syncer does, without the reconfigure).

Kubernetes -> Slurm: a Node cordoned, not Ready, being deleted or gone, or its slurmd Pod deleting or
not ready, or a Node condition listed in `--health-conditions` True (tandem.syncer.health), drains
the Slurm node with the reason `k8s: <why>` (again if someone resumes it while the cause holds);
when the cause clears, a drain of ours is resumed. So is a KillWait drain (a job ended while its Pod
still ran) once that Pod is gone or finished: nothing is left to keep off the node. A drain is ours
only if Slurm says the syncer's own Slurm user made it (`reason_set_by_user`) with one of those
reasons: an admin's drain, even worded like ours, and a lock-timeout drain (a Pod its
PodDisruptionBudget kept) are never touched.

Slurm -> Kubernetes: a Slurm node drained or down (any reason) shows on its Node as the annotation
`<prefix>drain` (the reason) and the condition `SlurmCordon`; both go when it is back.

The same pass plans the node's lock (tandem.syncer.locking) and the drain at KillWait of a placeholder
job whose Pod still runs here (tandem.syncer.killwait); one drain a pass: a lock that timed out
first, then KillWait, then a Kubernetes cause. The pass comes back at the next of its deadlines.

`decide` is pure (tests/unit/syncer/test_nodesync.py, test_locking.py); tandem.syncer.nodefacts reads its
facts from the caches and tandem.syncer.nodeapply carries its plan out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tandem import keys
from tandem.dra import gpuhealth
from tandem.kube import JSON, pod_finished
from tandem.slurm.models import Node
from tandem.syncer import gpucheck, gputaints, health, killwait
from tandem.syncer.facts import NodeFacts
from tandem.syncer.killwait import KillWaitPlan
from tandem.syncer.locking import LockPlan, decide_lock

# Reasons this module writes start so; only those are resumed by it.
CAUSE_PREFIXES = ("k8s: Node ", "k8s: slurmd Pod ")
CONDITION = "SlurmCordon"


@dataclass(frozen=True)
class Plan:
    drain: str = ""  # a reason: drain the Slurm node
    resume: bool = False
    # The Node's drain annotation and SlurmCordon condition: (reason, True) to show, ("", False) to clear.
    show: tuple[str, bool] | None = None
    # The taint, the lock annotation, evictions (tandem.syncer.locking).
    lock: LockPlan = field(default_factory=LockPlan)
    # The KillWait deadlines: the drain this plan makes (`drain` its reason), those it settles.
    killwait: KillWaitPlan = field(default_factory=KillWaitPlan)
    # The Node's SlurmGpuMismatch condition: (difference, True) to show, ("", False) to clear.
    gpus: tuple[str, bool] | None = None
    # The DeviceTaintRules that mirror the GPUs a Slurm drain names (tandem.syncer.gputaints).
    rules: gputaints.RulesPlan = field(default_factory=gputaints.RulesPlan)
    # (job id, GPU index): Slurm jobs holding a GPU tainted NoExecute, to cancel.
    evict: tuple[tuple[int, int], ...] = ()

    @property
    def requeue_after(self) -> float | None:
        """When to look at the node again: the lock's next deadline or a KillWait's."""
        due = [t for t in (self.lock.requeue_after, self.killwait.after) if t is not None]
        return min(due) if due else None


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
    status = (node or {}).get("status") or {}
    if node is not None:
        meta, spec = node.get("metadata") or {}, node.get("spec") or {}
        if meta.get("deletionTimestamp"):
            return f"k8s: Node {name} is being deleted"
        if spec.get("unschedulable"):
            return f"k8s: Node {name} is cordoned"
        if not status.get("ready", True):
            return f"k8s: Node {name} is NotReady"
    if not (pod.get("status") or {}).get("ready", True):
        return f"k8s: slurmd Pod {pod_meta.get('name')} is not ready"
    # Last: a cordon or NotReady says more about the whole Node than one device's condition, and a
    # condition a health checker sets more than one device's taint.
    return health.cause(name, status.get("health") or {}, f.health_conditions) or gputaints.cause(
        name, gpuhealth.tainted_gpus(f.devices)
    )


def decide(f: NodeFacts, now: float = 0.0) -> Plan:
    """The node's state both ways and its lock, as of `now` (monotonic seconds). One drain per
    pass: a lock that timed out names the Pods to blame, which says more than the cause."""
    lock = decide_lock(f, now)
    drained = f.slurm.reason if f.slurm is not None and f.slurm.drained else None
    others = drained_by_others(f)
    kw = killwait.decide(
        f.killwaits, drained, now, may_drain=not lock.drain and f.slurm is not None, others_drain=others
    )
    gpus = _gpus_shown(f)
    wanted = gputaints.wanted_rules(f.slurm, f.slurm_node, f.kube_node_name, f.devices)
    rules = gputaints.plan_rules(wanted if f.rules_served else None, f.gpu_rules)
    evict = gputaints.evicted_jobs(gpuhealth.tainted_gpus(f.devices), f.jobs)
    if lock.drain and not others:
        show = _shown(f, f.slurm, lock.drain, False) if f.slurm else None
        return Plan(lock.drain, False, show, lock, kw, gpus, rules, evict)
    if kw.drain is not None and f.slurm is not None:
        reason = kw.drain.reason
        return Plan(reason, False, _shown(f, f.slurm, reason, False), lock, kw, gpus, rules, evict)
    return replace(_decide_state(f), lock=lock, killwait=kw, gpus=gpus, rules=rules, evict=evict)


def _gpus_shown(f: NodeFacts) -> tuple[str, bool] | None:
    """What the Node's SlurmGpuMismatch condition should become, when it differs from what it shows:
    the difference while there is one, nothing once the two sides agree (or nothing compares)."""
    if f.kube_node is None:
        return None
    wanted = f.gpu_mismatch or ""
    shown = gpucheck.shown(f.kube_node)
    if wanted and shown != wanted:
        return (wanted, True)
    if not wanted and shown is not None:
        return ("", False)
    return None


def _decide_state(f: NodeFacts) -> Plan:
    slurm = f.slurm
    if slurm is None:
        return Plan()
    why = cause(f)
    ours = drained_by_us(f) and (slurm.reason.startswith(CAUSE_PREFIXES) or killwait_pod_left(f))
    drain, resume = "", False
    if why and not slurm.drained:
        drain = why
    elif why and ours and not health.same_condition(slurm.reason, why, f.kube_node_name):
        # A different cause of ours: say the current one. The same health condition with a new
        # message is not a different cause (health.same_condition).
        drain = why
    elif not why and slurm.drained and ours:
        resume = True
    show = _shown(f, slurm, drain, resume)
    return Plan(drain, resume, show)


def drained_by_us(f: NodeFacts) -> bool:
    """Whether Slurm records this syncer's own user as the one who set the reason: words alone
    can be anyone's (an admin's copy, a script's)."""
    return f.slurm is not None and bool(f.own_user) and f.slurm.reason_set_by == f.own_user


def drained_by_others(f: NodeFacts) -> bool:
    return drain_is_others(f.slurm, f.own_user)


def drain_is_others(slurm: Node | None, own_user: str) -> bool:
    """Whether the Slurm node is drained by someone other than `own_user` (an administrator, a
    health check, Slurm itself): that drain is never Tandem's to overwrite, since an overwritten
    reason would be Tandem's own, and resumed when Tandem's cause clears."""
    return slurm is not None and slurm.drained and not (own_user and slurm.reason_set_by == own_user)


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
