"""The syncer's mirror of Slurm: jobs and nodes, fed by an `update_time`-filtered poll of
slurmrestd (the safety net) and by pushes from the hooks and the scheduler (the fast path),
published to subscribers in batches: what one poll or one push changed. A heterogeneous job is
kept as Slurm lists it, a component per job id (each prolog locks for its own), and read and
published as one (tandem.slurm.hetjob)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Protocol

from tandem import placeholder, tracing
from tandem.slurm import hetjob
from tandem.slurm import queue as slurm_queue
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.slurm.wire import job_to_proto

log = logging.getLogger(__name__)


Change = JobStatus | Node
# A change and the trace context of the call that caused it (empty when the poll found it).
Published = tuple[Change, dict[str, str]]
# What one poll or one call changed, each job or node once: one item of a subscriber's queue, one
# stream message, one wake-up of the scheduler that reads it (SlurmMirror.batch).
Batch = list[Published]


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

# Changes a subscriber may fall behind by before it is cut off (it reconnects and gets a fresh
# snapshot): memory stays bounded however slow a scheduler reads.
SUBSCRIBER_BACKLOG = 50_000


def _nothing() -> None:
    pass


class Subscription:
    def __init__(
        self, mirror: SlurmMirror, scheduler_name: str = "", backlog: int = SUBSCRIBER_BACKLOG
    ) -> None:
        self._mirror = mirror
        self.scheduler_name = scheduler_name
        # Unbounded in batches: the backlog bounds the changes they hold (a poll's batch can hold
        # every job).
        self.queue: queue.Queue[Batch | None] = queue.Queue()
        self.backlog = backlog
        self.overflowed = False
        # Changes queued and not taken yet: offered under the mirror's lock, taken by the stream.
        self._waiting = 0
        self._counting = threading.Lock()
        # Told after each put, on the publisher's thread: wakes a stream waiting on an event loop.
        self._arrived: Callable[[], None] = _nothing

    def wants(self, change: Change) -> bool:
        """Nodes go to everyone; a job only to the scheduler whose placeholder it is (a job pushed
        before its name was known, to everyone)."""
        if not self.scheduler_name or isinstance(change, Node):
            return True
        if not change.job.name and not change.job.admin_comment:
            return True
        return placeholder.scheduler_of_job(change.job) == self.scheduler_name

    def offer(self, batch: Batch) -> None:
        if self.overflowed:
            return
        with self._counting:
            # A batch is taken whole by a subscriber that is not behind, however large: the
            # mirror's size bounds it.
            behind = self._waiting > 0 and self._waiting + len(batch) > self.backlog
            if not behind:
                self._waiting += len(batch)
        if behind:
            self.overflowed = True
            log.warning("subscriber fell behind; cutting it off", extra={"backlog": self.backlog})
            self.close()
            return
        self.queue.put_nowait(batch)
        self._arrived()

    def take(self, timeout: float) -> Batch | None:
        """The next batch, or None once the stream is to end; queue.Empty after `timeout`."""
        return self._taken(self.queue.get(timeout=timeout))

    async def take_async(self) -> Batch | None:
        """The next batch (None: the stream ends), waited for on the event loop: a stream that
        waits for hours holds no thread."""
        loop = asyncio.get_running_loop()
        arrived = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: no one waits any more
                loop.call_soon_threadsafe(arrived.set)

        self._arrived = wake
        try:
            while True:
                arrived.clear()  # before looking: a put after the look wakes the wait below
                try:
                    return self._taken(self.queue.get_nowait())
                except queue.Empty:
                    await arrived.wait()
        finally:
            self._arrived = _nothing

    def _taken(self, batch: Batch | None) -> Batch | None:
        if batch is not None:
            with self._counting:
                self._waiting -= len(batch)
        return batch

    def close(self) -> None:
        self._mirror._unsubscribe(self)
        self.queue.put_nowait(None)  # unbounded: always room for the end
        self._arrived()


class SlurmMirror:
    def __init__(self, slurm: SlurmReader, poll_interval: float) -> None:
        self.slurm = slurm
        self.poll_interval = poll_interval
        self._jobs: dict[int, JobStatus] = {}
        self._by_node: defaultdict[str, set[int]] = defaultdict(set)
        # A heterogeneous job's id -> its components' job ids.
        self._het: defaultdict[int, set[int]] = defaultdict(set)
        self._nodes: dict[str, Node] = {}
        self._subs: list[Subscription] = []
        self._lock = threading.RLock()
        # This thread's open batch (`batch`): its changes by job id or node name.
        self._local = threading.local()
        self._jobs_since: int | None = None
        self._nodes_since: int | None = None
        self._synced = threading.Event()
        # Why the last poll failed ("" once one succeeds): what readiness quotes.
        self.trouble = ""
        # When each job entered the mirror: a poll answer older than that says nothing about it.
        self._seen_at: dict[int, float] = {}
        # When the hooks last told us about each job: newer than any poll answer asked before it.
        self._pushed_at: dict[int, float] = {}
        self._polling = threading.Lock()
        # Each job's (state, flags) in the light listing that came before its last read from Slurm:
        # a job listed otherwise since has changed.
        self._listed: dict[int, tuple[str, tuple[str, ...]]] = {}
        # Light polls until the next read of every job; None once Slurm served no light listing.
        self._light_left: int | None = 0
        # Whether a pending job came, went or changed since the queue was last placed.
        self._queue_changed = False
        # Jobs holding a place in a queue (a nonzero queue_position).
        self._queued: set[int] = set()
        # Told each Slurm node whose state the poll saw change, or which a job came to hold or
        # stopped holding (the node sync: a node's lock follows the jobs on it).
        self.on_node_changed: Callable[[str], None] = lambda name: None

    # -- reading -------------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def job(self, job_id: int) -> JobStatus | None:
        """A job by its id: a heterogeneous job's id gives the whole job, a later component's
        id that component alone (what its prolog locked for)."""
        with self._lock:
            status = self._jobs.get(job_id)
            if status is not None and status.job.het_job_id == job_id:
                return self._whole(job_id) or status
            return status

    def _whole(self, het_job_id: int) -> JobStatus | None:
        return hetjob.merged(self._jobs[j] for j in self._het.get(het_job_id, ()) if j in self._jobs)

    def node(self, name: str) -> Node | None:
        with self._lock:
            return self._nodes.get(name)

    def jobs_on(self, node: str) -> list[JobStatus]:
        """Jobs that hold (or still clean up) an allocation on `node`."""
        with self._lock:
            return [s for j in self._by_node.get(node, ()) if (s := self._jobs[j]).holds_nodes]

    def nodes(self) -> list[Node]:
        with self._lock:
            return list(self._nodes.values())

    def subscribe(self, scheduler_name: str = "") -> tuple[list[Change], Subscription]:
        """A snapshot of everything (a scheduler's: every node, its own jobs), and a queue of
        every change after it."""
        sub = Subscription(self, scheduler_name)
        with self._lock:
            # A het job once, whole (none of it while a component is unread).
            jobs = (
                self._whole(j) if s.job.het_job_id else s
                for j, s in self._jobs.items()
                if not s.job.het_job_offset
            )
            everything: list[Change] = [*self._nodes.values(), *(s for s in jobs if s is not None)]
            snapshot = [c for c in everything if sub.wants(c)]
            self._subs.append(sub)
        return snapshot, sub

    def expect_node(self, node: Node) -> None:
        """A node as this syncer just wrote it (drained or resumed): the next poll then tells
        a later change by someone else from this one. Without it, a drain and a resume by hand
        between two polls looked like no change at all, and the drain was not made again."""
        with self._lock:
            if self._nodes.get(node.name) != node:
                self._nodes[node.name] = node
                self._publish(node)

    def republish_node(self, name: str) -> None:
        """Send a node again (the Node hosting its slurmd Pod changed: subscribers map anew)."""
        with self._lock:
            node = self._nodes.get(name)
            if node is not None:
                self._publish(node)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Publish what this thread changes inside as one batch when its outermost batch ends:
        each subscriber gets one queue item, its scheduler one message and one wake-up, however
        many jobs and nodes changed. Per thread: a push answered during a poll goes out at once,
        not when the poll ends."""
        if getattr(self._local, "pending", None) is not None:
            yield  # the outer batch sends
            return
        pending: dict[tuple[str, int | str], Published] = {}
        self._local.pending = pending
        try:
            yield
        finally:
            self._local.pending = None
            if pending:
                with self._lock:
                    self._send([(self._now(change), caused_by) for change, caused_by in pending.values()])

    def _now(self, change: Change) -> Change:
        """A batch's change as the mirror holds it when the batch is sent: another thread may have
        sent a newer state of the same job or node meanwhile, and a stream must never step one
        back. The change itself once the mirror forgot it (or a part of its het job). Lock held."""
        if isinstance(change, Node):
            return self._nodes.get(change.name, change)
        if change.job.het_job_id:
            return self._whole(change.job.het_job_id) or change
        return self._jobs.get(change.job_id, change)

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            if sub in self._subs:
                self._subs.remove(sub)

    # -- pushes ----------------------------------------------------------------------------------

    def job_submitted(self, job_id: int, name: str) -> None:
        """A job the scheduler just submitted: known by name before any poll sees it."""
        with self._lock:
            if job_id not in self._jobs:
                # The scheduler's word (a certified caller) that the job is its placeholder.
                self._store(JobStatus(Job(job_id=job_id, name=name, admin_comment=name, state="PENDING")))

    def job_started(self, job_id: int, node: str) -> JobStatus:
        return self._push(job_id, node, started=True)

    def job_terminating(self, job_id: int, node: str) -> JobStatus:
        return self._push(job_id, node, terminating=True)

    def refresh_job(self, job_id: int) -> JobStatus | None:
        """Fetch one job now (e.g. a prolog for a job nobody told us about)."""
        jobs = self.slurm.get_job_components(job_id)
        with self.batch(), self._lock:
            for job in jobs:
                self._apply_job(job)
            return self.job(job_id)

    def _push(self, job_id: int, node: str, started: bool = False, terminating: bool = False) -> JobStatus:
        with self.batch():  # what the read below found and the push itself: one message
            return self._pushed(job_id, node, started, terminating)

    def _pushed(self, job_id: int, node: str, started: bool, terminating: bool) -> JobStatus:
        with self._lock:
            current = self._jobs.get(job_id)
        if current is None or _allocation_unknown(current):
            try:
                self.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot fetch pushed job", extra={"job": job_id, "error": str(e)})
        with self._lock:
            current = self._jobs.get(job_id) or JobStatus(Job(job_id=job_id, name="", state="RUNNING"))
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
            self._pushed_at[job_id] = time.monotonic()
            before = self._jobs.get(job_id)
            if updated != before:
                self._store(updated)
                self._publish(updated, before)
            return self.job(job_id) or updated

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
        with self._polling, self.batch():  # everything the poll finds, jobs and nodes: one message
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
            self._synced.set()
            try:
                nodes = self.slurm.list_nodes(self._nodes_since - 1 if self._nodes_since else None)
            except SlurmApiError as e:
                log.warning("slurm node poll failed", extra={"error": str(e)})
                return
            if nodes is not None:
                self._apply_node_list(nodes)
            self._nodes_since = started

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
        with self._lock:
            stale = [job_id for job_id, seen in listed.items() if self._stale(job_id, seen)]
            vanished = [
                job_id
                for job_id in self._jobs
                if job_id not in listed and self._seen_at.get(job_id, 0.0) <= asked_at
            ]
        if len(stale) > min(READ_ONE_BY_ONE, max(16, len(listed) // 8)):
            return False
        for job_id in stale:
            jobs = self.slurm.get_job_components(job_id)
            with self._lock:
                for job in jobs:
                    self._apply_job(job, asked_at)
                    if job.job_id in listed:
                        self._listed[job.job_id] = listed[job.job_id]
        with self._lock:
            for job_id in vanished:
                self._vanished(job_id)
        return True

    def _stale(self, job_id: int, seen: tuple[str, tuple[str, ...]]) -> bool:
        """Whether a listed job needs reading: Slurm lists it otherwise than before its last read;
        or this mirror knows it only from a submit or a push; or what can change without its state
        changing matters: a pending job's reason and place, a placeholder's start marker."""
        status = self._jobs.get(job_id)
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
        status = self._jobs.get(job_id)
        if status is None:
            return
        if not status.gone:
            gone = replace(status, gone=True)
            self._store(gone)
            self._publish(gone, status)
        else:
            self._forget(job_id)

    def _apply_job_list(self, jobs: list[Job], asked_at: float) -> None:
        with self._lock:
            seen = set()
            for job in jobs:
                seen.add(job.job_id)
                self._apply_job(job, asked_at)
            for job_id in list(self._jobs):
                if job_id in seen or self._seen_at.get(job_id, 0.0) > asked_at:
                    continue
                self._vanished(job_id)

    def _place_pending(self) -> None:
        """Each pending job's place in its partition's queue; a job whose place moved is sent
        again (its Pod's message says it). Placed outside the lock, and only after a pending
        job changed: at 1,000 nodes sorting every job each poll held the lock that every node
        sync and hook call reads through."""
        with self._lock:
            if not self._queue_changed:
                return
            self._queue_changed = False
            jobs = [s.job for s in self._jobs.values() if not s.gone]
        placed = slurm_queue.places(jobs)
        with self._lock:
            for job_id in self._queued | placed.keys():
                status = self._jobs.get(job_id)
                if status is None:
                    continue
                queued = status.job.state == "PENDING" and not status.gone  # still, since placing
                position, length = placed.get(job_id, (0, 0)) if queued else (0, 0)
                if (status.queue_position, status.queue_length) != (position, length):
                    moved = replace(status, queue_position=position, queue_length=length)
                    self._store(moved)
                    self._publish(moved, status)

    def _apply_job(self, job: Job, asked_at: float | None = None) -> JobStatus:
        current = self._jobs.get(job.job_id)
        if current is not None and asked_at is not None and self._pushed_at.get(job.job_id, 0.0) > asked_at:
            return current  # a poll answer from before the script's push: the push is newer
        if current is None:
            updated = JobStatus(job, started=job.script_started)
        else:
            updated = replace(current, job=job, started=current.started or job.script_started, gone=False)
            if job.state != "PENDING":
                updated = replace(updated, queue_position=0, queue_length=0)  # left the queue
        if updated != current:
            self._store(updated)
            self._publish(updated, current)
        return updated

    def _apply_node_list(self, nodes: list[Node]) -> None:
        changed = []
        with self._lock:
            for node in nodes:
                if self._nodes.get(node.name) != node:
                    self._nodes[node.name] = node
                    self._publish(node)
                    changed.append(node.name)
        for name in changed:
            self.on_node_changed(name)

    # -- bookkeeping -------------------------------------------------------------------------------

    def _store(self, status: JobStatus) -> None:
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
                self.on_node_changed(n)
        if status.job.het_job_id:
            self._het[status.job.het_job_id].add(status.job_id)
        self._seen_at.setdefault(status.job_id, time.monotonic())
        for n in status.job.nodes:
            self._by_node[n].add(status.job_id)

    def _forget(self, job_id: int) -> None:
        old = self._jobs.pop(job_id, None)
        if old is not None and old.holds_nodes:
            for n in old.job.nodes:
                self.on_node_changed(n)
        self._listed.pop(job_id, None)
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

    def _publish(self, change: Change, before: JobStatus | None = None) -> None:
        """Send a change to every subscriber that wants it, or add it to this thread's batch. A job
        is sent only when what the stream carries of it changed (`before`: the job as last stored):
        the poll also sees changes the wire does not carry (the start marker once the push told,
        Slurm's state flags), and each change is work for every scheduler that reads it."""
        if (
            isinstance(change, JobStatus)
            and before is not None
            and not hetjob.is_component(change)
            and job_to_proto(before) == job_to_proto(change)
        ):
            return
        if isinstance(change, JobStatus) and hetjob.is_component(change):
            whole = self._whole(change.job.het_job_id)
            if whole is None:
                return  # its first component is not known yet: published once it is
            change = whole
        caused_by = tracing.inject()
        pending: dict[tuple[str, int | str], Published] | None = getattr(self._local, "pending", None)
        if pending is None:
            self._send([(change, caused_by)])
            return
        key = ("node", change.name) if isinstance(change, Node) else ("job", change.job_id)
        earlier = pending.get(key)
        # Changed again in the same batch: sent once; the call that caused it keeps its trace.
        pending[key] = (change, caused_by or (earlier[1] if earlier else {}))

    def _send(self, batch: Batch) -> None:
        """Each subscriber's part of a batch, in one queue item. Lock held: items are queued in
        the order the mirror made the changes."""
        for sub in list(self._subs):
            mine = [item for item in batch if sub.wants(item[0])]
            if mine:
                sub.offer(mine)


def _is_group(job: Job) -> bool:
    ref = placeholder.pod_of(job)
    return ref is not None and ref.is_group


def _queue_moves(old: JobStatus | None, new: JobStatus) -> bool:
    """Whether storing `new` over `old` can move a queue: a pending job came, changed or left."""
    pending = (old is not None and old.job.state == "PENDING") or new.job.state == "PENDING"
    return pending and (old is None or old.job != new.job or old.gone != new.gone)


def _allocation_unknown(status: JobStatus) -> bool:
    """A job whose allocation this mirror has not read yet, and a push cannot tell: a group's nodes
    (its members are bound to all of them at once, so the push must not publish it as running on
    the script's node alone), or which GPUs a job asking for GRES holds (its Pod's claims get those
    devices, so none may be guessed)."""
    job = status.job
    unread = job.state == "PENDING" or not job.nodes
    return (_is_group(job) and unread) or (job.asks_gres and (unread or not job.gres_detail))
