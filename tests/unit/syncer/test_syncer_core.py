"""The syncer's core with real informer caches (filled by hand) and a fake API server that writes
into them (tests/unit/syncer_world.py): a prolog's lock waits on the caches while the node sync
takes it, an unread Slurm never unlocks a Node, Events never hold a node up, one node's prolog
stuck behind a PodDisruptionBudget holds up no other node, and each scheduler's stream carries
only its own jobs, bounded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem import keys, placeholder
from tandem.keys import LockState
from tandem.kube import KubeError
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.broker import Subscription
from tandem.syncer.cluster import slim_node
from tandem.syncer.lockcalls import LockFailed
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodefacts import resync_keys
from tandem.syncer.service import SyncerServicer
from tandem.v1 import lock_pb2, syncer_pb2
from tests.unit.servicer_calls import call
from tests.unit.syncer_world import (
    JOB_KEY,
    SLURMD_NS,
    Stack,
    World,
    _mirror,
    _pod,
    _slurmd,
    bound,
    node_token_for,
    take_now,
    token_for,
    whole_listing_slurm,
)

__all__ = ["SLURMD_NS", "World", "_mirror", "_pod", "_slurmd"]

# cpu-001's own credential: the bound token of its slurmd Pod (tandem.nodetoken).
NODE_TOKEN = node_token_for("cpu-001")


@pytest.fixture
def stacks() -> Iterator[list[Stack]]:
    made: list[Stack] = []
    yield made
    for stack in made:
        stack.close()


def _stack(made: list[Stack], world: World, mirror: SlurmMirror, **kw: Any) -> Stack:
    stack = Stack(world, mirror, **kw)
    made.append(stack)
    return stack


def _submitted_and_seen(mirror: SlurmMirror, job_id: int, name: str) -> None:
    """A job the scheduler announced, seen once by the poll with its AdminComment (the binding its
    token names); slurmrestd may not answer for it afterwards."""
    mirror.job_submitted(job_id, name)
    mirror._apply_job_list([Job(job_id, name, "PENDING", admin_comment=bound(name))], time.monotonic())


def _context(remaining: float = 10.0) -> Any:
    context = mock.Mock()
    context.time_remaining.return_value = remaining
    context.abort.side_effect = RuntimeError
    return context


def _acquire(stack: Stack, job_id: int, strict: bool = True, remaining: float = 10.0) -> Any:
    return call(
        stack.servicer.AcquireNodeLock,
        syncer_pb2.AcquireNodeLockRequest(
            slurm_node="cpu-001", job_id=job_id, strict=strict, node_token=NODE_TOKEN
        ),
        _context(remaining),
    )


def _release(stack: Stack, job_id: int, slurm_node: str = "cpu-001") -> Any:
    return call(
        stack.servicer.ReleaseNodeLock,
        syncer_pb2.ReleaseNodeLockRequest(
            slurm_node=slurm_node, job_id=job_id, node_token=node_token_for(slurm_node)
        ),
        _context(),
    )


def _until(what: str, ok: Any, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_an_unread_slurm_never_unlocks_a_node(stacks: list[Stack]) -> None:
    """After a restart the mirror is empty until the first poll answers: "no job on the node"
    then means "not read yet", and a release must not untaint a Node that still runs jobs."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    stack = _stack(stacks, world, _mirror(synced=False))
    answer = _release(stack, 41)
    assert answer.lock.state == lock_pb2.LOCK_STATE_LOCKED_STRICT
    assert world.kube.taint_writes() == []
    assert world.kube.annotations_written() == []


def test_a_read_slurm_with_nothing_running_unlocks_the_node(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    stack = _stack(stacks, world, _mirror(synced=True))
    answer = _release(stack, 41)
    assert answer.lock.state == lock_pb2.LOCK_STATE_FALSE
    assert not world.tainted("node-001") and world.lock_of("cpu-001") == "false"
    # Taint first, annotation last: whoever reads `false` finds the Node untainted.
    writes = [verb for verb, _, _ in world.kube.calls if verb in ("json_patch", "merge_patch")]
    assert writes == ["json_patch", "merge_patch"]
    assert world.kube.annotations_written() == [("cpu-001", "false")]


def test_acquire_waits_for_the_node_sync_and_returns_once_locked(stacks: list[Stack]) -> None:
    """The prolog's call records its hold and waits on the caches; the node sync evicts the Pod,
    and the call returns as the Pod's leaving lets the node lock (0.1 s after the eviction)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    stack = _stack(stacks, world, _mirror(synced=True))
    began = time.monotonic()
    answer = _acquire(stack, 42)
    assert time.monotonic() - began < 1.0
    assert answer.lock.state == lock_pb2.LOCK_STATE_LOCKED_STRICT
    assert world.tainted("node-001") and world.lock_of("cpu-001") == "locked_strict"
    assert world.kube.annotations_written() == [("cpu-001", "pending"), ("cpu-001", "locked_strict")]
    assert world.cluster.pod("apps", "web") is None
    # Asked once: passes that ran before the watch showed the Pod leaving did not ask again (each
    # ask posts an Evicted Event on the Pod).
    assert world.kube.evictions() == ["web"]
    # No Pod, Node or slurmd Pod was read from the API: the informers hold them.
    assert world.kube.reads() == []


def test_release_unlocks_and_a_second_acquire_on_a_locked_node_writes_nothing(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    stack = _stack(stacks, world, _mirror(synced=True))
    _acquire(stack, 42)
    writes = len(world.kube.calls)
    _acquire(stack, 43)
    time.sleep(0.1)
    assert len(world.kube.calls) == writes
    _release(stack, 42)
    assert world.lock_of("cpu-001") == "locked_strict"  # job 43 still holds it
    _release(stack, 43)
    assert world.lock_of("cpu-001") == "false" and not world.tainted("node-001")


def test_a_prolog_on_a_node_a_release_is_unlocking_waits_for_a_pass_that_saw_its_hold(
    stacks: list[Stack],
) -> None:
    """Job 42's epilog released a locked node and its pass has not run yet when job 43's prolog
    asks: the node still looks locked, but the pass under way would unlock it. Before, per-node
    mutexes ordered the two; now the prolog returns only after a pass that read its hold."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    stack = _stack(stacks, world, _mirror(synced=True), workers=0)  # passes run only by hand
    stack.holds.release("cpu-001", 42)
    answered = threading.Event()

    def prolog() -> None:
        _acquire(stack, 43, strict=False)
        answered.set()

    threading.Thread(target=prolog).start()
    time.sleep(0.3)
    assert not answered.is_set()
    stack.sync.reconcile("cpu-001")
    assert answered.wait(2)
    assert world.lock_of("cpu-001") == "locked" and world.tainted("node-001")


def test_a_slow_event_api_does_not_hold_the_node(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    release = threading.Event()
    events = mock.Mock()
    events.record.side_effect = lambda *a: release.wait(10)
    stack = _stack(stacks, world, _mirror(synced=True), events=events)
    try:
        began = time.monotonic()
        _acquire(stack, 42)
        assert time.monotonic() - began < 2.0, "the lock waited for the Eviction Event to be posted"
    finally:
        release.set()
    stack.sync._event_pool.shutdown(wait=True)
    assert "Evicted" in [c.args[2] for c in events.record.call_args_list]


def test_a_nodes_lock_and_unlock_are_events_on_the_node(stacks: list[Stack]) -> None:
    """The lock history `kubectl tandem describe` shows, and `kubectl describe node` too."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    events = mock.Mock()
    stack = _stack(stacks, world, _mirror(synced=True), events=events)
    _acquire(stack, 42)
    _acquire(stack, 43)  # already locked: no second Event
    _release(stack, 42)
    _release(stack, 43)
    stack.sync._event_pool.shutdown(wait=True)
    posted = [(c.args[0]["metadata"], c.args[2], c.args[3]) for c in events.record.call_args_list]
    node = {"name": "node-001", "uid": "node-001"}
    assert posted == [
        (node, keys.NODE_LOCKED_EVENT, "Locked (locked_strict) for Slurm job 42 on Slurm node cpu-001"),
        (
            node,
            keys.NODE_UNLOCKED_EVENT,
            "Unlocked: Slurm node cpu-001 runs no job (locked for Slurm job 42)",
        ),
    ]


def test_a_lock_taint_on_a_node_no_slurmd_pod_is_on_is_removed(
    stacks: list[Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the safety net visited only Nodes hosting a slurmd Pod, so a Node whose slurmd Pod
    moved or was deleted while it was locked kept the NoExecute lock taint forever (issue 19).
    The resync now brings such a Node back as its own key."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-002"))  # moved from node-001
    world.add_node("node-001", tainted=True)  # left behind
    world.add_node("node-002")
    world.add_node("node-003", tainted=False)
    stack = _stack(stacks, world, _mirror(synced=True))
    assert stack.facts.waiting_on("node-001") == []
    assert resync_keys(stack.mirror.state, world.cluster, stack.facts) == ["cpu-001", "node/node-001"]
    assert stack.sync.reconcile("node/node-001") == pytest.approx(4.0, abs=0.1)
    assert world.kube.taint_writes() == []  # a slurmd Pod being re-created is on no Node for a moment
    monkeypatch.setattr("tandem.syncer.locking.ORPHAN_GRACE_SECONDS", 0.0)
    stack.resync()
    _until("the stale taint removed", lambda: not world.tainted("node-001"))
    ((path, ops),) = world.kube.taint_writes()
    assert path == "/api/v1/nodes/node-001" and ops[1]["value"] == []
    # A locked Node that does host a slurmd Pod keeps its taint while Slurm runs a job there.
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    job = Job(job_id=5, name="train", state="RUNNING", nodes=("cpu-001",))
    stack = _stack(stacks, world, _mirror(synced=True, jobs=(job,)))
    assert resync_keys(stack.mirror.state, world.cluster, stack.facts) == ["cpu-001"]
    stack.sync.reconcile("cpu-001")
    assert world.kube.taint_writes() == [] and world.kube.annotations_written() == []


def test_a_lock_taint_a_slurmd_pod_leaves_behind_goes_without_waiting_for_the_resync(
    stacks: list[Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: only the periodic resync found a Node a locked slurmd Pod had left, so the resync
    ran every 5 s, and at 1,000 nodes it was 200 node passes a second of the syncer's CPU. Now the
    slurmd Pod leaving wakes its old Node."""
    monkeypatch.setattr("tandem.syncer.locking.ORPHAN_GRACE_SECONDS", 0.0)
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    _stack(stacks, world, _mirror(synced=True))
    world.remove_pod(f"{SLURMD_NS}/cpu-001")
    _until("the taint it left removed", lambda: not world.tainted("node-001"))
    # A Node that comes with the lock taint and no slurmd Pod on it (left so under another leader).
    world.add_node("node-002", tainted=True)
    _until("the new Node's taint removed", lambda: not world.tainted("node-002"))


def test_a_prolog_stuck_behind_a_budget_does_not_delay_the_unlock_of_another(stacks: list[Stack]) -> None:
    """Before: the safety net waited on each node's mutex in turn, and a prolog held its node's
    for as long as a PodDisruptionBudget kept a Pod (up to the lock timeout): another node whose
    epilog was lost stayed locked that long (issue 19). Now no pass waits."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_slurmd("cpu-002", "node-002", LockState.LOCKED))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    world.add_node("node-002", tainted=True)
    world.kube.evict_refusal = KubeError(
        429, "TooManyRequests", "Cannot evict pod", ("disruption budget web-pdb",)
    )
    nodes = (Node("cpu-001", "IDLE"), Node("cpu-002", "IDLE"))
    stack = _stack(stacks, world, _mirror(synced=True, nodes=nodes), workers=1)
    failed: list[BaseException] = []

    def prolog_call() -> None:
        try:
            _acquire(stack, 9, True, 5.0)
        except RuntimeError as e:
            failed.append(e)

    prolog = threading.Thread(target=prolog_call)
    prolog.start()
    _until("cpu-001 pending", lambda: world.lock_of("cpu-001") == "pending")
    began = time.monotonic()
    stack.resync()
    _until("cpu-002 unlocked", lambda: world.lock_of("cpu-002") == "false", timeout=1.0)
    assert time.monotonic() - began < 1.0
    assert not world.tainted("node-002")
    assert prolog.is_alive() and world.lock_of("cpu-001") == "pending"
    world.kube.evict_refusal = None
    prolog.join(5)


def test_the_callers_deadline_bounds_the_lock_wait(stacks: list[Stack]) -> None:
    """The prolog waits 3 s: the syncer gives up a second before, drains the node with the Pod
    that stayed, tells the Pod, and says so, instead of the call dying at its deadline with no
    reason. The node then unlocks at once (nothing else holds it)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    world.kube.evict_refusal = KubeError(
        429, "TooManyRequests", "Cannot evict pod", ("disruption budget web-pdb",)
    )
    events = mock.Mock()
    stack = _stack(stacks, world, _mirror(synced=True), events=events, cap=50)
    context = _context(3.0)
    began = time.monotonic()
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node="cpu-001", job_id=9, strict=True, node_token=NODE_TOKEN
            ),
            context,
        )
    assert 1.5 < time.monotonic() - began < 2.9
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "apps/web (its PodDisruptionBudget web-pdb allows no disruption)" in message
    node, reason = stack.slurm.drain_node.call_args.args
    assert node == "cpu-001" and "could not lock node-001" in reason
    _until("the node unlocked", lambda: world.lock_of("cpu-001") == "false" and not world.tainted("node-001"))
    stack.sync._event_pool.shutdown(wait=True)
    assert "BlockedSlurmJob" in [c.args[2] for c in events.record.call_args_list]


def test_a_lock_on_a_slurm_node_without_a_slurmd_pod_fails_at_once(stacks: list[Stack]) -> None:
    """A node's credential speaks for its slurmd Pod: with none (a token the review still vouches
    for, its Pod just gone), the call is refused at once, nothing held. The hold itself fails at
    once too, for a Pod that goes between that check and the hold."""
    world = World()
    stack = _stack(stacks, world, _mirror(synced=True))
    context = _context(10.0)
    began = time.monotonic()
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node="cpu-001", job_id=9, strict=False, node_token=NODE_TOKEN
            ),
            context,
        )
    assert time.monotonic() - began < 1.0
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.PERMISSION_DENIED and "not a slurmd Pod" in message
    assert stack.holds.holds_of("cpu-001") == []
    began = time.monotonic()
    with pytest.raises(LockFailed, match="no slurmd Pod"):
        stack.locks.acquire("cpu-001", 9, strict=False, timeout=10.0)
    assert time.monotonic() - began < 1.0


def test_a_release_on_a_slurm_node_without_a_slurmd_pod_says_so(stacks: list[Stack]) -> None:
    stack = _stack(stacks, World(), _mirror(synced=True))
    context = _context(10.0)
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.ReleaseNodeLock,
            syncer_pb2.ReleaseNodeLockRequest(slurm_node="cpu-001", job_id=9, node_token=NODE_TOKEN),
            context,
        )
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.PERMISSION_DENIED and "slurm/cpu-001, which is not a slurmd Pod" in message
    with pytest.raises(LockFailed, match="no slurmd Pod slurm/cpu-001"):
        stack.locks.release("cpu-001", 9, timeout=10.0)


def test_a_new_leader_rebuilds_a_placeholders_strict_lock_from_slurm(stacks: list[Stack]) -> None:
    """A leader change while a placeholder ran under a lock left pending: the new leader's store
    is empty, but Slurm says a placeholder runs there, so its resync makes the lock strict again
    and moves the Pod that may not share it."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.PENDING))
    agent = _pod("agent", "node-001")
    agent["spec"]["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]
    world.add_pod(agent)
    world.add_node("node-001", tainted=True)
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    name = placeholder.job_name(ref, "tandem")
    job = Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))
    stack = _stack(stacks, world, _mirror(synced=True, jobs=(job,)))
    stack.resync()
    _until("locked strict again", lambda: world.lock_of("cpu-001") == "locked_strict")
    assert world.cluster.pod("apps", "agent") is None
    assert world.tainted("node-001")


def test_a_slurmd_pod_moved_to_another_node_locks_there(stacks: list[Stack]) -> None:
    """The slurmd Pod was re-created on node-002 (its old Node was replaced): the next prolog's
    lock taints node-002, and node-001's leftover taint is the resync's (after its grace)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-002"))
    world.add_node("node-001", tainted=True)
    world.add_node("node-002")
    stack = _stack(stacks, world, _mirror(synced=True))
    _acquire(stack, 42, strict=False)
    assert world.tainted("node-002") and world.lock_of("cpu-001") == "locked"
    assert world.tainted("node-001")
    assert stack.sync.reconcile("node/node-001") is not None


@pytest.mark.parametrize(
    "failure",
    [
        KubeError(0, "Unreachable", "PATCH /api/v1/nodes/node-001: connection refused"),
        # The API server's priority and fairness turning requests away: overloaded, not refusing.
        KubeError(
            429, "TooManyRequests", "PATCH /api/v1/nodes/node-001: too many requests, connection refused"
        ),
    ],
    ids=["down", "overloaded"],
)
def test_an_unreachable_api_answers_unavailable_at_once_and_a_retry_locks(
    stacks: list[Stack], failure: KubeError
) -> None:
    """The API server is down or overloaded: the prolog's call answers UNAVAILABLE with the API's
    error as soon as a pass could not reach it (no drain), and the prolog asks again; once the API
    is back, the call it repeats locks the node at once, not after the node's backoff."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    world.kube.failure = failure
    stack = _stack(stacks, world, _mirror(synced=True))
    context = _context(30.0)
    began = time.monotonic()
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node="cpu-001", job_id=9, strict=False, node_token=NODE_TOKEN
            ),
            context,
        )
    assert time.monotonic() - began < 1.0
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.UNAVAILABLE
    assert message.startswith("Kubernetes API:") and "connection refused" in message
    time.sleep(0.5)  # a few passes fail meanwhile; the node's backoff grows
    world.kube.failure = None
    began = time.monotonic()
    assert _acquire(stack, 9, strict=False).lock.state == lock_pb2.LOCK_STATE_LOCKED
    assert time.monotonic() - began < 1.0
    stack.slurm.drain_node.assert_not_called()


def test_a_lock_is_taken_though_slurm_refuses_the_nodes_drain(stacks: list[Stack]) -> None:
    """The node's state and its lock are one pass: Slurm refusing a drain (slurmrestd down) must
    not keep the lock from being taken."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    cordoned = world.cluster.node("node-001")
    assert cordoned is not None
    cordoned["spec"]["unschedulable"] = True
    slurm = mock.Mock()
    slurm.drain_node.side_effect = SlurmApiError("slurmrestd: connection refused", 0)
    stack = _stack(stacks, world, _mirror(synced=True), slurm=slurm)
    assert _acquire(stack, 9, strict=False).lock.state == lock_pb2.LOCK_STATE_LOCKED
    assert slurm.drain_node.called


def _job(job_id: int, scheduler: str) -> JobStatus:
    ref = placeholder.PodRef("apps", f"pod-{job_id}", f"uid-{job_id}")
    name = placeholder.job_name(ref, scheduler)
    return JobStatus(Job(job_id, name, "PENDING", admin_comment=bound(name)))


def test_each_scheduler_gets_only_its_own_jobs_and_every_node() -> None:
    mirror = _mirror(synced=True)
    _, a = mirror.broker.subscribe("sched-a")
    _, b = mirror.broker.subscribe("sched-b")
    _, everyone = mirror.broker.subscribe()
    mirror.broker.publish(_job(1, "sched-a"))
    mirror.broker.publish(_job(2, "sched-b"))
    mirror.broker.publish(Node("cpu-002", "IDLE"))

    def drained(sub: Subscription) -> list[Any]:
        return [c.job_id if isinstance(c, JobStatus) else c.name for c, _ in _drain(sub)]

    assert drained(a) == [1, "cpu-002"]
    assert drained(b) == [2, "cpu-002"]
    assert drained(everyone) == [1, 2, "cpu-002"]


def test_a_poll_that_sees_only_what_the_push_told_sends_nothing_more() -> None:
    """The start marker the poll reads after the script's push changes nothing a scheduler reads:
    no second message (each one wakes the scheduler); a change it does read is sent."""
    mirror = _mirror(synced=True)
    name = _job(5, "sched-a").job.name
    _, sub = mirror.broker.subscribe("sched-a")
    mirror.job_submitted(5, name)
    mirror.job_started(5, "cpu-001")
    polled = Job(5, name, "RUNNING", nodes=("cpu-001",), admin_comment=name, extra=": started")
    mirror._apply_job_list([polled], time.monotonic())
    mirror._apply_job_list([replace(polled, flags=("CONFIGURING",))], time.monotonic())
    sent = [item[0] for item in _drain(sub)]
    assert [(s.job.state, s.started) for s in sent] == [("RUNNING", True)]

    mirror._apply_job_list([replace(polled, state="COMPLETING")], time.monotonic())
    assert [item[0].job.state for item in _drain(sub)] == ["COMPLETING"]


def _drain(sub: Subscription) -> list[Any]:
    """Every change queued, batch after batch."""
    out = []
    while not sub.queue.empty():
        batch = take_now(sub)
        assert batch is not None
        out.extend(batch)
    return out


def test_a_subscriber_that_falls_behind_is_cut_off_not_buffered_forever() -> None:
    mirror = _mirror(synced=True)
    sub = Subscription(mirror.broker, "", backlog=3)
    mirror.broker._subs.append(sub)
    for job_id in range(10):
        mirror.broker.publish(_job(job_id, "sched-a"))
    assert sub.overflowed
    assert sub.queue.qsize() == 4  # three changes, then the end of the stream
    assert sub not in mirror.broker._subs


def test_a_terminating_job_waits_on_the_informer_not_on_the_api(stacks: list[Stack]) -> None:
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", "node-001"))
    mirror = _mirror(synced=True)
    _submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    servicer = _stack(stacks, world, mirror).servicer
    threading.Timer(0.2, world.remove_pod, ["apps/trainer"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    began = time.monotonic()
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    assert time.monotonic() - began < 1.0
    assert world.kube.reads() == []


@pytest.mark.parametrize(
    ("annotations", "node"),
    [
        ({keys.JOB_ID_ANNOTATION: "9"}, "node-001"),  # the Pod recorded another job
        ({}, "node-003"),  # bound away from this job's node (its record not cached yet)
        ({keys.JOB_ID_ANNOTATION: "7"}, ""),  # never bound (issue 37: its claim could not be mapped)
    ],
    ids=["records another job", "bound elsewhere", "never bound"],
)
def test_a_duplicate_jobs_end_does_not_wait_for_the_pod_of_another_job(
    annotations: dict[str, str], node: str, stacks: list[Stack]
) -> None:
    """A submit retried after its answer was lost left two jobs; the scheduler cancels the one the
    Pod did not record. Before: its placeholder waited for the Pod (alive, on its own job) until
    KillWait and drained its node ("k8s: pod ... still running at KillWait"): three in one run."""
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", node, annotations=annotations))
    mirror = _mirror(synced=True)
    _submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror._push(7, "cpu-001")
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    world.add_pod(_slurmd("cpu-001", "node-001"))
    # Its Node there: a pass over cpu-001 would drain it at once for a Node that is gone.
    world.add_node("node-001")
    stack = _stack(stacks, world, mirror)
    servicer, slurm = stack.servicer, stack.slurm
    servicer.terminating_timeout = 2
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()


def test_a_failing_node_listing_does_not_stop_the_jobs() -> None:
    """Before: a node poll error escaped poll_once, so a fresh WatchSlurm answered UNAVAILABLE
    and every scheduler stream stalled although the jobs had been read."""
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = [_job(1, "sched-a").job]
    slurm.list_nodes.side_effect = SlurmApiError("GET nodes: HTTP 500", 500)
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    assert mirror.synced
    assert mirror.state.job(1) is not None
    slurm.list_nodes.side_effect = None
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    mirror.poll_once()
    assert mirror.state.node("cpu-001") is not None


def test_a_group_job_waits_for_every_member_and_drains_only_the_nodes_one_still_holds(
    stacks: list[Stack],
) -> None:
    """The node sync makes the drain the call asks for (one drain path, retried by the runner), and
    the call answers with what it drained; the Pod that keeps the node drained is told."""
    world = World()
    for slurm_node, node in (("cpu-001", "node-001"), ("cpu-002", "node-002")):
        world.add_pod(_slurmd(slurm_node, node))
        world.add_node(node)
    for name, node in (("train-0", "node-001"), ("train-1", "node-002")):
        world.add_pod(_pod(name, node, annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    nodes = (Node("cpu-001", "ALLOCATED"), Node("cpu-002", "ALLOCATED"))
    mirror = _mirror(synced=True, nodes=nodes)
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=bound(name))
    mirror.slurm.get_job_components = mock.Mock(return_value=[allocation])  # type: ignore[method-assign]
    mirror.refresh_job(7)
    events = mock.Mock()
    stack = _stack(stacks, world, mirror, events=events)
    stack.servicer.terminating_timeout = 0.6
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    answer = call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        _context(10.0),
    )
    assert not answer.pod_gone
    assert list(answer.drained_slurm_nodes) == ["cpu-002"]
    stack.slurm.drain_node.assert_called_once()
    node, reason = stack.slurm.drain_node.call_args.args
    assert node == "cpu-002" and "apps/train-1 still running at KillWait (job 7)" in reason
    # The pass posts the Event just after it settles the drain, which may answer the call first.
    _until("the drain's Event posted", lambda: events.record.called)
    stack.sync._event_pool.shutdown(wait=True)
    told = [(c.args[0]["metadata"]["name"], c.args[2]) for c in events.record.call_args_list]
    assert ("train-1", "SlurmNodeDrained") in told


def test_a_killwait_drain_slurm_refused_is_not_reported_drained(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    world.add_pod(_pod("trainer", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    name = placeholder.job_name(ref, "tandem")
    mirror = _mirror(synced=True)
    mirror.slurm.get_job_components = mock.Mock(  # type: ignore[method-assign]
        return_value=[Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))]
    )
    slurm = mock.Mock()
    slurm.drain_node.side_effect = SlurmApiError("slurmrestd: connection refused", 0)
    stack = _stack(stacks, world, mirror, slurm=slurm)
    stack.servicer.terminating_timeout = 0.2
    answer = call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=name, job_token=token_for(name)
        ),
        _context(10.0),
    )
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == []
    assert slurm.drain_node.called
    # The script drains its node itself on that answer; the node sync keeps trying while the Pod
    # runs, and forgets the deadline once the Pod is gone.
    entry = stack.holds.killwait_of(7)
    assert entry is not None and entry.answered
    world.remove_pod("apps/trainer")
    _until("the KillWait deadline forgotten", lambda: stack.holds.killwait_of(7) is None)


def _ended_placeholder(slurm_node: Node) -> tuple[World, SlurmMirror, str]:
    """A placeholder job 7 on cpu-001 (Node node-001) that ended while its Pod still runs."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    world.add_pod(_pod("trainer", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    name = placeholder.job_name(placeholder.PodRef("apps", "trainer", "uid-trainer"), "tandem")
    mirror = _mirror(synced=True, nodes=(slurm_node,))
    mirror.slurm.get_job_components = mock.Mock(  # type: ignore[method-assign]
        return_value=[Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))]
    )
    return world, mirror, name


def _terminating(stack: Stack, name: str, remaining: float = 10.0) -> Any:
    return call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=name, job_token=token_for(name)
        ),
        _context(remaining),
    )


def test_a_pod_still_running_at_killwait_has_its_node_drained_then_not_before(
    stacks: list[Stack],
) -> None:
    """The call records a deadline and waits; the node's pass drains at it (not at once), and the
    call answers with the drain; the Pod is told."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    drained_at: list[float] = []
    slurm = mock.Mock()
    slurm.drain_node.side_effect = lambda node, reason: drained_at.append(time.monotonic())
    events = mock.Mock()
    stack = _stack(stacks, world, mirror, slurm=slurm, events=events)
    stack.servicer.terminating_timeout = 0.5
    began = time.monotonic()
    answer = _terminating(stack, name)
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == ["cpu-001"]
    assert len(drained_at) == 1 and drained_at[0] - began >= 0.45
    node, reason = slurm.drain_node.call_args.args
    assert (node, reason) == ("cpu-001", keys.killwait_drain_reason("apps", "trainer", 7))
    assert stack.holds.killwait_of(7) is None
    _until("the drain's Event posted", lambda: events.record.called)  # as in the group job's
    stack.sync._event_pool.shutdown(wait=True)
    assert [c.args[2] for c in events.record.call_args_list] == ["SlurmNodeDrained"]


def test_a_pod_that_goes_before_killwait_leaves_its_node_undrained(stacks: list[Stack]) -> None:
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    stack = _stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 0.4
    threading.Timer(0.1, world.remove_pod, ["apps/trainer"]).start()
    began = time.monotonic()
    assert _terminating(stack, name).pod_gone
    assert time.monotonic() - began < 0.35  # answered when the Pod went, not at the deadline
    assert stack.holds.killwait_of(7) is None
    time.sleep(0.5)  # past the deadline the call recorded: no pass drains for it
    stack.slurm.drain_node.assert_not_called()


def test_a_node_already_drained_for_the_pod_is_not_drained_again(stacks: list[Stack]) -> None:
    reason = keys.killwait_drain_reason("apps", "trainer", 7)
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED", ("DRAIN",), reason, "tandem"))
    stack = _stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 0.2
    answer = _terminating(stack, name)
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == ["cpu-001"]
    stack.slurm.drain_node.assert_not_called()


def test_a_node_in_its_backoff_is_still_drained_at_killwait(stacks: list[Stack]) -> None:
    """Slurm refused the drain of the node's cordon, so its pass went back into a long backoff; the
    KillWait drain still comes at drain_at (the deadline's own pass), not when the backoff ends."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    cordoned = {"metadata": {"name": "node-001", "resourceVersion": "2"}, "spec": {"unschedulable": True}}
    with world.cluster.nodes._lock:
        world.cluster.nodes._put("node-001", slim_node(cordoned))
    drained_at: list[float] = []

    def drain(node: str, reason: str) -> None:
        if reason.startswith("k8s: Node"):
            raise SlurmApiError("slurmrestd: busy", 503)
        drained_at.append(time.monotonic())

    slurm = mock.Mock()
    slurm.drain_node.side_effect = drain
    stack = _stack(stacks, world, mirror, slurm=slurm)
    stack.queue.backoff_base = stack.queue.backoff_cap = 5.0
    stack.servicer.terminating_timeout = 0.5
    began = time.monotonic()
    answer = _terminating(stack, name)
    assert list(answer.drained_slurm_nodes) == ["cpu-001"]
    assert len(drained_at) == 1 and drained_at[0] - began < 1.5


def test_a_call_asked_again_is_not_cut_short_by_the_first_ones_answer(stacks: list[Stack]) -> None:
    """The script asked again (through a restarted gateway) while the first call still waited:
    the first's answer at its deadline leaves the second's deadline, which waits for the Pod."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    stack = _stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 5
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(_terminating(stack, name, remaining=2.0)))
    first.start()
    time.sleep(0.2)
    threading.Timer(2.0, world.remove_pod, ["apps/trainer"]).start()
    began = time.monotonic()
    second = _terminating(stack, name)
    first.join()
    assert not answers[0].pod_gone  # at its own deadline, nothing drained yet
    assert second.pod_gone and time.monotonic() - began >= 1.5
    stack.slurm.drain_node.assert_not_called()


def test_a_group_job_whose_members_all_left_answers_gone(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_pod("train-0", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    _submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    stack = _stack(stacks, world, mirror)
    servicer, slurm = stack.servicer, stack.slurm
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()


def test_a_group_job_started_push_publishes_its_whole_allocation() -> None:
    """The script runs on one node of the group's job: the push must not make that its only node."""
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    _submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=bound(name))
    mirror.slurm.get_job_components = mock.Mock(return_value=[allocation])  # type: ignore[method-assign]
    status = mirror.job_started(7, "cpu-001")
    assert status.started and status.job.nodes == ("cpu-001", "cpu-002")


def test_a_lock_on_a_node_that_runs_nothing_is_counted_for_the_alert(stacks: list[Stack]) -> None:
    def idle(mirror: SlurmMirror) -> dict[tuple[str, ...], float]:
        world = World()
        world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
        world.add_node("node-001", tainted=True)
        return _stack(stacks, world, mirror).locks._count_idle()

    assert idle(_mirror(synced=True)) == {(): 1.0}
    running = Job(5, "plain", "RUNNING", nodes=("cpu-001",))
    assert idle(_mirror(synced=True, jobs=(running,))) == {(): 0.0}
    assert idle(_mirror(synced=False)) == {(): 0.0}  # not read yet is not idle


def test_a_job_only_named_like_a_placeholder_gets_no_strict_lock_and_no_wait() -> None:
    """Strict locks (evicting what tolerates the lock) and the terminating wait are for Tandem's
    placeholders, known by the AdminComment only Slurm's administrators write, not by the name."""
    ref = placeholder.PodRef("apps", "web", "uid-1")
    name = placeholder.job_name(ref, "tandem")
    slurm = mock.Mock()
    slurm.list_jobs.return_value = [
        Job(5, name, "RUNNING", nodes=("cpu-001",)),
        Job(6, name, "RUNNING", nodes=("cpu-002",), admin_comment=bound(name)),
    ]
    slurm.list_nodes.return_value = []
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    servicer = SyncerServicer(
        mirror, mock.Mock(), slurm, mock.Mock(), terminating_timeout=5, job_keys=lambda: [JOB_KEY]
    )
    assert not servicer._is_placeholder(5)
    assert servicer._is_placeholder(6)


def test_a_started_push_is_a_hint_checked_against_slurm() -> None:
    """Before: JobStarted marked the job started (and so bound its Pod) on the hook's word. Now the
    job is read from slurmrestd: it must be the placeholder the caller's credential names and hold
    the node the caller speaks for."""
    ref = placeholder.PodRef("apps", "web", "uid-1")
    name = placeholder.job_name(ref, "tandem")
    mirror = _mirror(synced=True)
    servicer = SyncerServicer(
        mirror, mock.Mock(), mock.Mock(), mock.Mock(), terminating_timeout=5, job_keys=lambda: [JOB_KEY]
    )
    servicer.active = True

    def started(job: Job, node: str) -> grpc.StatusCode | None:
        mirror.slurm.get_job_components = mock.Mock(return_value=[job])  # type: ignore[method-assign]
        context = mock.Mock()
        context.abort.side_effect = RuntimeError
        try:
            servicer.JobStarted(
                syncer_pb2.JobStartedRequest(
                    job_id=7, slurm_node=node, placeholder=name, job_token=token_for(name)
                ),
                context,
            )
        except RuntimeError:
            return context.abort.call_args.args[0]
        return None

    forged = Job(7, name, "RUNNING", nodes=("cpu-001",))  # named like it; no AdminComment
    assert started(forged, "cpu-001") == grpc.StatusCode.PERMISSION_DENIED
    real = Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))
    assert started(real, "cpu-002") == grpc.StatusCode.PERMISSION_DENIED
    status = mirror.state.job(7)
    assert status is not None and not status.started
    assert started(real, "cpu-001") is None
    status = mirror.state.job(7)
    assert status is not None and status.started


@pytest.mark.parametrize(
    ("extra", "write_fails", "written", "marked"),
    [
        # The syncer appends the marker to the Extra read from Slurm (the trace context kept).
        ("traceparent=00-1-2-01", False, "traceparent=00-1-2-01: started", True),
        ("", False, ": started", True),
        # Slurm refused the write: the script writes it (its scontrol, as before).
        ("", True, ": started", False),
        # Already there (a call asked again): nothing written.
        ("x: started", False, None, True),
    ],
)
def test_a_verified_started_call_writes_the_job_s_started_marker(
    extra: str, write_fails: bool, written: str | None, marked: bool
) -> None:
    """The placeholder script's `scontrol update` of its marker was ~5 ms of CPU a Pod (libslurm
    and munge in a new process, issue 22); the syncer writes it through slurmrestd once the call
    is checked against the job's own credential, and says so."""
    ref = placeholder.PodRef("apps", "web", "uid-1")
    name = placeholder.job_name(ref, "tandem")
    mirror = _mirror(synced=True)
    job = Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name), extra=extra)
    mirror.slurm.get_job_components = mock.Mock(return_value=[job])  # type: ignore[method-assign]
    slurm = mock.Mock()
    if write_fails:
        slurm.update_job.side_effect = SlurmApiError("POST job/7: Access denied", 200)
    servicer = SyncerServicer(
        mirror, mock.Mock(), slurm, mock.Mock(), terminating_timeout=5, job_keys=lambda: [JOB_KEY]
    )
    servicer.active = True
    reply = servicer.JobStarted(
        syncer_pb2.JobStartedRequest(
            job_id=7, slurm_node="cpu-001", placeholder=name, job_token=token_for(name)
        ),
        mock.Mock(),
    )
    assert reply.marked is marked
    if written is None:
        slurm.update_job.assert_not_called()
    else:
        slurm.update_job.assert_called_once_with(7, extra=written)
    status = mirror.state.job(7)
    assert status is not None and status.started  # the Pod binds either way


def test_a_slurmd_pod_on_no_node_yet_does_not_fail_the_listing(stacks: list[Stack]) -> None:
    """Before: ListNodeLocks answered UNKNOWN for every node when one slurmd Pod was not on a Node."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_pod(_slurmd("cpu-002", ""))
    stack = _stack(stacks, world, _mirror(synced=True))
    views = {v.slurm_node: (v.kube_node, v.state) for v in stack.locks.list()}
    assert views == {"cpu-001": ("node-001", LockState.LOCKED), "cpu-002": ("", LockState.FALSE)}


def test_unlocking_one_slurm_node_keeps_the_taint_another_on_the_same_node_needs(stacks: list[Stack]) -> None:
    """The lock taint is the Node's: two Slurm nodes hosted on one Node share it. Before, the
    first to unlock removed it from under the other's running job."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_pod(_slurmd("cpu-002", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    running = Job(5, "plain", "RUNNING", nodes=("cpu-001",))
    nodes = (Node("cpu-001", "ALLOCATED"), Node("cpu-002", "IDLE"))
    stack = _stack(stacks, world, _mirror(synced=True, jobs=(running,), nodes=nodes))
    answer = _release(stack, 8, slurm_node="cpu-002")
    assert answer.lock.state == lock_pb2.LOCK_STATE_FALSE
    assert world.kube.taint_writes() == []
    assert world.kube.annotations_written() == [("cpu-002", "false")]  # and nothing else
    assert world.tainted("node-001")


def test_a_node_being_locked_for_one_slurm_node_keeps_its_taint_from_another(stacks: list[Stack]) -> None:
    """Two Slurm nodes on one Node, passes on several workers: cpu-001's prolog tainted the Node
    and has not written `pending` yet when cpu-002's pass (woken by that very taint) looks. Before
    its hold counted, cpu-002 took the taint for a stray one and removed it from under the lock."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_slurmd("cpu-002", "node-001"))
    world.add_node("node-001", tainted=True)
    nodes = (Node("cpu-001", "IDLE"), Node("cpu-002", "IDLE"))
    stack = _stack(stacks, world, _mirror(synced=True, nodes=nodes), workers=0)
    stack.holds.hold("cpu-001", 42, strict=False, deadline=time.monotonic() + 50)
    stack.sync.reconcile("cpu-002")
    assert world.tainted("node-001") and world.kube.taint_writes() == []


def test_whether_a_pod_may_stay_is_never_asked_of_slurm_under_the_informers_lock(stacks: list[Stack]) -> None:
    """Before: the wait for Pods to leave re-judged them under the Pod informer's lock, and a
    Tandem-looking Pod whose job the mirror did not know sent a slurmrestd call from there, which
    held up every Pod event of the cluster for as long as slurmrestd took (issue 19). Now the
    node sync asks, on its worker, and the call waits on the caches only."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    impostor = _pod("lookalike", "node-001", annotations={keys.JOB_ID_ANNOTATION: "77"})
    impostor["spec"]["schedulerName"] = "tandem"
    impostor["spec"]["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]
    world.add_pod(impostor)
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    mirror = _mirror(synced=True)
    under_lock: list[bool] = []

    def refresh(job_id: int) -> None:
        under_lock.append(world.cluster.pods._lock._is_owned())  # type: ignore[attr-defined]
        return None  # Slurm knows no job 77: not Tandem's, it may not stay

    mirror.refresh_job = refresh  # type: ignore[method-assign]
    stack = _stack(stacks, world, mirror)
    answer = _acquire(stack, 42, remaining=4.0)
    assert answer.lock.state == lock_pb2.LOCK_STATE_LOCKED_STRICT
    assert under_lock and not any(under_lock)
    assert world.cluster.pod("apps", "lookalike") is None  # evicted once known not to be Tandem's


def _prolog_stuck_behind_a_budget(stacks: list[Stack]) -> tuple[World, Stack, Any, dict[str, Any]]:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    world.kube.evict_refusal = KubeError(
        429, "TooManyRequests", "Cannot evict pod", ("disruption budget web-pdb",)
    )
    job = Job(job_id=9, name="train", state="RUNNING", nodes=("cpu-001",))
    mirror = _mirror(synced=True, jobs=(job,))
    stack = _stack(stacks, world, mirror)
    context = _context(10.0)
    outcome: dict[str, Any] = {}

    def prolog_call() -> None:
        try:
            outcome["answer"] = call(
                stack.servicer.AcquireNodeLock,
                syncer_pb2.AcquireNodeLockRequest(
                    slurm_node="cpu-001", job_id=9, strict=True, node_token=NODE_TOKEN
                ),
                context,
            )
        except RuntimeError:
            outcome["aborted"] = context.abort.call_args.args
        outcome["after"] = time.monotonic()

    threading.Thread(target=prolog_call, daemon=True).start()
    _until("cpu-001 pending", lambda: world.lock_of("cpu-001") == "pending")
    return world, stack, mirror, outcome


def test_a_job_cancelled_while_its_prolog_waits_ends_the_call_without_a_prolog_error(
    stacks: list[Stack],
) -> None:
    """Seen on the lab (the soak's failed_hook_drains): a job cancelled while its prolog waited
    behind a PodDisruptionBudget lost its hold, and its call waited out the whole budget, then
    failed: Slurm drained the node for a prolog error and the job lingered ~50 s. Its call now
    answers as soon as Slurm confirms the end (no script of a killed job is launched)."""
    world, stack, mirror, outcome = _prolog_stuck_behind_a_budget(stacks)
    cancelled = Job(job_id=9, name="train", state="CANCELLED", nodes=("cpu-001",))
    mirror.slurm.list_jobs.return_value = [cancelled]
    mirror.slurm.get_job_components.return_value = [cancelled]
    mirror.slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    began = time.monotonic()
    mirror.poll_once()
    stack.queue.add("cpu-001")
    _until("the prolog's call answered", lambda: "after" in outcome)
    assert outcome["after"] - began < 2.0
    assert "aborted" not in outcome, outcome
    stack.slurm.drain_node.assert_not_called()
    _until("the node unlocked", lambda: world.lock_of("cpu-001") == "false" and not world.tainted("node-001"))


def test_a_hold_dropped_on_a_stale_copy_of_an_ended_job_is_not_taken_for_its_end(
    stacks: list[Stack],
) -> None:
    """The mirror may still show a requeued job's earlier end: Slurm, asked, says it runs, so the
    call answers UNAVAILABLE (the prolog asks again and locks) and never lets it run unlocked."""
    _, stack, mirror, outcome = _prolog_stuck_behind_a_budget(stacks)
    ended = Job(job_id=9, name="train", state="CANCELLED", nodes=("cpu-001",))
    mirror.slurm.list_jobs.return_value = [ended]
    mirror.slurm.get_job_components.return_value = [
        Job(job_id=9, name="train", state="RUNNING", nodes=("cpu-001",))
    ]
    mirror.poll_once()
    stack.queue.add("cpu-001")
    _until("the prolog's call answered", lambda: "after" in outcome)
    code, message = outcome["aborted"]
    assert code == grpc.StatusCode.UNAVAILABLE and "running again" in message


def test_an_unlock_under_a_job_slurm_says_still_runs_there_is_refused_and_changes_nothing(
    stacks: list[Stack],
) -> None:
    """Issue 39: an unlock is read against Slurm, not taken on the caller's word: root on a node (or
    anyone with its credential) cannot unlock a node under a running job."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    running = Job(job_id=42, name="train", state="RUNNING", nodes=("cpu-001",))
    mirror = _mirror(synced=True, jobs=(running,))
    stack = _stack(stacks, world, mirror)
    _acquire(stack, 42, strict=False)
    assert world.lock_of("cpu-001") == "locked"
    mirror.slurm.get_job_components.return_value = [running]  # type: ignore[attr-defined]
    context = _context()
    context.abort.side_effect = RuntimeError("aborted")
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.ReleaseNodeLock,
            syncer_pb2.ReleaseNodeLockRequest(slurm_node="cpu-001", job_id=42, node_token=NODE_TOKEN),
            context,
        )
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "still holds cpu-001 (RUNNING)" in message
    time.sleep(0.2)
    assert world.lock_of("cpu-001") == "locked" and world.tainted("node-001")
    # Once Slurm says it ended (its epilog's call), the same unlock goes through.
    ended = Job(job_id=42, name="train", state="COMPLETED", nodes=("cpu-001",))
    mirror.slurm.get_job_components.return_value = [ended]  # type: ignore[attr-defined]
    _release(stack, 42)
    assert world.lock_of("cpu-001") == "false"
