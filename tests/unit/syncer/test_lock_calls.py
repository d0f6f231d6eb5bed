"""The syncer's core with real informer caches (filled by hand) and a fake API server that writes
into them (tests/unit/syncer_world.py): a prolog's lock waits on the caches while the node sync
takes it, an unread Slurm never unlocks a Node, Events never hold a node up, and one node's prolog
stuck behind a PodDisruptionBudget holds up no other node."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem import keys, placeholder
from tandem.keys import LockState
from tandem.kube import KubeError
from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.lockcalls import LockFailed
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodefacts import resync_keys
from tandem.v1 import lock_pb2, syncer_pb2
from tests.unit.servicer_calls import call
from tests.unit.syncer.lock_calls_world import (
    NODE_TOKEN,
    acquire,
    call_context,
    new_stack,
    release,
    until,
)
from tests.unit.syncer_world import (
    SLURMD_NS,
    Stack,
    World,
    _mirror,
    _pod,
    _slurmd,
    bound,
    node_token_for,
)


def test_an_unread_slurm_never_unlocks_a_node(stacks: list[Stack]) -> None:
    """After a restart the mirror is empty until the first poll answers: "no job on the node"
    then means "not read yet", and a release must not untaint a Node that still runs jobs."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    stack = new_stack(stacks, world, _mirror(synced=False))
    answer = release(stack, 41)
    assert answer.lock.state == lock_pb2.LOCK_STATE_LOCKED_STRICT
    assert world.kube.taint_writes() == []
    assert world.kube.annotations_written() == []


def test_a_read_slurm_with_nothing_running_unlocks_the_node(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    stack = new_stack(stacks, world, _mirror(synced=True))
    answer = release(stack, 41)
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
    stack = new_stack(stacks, world, _mirror(synced=True))
    began = time.monotonic()
    answer = acquire(stack, 42)
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
    stack = new_stack(stacks, world, _mirror(synced=True))
    acquire(stack, 42)
    writes = len(world.kube.calls)
    acquire(stack, 43)
    time.sleep(0.1)
    assert len(world.kube.calls) == writes
    release(stack, 42)
    assert world.lock_of("cpu-001") == "locked_strict"  # job 43 still holds it
    release(stack, 43)
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
    stack = new_stack(stacks, world, _mirror(synced=True), workers=0)  # passes run only by hand
    stack.holds.release("cpu-001", 42)
    answered = threading.Event()

    def prolog() -> None:
        acquire(stack, 43, strict=False)
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
    stack = new_stack(stacks, world, _mirror(synced=True), events=events)
    try:
        began = time.monotonic()
        acquire(stack, 42)
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
    stack = new_stack(stacks, world, _mirror(synced=True), events=events)
    acquire(stack, 42)
    acquire(stack, 43)  # already locked: no second Event
    release(stack, 42)
    release(stack, 43)
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
    stack = new_stack(stacks, world, _mirror(synced=True))
    assert stack.facts.waiting_on("node-001") == []
    assert resync_keys(stack.mirror.state, world.cluster, stack.facts) == ["cpu-001", "node/node-001"]
    assert stack.sync.reconcile("node/node-001") == pytest.approx(4.0, abs=0.1)
    assert world.kube.taint_writes() == []  # a slurmd Pod being re-created is on no Node for a moment
    monkeypatch.setattr("tandem.syncer.locking.ORPHAN_GRACE_SECONDS", 0.0)
    stack.resync()
    until("the stale taint removed", lambda: not world.tainted("node-001"))
    ((path, ops),) = world.kube.taint_writes()
    assert path == "/api/v1/nodes/node-001" and ops[1]["value"] == []
    # A locked Node that does host a slurmd Pod keeps its taint while Slurm runs a job there.
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    job = Job(job_id=5, name="train", state="RUNNING", nodes=("cpu-001",))
    stack = new_stack(stacks, world, _mirror(synced=True, jobs=(job,)))
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
    new_stack(stacks, world, _mirror(synced=True))
    world.remove_pod(f"{SLURMD_NS}/cpu-001")
    until("the taint it left removed", lambda: not world.tainted("node-001"))
    # A Node that comes with the lock taint and no slurmd Pod on it (left so under another leader).
    world.add_node("node-002", tainted=True)
    until("the new Node's taint removed", lambda: not world.tainted("node-002"))


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
    stack = new_stack(stacks, world, _mirror(synced=True, nodes=nodes), workers=1)
    failed: list[BaseException] = []

    def prolog_call() -> None:
        try:
            acquire(stack, 9, True, 5.0)
        except RuntimeError as e:
            failed.append(e)

    prolog = threading.Thread(target=prolog_call)
    prolog.start()
    until("cpu-001 pending", lambda: world.lock_of("cpu-001") == "pending")
    began = time.monotonic()
    stack.resync()
    until("cpu-002 unlocked", lambda: world.lock_of("cpu-002") == "false", timeout=1.0)
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
    stack = new_stack(stacks, world, _mirror(synced=True), events=events, cap=50)
    context = call_context(3.0)
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
    until("the node unlocked", lambda: world.lock_of("cpu-001") == "false" and not world.tainted("node-001"))
    stack.sync._event_pool.shutdown(wait=True)
    assert "BlockedSlurmJob" in [c.args[2] for c in events.record.call_args_list]


def test_a_lock_on_a_slurm_node_without_a_slurmd_pod_fails_at_once(stacks: list[Stack]) -> None:
    """A node's credential speaks for its slurmd Pod: with none (a token the review still vouches
    for, its Pod just gone), the call is refused at once, nothing held. The hold itself fails at
    once too, for a Pod that goes between that check and the hold."""
    world = World()
    stack = new_stack(stacks, world, _mirror(synced=True))
    context = call_context(10.0)
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
    stack = new_stack(stacks, World(), _mirror(synced=True))
    context = call_context(10.0)
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
    stack = new_stack(stacks, world, _mirror(synced=True, jobs=(job,)))
    stack.resync()
    until("locked strict again", lambda: world.lock_of("cpu-001") == "locked_strict")
    assert world.cluster.pod("apps", "agent") is None
    assert world.tainted("node-001")


def test_a_slurmd_pod_moved_to_another_node_locks_there(stacks: list[Stack]) -> None:
    """The slurmd Pod was re-created on node-002 (its old Node was replaced): the next prolog's
    lock taints node-002, and node-001's leftover taint is the resync's (after its grace)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-002"))
    world.add_node("node-001", tainted=True)
    world.add_node("node-002")
    stack = new_stack(stacks, world, _mirror(synced=True))
    acquire(stack, 42, strict=False)
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
    stack = new_stack(stacks, world, _mirror(synced=True))
    context = call_context(30.0)
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
    assert acquire(stack, 9, strict=False).lock.state == lock_pb2.LOCK_STATE_LOCKED
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
    stack = new_stack(stacks, world, _mirror(synced=True), slurm=slurm)
    assert acquire(stack, 9, strict=False).lock.state == lock_pb2.LOCK_STATE_LOCKED
    assert slurm.drain_node.called


def test_a_lock_on_a_node_that_runs_nothing_is_counted_for_the_alert(stacks: list[Stack]) -> None:
    def idle(mirror: SlurmMirror) -> dict[tuple[str, ...], float]:
        world = World()
        world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
        world.add_node("node-001", tainted=True)
        return new_stack(stacks, world, mirror).locks._count_idle()

    assert idle(_mirror(synced=True)) == {(): 1.0}
    running = Job(5, "plain", "RUNNING", nodes=("cpu-001",))
    assert idle(_mirror(synced=True, jobs=(running,))) == {(): 0.0}
    assert idle(_mirror(synced=False)) == {(): 0.0}  # not read yet is not idle


def test_a_slurmd_pod_on_no_node_yet_does_not_fail_the_listing(stacks: list[Stack]) -> None:
    """Before: ListNodeLocks answered UNKNOWN for every node when one slurmd Pod was not on a Node."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_pod(_slurmd("cpu-002", ""))
    stack = new_stack(stacks, world, _mirror(synced=True))
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
    stack = new_stack(stacks, world, _mirror(synced=True, jobs=(running,), nodes=nodes))
    answer = release(stack, 8, slurm_node="cpu-002")
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
    stack = new_stack(stacks, world, _mirror(synced=True, nodes=nodes), workers=0)
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
    stack = new_stack(stacks, world, mirror)
    answer = acquire(stack, 42, remaining=4.0)
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
    stack = new_stack(stacks, world, mirror)
    context = call_context(10.0)
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
    until("cpu-001 pending", lambda: world.lock_of("cpu-001") == "pending")
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
    until("the prolog's call answered", lambda: "after" in outcome)
    assert outcome["after"] - began < 2.0
    assert "aborted" not in outcome, outcome
    stack.slurm.drain_node.assert_not_called()
    until("the node unlocked", lambda: world.lock_of("cpu-001") == "false" and not world.tainted("node-001"))


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
    until("the prolog's call answered", lambda: "after" in outcome)
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
    stack = new_stack(stacks, world, mirror)
    acquire(stack, 42, strict=False)
    assert world.lock_of("cpu-001") == "locked"
    mirror.slurm.get_job_components.return_value = [running]  # type: ignore[attr-defined]
    context = call_context()
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
    release(stack, 42)
    assert world.lock_of("cpu-001") == "false"


def test_the_epilogs_of_a_multi_node_job_read_it_from_slurm_once(stacks: list[Stack]) -> None:
    """A job of N nodes ends and N epilogs ask to unlock at once. Before, each read the job from
    Slurm again (62 reads for a 62-node job, behind one slurmrestd: a waiting job started 2 s after
    such a job's cancel in a Tandem cluster, 0.2 s without the epilogs, bench/gang.py's elastic
    row). Once one read shows it on none of its nodes, the rest ask nothing."""
    world = World()
    for i in (1, 2, 3):
        world.add_pod(_slurmd(f"cpu-00{i}", f"node-00{i}"))
        world.add_node(f"node-00{i}")
    hosts = ("cpu-001", "cpu-002", "cpu-003")
    running = Job(job_id=42, name="train", state="RUNNING", nodes=hosts)
    nodes = tuple(Node(n, "ALLOCATED") for n in hosts)
    mirror = _mirror(synced=True, jobs=(running,), nodes=nodes)
    stack = new_stack(stacks, world, mirror)
    _lock_all(stack, hosts, 42)
    ended = Job(job_id=42, name="train", state="COMPLETED", nodes=hosts)
    slurm: Any = mirror.slurm
    slurm.get_job_components.return_value = [ended]
    slurm.get_job_components.reset_mock()
    for n in hosts:
        assert release(stack, 42, slurm_node=n).lock.state == lock_pb2.LOCK_STATE_FALSE
    assert slurm.get_job_components.call_count == 1
    assert [world.lock_of(n) for n in hosts] == ["false"] * 3


def test_an_epilog_on_a_node_the_job_still_holds_elsewhere_reads_slurm_for_the_next(
    stacks: list[Stack],
) -> None:
    """A job that left one node and runs on another (Slurm shrank it): the next node's unlock is
    read again, and refused while the job runs there."""
    world = World()
    for i in (1, 2):
        world.add_pod(_slurmd(f"cpu-00{i}", f"node-00{i}"))
        world.add_node(f"node-00{i}")
    hosts = ("cpu-001", "cpu-002")
    running = Job(job_id=42, name="train", state="RUNNING", nodes=hosts)
    mirror = _mirror(synced=True, jobs=(running,), nodes=tuple(Node(n, "ALLOCATED") for n in hosts))
    stack = new_stack(stacks, world, mirror)
    _lock_all(stack, hosts, 42)
    slurm: Any = mirror.slurm
    slurm.get_job_components.return_value = [
        Job(job_id=42, name="train", state="RUNNING", nodes=("cpu-002",))
    ]
    slurm.get_job_components.reset_mock()
    release(stack, 42, slurm_node="cpu-001")
    context = call_context()
    context.abort.side_effect = RuntimeError("aborted")
    with pytest.raises(RuntimeError):
        call(
            stack.servicer.ReleaseNodeLock,
            syncer_pb2.ReleaseNodeLockRequest(
                slurm_node="cpu-002", job_id=42, node_token=node_token_for("cpu-002")
            ),
            context,
        )
    assert slurm.get_job_components.call_count == 2
    assert world.lock_of("cpu-002") == "locked"


def _lock_all(stack: Stack, slurm_nodes: tuple[str, ...], job_id: int) -> None:
    """Each node's prolog for the job, locked."""
    for n in slurm_nodes:
        call(
            stack.servicer.AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(
                slurm_node=n, job_id=job_id, strict=False, node_token=node_token_for(n)
            ),
            call_context(),
        )
