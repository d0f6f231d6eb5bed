"""Node locks, decided: while a Slurm node runs a job, its Kubernetes Node carries the lock taint and
its slurmd Pod the lock annotation, and no Pod that must not share the Node remains on it.

A lock is level-triggered. Its holders are the holds prologs recorded (tandem.syncer.holds) and the
jobs Slurm runs on the node, less those an epilog released or whose lock failed. It starts only for
a prolog's hold (a job merely seen running never starts one), is strict when a hold is strict or a
placeholder runs there (so a new leader, whose store is empty, rebuilds strictness from Slurm), and
ends when nothing holds it, however that came about (epilog, crash, lost epilog, a lock that timed
out). Slurm not read yet keeps every lock as it is: an empty mirror knows no job, which is not
"the node runs nothing".

Writes go in an order any crash leaves repairable: locking, the taint first, then `pending`, then
evictions, then `locked`; unlocking, the taint first, then `false`. Whoever reads `false` finds the
Node untainted. The taint is the Node's: every Slurm node hosted there shares it.

`decide_lock` is pure (tests/unit/syncer/test_locking.py); `tandem.syncer.nodesync` gathers its facts and
carries its plan out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from tandem import keys, placeholder, slurmd
from tandem.keys import LockState
from tandem.kube import JSON, tolerates
from tandem.slurm.models import JobStatus
from tandem.syncer.facts import NodeFacts
from tandem.syncer.holds import HOLD_GRACE_SECONDS, Asked, Failure, Hold

# How long a Node keeps a lock taint while no slurmd Pod is on it before the taint is removed: a
# slurmd Pod being re-created on the same Node is on no Node for a moment.
ORPHAN_GRACE_SECONDS = 4.0
# A Pod whose eviction was refused (its PodDisruptionBudget allows no disruption now) is asked
# again this much later, not on every pass: the budget changes on the scale of seconds.
EVICTION_RETRY_SECONDS = 2.0


@dataclass(frozen=True)
class Event:
    obj: JSON
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Eviction:
    pod: JSON
    job_id: int
    strict: bool


@dataclass(frozen=True)
class LockPlan:
    """What to write, in this order: `taint` (True: add, False: remove), `annotate_first`
    (pending), `lookup` (jobs to read from Slurm, then look again), `evict`, `annotate`."""

    taint: bool | None = None
    annotate_first: LockState | None = None
    lookup: tuple[int, ...] = ()
    evict: tuple[Eviction, ...] = ()
    annotate: LockState | None = None
    # A lock timed out: drain the Slurm node with this reason, and fail these jobs' prologs.
    drain: str = ""
    fail: tuple[tuple[int, Failure], ...] = ()
    events: tuple[Event, ...] = ()
    # Bookkeeping: holds that ended; the job the node is now locked for (0: unlocked).
    forget: frozenset[int] = frozenset()
    locked_for: int | None = None
    requeue_after: float | None = None


@dataclass(frozen=True)
class NodeLockView:
    slurm_node: str
    kube_node: str
    state: LockState
    job_ids: list[int] = field(default_factory=list)


def node_ref(kube_node: str) -> JSON:
    """A Node as an Event's object; its uid is its name, as the kubelet's own Node Events have it
    (what `kubectl describe node` looks for)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": kube_node, "uid": kube_node}}


def satisfies(current: LockState, target: LockState) -> bool:
    if current == LockState.LOCKED_STRICT:
        return True
    return current == LockState.LOCKED and target == LockState.LOCKED


def live_holds(f: NodeFacts, now: float) -> tuple[dict[int, Hold], frozenset[int]]:
    """The holds that count, and those that ended: their job finished, or never showed up in
    Slurm within the grace. Released and failed jobs hold nothing."""
    m = f.memory
    running = {j.job_id for j in f.jobs}
    ended = frozenset(
        j
        for j, h in m.holds.items()
        if j in f.ended or (j not in running and now - h.since > HOLD_GRACE_SECONDS)
    )
    live = {j: h for j, h in m.holds.items() if j not in ended and j not in m.released and j not in m.failed}
    return live, ended


def holders(f: NodeFacts, now: float) -> set[int]:
    live, _ = live_holds(f, now)
    m = f.memory
    return set(live) | {j.job_id for j in f.jobs if j.job_id not in m.released and j.job_id not in m.failed}


def target(f: NodeFacts, now: float) -> LockState | None:
    """The lock the node should have; None: keep it as it is."""
    if not f.slurm_read:
        return None
    live, _ = live_holds(f, now)
    held = holders(f, now)
    if held and (live or f.lock != LockState.FALSE):
        strict = (
            any(h.strict for h in live.values())
            or any(j.placeholder for j in f.jobs if j.job_id in held)
            or f.lock == LockState.LOCKED_STRICT
        )
        return LockState.LOCKED_STRICT if strict else LockState.LOCKED
    m = f.memory
    if not held and f.slurm is not None and f.slurm.busy and not m.released and not m.failed:
        # Slurm says the node is busy but we know no job: trust Slurm until the mirror catches up.
        # A lock stays as it is (its taint restored); a lock still `pending` had a hold that
        # ended (its job cancelled while the prolog waited), and there is no job to finish it for.
        return f.lock if f.lock in (LockState.LOCKED, LockState.LOCKED_STRICT) else None
    return LockState.FALSE


def where_missing(f: NodeFacts) -> str:
    """Why the node cannot be locked where it is ("" when it can): no slurmd Pod, none on a Node,
    or its Node gone."""
    if f.slurmd_pod is None:
        return f"no slurmd Pod for Slurm node {f.slurm_node}"
    if not f.kube_node_name:
        return f"slurmd Pod for {f.slurm_node} is not on a Node"
    if f.kube_node is None:
        return f"Node {f.kube_node_name} of Slurm node {f.slurm_node} is gone"
    return ""


def decide_lock(f: NodeFacts, now: float) -> LockPlan:
    plan = _decide_lock(f, now)
    # A hold Slurm does not list yet ends when its grace does, with no event to say so: look
    # again then (the periodic resync is a safety net, not the clock).
    grace = _grace_ends(f, now)
    if grace is not None and (plan.requeue_after is None or grace < plan.requeue_after):
        return replace(plan, requeue_after=grace)
    return plan


def _grace_ends(f: NodeFacts, now: float) -> float | None:
    """Seconds until the first live hold whose job Slurm does not list stops counting."""
    live, _ = live_holds(f, now)
    running = {j.job_id for j in f.jobs}
    ends = [h.since + HOLD_GRACE_SECONDS - now for j, h in live.items() if j not in running]
    return max(0.0, min(ends)) if ends else None


def _decide_lock(f: NodeFacts, now: float) -> LockPlan:
    live, ended = live_holds(f, now)
    want = target(f, now)
    missing = where_missing(f)
    if live and missing and want not in (None, LockState.FALSE):
        # Nothing to lock: the prologs fail at once (Slurm drains the node as a prolog error).
        fail = tuple((j, Failure(missing)) for j in sorted(live))
        return LockPlan(fail=fail, forget=ended, requeue_after=0.0)
    if want is None:
        return LockPlan(forget=ended)
    if want == LockState.FALSE:
        return _unlock(f, ended)
    if missing:
        return LockPlan(forget=ended)  # a running job's lock on a Node we cannot see: keep it
    return _lock(f, want, live, ended, now)


def _unlock(f: NodeFacts, ended: frozenset[int]) -> LockPlan:
    taint = False if f.tainted and not f.neighbours_locked and f.kube_node is not None else None
    if f.lock == LockState.FALSE:
        return LockPlan(taint=taint, forget=ended)
    last = f.memory.locked_for
    events: tuple[Event, ...] = ()
    if f.kube_node_name:
        message = f"Unlocked: Slurm node {f.slurm_node} runs no job" + (
            f" (locked for Slurm job {last})" if last is not None else ""
        )
        events = (Event(node_ref(f.kube_node_name), "Normal", keys.NODE_UNLOCKED_EVENT, message),)
    return LockPlan(taint=taint, annotate=LockState.FALSE, events=events, forget=ended, locked_for=0)


def _lock(
    f: NodeFacts, want: LockState, live: Mapping[int, Hold], ended: frozenset[int], now: float
) -> LockPlan:
    taint = True if not f.tainted else None
    if satisfies(f.lock, want):
        return LockPlan(taint=taint, forget=ended)
    strict = want == LockState.LOCKED_STRICT
    for_job = min(live) if live else min(holders(f, now))
    first = LockState.PENDING if f.lock == LockState.FALSE else None
    blocking = [p for p in f.pods if _must_leave(p, strict, f)]
    # Whether a Pod may share a strict lock can need its job read from Slurm first.
    undetermined = f.undetermined if strict else {}
    lookup = tuple(sorted({undetermined[_uid(p)] for p in blocking if _uid(p) in undetermined}))
    if not blocking:
        message = f"Locked ({want.value}) for Slurm job {for_job} on Slurm node {f.slurm_node}"
        event = Event(node_ref(f.kube_node_name), "Normal", keys.NODE_LOCKED_EVENT, message)
        # Nothing to wait for: straight to the lock. `pending` would be overwritten in this same
        # pass, one API write more per lock that nobody could see (issue 22).
        return LockPlan(
            taint=taint,
            annotate=want,
            events=(event,),
            forget=ended,
            locked_for=for_job,
        )
    asked = f.memory.asked
    expired = sorted(j for j, h in live.items() if h.deadline <= now)
    if expired and not lookup:
        return _timed_out(f, blocking, [live[j] for j in expired], ended, taint, first)
    evict = tuple(
        Eviction(p, for_job, strict)
        for p in blocking
        if not (p.get("metadata") or {}).get("deletionTimestamp")
        and _uid(p) not in undetermined
        and not _asked_already(asked.get(_uid(p)), p, now)
    )
    # Back when a refused eviction is due again, a hold's time is up, or a hold's grace ends;
    # a Pod leaving wakes the node sooner (its informer event).
    due = [a.until for a in asked.values() if a.why and a.until > now]
    due += [h.deadline for h in live.values()]
    due += [h.since + HOLD_GRACE_SECONDS for h in live.values()]
    after = 0.0 if lookup else max(0.0, min(due) - now) if due else None
    return LockPlan(
        taint=taint, annotate_first=first, lookup=lookup, evict=evict, forget=ended, requeue_after=after
    )


def _timed_out(
    f: NodeFacts,
    blocking: list[JSON],
    expired: list[Hold],
    ended: frozenset[int],
    taint: bool | None,
    first: LockState | None,
) -> LockPlan:
    """Pods were still on the Node when a prolog's time ran out. The prolog fails and Slurm drains
    the node as "Prolog error"; drained first with the Pods' names (and their
    PodDisruptionBudgets), the reason says what to fix (Slurm keeps the first reason). Each Pod's
    owner is told, on the Pod, which Slurm job it kept off the Node."""
    why = {uid: a.why for uid, a in f.memory.asked.items() if a.why}
    named = [_ref(p) + (f" ({why[_uid(p)]})" if _uid(p) in why else "") for p in blocking]
    names = ", ".join(named)
    hold = expired[0]
    waited = hold.deadline - hold.since
    drain = keys.lock_timeout_drain_reason(hold.job_id, f.kube_node_name, names)
    failure = Failure(f"timed out after {waited:.0f}s locking {f.kube_node_name}: still there: {names}")
    events = []
    for p in blocking:
        because = f": {why[_uid(p)]}" if _uid(p) in why else ""
        events.append(
            Event(
                p,
                "Warning",
                "BlockedSlurmJob",
                f"Slurm job {hold.job_id} could not lock Node {f.kube_node_name} (Slurm node "
                f"{f.slurm_node}) within {waited:.0f}s because this Pod did not leave{because}; the "
                "Slurm node is drained and the job runs elsewhere",
            )
        )
    return LockPlan(
        taint=taint,
        annotate_first=first,
        drain=drain,
        fail=tuple((h.job_id, failure) for h in expired),
        events=tuple(events),
        forget=ended,
        requeue_after=0.0,
    )


def _asked_already(asked: Asked | None, pod: JSON, now: float) -> bool:
    """Whether not to ask for this Pod's eviction now: refused and not due again yet, or accepted
    while the cache does not show the Pod's deletion yet (asking twice posts two Evicted Events)."""
    if asked is None:
        return False
    if asked.why:
        return asked.until > now
    return asked.version == str((pod.get("metadata") or {}).get("resourceVersion", ""))


def _must_leave(pod: JSON, strict: bool, f: NodeFacts) -> bool:
    if not tolerates(pod, keys.LOCK_KEY, keys.LOCK_TAINT_VALUE, keys.LOCK_TAINT_EFFECT):
        return True
    return strict and _uid(pod) not in f.sharers


# The cached DaemonSet of a namespace and name (None: the cache holds none).
DaemonSetLookup = Callable[[str, str], JSON | None]


def daemonset_ref_of(pod: JSON) -> JSON | None:
    """The Pod's controller reference when it names an apps/v1 DaemonSet; None otherwise. Only
    what the Pod says: any tenant can write it on its own Pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") is True:
            return ref if ref.get("kind") == "DaemonSet" and ref.get("apiVersion") == "apps/v1" else None
    return None


def daemonset_template(daemonset: JSON) -> JSON:
    """The Pod template of a DaemonSet, shaped as a Pod (what `tolerates` reads)."""
    template = (daemonset.get("spec") or {}).get("template") or {}
    return {"spec": template.get("spec") or {}}


def is_sharing_daemonset_pod(
    pod: JSON, sharing_namespaces: frozenset[str], daemonset_of: DaemonSetLookup
) -> bool:
    """Whether the Pod is a DaemonSet's that may share a held Node: in a namespace an
    administrator lets share (a namespace is what a tenant cannot choose for its Pod), its
    controller reference naming a DaemonSet that exists there under the very uid the reference
    holds (not another made under that name, nor one it merely names), whose own template
    tolerates the lock (the DaemonSet is meant to run on held Nodes, not only this one Pod). The
    reference alone is what anyone who may create Pods in the namespace can write by hand."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    ref = daemonset_ref_of(pod)
    if namespace not in sharing_namespaces or ref is None or not ref.get("uid"):
        return False
    daemonset = daemonset_of(namespace, str(ref.get("name") or ""))
    if daemonset is None or (daemonset.get("metadata") or {}).get("uid") != ref["uid"]:
        return False
    template = daemonset_template(daemonset)
    return tolerates(template, keys.LOCK_KEY, keys.LOCK_TAINT_VALUE, keys.LOCK_TAINT_EFFECT)


def may_share_strict_lock(
    pod: JSON,
    kube_node: str,
    slurmd_namespace: str,
    scheduler_name: str,
    job: JobStatus | None,
    host_of: Callable[[str], str],
    daemonset_of: DaemonSetLookup,
    sharing_namespaces: frozenset[str] = frozenset(),
) -> bool:
    """Who stays under a placeholder's strict lock: the DaemonSet Pods of the namespaces an
    administrator lets share held Nodes, each of a real DaemonSet whose template tolerates the
    lock (is_sharing_daemonset_pod; `daemonset_of`: the cached DaemonSets), the slurmd Pods (known
    by their namespace, which tenants cannot write to, not by a label any Pod can carry), and
    Tandem's own Pods: each placed for a placeholder job that runs on this Node, as Slurm says (a
    scheduler name or a job-id annotation alone is what any tenant can write). `job`: the job the
    Pod's annotation records, as Slurm has it (None: unknown, so not Tandem's)."""
    meta = pod.get("metadata") or {}
    if is_sharing_daemonset_pod(pod, sharing_namespaces, daemonset_of):
        return True
    if slurmd.slurm_node_of(pod, slurmd_namespace) is not None:
        return True
    if (pod.get("spec") or {}).get("schedulerName") != scheduler_name or job is None:
        return False
    if keys.recorded_job_id(pod) != job.job_id:
        return False
    ref = placeholder.pod_of(job.job)
    if ref is None or ref.namespace != meta.get("namespace"):
        return False
    # A Pod's own job names its uid; a group's job names the group (members share it).
    if not ref.is_group and ref.uid != meta.get("uid"):
        return False
    return any(host_of(n) == kube_node for n in job.job.nodes)


@dataclass(frozen=True)
class OrphanFacts:
    """A Node with the lock taint and no slurmd Pod on it (its slurmd Pod moved or was deleted
    while its node was locked, perhaps under another leader): no Slurm node maps there, so no
    release would ever reach it."""

    kube_node: str
    tainted: bool
    hosts_slurmd: bool
    # Since when it has been seen so (None: it is not).
    orphaned_since: float | None


def decide_orphan(f: OrphanFacts, now: float) -> tuple[bool, float | None]:
    """(remove the taint now, look again after); orphaned for at least ORPHAN_GRACE_SECONDS."""
    if not f.tainted or f.hosts_slurmd or f.orphaned_since is None:
        return False, None
    left = f.orphaned_since + ORPHAN_GRACE_SECONDS - now
    return (True, None) if left <= 0 else (False, left)


def _uid(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("uid", ""))


def _ref(pod: JSON) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
