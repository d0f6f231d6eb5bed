"""Slurm's changes published to the syncer's subscribers (each scheduler's WatchSlurm stream) in
batches: what one poll or one push changed, each job or node once, one queue item, one stream
message, one wake-up of the scheduler that reads it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Iterator

from tandem import placeholder, tracing
from tandem.slurm import hetjob
from tandem.slurm.models import JobStatus, Node
from tandem.slurm.wire import job_to_proto
from tandem.syncer.slurmstate import Change, SlurmState

log = logging.getLogger(__name__)

# A change and the trace context of the call that caused it (empty when the poll found it).
Published = tuple[Change, dict[str, str]]
# What one poll or one call changed, each job or node once (Broker.batch).
Batch = list[Published]

# Changes a subscriber may fall behind by before it is cut off (it reconnects and gets a fresh
# snapshot): memory stays bounded however slow a scheduler reads.
SUBSCRIBER_BACKLOG = 50_000


def _nothing() -> None:
    pass


class Subscription:
    def __init__(self, broker: Broker, scheduler_name: str = "", backlog: int = SUBSCRIBER_BACKLOG) -> None:
        self._broker = broker
        self.scheduler_name = scheduler_name
        # Unbounded in batches: the backlog bounds the changes they hold (a poll's batch can hold
        # every job).
        self.queue: queue.Queue[Batch | None] = queue.Queue()
        self.backlog = backlog
        self.overflowed = False
        # Changes queued and not taken yet: offered under the store's lock, taken by the stream.
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
            # store's size bounds it.
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

    async def take(self) -> Batch | None:
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
        self._broker.unsubscribe(self)
        self.queue.put_nowait(None)  # unbounded: always room for the end
        self._arrived()


class Broker:
    def __init__(self, state: SlurmState) -> None:
        self.state = state
        self._subs: list[Subscription] = []
        # This thread's open batch (`batch`): its changes by job id or node name.
        self._local = threading.local()

    def subscribe(self, scheduler_name: str = "") -> tuple[list[Change], Subscription]:
        """A snapshot of everything (a scheduler's: every node, its own jobs), and a queue of
        every change after it."""
        sub = Subscription(self, scheduler_name)
        with self.state.lock:
            snapshot = [c for c in self.state.everything() if sub.wants(c)]
            self._subs.append(sub)
        return snapshot, sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self.state.lock:
            if sub in self._subs:
                self._subs.remove(sub)

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
                with self.state.lock:
                    self._send([(self._now(change), caused_by) for change, caused_by in pending.values()])

    def republish_node(self, name: str) -> None:
        """Send a node again (the Node hosting its slurmd Pod changed: subscribers map anew)."""
        with self.state.lock:
            node = self.state.node(name)
            if node is not None:
                self.publish(node)

    def publish(self, change: Change, before: JobStatus | None = None) -> None:
        """Send a change to every subscriber that wants it, or add it to this thread's batch. A job
        is sent only when what the stream carries of it changed (`before`: the job as last stored):
        the poll also sees changes the wire does not carry (the start marker once the push told,
        Slurm's state flags), and each change is work for every scheduler that reads it. Lock held."""
        if (
            isinstance(change, JobStatus)
            and before is not None
            and not hetjob.is_component(change)
            and job_to_proto(before) == job_to_proto(change)
        ):
            return
        if isinstance(change, JobStatus) and hetjob.is_component(change):
            whole = self.state.whole(change.job.het_job_id)
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

    def _now(self, change: Change) -> Change:
        """A batch's change as the store holds it when the batch is sent: another thread may have
        sent a newer state of the same job or node meanwhile, and a stream must never step one
        back. The change itself once the store forgot it (or a part of its het job). Lock held."""
        if isinstance(change, Node):
            return self.state.node(change.name) or change
        if change.job.het_job_id:
            return self.state.whole(change.job.het_job_id) or change
        return self.state.component(change.job_id) or change

    def _send(self, batch: Batch) -> None:
        """Each subscriber's part of a batch, in one queue item. Lock held: items are queued in
        the order the changes were made."""
        for sub in list(self._subs):
            mine = [item for item in batch if sub.wants(item[0])]
            if mine:
                sub.offer(mine)
