"""The syncer's mirror of Slurm: an `update_time`-filtered poll of slurmrestd (the safety net) and
the pushes of the hooks and the scheduler (the fast path), written to one store
(tandem.syncer.slurmstate) and published to the subscribers (tandem.syncer.broker) in batches:
what one poll or one push changed."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Protocol

from tandem import placeholder
from tandem.slurm import queue as slurm_queue
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.broker import Broker
from tandem.syncer.slurmstate import SlurmState

log = logging.getLogger(__name__)


class SlurmReader(Protocol):
    """What the syncer reads of Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def get_job_components(self, job_id: int) -> list[Job]: ...

    def list_jobs(self, changed_since: int | None = None) -> list[Job] | None: ...

    def all_job_states(self) -> dict[int, tuple[str, tuple[str, ...]]]: ...

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None: ...


# Polls between two reads of every job (GET /jobs): the others read the light state listing
# (GET /jobs/state) and only the jobs it shows changed, new, pending or not started yet. With
# 10,000 running jobs a changed one made slurmctld's update_time filter return all of them,
# thousands of bytes each, every poll.
LIGHT_POLLS = 5
# At most this many jobs read one by one in a poll (and at most an eighth of all jobs): more,
# and one listing of every job costs less.
READ_ONE_BY_ONE = 256


class SlurmMirror:
    def __init__(self, slurm: SlurmReader, poll_interval: float) -> None:
        self.slurm = slurm
        self.poll_interval = poll_interval
        self.state = SlurmState()
        self.broker = Broker(self.state)
        self._jobs_since: int | None = None
        self._nodes_since: int | None = None
        # Why the last poll failed ("" once one succeeds): what readiness quotes.
        self.trouble = ""
        self._polling = threading.Lock()
        # Each job's (state, flags) in the light listing that came before its last read from Slurm:
        # a job listed otherwise since has changed.
        self._listed: dict[int, tuple[str, tuple[str, ...]]] = {}
        # Light polls until the next read of every job; None once Slurm served no light listing.
        self._light_left: int | None = 0

    @property
    def synced(self) -> bool:
        return self.state.synced

    def _update(self, status: JobStatus, before: JobStatus | None) -> None:
        """Stored and published. Lock held."""
        self.state.put(status)
        self.broker.publish(status, before)

    # -- pushes ----------------------------------------------------------------------------------

    def expect_node(self, node: Node) -> None:
        """A node as this syncer just wrote it (drained or resumed): the next poll then tells
        a later change by someone else from this one. Without it, a drain and a resume by hand
        between two polls looked like no change at all, and the drain was not made again."""
        with self.state.lock:
            if self.state.set_node(node):
                self.broker.publish(node)

    def job_submitted(self, job_id: int, name: str) -> None:
        """A job the scheduler just submitted: known by name before any poll sees it."""
        with self.state.lock:
            if self.state.component(job_id) is None:
                # The scheduler's word (a certified caller) that the job is its placeholder.
                self.state.put(JobStatus(Job(job_id=job_id, name=name, admin_comment=name, state="PENDING")))

    def job_started(self, job_id: int, node: str) -> JobStatus:
        return self._push(job_id, node, started=True)

    def job_terminating(self, job_id: int, node: str) -> JobStatus:
        return self._push(job_id, node, terminating=True)

    def refresh_job(self, job_id: int) -> JobStatus | None:
        """Fetch one job now (e.g. a prolog for a job nobody told us about)."""
        jobs = self.slurm.get_job_components(job_id)
        with self.broker.batch(), self.state.lock:
            for job in jobs:
                self._apply_job(job)
            return self.state.job(job_id)

    def _push(self, job_id: int, node: str, started: bool = False, terminating: bool = False) -> JobStatus:
        with self.broker.batch():  # what the read below found and the push itself: one message
            return self._pushed(job_id, node, started, terminating)

    def _pushed(self, job_id: int, node: str, started: bool, terminating: bool) -> JobStatus:
        current = self.state.component(job_id)
        if current is None or _allocation_unknown(current):
            try:
                self.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot fetch pushed job", extra={"job": job_id, "error": str(e)})
        with self.state.lock:
            before = self.state.component(job_id)
            current = before or JobStatus(Job(job_id=job_id, name="", state="RUNNING"))
            job = current.job
            if node and (job.state == "PENDING" or not job.nodes) and not _is_group(job):
                # The script runs, so the job does, and on the node it names: no need to ask Slurm
                # (a group's job holds more nodes than the one its script runs on: asked above).
                job = replace(job, state="RUNNING", nodes=(node,), state_reason="")
            updated = replace(
                current,
                job=job,
                started=current.started or started,
                terminating=current.terminating or terminating,
            )
            self.state.pushed(job_id)
            if updated != before:
                self._update(updated, before)
            return self.state.job(job_id) or updated

    # -- the poll --------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.poll_once()
                self.trouble = ""
            except SlurmApiError as e:
                log.warning("slurm poll failed", extra={"error": str(e)})
                self.trouble = e.summary
            stop.wait(self.poll_interval)

    def poll_once(self) -> None:
        with self._polling, self.broker.batch():  # everything the poll finds, jobs and nodes: one message
            started = int(time.time())
            asked_at = time.monotonic()
            listed = self._light_listing()
            due = not self._light_left  # None (no light listing served) or 0 (every job's turn)
            if listed is not None and not due and self._read_changed(listed, asked_at):
                self._light_left = (self._light_left or 1) - 1
            else:
                # One second of overlap: update_time has a resolution of seconds.
                jobs = self.slurm.list_jobs(self._jobs_since - 1 if self._jobs_since else None)
                if jobs is not None:
                    self._apply_job_list(jobs, asked_at)
                self._jobs_since = started
                # Listed before this read: a job listed otherwise next time changed after it.
                self._listed = dict(listed or {})
                if self._light_left is not None:
                    self._light_left = LIGHT_POLLS
            # Also after no answer: a push (a script started) takes a job out of its queue.
            self._place_pending()
            # Jobs are what streams and locks wait for: a failing node listing (24.11's filtered
            # query can fail alone) is logged and tried again next round, not theirs to fail.
            self.state.mark_synced()
            try:
                nodes = self._node_listing()
            except SlurmApiError as e:
                log.warning("slurm node poll failed", extra={"error": str(e)})
                return
            if nodes is not None:
                self._apply_node_list(nodes)
            self._nodes_since = started

    def _node_listing(self) -> list[Node] | None:
        """The nodes changed since the last listing (None: none did)."""
        since = self._nodes_since - 1 if self._nodes_since else None
        try:
            return self.slurm.list_nodes(since)
        except SlurmApiError as e:
            if since is None or e.status != 500:
                raise
            # 24.11's slurmrestd answers a filtered listing 500 ("Unable to query partitions")
            # whenever nodes changed and partitions did not (fixed in 26.05.3): every poll failed
            # until a partition changed, and what the nodes lost meanwhile (the topology features
            # a slurmctld restart drops) stayed unseen. Every node, unfiltered, is read instead.
            return self.slurm.list_nodes(None)

    def _light_listing(self) -> dict[int, tuple[str, tuple[str, ...]]] | None:
        """Every job's (state, flags); None before the first read of every job and once Slurm
        served no light listing. Also taken before a read of every job: what it lists then is
        what the next poll's listing is compared with."""
        if self._light_left is None or self._jobs_since is None:
            return None
        try:
            return self.slurm.all_job_states()
        except SlurmApiError as e:
            if e.status != 404:
                raise
            log.warning("slurmrestd serves no GET /jobs/state; reading every job each poll")
            self._light_left = None
            return None

    def _read_changed(self, listed: dict[int, tuple[str, tuple[str, ...]]], asked_at: float) -> bool:
        """Read the jobs the light listing shows changed, and let those it no longer lists go;
        False (nothing read) when more changed than reading them one by one is worth."""
        with self.state.lock:
            stale = [job_id for job_id, seen in listed.items() if self._stale(job_id, seen)]
            vanished = [
                job_id
                for job_id in self.state.job_ids()
                if job_id not in listed and not self.state.seen_after(job_id, asked_at)
            ]
        if len(stale) > min(READ_ONE_BY_ONE, max(16, len(listed) // 8)):
            return False
        for job_id in stale:
            jobs = self.slurm.get_job_components(job_id)
            with self.state.lock:
                for job in jobs:
                    self._apply_job(job, asked_at)
                    if job.job_id in listed:
                        self._listed[job.job_id] = listed[job.job_id]
        with self.state.lock:
            for job_id in vanished:
                self._vanished(job_id)
        return True

    def _stale(self, job_id: int, seen: tuple[str, tuple[str, ...]]) -> bool:
        """Whether a listed job needs reading: Slurm lists it otherwise than before its last read;
        or this mirror knows it only from a submit or a push; or what can change without its state
        changing matters: a pending job's reason and place, a placeholder's start marker."""
        status = self.state.component(job_id)
        if status is None or status.gone or not status.job.partition:
            return True
        if self._listed.get(job_id) != seen:
            return True
        job = status.job
        return job.state == "PENDING" or (not status.started and placeholder.pod_of(job) is not None)

    def _vanished(self, job_id: int) -> None:
        """A job Slurm no longer lists (purged after MinJobAge, or never really existed): gone
        first, then forgotten. Lock held."""
        self._listed.pop(job_id, None)
        status = self.state.component(job_id)
        if status is None:
            return
        if not status.gone:
            self._update(replace(status, gone=True), status)
        else:
            self.state.forget(job_id)

    def _apply_job_list(self, jobs: list[Job], asked_at: float) -> None:
        with self.state.lock:
            seen = set()
            for job in jobs:
                seen.add(job.job_id)
                self._apply_job(job, asked_at)
            for job_id in self.state.job_ids():
                if job_id in seen or self.state.seen_after(job_id, asked_at):
                    continue
                self._vanished(job_id)

    def _place_pending(self) -> None:
        """Each pending job's place in its partition's queue; a job whose place moved is sent
        again (its Pod's message says it). Placed outside the lock, and only after a pending
        job changed: at 1,000 nodes sorting every job each poll held the lock that every node
        sync and hook call reads through."""
        if not self.state.take_queue_changed():
            return
        placed = slurm_queue.places([s.job for s in self.state.live_jobs()])
        with self.state.lock:
            for job_id in self.state.queued() | placed.keys():
                status = self.state.component(job_id)
                if status is None:
                    continue
                queued = status.job.state == "PENDING" and not status.gone  # still, since placing
                position, length = placed.get(job_id, (0, 0)) if queued else (0, 0)
                if (status.queue_position, status.queue_length) != (position, length):
                    self._update(replace(status, queue_position=position, queue_length=length), status)

    def _apply_job(self, job: Job, asked_at: float | None = None) -> JobStatus:
        current = self.state.component(job.job_id)
        if current is not None and asked_at is not None and self.state.pushed_after(job.job_id, asked_at):
            return current  # a poll answer from before the script's push: the push is newer
        if current is None:
            updated = JobStatus(job, started=job.script_started)
        else:
            updated = replace(current, job=job, started=current.started or job.script_started, gone=False)
            if job.state != "PENDING":
                updated = replace(updated, queue_position=0, queue_length=0)  # left the queue
        if updated != current:
            self._update(updated, current)
        return updated

    def _apply_node_list(self, nodes: list[Node]) -> None:
        changed = []
        with self.state.lock:
            for node in nodes:
                if self.state.set_node(node):
                    self.broker.publish(node)
                    changed.append(node.name)
        for name in changed:
            self.state.node_changed(name)


def _is_group(job: Job) -> bool:
    ref = placeholder.pod_of(job)
    return ref is not None and ref.is_group


def _allocation_unknown(status: JobStatus) -> bool:
    """A job whose allocation this mirror has not read yet, and a push cannot tell: a group's nodes
    (its members are bound to all of them at once, so the push must not publish it as running on
    the script's node alone), or which GPUs a job asking for GRES holds (its Pod's claims get those
    devices, so none may be guessed)."""
    job = status.job
    unread = job.state == "PENDING" or not job.nodes
    return (_is_group(job) and unread) or (job.asks_gres and (unread or not job.gres_detail))
