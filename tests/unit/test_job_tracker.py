"""The scheduler's view of Slurm jobs, fed by the syncer's stream, across a broken stream."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from unittest import mock

import grpc

from tandem import placeholder
from tandem.scheduler.jobs import JobTracker
from tandem.slurm.wire import job_from_proto
from tandem.v1 import slurm_pb2, syncer_pb2

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
    return [syncer_pb2.WatchSlurmResponse(job=j) for j in jobs] + [
        syncer_pb2.WatchSlurmResponse(snapshot_done=True)
    ]


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
    streams = [[*_snapshot(_job(1)), syncer_pb2.WatchSlurmResponse(node=node)]]
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
        tracker._apply(pending)
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=101.5):
        tracker._apply(replace(pending, job=replace(pending.job, state_reason="Resources")))
        assert tracker.in_phase_for(1) == 1.5, "a new reason is the same phase"
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=102.0):
        tracker._apply(replace(pending, job=replace(pending.job, state="RUNNING", nodes=("cpu-001",))))
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=102.25):
        assert tracker.in_phase_for(1) == 0.25
