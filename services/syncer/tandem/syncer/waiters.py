"""Hook calls waiting on the caches, each woken by a change to what it waits on.

A prolog's lock call waits until a pass over its Slurm node settled the hold; a job's end waits
until its Pods are gone. They used to share one condition that every Pod change and every
store change notified: each of W waiting calls re-checked on each of E changes, under the Pod
informer's lock. At 1,000 nodes a wave of 500 prologs made that W x E the syncer's busiest work
(issue 22). Here a call names its keys (the Slurm node it locks, the job whose Pods it waits
for) and only a change to one of them wakes it.

A call waits on its own thread (`wait_for`) or, served by grpc.aio, as a coroutine on the
server's event loop (`wait_async`): hundreds of prologs waiting at once then hold no thread
(issue 40). Wakes come from the informers' and the node sync's threads either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import Protocol

# A Slurm node (its hold, its slurmd Pod, the Node hosting it), a job (its KillWait entry, the
# Pods recorded as its), a Pod (by uid).
Key = tuple[str, str]

# However a change was missed, a waiter looks again this often: a missed wake costs seconds,
# never a prolog's whole budget.
RECHECK_SECONDS = 2.0


def node_key(slurm_node: str) -> Key:
    return ("node", slurm_node)


def job_key(job_id: int | str) -> Key:
    return ("job", str(job_id))


def pod_key(uid: str) -> Key:
    return ("pod", uid)


class Wakeable(Protocol):
    def set(self) -> None: ...


class _LoopWake:
    """Wakes a coroutine waiting on `loop` from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.event = asyncio.Event()

    def set(self) -> None:
        # A loop already closed (the server stopped) has no one left to wake.
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.event.set)


class Waiters:
    def __init__(self, recheck: float = RECHECK_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._recheck = recheck
        self._clock = clock
        self._lock = threading.Lock()
        self._by_key: dict[Key, set[Wakeable]] = {}

    def wait_for(self, keys: Collection[Key], ready: Callable[[], bool], timeout: float) -> bool:
        """Until `ready()` holds, checked now and after each wake of one of `keys`, or `timeout`
        seconds. `ready` runs on the caller's thread, under no lock of this class."""
        woken = threading.Event()
        deadline = self._clock() + timeout
        with self._registered(keys, woken):
            while True:
                woken.clear()  # before the check: a wake during it is not lost
                if ready():
                    return True
                left = deadline - self._clock()
                if left <= 0:
                    return False
                woken.wait(min(left, self._recheck))

    async def wait_async(self, keys: Collection[Key], ready: Callable[[], bool], timeout: float) -> bool:
        """`wait_for` as a coroutine: it holds no thread while it waits. `ready` runs on the event
        loop, so it must only read memory (the caches, the hold store: short locks, no I/O).
        Cancelled (the caller went away, the server stops), it leaves nothing registered."""
        loop = asyncio.get_running_loop()
        woken = _LoopWake(loop)
        deadline = self._clock() + timeout
        with self._registered(keys, woken):
            while True:
                # Before the check: a wake during it is queued on the loop and lands after it.
                woken.event.clear()
                if ready():
                    return True
                left = deadline - self._clock()
                if left <= 0:
                    return False
                # The recheck is a wake of its own: one timer, no task per look.
                timer = loop.call_later(min(left, self._recheck), woken.event.set)
                try:
                    await woken.event.wait()
                finally:
                    timer.cancel()

    @contextlib.contextmanager
    def _registered(self, keys: Collection[Key], woken: Wakeable) -> Iterator[None]:
        """`woken` is woken by a change to any of `keys` while the block runs, and is left
        registered nowhere after it, however it ends (a cancelled coroutine included)."""
        with self._lock:
            for key in keys:
                self._by_key.setdefault(key, set()).add(woken)
        try:
            yield
        finally:
            with self._lock:
                for key in keys:
                    waiting = self._by_key.get(key)
                    if waiting is not None:
                        waiting.discard(woken)
                        if not waiting:
                            del self._by_key[key]

    def wake(self, *keys: Key) -> None:
        with self._lock:
            woken = [w for key in keys for w in self._by_key.get(key, ())]
        for w in woken:
            w.set()

    def waiting(self) -> int:
        """How many keys someone waits on (for tests and metrics)."""
        with self._lock:
            return len(self._by_key)

    def waiting_on(self, key: Key) -> int:
        """How many calls wait on `key` (for tests and metrics)."""
        with self._lock:
            return len(self._by_key.get(key, ()))
