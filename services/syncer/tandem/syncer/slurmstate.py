"""Slurm's jobs and nodes as the syncer last read or was told them (tandem.syncer.mirror feeds it):
the one store every reader of Slurm in the syncer reads through, with the indexes they read by.
A heterogeneous job is kept as Slurm lists it, a component per job id (each prolog locks for its
own), and read as one (tandem.slurm.hetjob)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

from tandem.slurm import hetjob
from tandem.slurm.models import JobStatus, Node

Change = JobStatus | Node


class SlurmState:
    def __init__(self) -> None:
        # Held by every write here and by the broker while it sends (tandem.syncer.broker): a
        # stream sees changes in the order they were made.
        self.lock = threading.RLock()
        self._jobs: dict[int, JobStatus] = {}
        self._by_node: defaultdict[str, set[int]] = defaultdict(set)
        # A heterogeneous job's id -> its components' job ids.
        self._het: defaultdict[int, set[int]] = defaultdict(set)
        self._nodes: dict[str, Node] = {}
        # When each job entered the store: a poll answer older than that says nothing about it.
        self._seen_at: dict[int, float] = {}
        # When the hooks last told us about each job: newer than any poll answer asked before it.
        self._pushed_at: dict[int, float] = {}
        # Whether a pending job came, went or changed since the queue was last placed.
        self._queue_changed = False
        # Jobs holding a place in a queue (a nonzero queue_position).
        self._queued: set[int] = set()
        self._synced = threading.Event()
        self._node_handlers: list[Callable[[str], None]] = []

    def on_node_changed(self, handler: Callable[[str], None]) -> None:
        """Tell `handler` each Slurm node whose state changed, or which a job came to hold or
        stopped holding (the node sync: a node's lock follows the jobs on it). Register before
        the first poll."""
        self._node_handlers.append(handler)

    def node_changed(self, name: str) -> None:
        for handler in self._node_handlers:
            handler(name)

    # -- reading -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Slurm's jobs read once: before that, an empty store would call busy nodes idle."""
        return self._synced.is_set()

    def mark_synced(self) -> None:
        self._synced.set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def job(self, job_id: int) -> JobStatus | None:
        """A job by its id: a heterogeneous job's id gives the whole job, a later component's
        id that component alone (what its prolog locked for)."""
        with self.lock:
            status = self._jobs.get(job_id)
            if status is not None and status.job.het_job_id == job_id:
                return self.whole(job_id) or status
            return status

    def component(self, job_id: int) -> JobStatus | None:
        """The job or het job component stored under this id, as Slurm lists it."""
        with self.lock:
            return self._jobs.get(job_id)

    def whole(self, het_job_id: int) -> JobStatus | None:
        with self.lock:
            return hetjob.merged(self._jobs[j] for j in self._het.get(het_job_id, ()) if j in self._jobs)

    def node(self, name: str) -> Node | None:
        with self.lock:
            return self._nodes.get(name)

    def jobs_on(self, node: str) -> list[JobStatus]:
        """Jobs that hold (or still clean up) an allocation on `node`."""
        with self.lock:
            return [s for j in self._by_node.get(node, ()) if (s := self._jobs[j]).holds_nodes]

    def nodes(self) -> list[Node]:
        with self.lock:
            return list(self._nodes.values())

    def job_ids(self) -> list[int]:
        with self.lock:
            return list(self._jobs)

    def live_jobs(self) -> list[JobStatus]:
        with self.lock:
            return [s for s in self._jobs.values() if not s.gone]

    def everything(self) -> list[Change]:
        """Every node and job, a het job once and whole (none of it while a component is unread)."""
        with self.lock:
            jobs = (
                self.whole(j) if s.job.het_job_id else s
                for j, s in self._jobs.items()
                if not s.job.het_job_offset
            )
            return [*self._nodes.values(), *(s for s in jobs if s is not None)]

    def seen_after(self, job_id: int, asked_at: float) -> bool:
        """The job entered the store after a poll asked: the poll's answer says nothing of it."""
        return self._seen_at.get(job_id, 0.0) > asked_at

    def pushed_after(self, job_id: int, asked_at: float) -> bool:
        """The hooks told of the job after a poll asked: the push is newer than the poll's answer."""
        return self._pushed_at.get(job_id, 0.0) > asked_at

    def take_queue_changed(self) -> bool:
        """Whether a pending job came, went or changed since the last call."""
        with self.lock:
            changed, self._queue_changed = self._queue_changed, False
            return changed

    def queued(self) -> set[int]:
        with self.lock:
            return set(self._queued)

    # -- writing -------------------------------------------------------------------------------

    def pushed(self, job_id: int) -> None:
        self._pushed_at[job_id] = time.monotonic()

    def set_node(self, node: Node) -> bool:
        """Whether the node changed."""
        with self.lock:
            if self._nodes.get(node.name) == node:
                return False
            self._nodes[node.name] = node
            return True

    def put(self, status: JobStatus) -> None:
        with self.lock:
            old = self._jobs.get(status.job_id)
            if _queue_moves(old, status):
                self._queue_changed = True
            if status.queue_position:
                self._queued.add(status.job_id)
            else:
                self._queued.discard(status.job_id)
            if old is not None:
                for n in old.job.nodes:
                    self._by_node[n].discard(status.job_id)
            self._jobs[status.job_id] = status
            # A job ending is not always a node's state changing (its node stays busy with another
            # job, or went idle before the poll that read the job's end). A short job may be seen
            # over without ever being seen running: its prolog's hold waits on that end.
            before = old.job.nodes if old is not None and old.holds_nodes else ()
            after = status.job.nodes if status.holds_nodes else ()
            ended = status.job.nodes if status.ended and (old is None or not old.ended) else ()
            if before != after or ended:
                for n in {*before, *after, *ended}:
                    self.node_changed(n)
            if status.job.het_job_id:
                self._het[status.job.het_job_id].add(status.job_id)
            self._seen_at.setdefault(status.job_id, time.monotonic())
            for n in status.job.nodes:
                self._by_node[n].add(status.job_id)

    def forget(self, job_id: int) -> None:
        with self.lock:
            old = self._jobs.pop(job_id, None)
            if old is not None and old.holds_nodes:
                for n in old.job.nodes:
                    self.node_changed(n)
            self._queued.discard(job_id)
            if old is not None and old.job.state == "PENDING":
                self._queue_changed = True
            self._seen_at.pop(job_id, None)
            self._pushed_at.pop(job_id, None)
            if old is not None:
                for n in old.job.nodes:
                    self._by_node[n].discard(job_id)
                het = old.job.het_job_id
                if het:
                    self._het[het].discard(job_id)
                    if not self._het[het]:
                        del self._het[het]


def _queue_moves(old: JobStatus | None, new: JobStatus) -> bool:
    """Whether storing `new` over `old` can move a queue: a pending job came, changed or left."""
    pending = (old is not None and old.job.state == "PENDING") or new.job.state == "PENDING"
    return pending and (old is None or old.job != new.job or old.gone != new.gone)
