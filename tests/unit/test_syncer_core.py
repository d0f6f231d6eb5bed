"""The syncer's core with real informer caches (filled by hand) and a fake API: locks read Pods and
Nodes from the caches and wake on changes, an unread Slurm never unlocks a Node, Events never wait
under a node's mutex, and each scheduler's stream carries only its own jobs, bounded."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem import keys, placeholder
from tandem.keys import LockState
from tandem.kube import JSON, KubeError, object_key
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.cluster import ClusterView, slim_node, slim_pod
from tandem.syncer.locks import NodeLocker
from tandem.syncer.mirror import SlurmMirror, Subscription
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2

SLURMD_NS = "slurm"


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


class World:
    """The caches of a ClusterView, filled by hand, and an API that records writes."""

    def __init__(self) -> None:
        self.kube = mock.Mock()
        self.cluster = ClusterView(self.kube, SLURMD_NS)
        for informer in (self.cluster.pods, self.cluster.nodes):
            for synced in informer._synced:
                synced.set()
        self.kube.post.side_effect = self._evicted

    def add_pod(self, pod: JSON) -> None:
        with self.cluster.pods._lock:
            self.cluster.pods._put(object_key(pod), slim_pod(pod))

    def remove_pod(self, key: str) -> None:
        with self.cluster.pods._lock:
            self.cluster.pods._put(key, None)

    def add_node(self, name: str, tainted: bool = False) -> None:
        spec = {"taints": [{"key": keys.LOCK_KEY, "effect": "NoExecute"}]} if tainted else {}
        node = {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}
        with self.cluster.nodes._lock:
            self.cluster.nodes._put(name, slim_node(node))

    def _evicted(self, path: str, body: Any) -> JSON:
        if path.endswith("/eviction"):
            meta = body["metadata"]
            # The kubelet (kwok) takes a moment to let the Pod go.
            threading.Timer(0.1, self.remove_pod, [f"{meta['namespace']}/{meta['name']}"]).start()
        return {}

    def taint_writes(self) -> list[Any]:
        return [c for c in self.kube.json_patch.call_args_list if "/nodes/" in c.args[0]]


def _mirror(synced: bool, jobs: tuple[Job, ...] = ()) -> SlurmMirror:
    slurm = mock.Mock()
    slurm.list_jobs.return_value = list(jobs)
    slurm.list_nodes.return_value = [Node("cpu-001", "ALLOCATED" if jobs else "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    if synced:
        mirror.poll_once()
    return mirror


def test_an_unread_slurm_never_unlocks_a_node() -> None:
    """After a restart the mirror is empty until the first poll answers: "no job on the node"
    then means "not read yet", and a release must not untaint a Node that still runs jobs."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    locker = NodeLocker(world.kube, _mirror(synced=False), world.cluster, "tandem", timeout=5)
    view = locker.release("cpu-001", 41)
    assert view.state == LockState.LOCKED_STRICT
    assert world.taint_writes() == []
    world.kube.merge_patch.assert_not_called()


def test_a_read_slurm_with_nothing_running_unlocks_the_node() -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED_STRICT))
    world.add_node("node-001", tainted=True)
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    assert locker.release("cpu-001", 41).state == LockState.FALSE
    assert len(world.taint_writes()) == 1


def test_a_lock_taint_on_a_node_no_slurmd_pod_is_on_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the safety net visited only Nodes hosting a slurmd Pod, so a Node whose slurmd Pod
    moved or was deleted while it was locked kept the NoExecute lock taint forever (issue 19)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-002"))  # moved from node-001
    world.add_node("node-001", tainted=True)  # left behind
    world.add_node("node-002")
    world.add_node("node-003", tainted=False)
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    locker.reconcile_all()
    assert world.taint_writes() == []  # a slurmd Pod being re-created is on no Node for a moment
    monkeypatch.setattr("tandem.syncer.locks.ORPHAN_GRACE_SECONDS", 0.0)
    locker.reconcile_all()
    (write,) = world.taint_writes()
    assert write.args[0] == "/api/v1/nodes/node-001"
    assert write.args[1][1]["value"] == []
    # A locked Node that does host a slurmd Pod keeps its taint while Slurm runs a job there.
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    job = Job(job_id=5, name="train", state="RUNNING", nodes=("cpu-001",))
    locker = NodeLocker(world.kube, _mirror(synced=True, jobs=(job,)), world.cluster, "tandem", timeout=5)
    locker.reconcile_all()
    assert world.taint_writes() == []


def test_a_prolog_holding_its_node_does_not_delay_the_safety_net_of_another() -> None:
    """Before: reconcile_all waited on each node's mutex in turn, and a prolog holds its node's
    for as long as a PodDisruptionBudget keeps a Pod (up to the lock timeout): another node
    whose epilog was lost stayed locked that long (issue 19)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.PENDING))
    world.add_pod(_slurmd("cpu-002", "node-002", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    world.add_node("node-002", tainted=True)
    slurm = mock.Mock()
    slurm.list_jobs.return_value = []
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE"), Node("cpu-002", "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    locker = NodeLocker(world.kube, mirror, world.cluster, "tandem", timeout=5)
    with locker._mutex("cpu-001"):  # cpu-001's prolog, stuck behind a PodDisruptionBudget
        began = time.monotonic()
        done = threading.Thread(target=locker.reconcile_all)
        done.start()
        done.join(timeout=3)
        assert not done.is_alive(), "the safety net waited for another node's prolog"
    assert time.monotonic() - began < 1.0
    unlocked = [c.args[0] for c in world.kube.merge_patch.call_args_list]
    assert unlocked == [f"/api/v1/namespaces/{SLURMD_NS}/pods/cpu-002"]
    assert [w.args[0] for w in world.taint_writes()] == ["/api/v1/nodes/node-002"]


def test_locking_reads_the_caches_and_wakes_when_the_pod_leaves() -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    began = time.monotonic()
    view = locker.acquire("cpu-001", 42, strict=True)
    took = time.monotonic() - began
    assert view.state == LockState.LOCKED_STRICT
    assert took < 1.0  # woken by the Pod leaving, 0.1 s after its eviction
    # No Pod, Node or slurmd Pod was read from the API: the informers hold them.
    world.kube.get.assert_not_called()


def test_a_slow_event_api_does_not_hold_the_node() -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    release = threading.Event()
    events = mock.Mock()
    events.record.side_effect = lambda *a: release.wait(10)
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5, events=events)
    done = threading.Event()

    def lock() -> None:
        locker.acquire("cpu-001", 42, strict=True)
        done.set()

    threading.Thread(target=lock).start()
    try:
        assert done.wait(3), "the lock waited for the Eviction Event to be posted"
        second = time.monotonic()
        locker.acquire("cpu-001", 43, strict=True)  # the node's mutex is free
        assert time.monotonic() - second < 1.0
    finally:
        release.set()
    assert "Evicted" in [c.args[2] for c in events.record.call_args_list]


def test_a_nodes_lock_and_unlock_are_events_on_the_node() -> None:
    """The lock history `kubectl tandem describe` shows, and `kubectl describe node` too."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    events = mock.Mock()
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5, events=events)
    locker.acquire("cpu-001", 42, strict=True)
    locker.acquire("cpu-001", 43, strict=True)  # already locked: no second Event
    locker.release("cpu-001", 42)
    locker.release("cpu-001", 43)
    locker._event_pool.shutdown(wait=True)
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


def _job(job_id: int, scheduler: str) -> JobStatus:
    ref = placeholder.PodRef("apps", f"pod-{job_id}", f"uid-{job_id}")
    name = placeholder.job_name(ref, scheduler)
    return JobStatus(Job(job_id, name, "PENDING", admin_comment=name))


def test_each_scheduler_gets_only_its_own_jobs_and_every_node() -> None:
    mirror = _mirror(synced=True)
    _, a = mirror.subscribe("sched-a")
    _, b = mirror.subscribe("sched-b")
    _, everyone = mirror.subscribe()
    mirror._publish(_job(1, "sched-a"))
    mirror._publish(_job(2, "sched-b"))
    mirror._publish(Node("cpu-002", "IDLE"))

    def drained(sub: Subscription) -> list[Any]:
        out = []
        while not sub.queue.empty():
            item = sub.queue.get_nowait()
            assert item is not None
            out.append(item[0].job_id if isinstance(item[0], JobStatus) else item[0].name)
        return out

    assert drained(a) == [1, "cpu-002"]
    assert drained(b) == [2, "cpu-002"]
    assert drained(everyone) == [1, 2, "cpu-002"]


def test_a_subscriber_that_falls_behind_is_cut_off_not_buffered_forever() -> None:
    mirror = _mirror(synced=True)
    sub = Subscription(mirror, "", backlog=3)
    mirror._subs.append(sub)
    for job_id in range(10):
        mirror._publish(_job(job_id, "sched-a"))
    assert sub.overflowed
    assert sub.queue.qsize() == 4  # three changes, then the end of the stream
    assert sub not in mirror._subs


def test_a_terminating_job_waits_on_the_informer_not_on_the_api() -> None:
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", "node-001"))
    mirror = _mirror(synced=True)
    mirror.job_submitted(7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job = mock.Mock(return_value=None)  # type: ignore[method-assign]
    servicer = SyncerServicer(mirror, mock.Mock(), mock.Mock(), world.cluster, terminating_timeout=5)
    servicer.active = True
    threading.Timer(0.2, world.remove_pod, ["apps/trainer"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    began = time.monotonic()
    answer = servicer.JobTerminating(
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=placeholder.job_name(ref, "tandem")
        ),
        context,
    )
    assert answer.pod_gone
    assert time.monotonic() - began < 1.0
    world.kube.get.assert_not_called()


@pytest.mark.parametrize(
    ("annotations", "node"),
    [
        ({keys.JOB_ID_ANNOTATION: "9"}, "node-001"),  # the Pod recorded another job
        ({}, "node-003"),  # bound away from this job's node (its record not cached yet)
    ],
    ids=["records another job", "bound elsewhere"],
)
def test_a_duplicate_jobs_end_does_not_wait_for_the_pod_of_another_job(
    annotations: dict[str, str], node: str
) -> None:
    """A submit retried after its answer was lost left two jobs; the scheduler cancels the one the
    Pod did not record. Before: its placeholder waited for the Pod (alive, on its own job) until
    KillWait and drained its node ("k8s: pod ... still running at KillWait"): three in one run."""
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", node, annotations=annotations))
    mirror = _mirror(synced=True)
    mirror.job_submitted(7, placeholder.job_name(ref, "tandem"))
    mirror._push(7, "cpu-001")
    mirror.slurm.get_job = mock.Mock(return_value=None)  # type: ignore[method-assign]
    slurm = mock.Mock()
    servicer = SyncerServicer(mirror, mock.Mock(), slurm, world.cluster, terminating_timeout=2)
    servicer.active = True
    world.add_pod(_slurmd("cpu-001", "node-001"))
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = servicer.JobTerminating(
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=placeholder.job_name(ref, "tandem")
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()


def test_the_callers_deadline_bounds_the_lock_wait() -> None:
    """The prolog waits 3 s: the syncer gives up a second before, drains the node with the Pod
    that stayed, and says so, instead of the call dying at its deadline with no reason."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_pod(_pod("web", "node-001"))
    world.add_node("node-001")
    world.kube.post.side_effect = KubeError(
        429, "TooManyRequests", "Cannot evict pod", ("disruption budget web-pdb",)
    )
    slurm = mock.Mock()
    locker = NodeLocker(
        world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=50, drain=slurm.drain_node
    )
    servicer = SyncerServicer(_mirror(synced=True), locker, slurm, world.cluster, terminating_timeout=5)
    servicer.active = True
    context = mock.Mock()
    context.time_remaining.return_value = 3.0
    context.abort.side_effect = RuntimeError
    began = time.monotonic()
    with pytest.raises(RuntimeError):
        servicer.AcquireNodeLock(
            syncer_pb2.AcquireNodeLockRequest(slurm_node="cpu-001", job_id=9, strict=True), context
        )
    assert 1.5 < time.monotonic() - began < 2.9
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "apps/web (its PodDisruptionBudget web-pdb allows no disruption)" in message
    node, reason = slurm.drain_node.call_args.args
    assert node == "cpu-001" and "could not lock node-001" in reason


def test_a_failing_node_listing_does_not_stop_the_jobs() -> None:
    """Before: a node poll error escaped poll_once, so a fresh WatchSlurm answered UNAVAILABLE
    and every scheduler stream stalled although the jobs had been read."""
    slurm = mock.Mock()
    slurm.list_jobs.return_value = [_job(1, "sched-a").job]
    slurm.list_nodes.side_effect = SlurmApiError("GET nodes: HTTP 500", 500)
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    assert mirror.synced
    assert mirror.job(1) is not None
    slurm.list_nodes.side_effect = None
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    mirror.poll_once()
    assert mirror.node("cpu-001") is not None


def test_a_group_job_waits_for_every_member_and_drains_only_the_nodes_one_still_holds() -> None:
    world = World()
    for slurm_node, node in (("cpu-001", "node-001"), ("cpu-002", "node-002")):
        world.add_pod(_slurmd(slurm_node, node))
    for name, node in (("train-0", "node-001"), ("train-1", "node-002")):
        world.add_pod(_pod(name, node, annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=name)
    mirror.slurm.get_job = mock.Mock(return_value=allocation)  # type: ignore[method-assign]
    mirror.refresh_job(7)
    slurm = mock.Mock()
    servicer = SyncerServicer(mirror, mock.Mock(), slurm, world.cluster, terminating_timeout=0.6)
    servicer.active = True
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = servicer.JobTerminating(
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=placeholder.job_name(ref, "tandem")
        ),
        context,
    )
    assert not answer.pod_gone
    assert list(answer.drained_slurm_nodes) == ["cpu-002"]
    slurm.drain_node.assert_called_once()
    node, reason = slurm.drain_node.call_args.args
    assert node == "cpu-002" and "apps/train-1 still running at KillWait (job 7)" in reason


def test_a_group_job_whose_members_all_left_answers_gone() -> None:
    world = World()
    world.add_pod(_pod("train-0", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    mirror.job_submitted(7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job = mock.Mock(return_value=None)  # type: ignore[method-assign]
    slurm = mock.Mock()
    servicer = SyncerServicer(mirror, mock.Mock(), slurm, world.cluster, terminating_timeout=5)
    servicer.active = True
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = servicer.JobTerminating(
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=placeholder.job_name(ref, "tandem")
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()


def test_a_group_job_started_push_publishes_its_whole_allocation() -> None:
    """The script runs on one node of the group's job: the push must not make that its only node."""
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    mirror.job_submitted(7, placeholder.job_name(ref, "tandem"))
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=name)
    mirror.slurm.get_job = mock.Mock(return_value=allocation)  # type: ignore[method-assign]
    status = mirror.job_started(7, "cpu-001")
    assert status.started and status.job.nodes == ("cpu-001", "cpu-002")


def test_a_lock_on_a_node_that_runs_nothing_is_counted_for_the_alert() -> None:
    world = World()
    idle = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    idle._state["cpu-001"] = LockState.LOCKED
    assert idle._count_idle() == {(): 1.0}
    running = Job(5, "plain", "RUNNING", nodes=("cpu-001",))
    busy = NodeLocker(world.kube, _mirror(synced=True, jobs=(running,)), world.cluster, "tandem", timeout=5)
    busy._state["cpu-001"] = LockState.LOCKED
    assert busy._count_idle() == {(): 0.0}
    unread = NodeLocker(world.kube, _mirror(synced=False), world.cluster, "tandem", timeout=5)
    unread._state["cpu-001"] = LockState.LOCKED
    assert unread._count_idle() == {(): 0.0}  # not read yet is not idle


def test_a_job_only_named_like_a_placeholder_gets_no_strict_lock_and_no_wait() -> None:
    """Strict locks (evicting what tolerates the lock) and the terminating wait are for Tandem's
    placeholders, known by the AdminComment only Slurm's administrators write, not by the name."""
    ref = placeholder.PodRef("apps", "web", "uid-1")
    name = placeholder.job_name(ref, "tandem")
    slurm = mock.Mock()
    slurm.list_jobs.return_value = [
        Job(5, name, "RUNNING", nodes=("cpu-001",)),
        Job(6, name, "RUNNING", nodes=("cpu-002",), admin_comment=name),
    ]
    slurm.list_nodes.return_value = []
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    servicer = SyncerServicer(mirror, mock.Mock(), slurm, mock.Mock(), terminating_timeout=5)
    assert not servicer._is_placeholder(5)
    assert servicer._is_placeholder(6)


def test_a_started_push_is_a_hint_checked_against_slurm() -> None:
    """Before: JobStarted marked the job started (and so bound its Pod) on the hook's word. Now the
    job is read from slurmrestd: it must be the placeholder the caller's credential names and hold
    the node the caller speaks for."""
    ref = placeholder.PodRef("apps", "web", "uid-1")
    name = placeholder.job_name(ref, "tandem")
    mirror = _mirror(synced=True)
    servicer = SyncerServicer(mirror, mock.Mock(), mock.Mock(), mock.Mock(), terminating_timeout=5)
    servicer.active = True

    def started(job: Job, node: str) -> grpc.StatusCode | None:
        mirror.slurm.get_job = mock.Mock(return_value=job)  # type: ignore[method-assign]
        context = mock.Mock()
        context.abort.side_effect = RuntimeError
        try:
            servicer.JobStarted(
                syncer_pb2.JobStartedRequest(job_id=7, slurm_node=node, placeholder=name), context
            )
        except RuntimeError:
            return context.abort.call_args.args[0]
        return None

    forged = Job(7, name, "RUNNING", nodes=("cpu-001",))  # named like it; no AdminComment
    assert started(forged, "cpu-001") == grpc.StatusCode.PERMISSION_DENIED
    real = Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=name)
    assert started(real, "cpu-002") == grpc.StatusCode.PERMISSION_DENIED
    status = mirror.job(7)
    assert status is not None and not status.started
    assert started(real, "cpu-001") is None
    status = mirror.job(7)
    assert status is not None and status.started


def test_a_slurmd_pod_on_no_node_yet_does_not_fail_the_listing() -> None:
    """Before: ListNodeLocks answered UNKNOWN for every node when one slurmd Pod was not on a Node."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    unscheduled = _slurmd("cpu-002", "")
    world.add_pod(unscheduled)
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    views = {v.slurm_node: (v.kube_node, v.state) for v in locker.list()}
    assert views == {"cpu-001": ("node-001", LockState.LOCKED), "cpu-002": ("", LockState.FALSE)}


def test_unlocking_one_slurm_node_keeps_the_taint_another_on_the_same_node_needs() -> None:
    """The lock taint is the Node's: two Slurm nodes hosted on one Node share it. Before, the
    first to unlock removed it from under the other's running job."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001", LockState.LOCKED))
    world.add_pod(_slurmd("cpu-002", "node-001", LockState.LOCKED))
    world.add_node("node-001", tainted=True)
    locker = NodeLocker(world.kube, _mirror(synced=True), world.cluster, "tandem", timeout=5)
    assert locker.release("cpu-002", 8).state == LockState.FALSE
    assert world.taint_writes() == []
    world.kube.merge_patch.assert_called_once()  # cpu-002's annotation, and nothing else


def test_whether_a_pod_may_stay_is_never_asked_of_slurm_under_the_informers_lock() -> None:
    """Before: the wait for Pods to leave re-judged them under the Pod informer's lock, and a
    Tandem-looking Pod whose job the mirror did not know sent a slurmrestd call from there, which
    held up every Pod event of the cluster for as long as slurmrestd took (issue 19)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    impostor = _pod(
        "lookalike",
        "node-001",
        annotations={keys.JOB_ID_ANNOTATION: "77"},
    )
    impostor["spec"]["schedulerName"] = "tandem"
    impostor["spec"]["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]
    world.add_pod(impostor)
    world.add_pod(_pod("web", "node-001"))  # leaves after its eviction, waking the wait
    world.add_node("node-001")
    mirror = _mirror(synced=True)
    under_lock: list[bool] = []

    def refresh(job_id: int) -> None:
        under_lock.append(world.cluster.pods._lock._is_owned())  # type: ignore[attr-defined]
        return None  # Slurm knows no job 77: not Tandem's, it may not stay

    mirror.refresh_job = refresh  # type: ignore[method-assign]
    locker = NodeLocker(world.kube, mirror, world.cluster, "tandem", timeout=5)
    view = locker.acquire("cpu-001", 42, strict=True, timeout=3)
    assert view.state == LockState.LOCKED_STRICT
    assert under_lock and not any(under_lock)
