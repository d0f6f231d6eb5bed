"""The syncer's mirror of Slurm: jobs and nodes, fed by an `update_time`-filtered poll of
slurmrestd (the safety net) and by pushes from the hooks (the fast path), published to
subscribers as changes."""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, replace

from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError, SlurmRestClient

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobStatus:
    """A job as the syncer knows it: Slurm's view plus what the hooks told us first."""

    job: Job
    started: bool = False
    terminating: bool = False
    gone: bool = False

    @property
    def job_id(self) -> int:
        return self.job.job_id


Change = JobStatus | Node


class Subscription:
    def __init__(self, mirror: SlurmMirror) -> None:
        self._mirror = mirror
        self.queue: queue.Queue[Change | None] = queue.Queue()

    def close(self) -> None:
        self._mirror._unsubscribe(self)
        self.queue.put(None)


class SlurmMirror:
    def __init__(self, slurm: SlurmRestClient, poll_interval: float) -> None:
        self.slurm = slurm
        self.poll_interval = poll_interval
        self._jobs: dict[int, JobStatus] = {}
        self._nodes: dict[str, Node] = {}
        self._subs: list[Subscription] = []
        self._lock = threading.RLock()
        self._jobs_since: int | None = None
        self._nodes_since: int | None = None
        self._synced = threading.Event()
        # When each job entered the mirror: a poll answer older than that says nothing about it.
        self._seen_at: dict[int, float] = {}
        self._wake = threading.Event()
        self._polling = threading.Lock()

    # -- reading -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def job(self, job_id: int) -> JobStatus | None:
        with self._lock:
            return self._jobs.get(job_id)

    def node(self, name: str) -> Node | None:
        with self._lock:
            return self._nodes.get(name)

    def jobs_on(self, node: str) -> list[JobStatus]:
        """Jobs that hold (or still clean up) an allocation on `node`."""
        with self._lock:
            return [
                s
                for s in self._jobs.values()
                if not s.gone and not s.job.finished and s.job.state != "PENDING" and node in s.job.nodes
            ]

    def nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())

    def subscribe(self) -> tuple[list[Change], Subscription]:
        """A snapshot of everything, and a queue of every change after it."""
        sub = Subscription(self)
        with self._lock:
            snapshot: list[Change] = [*self._nodes.values(), *self._jobs.values()]
            self._subs.append(sub)
        return snapshot, sub

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    # -- pushes from the hooks -----------------------------------------------------------------

    def job_started(self, job_id: int, node: str) -> JobStatus | None:
        return self._push(job_id, node, started=True)

    def job_terminating(self, job_id: int, node: str) -> JobStatus | None:
        return self._push(job_id, node, terminating=True)

    def refresh_job(self, job_id: int) -> JobStatus | None:
        """Fetch one job now (e.g. a prolog for a job the poll has not seen yet)."""
        job = self.slurm.get_job(job_id)
        with self._lock:
            if job is None:
                return self._jobs.get(job_id)
            return self._apply_job(job)

    def _push(
        self, job_id: int, node: str, started: bool = False, terminating: bool = False
    ) -> JobStatus | None:
        with self._lock:
            status = self._jobs.get(job_id)
        if status is None:
            try:
                status = self.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot fetch pushed job", extra={"job": job_id, "error": str(e)})
            if status is None:
                # Slurm answered nothing yet; what the script told us is enough to act on.
                status = JobStatus(Job(job_id=job_id, name="", state="RUNNING", nodes=(node,)))
        with self._lock:
            current = self._jobs.get(job_id, status)
            self._seen_at.setdefault(job_id, time.monotonic())
            updated = replace(
                current, started=current.started or started, terminating=current.terminating or terminating
            )
            if updated != current or job_id not in self._jobs:
                self._jobs[job_id] = updated
                self._publish(updated)
            return updated

    # -- the poll --------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
            except SlurmApiError as e:
                log.warning("slurm poll failed", extra={"error": str(e)})
            self._wake.wait(self.poll_interval)
            self._wake.clear()

    def poll_soon(self) -> None:
        self._wake.set()

    def poll_once(self) -> None:
        with self._polling:
            self._poll_once()

    def _poll_once(self) -> None:
        started = int(time.time())
        asked_at = time.monotonic()
        # One second of overlap: update_time has a resolution of seconds.
        jobs = self.slurm.list_jobs(self._jobs_since - 1 if self._jobs_since else None)
        if jobs is not None:
            self._apply_job_list(jobs, asked_at)
        self._jobs_since = started
        nodes = self.slurm.list_nodes(self._nodes_since - 1 if self._nodes_since else None)
        if nodes is not None:
            self._apply_node_list(nodes)
        self._nodes_since = started
        self._synced.set()

    def _apply_job_list(self, jobs: list[Job], asked_at: float) -> None:
        with self._lock:
            seen = set()
            for job in jobs:
                seen.add(job.job_id)
                self._apply_job(job)
            for job_id, status in list(self._jobs.items()):
                if job_id in seen or self._seen_at.get(job_id, 0.0) > asked_at:
                    continue
                if not status.gone:
                    # Purged by slurmctld (MinJobAge) or never really existed.
                    gone = replace(status, gone=True)
                    self._jobs[job_id] = gone
                    self._publish(gone)
                else:
                    del self._jobs[job_id]
                    self._seen_at.pop(job_id, None)

    def _apply_job(self, job: Job) -> JobStatus:
        current = self._jobs.get(job.job_id)
        if current is None:
            self._seen_at[job.job_id] = time.monotonic()
            updated = JobStatus(job, started=job.script_started)
        else:
            updated = replace(current, job=job, started=current.started or job.script_started, gone=False)
        if updated != current:
            self._jobs[job.job_id] = updated
            self._publish(updated)
        return updated

    def _apply_node_list(self, nodes: list[Node]) -> None:
        with self._lock:
            for node in nodes:
                if self._nodes.get(node.name) != node:
                    self._nodes[node.name] = node
                    self._publish(node)

    def _publish(self, change: Change) -> None:
        for sub in list(self._subs):
            sub.queue.put(change)
