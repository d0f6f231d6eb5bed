"""Where a pending job stands: its place among its partition's pending jobs in Slurm's priority
order, and when Slurm expects it to start. The syncer places every job it mirrors; the scheduler
says it in the Pod's PodScheduled message; `kubectl tandem` reads it back from there."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from tandem.slurm.models import Job, JobStatus


def places(jobs: Iterable[Job]) -> dict[int, tuple[int, int]]:
    """Each queued job's (position, of how many) in its partition. Slurm's main scheduler tries
    pending jobs by priority, then by job id; a held job (priority 0) is not queued."""
    queues: defaultdict[str, list[Job]] = defaultdict(list)
    for job in jobs:
        if job.state == "PENDING" and job.priority > 0:
            queues[job.partition].append(job)
    placed = {}
    for queue in queues.values():
        queue.sort(key=lambda j: (-j.priority, j.job_id))
        for position, job in enumerate(queue, 1):
            placed[job.job_id] = (position, len(queue))
    return placed


def pending_message(status: JobStatus) -> str:
    """The PodScheduled message of a Pod whose job pends. The expected start is to the minute:
    Slurm's backfill moves it by seconds every cycle, and each change is a write to the Pod."""
    job = status.job
    where = f" in partition {job.partition}" if job.partition else ""
    message = f"Slurm job {job.job_id}{where} is pending: {job.state_reason}"
    if status.queue_position:
        message += f"; position {status.queue_position} of {status.queue_length}"
    if job.expected_start:
        start = datetime.fromtimestamp(job.expected_start, UTC).strftime("%Y-%m-%dT%H:%MZ")
        message += f"; expected to start at {start}"
    return message


@dataclass(frozen=True)
class QueueReading:
    """What a PodScheduled message says of the queue (empty strings where it says nothing)."""

    position: str = ""
    expected_start: str = ""


_POSITION = re.compile(r"; position (\d+ of \d+)")
_START = re.compile(r"; expected to start at (\S+)")


def read_message(message: str) -> QueueReading:
    position = _POSITION.search(message)
    start = _START.search(message)
    return QueueReading(position.group(1) if position else "", start.group(1) if start else "")
