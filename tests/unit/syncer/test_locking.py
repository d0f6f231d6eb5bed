"""Node locks, decided: the plan for one Slurm node's lock from its facts, row by row, for every
transition of a lock (normal, strict, evictions a PodDisruptionBudget refused, lock timeout, lost
epilog, leader change, slurmd Pod moved or gone, Node gone), and for every state a crash between
two writes can leave (the crash rows): each must plan its own repair."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from tandem import keys
from tandem.keys import LockState
from tandem.kube import JSON
from tandem.placeholder import PodRef
from tandem.slurm.models import Job, JobStatus, Node
from tandem.syncer import killwait, nodesync
from tandem.syncer.facts import NodeFacts, RunningJob
from tandem.syncer.holds import (
    HOLD_GRACE_SECONDS,
    Asked,
    Failure,
    Hold,
    HoldStore,
    KillWait,
    NodeMemory,
)
from tandem.syncer.locking import Event, Eviction, LockPlan, OrphanFacts, decide_lock, decide_orphan, node_ref
from tandem.syncer.waiters import Key, node_key

NOW = 1000.0
FALSE, PENDING, LOCKED, STRICT = LockState.FALSE, LockState.PENDING, LockState.LOCKED, LockState.LOCKED_STRICT
TOLERATES = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]


def pod(name: str, tolerant: bool = False, leaving: bool = False) -> JSON:
    return {
        "metadata": {
            "name": name,
            "namespace": "apps",
            "uid": f"uid-{name}",
            "deletionTimestamp": "2026-01-01T00:00:00Z" if leaving else None,
        },
        "spec": {"nodeName": "node-001", "tolerations": TOLERATES if tolerant else []},
        "status": {"phase": "Running"},
    }


WEB = pod("web")
AGENT = pod("agent", tolerant=True)  # tolerates the lock; not one that may share a strict lock
OURS = pod("ours", tolerant=True)  # a Pod placed for the placeholder running here
LEAVING = pod("web", leaving=True)
SLURMD = {
    "metadata": {"name": "cpu-001", "namespace": "slurm", "uid": "uid-cpu-001"},
    "spec": {"nodeName": "node-001"},
}
NODE = {"metadata": {"name": "node-001"}, "spec": {}, "status": {"ready": True}}
IDLE = Node("cpu-001", "IDLE")
BUSY = Node("cpu-001", "ALLOCATED")


def hold(job_id: int = 7, strict: bool = False, since: float = NOW - 1, deadline: float = NOW + 50) -> Hold:
    return Hold(job_id, strict, since, deadline)


def memory(
    *holds: Hold,
    released: tuple[int, ...] = (),
    failed: tuple[int, ...] = (),
    asked: dict[str, Asked] | None = None,
    locked_for: int | None = None,
) -> NodeMemory:
    return NodeMemory(
        MappingProxyType({h.job_id: h for h in holds}),
        frozenset(released),
        MappingProxyType({j: Failure("timed out") for j in failed}),
        MappingProxyType(asked or {}),
        locked_for,
    )


def facts(
    *,
    lock: LockState = FALSE,
    tainted: bool = False,
    mem: NodeMemory | None = None,
    jobs: tuple[RunningJob, ...] = (),
    slurm: Node | None = IDLE,
    pods: tuple[JSON, ...] = (),
    sharers: frozenset[str] = frozenset(),
    undetermined: dict[str, int] | None = None,
    read: bool = True,
    neighbours_locked: bool = False,
    slurmd: JSON | None = SLURMD,
    kube_node_name: str = "node-001",
    kube_node: JSON | None = NODE,
    ended: frozenset[int] = frozenset(),
) -> NodeFacts:
    return NodeFacts(
        "cpu-001",
        slurm,
        kube_node_name,
        kube_node,
        slurmd,
        own_user="tandem",
        slurm_read=read,
        jobs=jobs,
        ended=ended,
        lock=lock,
        tainted=tainted,
        pods=pods,
        sharers=sharers,
        undetermined=undetermined or {},
        neighbours_locked=neighbours_locked,
        memory=mem if mem is not None else memory(),
    )


def locked_event(state: LockState, job_id: int = 7) -> Event:
    return Event(
        node_ref("node-001"),
        "Normal",
        keys.NODE_LOCKED_EVENT,
        f"Locked ({state.value}) for Slurm job {job_id} on Slurm node cpu-001",
    )


def unlocked_event(job_id: int | None = 7) -> Event:
    tail = f" (locked for Slurm job {job_id})" if job_id is not None else ""
    return Event(
        node_ref("node-001"),
        "Normal",
        keys.NODE_UNLOCKED_EVENT,
        f"Unlocked: Slurm node cpu-001 runs no job{tail}",
    )


def unlock(taint: bool | None = False, job_id: int | None = 7, **kw: Any) -> LockPlan:
    return LockPlan(taint=taint, annotate=FALSE, events=(unlocked_event(job_id),), locked_for=0, **kw)


PDB = "its PodDisruptionBudget web-pdb allows no disruption"
# A hold taken a second ago whose job Slurm does not list yet counts this much longer.
GRACE_LEFT = HOLD_GRACE_SECONDS - 1
PLACEHOLDER = RunningJob(7, placeholder=True)
PLAIN = RunningJob(7)

ROWS: list[tuple[str, NodeFacts, LockPlan]] = [
    # -- normal: a plain lock takes the taint, then pending while Pods must leave, then locked --
    (
        "normal: an empty Node locks in one pass, back when the hold's grace ends (Slurm lists no job 7)",
        facts(mem=memory(hold())),
        LockPlan(
            taint=True,
            annotate=LOCKED,
            events=(locked_event(LOCKED),),
            locked_for=7,
            requeue_after=GRACE_LEFT,
        ),
    ),
    (
        "normal: a Pod that does not tolerate the taint is evicted, back at the hold's deadline",
        facts(mem=memory(hold()), pods=(WEB,)),
        LockPlan(taint=True, annotate_first=PENDING, evict=(Eviction(WEB, 7, False),), requeue_after=50.0),
    ),
    (
        "normal: a Pod that tolerates the lock stays under a plain lock",
        facts(mem=memory(hold()), pods=(AGENT,), tainted=True),
        LockPlan(annotate=LOCKED, events=(locked_event(LOCKED),), locked_for=7, requeue_after=GRACE_LEFT),
    ),
    (
        "normal: pending and the Pod gone: locked",
        facts(mem=memory(hold()), lock=PENDING, tainted=True),
        LockPlan(annotate=LOCKED, events=(locked_event(LOCKED),), locked_for=7, requeue_after=GRACE_LEFT),
    ),
    (
        "normal: an evicted Pod on its way out is waited for, not evicted again",
        facts(mem=memory(hold()), lock=PENDING, tainted=True, pods=(LEAVING,)),
        LockPlan(requeue_after=50.0),
    ),
    (
        "normal: a second job's prolog on a locked node changes nothing until its grace ends",
        facts(mem=memory(hold(), hold(8)), lock=LOCKED, tainted=True, jobs=(PLAIN,)),
        LockPlan(requeue_after=GRACE_LEFT),
    ),
    (
        "normal: a held job Slurm says ended is forgotten",
        facts(
            mem=memory(hold(), hold(8)),
            lock=LOCKED,
            tainted=True,
            jobs=(RunningJob(8),),
            ended=frozenset({7}),
        ),
        LockPlan(forget=frozenset({7})),
    ),
    (
        "normal: a hold whose job never showed up in Slurm ends after the grace, and the node unlocks",
        facts(mem=memory(hold(since=NOW - HOLD_GRACE_SECONDS - 1)), lock=LOCKED, tainted=True),
        unlock(job_id=None, forget=frozenset({7})),
    ),
    # -- strict: a placeholder's lock moves what tolerates the lock too, but not its sharers --
    (
        "strict: a tolerating Pod must leave, a sharer stays",
        facts(mem=memory(hold(strict=True)), pods=(AGENT, OURS), sharers=frozenset({"uid-ours"})),
        LockPlan(taint=True, annotate_first=PENDING, evict=(Eviction(AGENT, 7, True),), requeue_after=50.0),
    ),
    (
        "strict: only sharers left: locked_strict",
        facts(
            mem=memory(hold(strict=True)),
            lock=PENDING,
            tainted=True,
            pods=(OURS,),
            sharers=frozenset({"uid-ours"}),
        ),
        LockPlan(annotate=STRICT, events=(locked_event(STRICT),), locked_for=7, requeue_after=GRACE_LEFT),
    ),
    (
        "strict: a plain lock becomes strict for a placeholder's prolog (no pending step back)",
        facts(
            mem=memory(hold(), hold(8, strict=True)), lock=LOCKED, tainted=True, pods=(AGENT,), jobs=(PLAIN,)
        ),
        LockPlan(evict=(Eviction(AGENT, 7, True),), requeue_after=50.0),
    ),
    (
        "strict: a Pod whose job the mirror does not know is looked up before it is judged",
        facts(
            mem=memory(hold(strict=True)),
            lock=PENDING,
            tainted=True,
            pods=(OURS,),
            undetermined={"uid-ours": 9},
        ),
        LockPlan(lookup=(9,), requeue_after=0.0),
    ),
    (
        "normal: an eviction accepted is not asked again before the cache shows the Pod leaving",
        facts(
            mem=memory(hold(), asked={"uid-web": Asked("", NOW + 2, "")}),
            lock=PENDING,
            tainted=True,
            pods=(WEB,),
        ),
        LockPlan(requeue_after=50.0),
    ),
    (
        "normal: a Pod that changed since its eviction and still does not leave is asked again",
        facts(
            mem=memory(hold(), asked={"uid-web": Asked("", NOW + 2, "9")}),
            lock=PENDING,
            tainted=True,
            pods=(WEB,),
        ),
        LockPlan(evict=(Eviction(WEB, 7, False),), requeue_after=50.0),
    ),
    # -- a PodDisruptionBudget refuses the eviction --
    (
        "pdb: a refused eviction is not asked again before its retry time",
        facts(
            mem=memory(hold(), asked={"uid-web": Asked(PDB, NOW + 2)}),
            lock=PENDING,
            tainted=True,
            pods=(WEB,),
        ),
        LockPlan(requeue_after=2.0),
    ),
    (
        "pdb: a refused eviction is asked again once due",
        facts(
            mem=memory(hold(), asked={"uid-web": Asked(PDB, NOW)}),
            lock=PENDING,
            tainted=True,
            pods=(WEB,),
        ),
        LockPlan(evict=(Eviction(WEB, 7, False),), requeue_after=50.0),
    ),
    # -- lock timeout: drain with the Pods' names, tell each Pod, fail the prolog --
    (
        "timeout: the hold's deadline passed with a Pod its budget kept",
        facts(
            mem=memory(hold(since=NOW - 50, deadline=NOW), asked={"uid-web": Asked(PDB, NOW + 1)}),
            lock=PENDING,
            tainted=True,
            pods=(WEB,),
            jobs=(PLAIN,),
        ),
        LockPlan(
            drain=f"k8s: job 7 could not lock node-001: apps/web ({PDB}) did not leave",
            fail=((7, Failure(f"timed out after 50s locking node-001: still there: apps/web ({PDB})")),),
            events=(
                Event(
                    WEB,
                    "Warning",
                    "BlockedSlurmJob",
                    "Slurm job 7 could not lock Node node-001 (Slurm node cpu-001) within 50s because this "
                    f"Pod did not leave: {PDB}; the Slurm node is drained and the job runs elsewhere",
                ),
            ),
            requeue_after=0.0,
        ),
    ),
    (
        "timeout: once failed, the node unlocks at once though Slurm still lists the job",
        facts(mem=memory(failed=(7,)), lock=PENDING, tainted=True, pods=(WEB,), jobs=(PLAIN,), slurm=BUSY),
        unlock(job_id=None),
    ),
    # -- release and lost epilog --
    (
        "release: the epilog released the only job (Slurm still lists it): unlocked",
        facts(mem=memory(released=(7,), locked_for=7), lock=LOCKED, tainted=True, jobs=(PLAIN,), slurm=BUSY),
        unlock(),
    ),
    (
        "release: another job still holds the node",
        facts(mem=memory(hold(8), released=(7,)), lock=LOCKED, tainted=True, jobs=(PLAIN, RunningJob(8))),
        LockPlan(),
    ),
    (
        "release: unlocking one Slurm node keeps the taint another on the same Node needs",
        facts(mem=memory(released=(7,), locked_for=7), lock=LOCKED, tainted=True, neighbours_locked=True),
        unlock(taint=None),
    ),
    (
        "lost epilog: nothing runs and nothing holds: unlocked",
        facts(lock=LOCKED, tainted=True),
        unlock(job_id=None),
    ),
    (
        "busy with no job known yet: the lock and its taint are kept",
        facts(lock=LOCKED, tainted=False, slurm=BUSY),
        LockPlan(taint=True),
    ),
    (
        "busy, its hold ended while pending (the job cancelled in its prolog): kept, not locked for no job",
        facts(lock=PENDING, tainted=True, slurm=BUSY),
        LockPlan(),
    ),
    (
        "Slurm not read: every lock is kept, even one released",
        facts(mem=memory(released=(7,)), lock=STRICT, tainted=True, read=False),
        LockPlan(),
    ),
    (
        "a job merely seen running starts no lock",
        facts(jobs=(PLACEHOLDER,), slurm=BUSY, pods=(WEB,)),
        LockPlan(),
    ),
    # -- leader change: the store is empty; Slurm's running jobs rebuild the lock --
    (
        "leader change: a placeholder runs on a plainly locked node: strict again",
        facts(lock=LOCKED, tainted=True, jobs=(PLACEHOLDER,), slurm=BUSY, pods=(AGENT,)),
        LockPlan(evict=(Eviction(AGENT, 7, True),)),
    ),
    (
        "leader change: a lock left pending finishes for the running job",
        facts(lock=PENDING, tainted=True, jobs=(PLAIN,), slurm=BUSY),
        LockPlan(annotate=LOCKED, events=(locked_event(LOCKED),), locked_for=7),
    ),
    # -- slurmd Pod moved or gone, Node gone --
    (
        "slurmd Pod gone: a prolog's lock fails at once",
        facts(mem=memory(hold()), slurmd=None, kube_node_name="", kube_node=None),
        LockPlan(fail=((7, Failure("no slurmd Pod for Slurm node cpu-001")),), requeue_after=0.0),
    ),
    (
        "slurmd Pod on no Node (being re-created): a prolog's lock fails at once",
        facts(mem=memory(hold()), kube_node_name="", kube_node=None),
        LockPlan(fail=((7, Failure("slurmd Pod for cpu-001 is not on a Node")),), requeue_after=0.0),
    ),
    (
        "Node gone: a prolog's lock fails at once",
        facts(mem=memory(hold()), kube_node=None),
        LockPlan(fail=((7, Failure("Node node-001 of Slurm node cpu-001 is gone")),), requeue_after=0.0),
    ),
    (
        "Node gone, nothing holds: the annotation is cleared, no taint written to a missing Node",
        facts(lock=LOCKED, tainted=True, kube_node=None),
        unlock(taint=None, job_id=None),
    ),
    (
        "slurmd Pod moved to a fresh Node while locked: the new Node gets the taint",
        facts(lock=LOCKED, tainted=False, jobs=(PLAIN,), slurm=BUSY),
        LockPlan(taint=True),
    ),
    # -- crash rows: half-written states, each repaired --
    (
        "crash: taint written, annotation not yet (prolog waiting)",
        facts(mem=memory(hold()), tainted=True),
        LockPlan(annotate=LOCKED, events=(locked_event(LOCKED),), locked_for=7, requeue_after=GRACE_LEFT),
    ),
    (
        "crash: taint written, annotation not, prolog gone: the taint goes",
        facts(tainted=True),
        LockPlan(taint=False),
    ),
    (
        "crash: annotation pending without a taint (taint lost): taint again and finish",
        facts(mem=memory(hold()), lock=PENDING),
        LockPlan(
            taint=True,
            annotate=LOCKED,
            events=(locked_event(LOCKED),),
            locked_for=7,
            requeue_after=GRACE_LEFT,
        ),
    ),
    (
        "crash: annotation pending, nothing holds: cleared",
        facts(lock=PENDING, tainted=True),
        unlock(job_id=None),
    ),
    (
        "crash: locked annotation without a taint, job running: the taint comes back",
        facts(lock=LOCKED, jobs=(PLAIN,), slurm=BUSY),
        LockPlan(taint=True),
    ),
    (
        "crash: locked annotation without a taint, nothing holds: only the annotation to clear",
        facts(lock=LOCKED),
        unlock(taint=None, job_id=None),
    ),
    (
        "crash: unlocking stopped after the taint went: the annotation follows",
        facts(mem=memory(released=(7,), locked_for=7), lock=STRICT),
        unlock(taint=None),
    ),
    (
        "crash: a job merely running and a stray taint with a false annotation: the taint goes",
        facts(jobs=(PLAIN,), slurm=BUSY, tainted=True),
        LockPlan(taint=False),
    ),
]


@pytest.mark.parametrize(("f", "plan"), [(f, p) for _, f, p in ROWS], ids=[r[0] for r in ROWS])
def test_the_lock_plan(f: NodeFacts, plan: LockPlan) -> None:
    assert decide_lock(f, NOW) == plan


def test_a_lock_timeout_is_the_one_drain_of_the_pass() -> None:
    """The node sync drains once per pass: a timed-out lock's reason (naming the Pods) wins over a
    Kubernetes cause found in the same pass, and the Node shows it."""
    cordoned = {**NODE, "spec": {"unschedulable": True}}
    f = facts(
        mem=memory(hold(since=NOW - 50, deadline=NOW)),
        lock=PENDING,
        tainted=True,
        pods=(WEB,),
        kube_node=cordoned,
    )
    plan = nodesync.decide(f, NOW)
    assert plan.drain == "k8s: job 7 could not lock node-001: apps/web did not leave"
    assert plan.show == (plan.drain, True)
    assert plan.lock.fail[0][0] == 7


@pytest.mark.parametrize(
    ("tainted", "hosts", "since", "expected"),
    [
        (True, False, NOW - 5, (True, None)),
        (True, False, NOW - 1, (False, 3.0)),  # a slurmd Pod being re-created is on no Node for a moment
        (True, True, None, (False, None)),
        (False, False, None, (False, None)),
    ],
    ids=["orphaned past the grace", "orphaned just now", "hosts a slurmd Pod", "not tainted"],
)
def test_a_stale_lock_taint(
    tainted: bool, hosts: bool, since: float | None, expected: tuple[bool, float | None]
) -> None:
    assert decide_orphan(OrphanFacts("node-009", tainted, hosts, since), NOW) == expected


def test_the_hold_store_remembers_what_the_hook_calls_said() -> None:
    clock = [NOW]
    store = HoldStore(clock=lambda: clock[0])
    woken: list[tuple[Key, ...]] = []
    store.on_change = lambda *changed: woken.append(changed)
    store.hold("cpu-001", 7, strict=True, deadline=NOW + 50)
    assert store.memory("cpu-001").holds[7] == Hold(7, True, NOW, NOW + 50)
    store.release("cpu-001", 7)
    mem = store.memory("cpu-001")
    assert not mem.holds and mem.released == {7}
    store.hold("cpu-001", 8, strict=False, deadline=NOW + 50)
    store.fail("cpu-001", 8, Failure("timed out"))
    assert store.outcome("cpu-001", 8, since=0).failure == Failure("timed out")
    assert not store.memory("cpu-001").holds
    # Each change wakes the calls waiting on that node.
    assert woken == [(node_key("cpu-001"),)] * 4
    clock[0] += 301
    mem = store.memory("cpu-001")
    assert not mem.released and not mem.failed  # remembered long enough for Slurm to catch up
    assert store.orphaned_since("node-009", True) == clock[0]
    clock[0] += 1
    assert store.orphaned_since("node-009", True) == clock[0] - 1
    assert store.orphaned_since("node-009", False) is None


KILLWAIT_REASON = keys.killwait_drain_reason("apps", "web", 7)
DRAIN_AT = NOW + 5


def due(pod: JSON | None = WEB, drain_at: float = DRAIN_AT, gone: bool = False, job_id: int = 7) -> Any:
    """A KillWait deadline JobTerminating recorded, as this node's facts carry it."""
    return killwait.NodeKillWait(job_id, drain_at, pod, gone)


KILLWAIT_ROWS = [
    # (why, the Slurm node, the deadline, now, drain, settled, requeue_after)
    ("before drain_at: nothing yet, back at drain_at", IDLE, due(), NOW, "", (), 5.0),
    ("at drain_at, the Pod still runs: drained", IDLE, due(), DRAIN_AT, KILLWAIT_REASON, (), None),
    ("after drain_at, the Pod still runs: drained", IDLE, due(), DRAIN_AT + 1, KILLWAIT_REASON, (), None),
    (
        "drained so already: not drained again",
        Node("cpu-001", "IDLE", ("DRAIN",), KILLWAIT_REASON, "tandem"),
        due(),
        DRAIN_AT,
        "",
        ((7, True),),
        None,
    ),
    # Drained for a cause of ours that may clear: the Pod's reason keeps it drained until it goes.
    (
        "drained otherwise: said again",
        Node("cpu-001", "IDLE", ("DRAIN",), "k8s: Node node-001 is cordoned", "tandem"),
        due(),
        DRAIN_AT,
        KILLWAIT_REASON,
        (),
        None,
    ),
    (
        "the Pods went before drain_at: no drain, settled",
        IDLE,
        due(None, gone=True),
        NOW,
        "",
        ((7, False),),
        None,
    ),
    # Issue 50: an administrator drained the node (a bad GPU) while the placeholder ran there.
    # Its reason stays: written over, the drain would be Tandem's and resumed when the Pod goes.
    (
        "drained by an administrator: not drained again, settled as drained",
        Node("cpu-001", "IDLE", ("DRAIN",), "bad-gpu", "root"),
        due(),
        DRAIN_AT,
        "",
        ((7, True),),
        None,
    ),
    (
        "drained by someone else in Tandem's words: still not Tandem's",
        Node("cpu-001", "IDLE", ("DRAIN",), "k8s: Node node-001 is cordoned", "root"),
        due(),
        DRAIN_AT,
        "",
        ((7, True),),
        None,
    ),
    # A group's member left this node while another still runs elsewhere: that node is drained.
    ("at drain_at, no Pod of the job here: settled", IDLE, due(None), DRAIN_AT, "", ((7, False),), None),
    ("before drain_at, no Pod of the job here: wait", IDLE, due(None), NOW, "", (), 5.0),
]


@pytest.mark.parametrize(
    ("why", "slurm", "deadline", "now", "drain", "settled", "after"),
    KILLWAIT_ROWS,
    ids=[r[0] for r in KILLWAIT_ROWS],
)
def test_a_drain_at_killwait(
    why: str,
    slurm: Node,
    deadline: Any,
    now: float,
    drain: str,
    settled: tuple[tuple[int, bool], ...],
    after: float | None,
) -> None:
    """JobTerminating only records a deadline; the node's pass drains at it (one drain path) if a
    Pod of the job still runs there, or settles it, and comes back at it while it lies ahead."""
    plan = nodesync.decide(replace(facts(slurm=slurm), killwaits=(deadline,)), now)
    assert (plan.drain, plan.killwait.settle, plan.requeue_after) == (drain, settled, after), why
    assert (plan.killwait.drain is not None) == (drain == KILLWAIT_REASON)


def test_a_lock_timeout_leaves_an_administrators_drain_as_it_is() -> None:
    """Issue 50: the lock fails its job, but the node keeps the administrator's reason (and so
    is never resumed by Tandem)."""
    admin = Node("cpu-001", "IDLE", ("DRAIN",), "bad-gpu", "root")
    f = facts(
        mem=memory(hold(since=NOW - 50, deadline=NOW)), lock=PENDING, tainted=True, pods=(WEB,), slurm=admin
    )
    plan = nodesync.decide(f, NOW)
    assert plan.lock.drain and plan.lock.fail
    assert plan.drain == "" and not plan.resume


def test_a_lock_timeout_drains_before_a_killwait_drain() -> None:
    f = facts(mem=memory(hold(since=NOW - 50, deadline=NOW)), lock=PENDING, tainted=True, pods=(WEB,))
    plan = nodesync.decide(replace(f, killwaits=(due(drain_at=NOW),)), NOW)
    assert plan.drain.startswith("k8s: job 7 could not lock") and plan.killwait.drain is None
    assert plan.requeue_after == 0.0  # the KillWait drain on the next pass


def test_one_killwait_drain_a_pass() -> None:
    other = due(pod("batch"), drain_at=NOW, job_id=8)
    plan = nodesync.decide(replace(facts(), killwaits=(due(drain_at=NOW), other)), NOW)
    assert plan.drain == KILLWAIT_REASON and plan.requeue_after == 0.0


def test_a_new_leader_drains_nothing_at_killwait() -> None:
    """Crash row: the leader answering JobTerminating died; the new one's store is empty, so no
    node's facts carry the deadline and nothing is drained, though the Pod still runs at KillWait.
    The call failed, so the placeholder's script drains its own node itself
    (libs/tandem/scripts/placeholder.sh: no answer -> DrainNode, then scontrol)."""
    assert HoldStore().memory("cpu-001").killwaits == ()
    plan = nodesync.decide(facts(pods=(WEB,)), NOW + 100)
    assert plan.drain == "" and plan.killwait == killwait.KillWaitPlan()


def test_a_nodes_memory_holds_the_killwaits_still_open_on_it_and_no_other() -> None:
    """A node's pass reads the KillWait entries naming it (an index, not a walk over every job)."""
    store = HoldStore(clock=lambda: NOW)
    ref = PodRef("apps", "web", "uid-1")

    def entry(job_id: int, *nodes: str) -> KillWait:
        status = JobStatus(Job(job_id, "tandem", "COMPLETING", nodes=nodes))
        return KillWait(job_id, ref, nodes[0], status, NOW + 5)

    def open_on(node: str) -> list[int]:
        return [k.job_id for k in store.memory(node).killwaits]

    store.killwait(entry(7, "cpu-001"))
    store.killwait(entry(8, "cpu-002", "cpu-003"))
    assert (open_on("cpu-001"), open_on("cpu-002"), open_on("cpu-003")) == ([7], [8], [8])
    store.killwait(entry(7, "cpu-004"))  # the job's call again, verified anew: the new entry only
    assert (open_on("cpu-001"), open_on("cpu-004")) == ([], [7])
    store.killwait_settled("cpu-003", 8, drained=True)
    assert (open_on("cpu-002"), open_on("cpu-003")) == ([8], [])
    store.answer_killwait(8, NOW + 5, pod_gone=True)
    assert open_on("cpu-002") == []
