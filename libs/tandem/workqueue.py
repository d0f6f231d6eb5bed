"""A work queue in the manner of client-go's: a key is queued at most once, is never processed by
two workers at once, and is processed again if it changed while a worker had it."""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable

Key = str


class WorkQueue:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: deque[Key] = deque()
        self._urgent: set[Key] = set()
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._delayed: list[tuple[float, Key]] = []
        self._shutdown = False

    def add(self, key: Key, urgent: bool = False) -> None:
        """Queue `key`; an urgent key (e.g. a Pod ready to bind) goes ahead of routine updates."""
        with self._cond:
            if key in self._processing:
                self._dirty.add(key)
                if urgent:
                    self._urgent.add(key)
                return
            if key in self._queued:
                if urgent and key not in self._urgent:
                    self._queue.remove(key)
                    self._queue.appendleft(key)
                    self._urgent.add(key)
                return
            self._queued.add(key)
            if urgent:
                self._urgent.add(key)
                self._queue.appendleft(key)
            else:
                self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: Key, seconds: float) -> None:
        with self._cond:
            heapq.heappush(self._delayed, (time.monotonic() + seconds, key))
            self._cond.notify()

    def get(self) -> Key | None:
        """The next key to work on, or None once shut down."""
        with self._cond:
            while True:
                if self._shutdown:
                    return None
                self._promote_delayed()
                if self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
                    self._urgent.discard(key)
                    self._processing.add(key)
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
                        self._queue.appendleft(key)
                    else:
                        self._queue.append(key)
                    self._cond.notify()

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def _promote_delayed(self) -> None:
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            _, key = heapq.heappop(self._delayed)
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._queue.append(key)


def run_workers(
    queue: WorkQueue, handle: Callable[[Key], None], count: int, name: str
) -> list[threading.Thread]:
    def loop() -> None:
        while (key := queue.get()) is not None:
            try:
                handle(key)
            finally:
                queue.done(key)

    threads = [threading.Thread(target=loop, name=f"{name}-{i}", daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads
