"""A work queue in the manner of client-go's: a key is queued at most once, is never processed by
two workers at once, and is processed again if it changed while a worker had it. Like client-go's,
it counts the keys added and times how long each waited before a worker took it."""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque

from tandem.metrics import REGISTRY

Key = str

ADDS = REGISTRY.counter(
    "tandem_workqueue_adds_total",
    "keys added to a controller's work queue (not already in it)",
    ["controller"],
)
# From added (or due, for a delayed key) to taken by a worker; the work itself is
# tandem_reconcile_seconds.
QUEUE_SECONDS = REGISTRY.histogram(
    "tandem_workqueue_queue_duration_seconds",
    "seconds a key waited in a controller's work queue before a worker took it",
    ["controller"],
)


BACKOFF_CAP = 30.0
"""The longest a failing key waits before its next try (client-go's default is 1000 s; ours is
short because a failed key is usually a lock or bind someone waits on)."""


class WorkQueue:
    def __init__(self, backoff_base: float = 0.25, backoff_cap: float = BACKOFF_CAP, name: str = "") -> None:
        """`backoff_*`: the per-key exponential delay of `add_rate_limited` (client-go's
        ItemExponentialFailureRateLimiter): base * 2^(failures so far), at most cap. `name`: the
        controller's, the `controller` label of the queue's metrics."""
        self.name = name
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._failures: dict[Key, int] = {}
        self._cond = threading.Condition()
        # Two lines, urgent first. A routine key made urgent is appended to the urgent line and its
        # entry in the routine line left behind, skipped when reached: a promotion in O(1), where
        # taking it out of the line had been a scan of the whole line (4% of the syncer's CPU).
        self._queue: deque[Key] = deque()
        self._urgent_queue: deque[Key] = deque()
        self._urgent: set[Key] = set()
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._delayed: list[tuple[float, Key]] = []
        # Each delayed key's earliest time: a later one for the same key is dropped (client-go's
        # AddAfter). Every pass of a node asked to look again when a hold's grace ends; each ask
        # had been a pass of its own a minute later.
        self._ready_at: dict[Key, float] = {}
        # When each key queued or dirty was added: a key added again meanwhile keeps its first time.
        self._added_at: dict[Key, float] = {}
        self._shutdown = False

    def add(self, key: Key, urgent: bool = False) -> None:
        """Queue `key`; an urgent key (e.g. a Pod ready to bind) goes ahead of routine updates."""
        with self._cond:
            if key in self._processing:
                if key not in self._dirty:
                    self._added(key)
                self._dirty.add(key)
                if urgent:
                    self._urgent.add(key)
                return
            if key in self._queued:
                if urgent and key not in self._urgent:
                    self._urgent_queue.appendleft(key)
                    self._urgent.add(key)
                return
            self._added(key)
            self._queued.add(key)
            if urgent:
                self._urgent.add(key)
                self._urgent_queue.appendleft(key)
            else:
                self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: Key, seconds: float) -> None:
        """Queue `key` in `seconds`, unless it is due sooner already."""
        at = time.monotonic() + seconds
        with self._cond:
            if self._ready_at.get(key, float("inf")) <= at:
                return
            self._ready_at[key] = at
            heapq.heappush(self._delayed, (at, key))
            self._cond.notify()

    def add_rate_limited(self, key: Key) -> float:
        """Queue `key` again after its next backoff delay; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = min(self.backoff_cap, self.backoff_base * 2.0**failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        """`key` succeeded: its next failure starts the backoff over."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self) -> Key | None:
        """The next key to work on, or None once shut down."""
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                self._promote_delayed()
                if (key := self._next()) is not None:
                    self._queued.discard(key)
                    self._urgent.discard(key)
                    self._processing.add(key)
                    now = time.monotonic()
                    QUEUE_SECONDS.observe(now - self._added_at.pop(key, now), controller=self.name)
                    return key
                wait = self._delayed[0][0] - time.monotonic() if self._delayed else None
                self._cond.wait(timeout=max(wait, 0.0) if wait is not None else None)

    def done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    if key in self._urgent:
                        self._urgent_queue.appendleft(key)
                    else:
                        self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queued)

    def _next(self) -> Key | None:
        """The next queued key, urgent ones first; entries left behind by a promotion skipped."""
        while self._urgent_queue:
            key = self._urgent_queue.popleft()
            if key in self._queued and key in self._urgent:
                return key
        while self._queue:
            key = self._queue.popleft()
            if key in self._queued and key not in self._urgent:
                return key
        return None

    def _promote_delayed(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            at, key = heapq.heappop(self._delayed)
            if self._ready_at.get(key) != at:
                continue  # an earlier time for this key came first and brought it
            del self._ready_at[key]
            if key in self._processing:
                if key not in self._dirty:
                    self._added(key)
                self._dirty.add(key)
            elif key not in self._queued:
                self._added(key)
                self._queued.add(key)
                self._queue.append(key)

    def _added(self, key: Key) -> None:
        """`key` is in the queue now, or will be once its worker is done (client-go's metrics: a
        delayed key counts from when it is due)."""
        ADDS.inc(controller=self.name)
        self._added_at.setdefault(key, time.monotonic())
