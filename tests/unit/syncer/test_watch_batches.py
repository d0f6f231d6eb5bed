"""The syncer's WatchSlurm stream in batches (issue 40): what one poll of Slurm, or one call such as
JobStarted, changed goes to each scheduler in one message, however many jobs and nodes it holds;
the snapshot ends with snapshot_done; a client that does not ask for batches still gets one change
a message; a push during a poll goes out at once and the poll never sends a job back to an older
state."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast
from unittest import mock

import pytest

from tandem import placeholder
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.slurm.wire import changes_of
from tandem.syncer import stream as stream_module
from tandem.syncer.broker import Batch
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.service import SyncerServicer
from tandem.v1 import slurm_pb2, syncer_pb2
from tests.unit.servicer_calls import call, steps_done
from tests.unit.syncer_world import JOB_KEY, bound, take_now, token_for

SCHEDULER = "tandem"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class FakeSlurm:
    """Slurm as slurmrestd lists it: every job whole (no light listing), and nodes."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.nodes: dict[str, Node] = {}

    def list_jobs(self, changed_since: int | None = None) -> list[Job]:
        return list(self.jobs.values())

    def all_job_states(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        raise SlurmApiError("GET jobs/state: not served", 404)

    def list_nodes(self, changed_since: int | None = None) -> list[Node]:
        return list(self.nodes.values())

    def get_job_components(self, job_id: int) -> list[Job]:
        return [self.jobs[job_id]] if job_id in self.jobs else []


def _placeholder(job_id: int, scheduler: str = SCHEDULER, state: str = "PENDING") -> Job:
    name = placeholder.job_name(placeholder.PodRef("apps", f"pod-{job_id}", f"uid-{job_id}"), scheduler)
    nodes = ("gpu-000",) if state != "PENDING" else ()
    return Job(job_id, name, state, nodes=nodes, partition="gpu", admin_comment=bound(name), priority=100)


def _setup(jobs: int = 0, nodes: int = 1) -> tuple[FakeSlurm, SlurmMirror, SyncerServicer]:
    slurm = FakeSlurm()
    slurm.jobs = {j: _placeholder(j) for j in range(1, jobs + 1)}
    slurm.nodes = {f"gpu-{i:03d}": Node(f"gpu-{i:03d}", "IDLE") for i in range(nodes)}
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    cluster = mock.Mock()
    cluster.kube_node_of.side_effect = lambda name: f"node-{name}"
    servicer = SyncerServicer(
        mirror, mock.Mock(), mock.Mock(), cluster, terminating_timeout=5, job_keys=lambda: [JOB_KEY]
    )
    servicer.active = True
    return slurm, mirror, servicer


class Stream:
    """A WatchSlurm call, driven as grpc.aio drives it (an async generator, on an event loop of its
    own): the snapshot read at once, then `rest()` reads what was queued since and ends the call
    (its subscription closed, as when the caller goes away: what was queued before still goes)."""

    def __init__(self, servicer: SyncerServicer, mirror: SlurmMirror, **request: Any) -> None:
        context = mock.Mock()
        context.abort.side_effect = RuntimeError
        self._loop = asyncio.new_event_loop()
        _streams.append(self)
        self._messages = servicer.WatchSlurm(syncer_pb2.WatchSlurmRequest(**request), context)
        self.snapshot: list[syncer_pb2.WatchSlurmResponse] = []
        while not self.snapshot or not self.snapshot[-1].snapshot_done:
            self.snapshot.append(self._next())
            if len(self.snapshot) == 1:
                self._sub = mirror.broker._subs[-1]  # subscribed before its first message

    def _next(self) -> syncer_pb2.WatchSlurmResponse:
        return self._loop.run_until_complete(asyncio.wait_for(anext(self._messages), timeout=5))

    def rest(self) -> list[syncer_pb2.WatchSlurmResponse]:
        self._sub.close()
        out: list[syncer_pb2.WatchSlurmResponse] = []
        try:
            while True:
                out.append(self._next())
        except StopAsyncIteration:
            return out
        finally:
            self.close()

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self._messages.aclose())
            self._loop.close()


_streams: list[Stream] = []


@pytest.fixture(autouse=True)
def _streams_closed() -> Iterator[None]:
    yield
    while _streams:
        _streams.pop().close()


def _ids(msg: syncer_pb2.WatchSlurmResponse) -> list[int | str]:
    return [c.job.job_id if c.HasField("job") else c.node.name for c in msg.changes]


def _started(batch: Batch | None) -> list[tuple[int, bool]]:
    assert batch is not None
    return [(c.job_id, c.started) for c, _ in batch if isinstance(c, JobStatus)]


def test_a_poll_with_k_changes_is_one_message_with_k_changes() -> None:
    slurm, mirror, servicer = _setup(nodes=3)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    k = 40
    for j in range(1, k + 1):
        slurm.jobs[j] = _placeholder(j)
    slurm.nodes["gpu-001"] = Node("gpu-001", "ALLOCATED")
    mirror.poll_once()
    [msg] = stream.rest()
    # Each new pending job once (read, then placed in its queue: the later state), then the node.
    assert _ids(msg) == [*range(1, k + 1), "gpu-001"]
    assert [c.job.queue_position for c in msg.changes[:k]] == list(range(1, k + 1))
    assert not msg.snapshot_done
    assert all(not c.trace_context for c in msg.changes), "what the poll found carries no trace"


def test_polls_are_a_message_each_and_a_quiet_poll_none() -> None:
    slurm, mirror, servicer = _setup(jobs=5, nodes=2)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    for j in slurm.jobs:
        slurm.jobs[j] = replace(slurm.jobs[j], state="RUNNING", nodes=("gpu-000",))
    slurm.nodes["gpu-000"] = Node("gpu-000", "ALLOCATED")
    mirror.poll_once()
    mirror.poll_once()  # nothing changed
    for j in slurm.jobs:
        slurm.jobs[j] = replace(slurm.jobs[j], state="COMPLETED")
    mirror.poll_once()
    messages = stream.rest()
    assert [len(m.changes) for m in messages] == [6, 5]
    assert [c.job.state for c in messages[1].changes] == [slurm_pb2.JOB_STATE_COMPLETED] * 5


def test_each_scheduler_gets_its_own_part_of_a_batch_and_every_node() -> None:
    slurm, mirror, _ = _setup(nodes=1)
    _, a = mirror.broker.subscribe("sched-a")
    _, b = mirror.broker.subscribe("sched-b")
    slurm.jobs = {1: _placeholder(1, "sched-a"), 2: _placeholder(2, "sched-b"), 3: _placeholder(3, "sched-a")}
    slurm.nodes["gpu-000"] = Node("gpu-000", "MIXED")
    mirror.poll_once()

    def batches(sub: Any) -> list[list[int | str]]:
        out = []
        while not sub.queue.empty():
            batch = take_now(sub) or []
            out.append([c.job_id if isinstance(c, JobStatus) else c.name for c, _ in batch])
        return out

    assert batches(a) == [[1, 3, "gpu-000"]]
    assert batches(b) == [[2, "gpu-000"]]


def test_the_snapshot_is_one_message_ending_with_snapshot_done() -> None:
    _, mirror, servicer = _setup(jobs=7, nodes=2)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    [msg] = stream.snapshot
    assert msg.snapshot_done
    assert sorted(map(str, _ids(msg))) == sorted(["gpu-000", "gpu-001", *map(str, range(1, 8))])


def test_an_empty_snapshot_still_ends() -> None:
    _, mirror, servicer = _setup(nodes=0)
    stream = Stream(servicer, mirror, batched=True)
    assert [(len(m.changes), m.snapshot_done) for m in stream.snapshot] == [(0, True)]


def test_a_large_snapshot_is_split_and_only_its_last_message_says_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A message over 4 MiB is refused by a gRPC client not told otherwise: a snapshot of
    thousands of jobs goes in a few bounded messages."""
    _, mirror, servicer = _setup(jobs=50, nodes=0)
    limit = 1000
    monkeypatch.setattr(stream_module, "MESSAGE_BYTES", limit)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    assert len(stream.snapshot) > 3
    assert [m.snapshot_done for m in stream.snapshot] == [False] * (len(stream.snapshot) - 1) + [True]
    assert all(m.ByteSize() <= limit for m in stream.snapshot)
    assert sorted(j for m in stream.snapshot for j in _ids(m)) == list(range(1, 51))


def test_a_client_that_does_not_ask_for_batches_gets_one_change_a_message() -> None:
    """What a scheduler older than batching reads (an upgrade rolls the syncer and the scheduler
    one after the other): a batched snapshot would read to it as an empty one, every job gone."""
    slurm, mirror, servicer = _setup(nodes=1)
    slurm.jobs = {j: _placeholder(j, state="RUNNING") for j in (1, 2)}
    mirror.poll_once()
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER)
    assert [(m.WhichOneof("change"), m.snapshot_done) for m in stream.snapshot] == [
        ("node", False),
        ("job", False),
        ("job", False),
        (None, True),
    ]
    assert not any(m.changes for m in stream.snapshot)
    slurm.jobs[3] = _placeholder(3, state="RUNNING")
    slurm.jobs[4] = _placeholder(4, state="RUNNING")
    mirror.poll_once()
    rest = stream.rest()
    assert [m.job.job_id for m in rest] == [3, 4]
    # The client side reads both shapes alike.
    assert [c.job.job_id for m in rest for c in changes_of(m)] == [3, 4]


def test_a_started_call_is_one_message_carrying_its_trace_context() -> None:
    """The call reads the job from Slurm (a change: now running) and pushes its start: one message,
    the job as started, with the call's trace context (the scheduler's bind span's parent)."""
    slurm, mirror, servicer = _setup(nodes=1)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    job = replace(_placeholder(7), state="RUNNING", nodes=("gpu-000",))
    slurm.jobs[7] = job
    with mock.patch("tandem.syncer.broker.tracing.inject", return_value={"traceparent": TRACEPARENT}):
        servicer.JobStarted(
            syncer_pb2.JobStartedRequest(
                job_id=7, slurm_node="gpu-000", placeholder=job.name, job_token=token_for(job.name)
            ),
            mock.Mock(),
        )
    [msg] = stream.rest()
    [change] = msg.changes
    assert change.job.job_id == 7 and change.job.script_started
    assert dict(change.trace_context) == {"traceparent": TRACEPARENT}


def test_a_terminating_call_is_one_message_though_its_steps_run_on_a_worker_thread() -> None:
    """JobTerminating is a coroutine (grpc.aio) whose steps run on the server's threads: its check
    (the job read from Slurm: now running) and its push (terminating) are still one message, the
    batch opened and sent within the step, before the call waits for the job's Pods."""
    slurm, mirror, servicer = _setup(nodes=1)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    job = replace(_placeholder(8), state="RUNNING", nodes=("gpu-000",))
    slurm.jobs[8] = job
    cast(Any, servicer.locks).killwait_steps.return_value = steps_done((True, []))
    context = mock.Mock()
    context.time_remaining.return_value = 30.0
    with mock.patch("tandem.syncer.broker.tracing.inject", return_value={"traceparent": TRACEPARENT}):
        answer = call(
            servicer.JobTerminating,
            syncer_pb2.JobTerminatingRequest(
                job_id=8, slurm_node="gpu-000", placeholder=job.name, job_token=token_for(job.name)
            ),
            context,
        )
    assert answer.pod_gone
    [msg] = stream.rest()
    [change] = msg.changes
    assert change.job.job_id == 8 and change.job.terminating
    assert change.job.state == slurm_pb2.JOB_STATE_RUNNING
    assert dict(change.trace_context) == {"traceparent": TRACEPARENT}


def test_a_terminating_call_carries_slurms_word_that_the_job_was_preempted() -> None:
    """The caller's check reads the job again when its script says it stops: the scheduler hears
    PREEMPTED with the push (and writes the Pods' DisruptionTarget), not only once a poll sees it."""
    slurm, mirror, servicer = _setup(nodes=1)
    job = replace(_placeholder(8), state="RUNNING", nodes=("gpu-000",))
    slurm.jobs[8] = job
    mirror.poll_once()  # the mirror knows it running
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    slurm.jobs[8] = replace(job, state="PREEMPTED", flags=("COMPLETING",))
    cast(Any, servicer.locks).killwait_steps.return_value = steps_done((True, []))
    context = mock.Mock()
    context.time_remaining.return_value = 30.0
    request = syncer_pb2.JobTerminatingRequest(
        job_id=8, slurm_node="gpu-000", placeholder=job.name, job_token=token_for(job.name)
    )
    assert call(servicer.JobTerminating, request, context).pod_gone
    [msg] = stream.rest()
    [change] = msg.changes
    assert change.job.terminating and change.job.state == slurm_pb2.JOB_STATE_PREEMPTED


def test_a_call_s_trace_context_stays_on_its_own_change_in_a_batch() -> None:
    slurm, mirror, servicer = _setup(jobs=3, nodes=1)
    stream = Stream(servicer, mirror, scheduler_name=SCHEDULER, batched=True)
    for j in (1, 2, 3):
        slurm.jobs[j] = replace(slurm.jobs[j], state="RUNNING", nodes=("gpu-000",))
    with mirror.broker.batch():
        mirror.poll_once()  # nested: the outer batch sends
        with mock.patch("tandem.syncer.broker.tracing.inject", return_value={"traceparent": TRACEPARENT}):
            mirror.job_started(2, "gpu-000")
        slurm.jobs[2] = replace(slurm.jobs[2], state="COMPLETING")
        mirror.poll_once()  # job 2 changed again, found by the poll: the call's trace stays on it
    [msg] = stream.rest()
    traces = {c.job.job_id: dict(c.trace_context) for c in msg.changes}
    assert traces == {1: {}, 2: {"traceparent": TRACEPARENT}, 3: {}}


def test_a_push_during_a_poll_goes_out_at_once_and_the_poll_never_steps_the_job_back() -> None:
    """The poll read job 5 running, not started, and holds it in its batch; the script's push
    (another thread) marks it started and is sent at once. The poll's batch, sent after, must carry
    the job as the mirror has it then: a stale 'not started' would undo the push for the scheduler
    (and no later poll would send the job again: nothing changed in the mirror)."""
    slurm, mirror, _ = _setup(nodes=1)
    _, sub = mirror.broker.subscribe(SCHEDULER)
    slurm.jobs[5] = _placeholder(5, state="RUNNING")
    with mirror.broker.batch():
        mirror.poll_once()
        assert sub.queue.empty(), "the poll's batch is not sent until it ends"
        pusher = threading.Thread(target=mirror.job_started, args=(5, "gpu-000"))
        pusher.start()
        pusher.join()
        assert _started(take_now(sub)) == [(5, True)]
    assert _started(take_now(sub)) == [(5, True)]
    assert sub.queue.empty()


def test_a_subscriber_behind_by_more_than_its_backlog_is_cut_off_but_a_large_batch_is_not() -> None:
    slurm, mirror, _ = _setup(nodes=0)
    _, sub = mirror.broker.subscribe(SCHEDULER)
    sub.backlog = 10
    slurm.jobs = {j: _placeholder(j) for j in range(1, 31)}
    mirror.poll_once()  # 30 changes: more than the backlog, but the subscriber is not behind
    assert not sub.overflowed
    slurm.jobs[31] = _placeholder(31)
    mirror.poll_once()  # now it is: 30 waiting, and more
    assert sub.overflowed
