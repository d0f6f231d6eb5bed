"""Queue position: the syncer places every pending job of a partition in Slurm's priority order,
the Pod's message says the place and the expected start, and `kubectl tandem` reads them back."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tandem.slurm import queue
from tandem.slurm.models import Job, JobStatus, Node
from tandem.syncer.mirror import SlurmMirror
from tests.unit.syncer_world import take_now, whole_listing_slurm


def _pending(
    job_id: int, priority: int, partition: str = "gpu", reason: str = "Priority", start: int = 0
) -> Job:
    return Job(
        job_id,
        f"job-{job_id}",
        "PENDING",
        reason,
        partition=partition,
        priority=priority,
        expected_start=start,
    )


@pytest.mark.parametrize(
    ("jobs", "expected"),
    [
        ([], {}),
        # Higher priority first; a tie goes to the older (smaller) job id.
        ([_pending(3, 10), _pending(2, 20), _pending(1, 10)], {2: (1, 3), 1: (2, 3), 3: (3, 3)}),
        # Each partition is its own queue.
        ([_pending(1, 5, "gpu"), _pending(2, 9, "cpu")], {1: (1, 1), 2: (1, 1)}),
        # A held job (priority 0) and a running one are not queued.
        ([_pending(1, 0), Job(2, "r", "RUNNING", partition="gpu", priority=50), _pending(3, 1)], {3: (1, 1)}),
    ],
)
def test_places(jobs: list[Job], expected: dict[int, tuple[int, int]]) -> None:
    assert queue.places(jobs) == expected


def test_the_message_says_the_place_and_the_start_to_the_minute() -> None:
    job = _pending(7, 10, reason="Resources", start=1795430530)  # 2026-11-23T10:42:10Z
    status = JobStatus(job, queue_position=2, queue_length=5)
    message = queue.pending_message(status)
    assert message == (
        "Slurm job 7 in partition gpu is pending: Resources; position 2 of 5; "
        "expected to start at 2026-11-23T10:42Z"
    )
    assert queue.read_message(message) == queue.QueueReading("2 of 5", "2026-11-23T10:42Z")


def test_a_job_with_no_place_and_no_estimate_says_only_slurms_reason() -> None:
    message = queue.pending_message(JobStatus(_pending(7, 0, reason="JobHeldUser")))
    assert message == "Slurm job 7 in partition gpu is pending: JobHeldUser"
    assert queue.read_message(message) == queue.QueueReading()


def test_the_mirror_sends_a_job_again_when_its_place_moves() -> None:
    slurm = whole_listing_slurm()
    slurm.list_nodes.return_value = [Node("gpu-000", "ALLOCATED")]
    slurm.list_jobs.return_value = [_pending(1, 10), _pending(2, 10)]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    places = [(s.queue_position, s.queue_length) for j in (1, 2) if (s := mirror.state.job(j)) is not None]
    assert places == [(1, 2), (2, 2)]
    _, sub = mirror.broker.subscribe()
    # Job 1 starts: job 2 moves up and is sent again; job 1 leaves the queue.
    # (Slurm answers a changed-since query with every job when any changed.)
    slurm.list_jobs.return_value = [
        replace(_pending(1, 10), state="RUNNING", nodes=("gpu-000",)),
        _pending(2, 10),
    ]
    mirror.poll_once()
    batch = take_now(sub)
    assert batch is not None and sub.queue.empty(), "the poll's changes: one batch"
    sent = [(c.job_id, c.queue_position, c.queue_length) for c, _ in batch if isinstance(c, JobStatus)]
    assert sorted(sent) == [(1, 0, 0), (2, 1, 1)]
    assert mirror.state.job(1).queue_position == 0  # type: ignore[union-attr]


def test_a_started_script_moves_the_queue_on_the_next_poll_even_when_slurm_reports_no_change() -> None:
    slurm = whole_listing_slurm()
    slurm.list_nodes.return_value = None
    slurm.list_jobs.return_value = [_pending(1, 10), _pending(2, 10), _pending(3, 5)]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    assert mirror.state.job(3).queue_position == 3  # type: ignore[union-attr]
    mirror.job_started(1, "gpu-000")  # the hooks' word, before Slurm's
    slurm.list_jobs.return_value = None  # nothing changed since the last answer
    mirror.poll_once()
    places = [(mirror.state.job(j).queue_position, mirror.state.job(j).queue_length) for j in (1, 2, 3)]  # type: ignore[union-attr]
    assert places == [(0, 0), (1, 2), (2, 2)]
