"""The syncer's lock calls over real gRPC, served as tandem.syncer.main serves them (grpc.aio):
hundreds of prologs waiting for their Nodes hold no thread (issue 40), each is answered when the
node sync settles its lock, its deadline ends it as before, and a caller that goes away takes its
waiter with it. A WatchSlurm stream waits without a thread too, and unsubscribes when dropped."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tandem import serving
from tandem.keys import LockState
from tandem.kube import KubeError
from tandem.slurm.models import Job, JobStatus
from tandem.syncer.main import GRPC_WORKERS, grpc_service, serve_as_leader
from tandem.syncer.waiters import node_key
from tandem.v1 import lock_pb2, syncer_pb2, syncer_pb2_grpc
from tests.unit.syncer_world import Stack, World, _mirror, _pod, _slurmd, node_token_for

NODE_TOKEN = node_token_for("cpu-001")
WAITING_CALLS = 200


class Served:
    """cpu-001's Node with a Pod on it whose PodDisruptionBudget refuses every eviction: a lock
    waits. The syncer's servicer over it, served by tandem.syncer.main's gRPC server."""

    def __init__(self) -> None:
        self.world = World()
        self.world.add_pod(_slurmd("cpu-001", "node-001"))
        self.world.add_pod(_pod("web", "node-001"))
        self.world.add_node("node-001")
        self.refuse_evictions()
        self.stack = Stack(self.world, _mirror(synced=True))
        self.server: serving.GrpcServer = grpc_service("127.0.0.1:0", None, self.stack.servicer)
        self.server.start()
        serve_as_leader(self.stack.servicer, self.server)(True)
        self.channel = serving.channel(f"127.0.0.1:{self.server.port}", None)
        self.stub = syncer_pb2_grpc.SyncerServiceStub(self.channel)

    def refuse_evictions(self) -> None:
        self.world.kube.evict_refusal = KubeError(
            429, "TooManyRequests", "Cannot evict pod", ("disruption budget web-pdb",)
        )

    def let_the_pod_go(self) -> None:
        self.world.kube.evict_refusal = None
        self.stack.queue.add("cpu-001")  # its refused eviction is otherwise asked again in 2 s

    def acquire(self, job_id: int, timeout: float) -> Any:
        request = syncer_pb2.AcquireNodeLockRequest(
            slurm_node="cpu-001", job_id=job_id, node_token=NODE_TOKEN
        )
        return self.stub.AcquireNodeLock.future(request, timeout=timeout)

    def waiting(self) -> int:
        return self.world.cluster.waiters.waiting_on(node_key("cpu-001"))

    def close(self) -> None:
        self.channel.close()
        self.server.stop(0)
        self.stack.close()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.close()


def _until(what: str, ok: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _pool_threads() -> int:
    """The gRPC server's worker threads (tandem.serving names them grpc_<n>)."""
    return sum(1 for t in threading.enumerate() if t.name.startswith("grpc_"))


def test_many_waiting_lock_calls_hold_no_thread_and_are_answered_once_the_node_is_locked(
    served: Served,
) -> None:
    """Before: the syncer served with 512 threads, one held by each waiting prolog (and the 513th
    waited for one)."""
    before = threading.active_count()
    calls = [served.acquire(job_id, timeout=30) for job_id in range(1, WAITING_CALLS + 1)]
    _until(f"{WAITING_CALLS} calls waiting", lambda: served.waiting() == WAITING_CALLS, timeout=10.0)
    time.sleep(0.3)  # each waits on its Node; none is answered
    assert not any(c.done() for c in calls)
    assert _pool_threads() <= GRPC_WORKERS
    assert threading.active_count() - before <= GRPC_WORKERS + 4, [t.name for t in threading.enumerate()]
    served.let_the_pod_go()
    replies = [c.result(timeout=10) for c in calls]
    assert {r.lock.state for r in replies} == {lock_pb2.LOCK_STATE_LOCKED}
    assert served.world.lock_of("cpu-001") == LockState.LOCKED.value
    assert served.waiting() == 0


def test_a_waiting_lock_call_is_answered_as_soon_as_its_node_is_locked(served: Served) -> None:
    call = served.acquire(7, timeout=30)
    _until("the call waiting", lambda: served.waiting() == 1)
    time.sleep(0.3)
    assert not call.done()
    began = time.monotonic()
    served.let_the_pod_go()
    assert call.result(timeout=5).lock.state == lock_pb2.LOCK_STATE_LOCKED
    assert time.monotonic() - began < 2.0  # woken by the caches, not by a recheck


def test_a_lock_call_whose_node_is_never_settled_ends_at_its_deadline_as_before(served: Served) -> None:
    """No pass over the node (the node sync stopped): the call gives up a margin before the
    caller's deadline, UNAVAILABLE (the prolog asks again), and leaves no waiter behind."""
    served.stack.queue.shutdown()
    began = time.monotonic()
    with pytest.raises(grpc.RpcError) as refused:
        served.acquire(7, timeout=3.0).result()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert re.search(r"cpu-001 not locked within \ds", refused.value.details() or "")
    assert 2.0 < time.monotonic() - began < 3.0
    assert served.waiting() == 0


def test_a_lock_call_whose_pods_do_not_leave_by_its_deadline_fails_and_drains_as_before(
    served: Served,
) -> None:
    began = time.monotonic()
    with pytest.raises(grpc.RpcError) as refused:
        served.acquire(7, timeout=3.0).result()
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "still there: apps/web (its PodDisruptionBudget web-pdb" in (refused.value.details() or "")
    assert time.monotonic() - began < 3.0
    node, reason = served.stack.slurm.drain_node.call_args.args
    assert node == "cpu-001" and "could not lock node-001" in reason
    assert served.waiting() == 0


def test_a_caller_that_goes_away_takes_its_waiter_with_it(served: Served) -> None:
    call = served.acquire(7, timeout=30)
    _until("the call waiting", lambda: served.waiting() == 1)
    call.cancel()
    _until("its waiter gone", lambda: served.waiting() == 0, timeout=2.0)


def test_a_deadline_shorter_than_the_wait_ends_the_call_and_its_waiter(served: Served) -> None:
    """A caller's deadline under the syncer's own margin: the caller gives up first, and the
    call's coroutine is cancelled with it, not left waiting out its own time."""
    served.stack.queue.shutdown()
    with pytest.raises(grpc.RpcError) as ended:
        served.acquire(7, timeout=1.0).result()
    assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _until("its waiter gone", lambda: served.waiting() == 0, timeout=1.0)


def test_a_standby_answers_unavailable_to_every_kind_of_call(served: Served) -> None:
    serve_as_leader(served.stack.servicer, served.server)(False)
    health = health_pb2_grpc.HealthStub(served.channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as waiting:  # a coroutine
        served.acquire(7, timeout=5).result()
    with pytest.raises(grpc.RpcError) as plain:  # a method on the thread pool
        served.stub.GetNodeLock(syncer_pb2.GetNodeLockRequest(slurm_node="cpu-001"), timeout=5)
    with pytest.raises(grpc.RpcError) as stream:  # an async generator
        list(served.stub.WatchSlurm(syncer_pb2.WatchSlurmRequest(), timeout=5))
    for refused in (waiting, plain, stream):
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "standby" in (refused.value.details() or "")
    assert served.stack.holds.holds_of("cpu-001") == []


def test_watch_slurm_streams_hold_no_thread_and_unsubscribe_when_dropped(served: Served) -> None:
    """More open streams than the server has threads, and a plain call is still answered at once:
    no stream holds a thread while it waits for changes (a thread each, before)."""
    mirror = served.stack.mirror
    before = threading.active_count()
    streams = [
        served.stub.WatchSlurm(syncer_pb2.WatchSlurmRequest(), timeout=30) for _ in range(GRPC_WORKERS + 8)
    ]
    for stream in streams:
        while not next(stream).snapshot_done:
            pass
    began = time.monotonic()
    served.stub.GetNodeLock(syncer_pb2.GetNodeLockRequest(slurm_node="cpu-001"), timeout=5)
    assert time.monotonic() - began < 1.0
    assert threading.active_count() - before <= GRPC_WORKERS + 4
    mirror.broker.publish(JobStatus(Job(job_id=42, name="train", state="RUNNING", nodes=("cpu-001",))))
    assert all(next(s).job.job_id == 42 for s in streams)
    for stream in streams:
        stream.cancel()
    _until("every stream unsubscribed", lambda: not mirror.broker._subs, timeout=2.0)


def test_a_batched_stream_gets_a_batch_as_one_message_woken_from_the_publisher_s_thread(
    served: Served,
) -> None:
    """The batched protocol over grpc.aio: the stream waits on the loop, a batch made on another
    thread (a poll, a push) wakes it, and it goes out whole, in one message."""
    mirror = served.stack.mirror
    stream = served.stub.WatchSlurm(syncer_pb2.WatchSlurmRequest(batched=True), timeout=30)
    while not next(stream).snapshot_done:
        pass

    def publish() -> None:
        with mirror.broker.batch():
            for job_id in (42, 43, 44):
                mirror.broker.publish(
                    JobStatus(Job(job_id=job_id, name="train", state="RUNNING", nodes=("cpu-001",)))
                )

    publisher = threading.Thread(target=publish)
    publisher.start()
    publisher.join()
    message = next(stream)
    assert [c.job.job_id for c in message.changes] == [42, 43, 44]
    assert not message.snapshot_done
    stream.cancel()
    _until("the stream unsubscribed", lambda: not mirror.broker._subs, timeout=2.0)
