"""What the syncer's stream carries to each scheduler (tandem.syncer.broker, mirror): only its own
jobs, each change once, bounded; a started call is a hint checked against Slurm."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem import placeholder
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.broker import Subscription
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2
from tests.unit.syncer.lock_calls_world import submitted_and_seen
from tests.unit.syncer_world import (
    JOB_KEY,
    _mirror,
    bound,
    take_now,
    token_for,
    whole_listing_slurm,
)


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


def test_a_group_job_started_push_publishes_its_whole_allocation() -> None:
    """The script runs on one node of the group's job: the push must not make that its only node."""
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=bound(name))
    mirror.slurm.get_job_components = mock.Mock(return_value=[allocation])  # type: ignore[method-assign]
    status = mirror.job_started(7, "cpu-001")
    assert status.started and status.job.nodes == ("cpu-001", "cpu-002")


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
