"""The scheduler's view of Slurm jobs, fed by the syncer's stream, across a broken stream; each
message a batch, recorded in one go and then told to the controller job by job."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import grpc

from tandem import placeholder
from tandem.scheduler.jobs import JobTracker
from tandem.slurm.models import JobStatus
from tandem.slurm.wire import job_from_proto
from tandem.v1 import slurm_pb2, syncer_pb2
from tests.unit.scheduler.scheduler_world import report

SCHEDULER = "tandem-test"


class Broken(grpc.RpcError):  # type: ignore[misc]
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


def _job(job_id: int, state: Any = slurm_pb2.JOB_STATE_RUNNING) -> Any:
    ref = placeholder.PodRef("default", f"pod-{job_id}", f"uid-{job_id}")
    name = placeholder.job_name(ref, SCHEDULER)
    return slurm_pb2.SlurmJob(job_id=job_id, name=name, admin_comment=name, state=state)


class FakeSyncer:
    """Serves one scripted stream per WatchSlurm call; the last call ends the test."""

    def __init__(self, streams: list[list[Any]], stop: threading.Event) -> None:
        self.streams = streams
        self.stop = stop

    def PlaceholderSubmitted(self, request: Any, timeout: float) -> Any:
        raise AssertionError("not part of these tests")

    def WatchSlurm(self, request: Any, wait_for_ready: bool) -> Iterator[Any]:
        messages = self.streams.pop(0)
        last = not self.streams
        for i, msg in enumerate(messages):
            if last and i == len(messages) - 1:
                self.stop.set()
            yield msg
        if not last:
            raise Broken()


def _snapshot(*jobs: Any) -> list[Any]:
    return [
        syncer_pb2.WatchSlurmResponse(
            changes=[syncer_pb2.SlurmChange(job=j) for j in jobs], snapshot_done=True
        )
    ]


def _batch(*changes: Any) -> Any:
    return syncer_pb2.WatchSlurmResponse(changes=list(changes))


def _run(streams: list[list[Any]]) -> tuple[JobTracker, list[tuple[int, str]]]:
    stop = threading.Event()
    changes: list[tuple[int, str]] = []
    tracker = JobTracker(
        SCHEDULER, FakeSyncer(streams, stop), lambda pod, job: changes.append((job.job_id, job.state_name))
    )
    tracker.run(stop)
    return tracker, changes


def test_a_job_that_vanished_while_the_stream_was_down_is_reported_gone() -> None:
    tracker, changes = _run([_snapshot(_job(1), _job(2)), _snapshot(_job(2))])
    gone = tracker.get(1)
    assert gone is not None and gone.gone
    assert (1, "GONE") in changes
    still = tracker.get(2)
    assert still is not None and still.running


def test_jobs_still_there_after_a_reconnect_are_not_reported_gone() -> None:
    _, changes = _run([_snapshot(_job(1)), _snapshot(_job(1))])
    assert [state for _, state in changes] == ["RUNNING"] * 2


def test_a_job_only_named_like_a_placeholder_is_not_the_pods() -> None:
    """A Slurm user may name a job `tandem:<scheduler>/<ns>/<pod>/<uid>`; only Tandem's submit
    (as Slurm's administrator) writes the AdminComment. Before: the name alone made it the Pod's
    job, which the scheduler recorded, bound the Pod to, or cancelled as root."""
    forged = _job(5)
    forged.admin_comment = ""
    tracker, changes = _run([_snapshot(forged, _job(6))])
    assert tracker.get(5) is None
    assert tracker.for_pod_key("default/pod-5") == []
    assert changes == [(6, "RUNNING")]


def test_a_slurm_node_whose_node_becomes_known_wakes_the_pods_waiting_to_bind_there() -> None:
    """A Pod whose job started on a Slurm node the syncer had not mapped yet waits (runner.NotYet,
    a growing backoff); before, only a move woke it, not the mapping first becoming known."""
    stop = threading.Event()
    woken: list[str] = []
    node = slurm_pb2.SlurmNode(name="cpu-009", kube_node="node-009")
    streams = [[*_snapshot(_job(1)), _batch(syncer_pb2.SlurmChange(node=node))]]
    tracker = JobTracker(SCHEDULER, FakeSyncer(streams, stop), lambda pod, job: None, woken.append)
    tracker.run(stop)
    assert woken == ["cpu-009"]
    assert tracker.kube_node("cpu-009") == "node-009"


def test_how_long_a_job_has_been_in_its_phase_restarts_when_the_phase_changes() -> None:
    """What decide reads to leave a passing pending or allocated state unwritten (issue 22)."""
    tracker = JobTracker(SCHEDULER, mock.Mock(), lambda pod, job: None)
    assert tracker.in_phase_for(1) == float("inf")
    pending = job_from_proto(_job(1, slurm_pb2.JOB_STATE_PENDING))
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=100.0):
        report(tracker, pending)
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=101.5):
        report(tracker, replace(pending, job=replace(pending.job, state_reason="Resources")))
        assert tracker.in_phase_for(1) == 1.5, "a new reason is the same phase"
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=102.0):
        report(tracker, replace(pending, job=replace(pending.job, state="RUNNING", nodes=("cpu-001",))))
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=102.25):
        assert tracker.in_phase_for(1) == 0.25


class CountingLock:
    """The tracker's lock, counting how often it is taken."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> None:
        self._lock.acquire()
        self.taken += 1

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def _started(job_id: int, **flags: Any) -> Any:
    job = _job(job_id)
    job.script_started = True
    for name, value in flags.items():
        setattr(job, name, value)
    return job


def test_a_batch_is_recorded_under_one_lock_then_each_changed_job_reaches_the_controller() -> None:
    """One wake-up, one hold of the lock for the batch, not one a change. The controller still
    hears of every job, with what makes it urgent (started, terminating, ended), and each callback
    finds the whole batch recorded already."""
    stop = threading.Event()
    seen: list[tuple[int, bool, bool, bool]] = []
    recorded_when_told: list[list[int]] = []
    batch = _batch(
        syncer_pb2.SlurmChange(job=_started(1)),
        syncer_pb2.SlurmChange(job=_started(2, terminating=True)),
        syncer_pb2.SlurmChange(job=_job(3, slurm_pb2.JOB_STATE_COMPLETED)),
        syncer_pb2.SlurmChange(job=_job(4, slurm_pb2.JOB_STATE_PENDING)),
        syncer_pb2.SlurmChange(node=slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-001")),
    )
    lock = CountingLock()

    def on_change(pod: placeholder.PodRef, job: JobStatus) -> None:
        seen.append((job.job_id, job.started, job.terminating, job.ended))
        recorded_when_told.append(sorted(tracker._jobs))  # not get(): it would count

    tracker = JobTracker(SCHEDULER, FakeSyncer([[*_snapshot(_job(9)), batch]], stop), on_change)
    tracker._lock = lock  # type: ignore[assignment]
    tracker.run(stop)
    assert seen == [
        (9, False, False, False),
        (1, True, False, False),
        (2, True, True, False),
        (3, False, False, True),
        (4, False, False, False),
    ]
    # The snapshot, its look for jobs missing from it, and the batch of five (one a change before).
    assert lock.taken == 3
    assert recorded_when_told[1:] == [[1, 2, 3, 4, 9]] * 4
    assert tracker.kube_node("cpu-001") == "node-001"


def test_a_batch_s_trace_context_stays_with_its_own_job() -> None:
    """The bind of job 2's Pod is a child of the call that started it; jobs 1 and 3, found started
    by the poll in the same batch, have no parent to claim."""
    stop = threading.Event()
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    batch = _batch(
        syncer_pb2.SlurmChange(job=_started(1)),
        syncer_pb2.SlurmChange(job=_started(2), trace_context={"traceparent": traceparent}),
        syncer_pb2.SlurmChange(job=_started(3)),
    )
    tracker = JobTracker(SCHEDULER, FakeSyncer([[*_snapshot(), batch]], stop), lambda pod, job: None)
    tracker.run(stop)
    assert tracker.trace_context == {2: {"traceparent": traceparent}}
    assert set(tracker.started_at) == {1, 2, 3}


def test_a_snapshot_over_several_messages_is_whole_before_missing_jobs_are_reported_gone() -> None:
    """A large snapshot comes in a few messages; only the last says snapshot_done, and a job in an
    earlier one is not taken for one that vanished."""
    first = _batch(syncer_pb2.SlurmChange(job=_job(1)))
    last = _batch(syncer_pb2.SlurmChange(job=_job(2)))
    last.snapshot_done = True
    tracker, changes = _run([_snapshot(_job(1), _job(2), _job(3)), [first, last]])
    assert [j for j, state in changes if state == "GONE"] == [3]
    gone = tracker.get(3)
    assert gone is not None and gone.gone


def test_a_syncer_older_than_batching_is_read_one_change_a_message() -> None:
    """An upgrade rolls the scheduler and the syncer one after the other: the old syncer ignores
    the request's `batched` and sends each change in the deprecated fields."""
    stop = threading.Event()
    changes: list[int] = []
    woken: list[str] = []
    old_shape = [
        syncer_pb2.WatchSlurmResponse(job=_job(1)),
        syncer_pb2.WatchSlurmResponse(node=slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-001")),
        syncer_pb2.WatchSlurmResponse(snapshot_done=True),
        syncer_pb2.WatchSlurmResponse(job=_started(2), trace_context={"traceparent": "tp"}),
        syncer_pb2.WatchSlurmResponse(node=slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-002")),
    ]
    syncer = FakeSyncer([old_shape], stop)
    tracker = JobTracker(SCHEDULER, syncer, lambda pod, job: changes.append(job.job_id), woken.append)
    tracker.run(stop)
    assert changes == [1, 2]
    assert tracker.trace_context == {2: {"traceparent": "tp"}}
    assert woken == ["cpu-001"] and tracker.kube_node("cpu-001") == "node-002"
