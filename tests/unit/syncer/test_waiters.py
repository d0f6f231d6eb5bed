"""Hook calls wait on the keys they name: a change to one of them wakes the call at once, a change
to another key does not make it look again, and a missed wake costs a recheck, not the call. The
same holds for a call waiting as a coroutine on the gRPC server's event loop, woken from the
informers' threads."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from tandem.syncer.waiters import Key, Waiters, job_key, node_key


class _Call:
    """A hook call waiting on `keys` on its own thread; it is ready once `ready` is set."""

    def __init__(self, waiters: Waiters, keys: list[Key], timeout: float) -> None:
        self.ready = False
        self.checks: list[float] = []
        self.result: list[bool] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(waiters.wait_for(keys, self._check, timeout))
        )
        self.thread.start()
        _until(lambda: len(self.checks) == 1)

    def _check(self) -> bool:
        self.checks.append(time.monotonic())
        return self.ready


def _until(condition: Callable[[], bool], within: float = 2.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_change_to_the_key_a_call_waits_on_wakes_it_at_once() -> None:
    waiters = Waiters(recheck=60.0)
    call = _Call(waiters, [node_key("cpu-001")], timeout=30.0)
    call.ready = True
    began = time.monotonic()
    waiters.wake(node_key("cpu-001"))
    call.thread.join(2.0)
    assert call.result == [True]
    assert time.monotonic() - began < 1.0
    assert waiters.waiting() == 0  # nothing left registered


def test_a_change_to_another_key_does_not_make_a_call_look_again() -> None:
    waiters = Waiters(recheck=60.0)
    call = _Call(waiters, [node_key("cpu-001"), job_key(7)], timeout=30.0)
    for _ in range(50):
        waiters.wake(node_key("cpu-002"), job_key(8))
    time.sleep(0.1)
    assert len(call.checks) == 1
    call.ready = True
    waiters.wake(job_key(7))  # any of its keys
    call.thread.join(2.0)
    assert call.result == [True]


def test_a_call_nobody_wakes_looks_again_each_recheck_and_gives_up_at_its_timeout() -> None:
    waiters = Waiters(recheck=0.05)
    call = _Call(waiters, [node_key("cpu-001")], timeout=0.5)
    call.thread.join(2.0)
    assert call.result == [False]
    # Ten rechecks on an idle machine; a loaded one (CI's background builds) wakes the thread late,
    # and four came once. It looked again, more than once, and did not spin.
    assert 3 <= len(call.checks) <= 12


def test_a_wake_while_the_call_checks_is_not_lost() -> None:
    waiters = Waiters(recheck=60.0)
    woke_during_check = threading.Event()
    calls = {"n": 0}

    def ready() -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            waiters.wake(node_key("cpu-001"))  # the change lands while the first check runs
            woke_during_check.set()
            return False
        return True

    began = time.monotonic()
    assert waiters.wait_for([node_key("cpu-001")], ready, timeout=30.0)
    assert woke_during_check.is_set() and time.monotonic() - began < 1.0


# -- waiting as a coroutine (grpc.aio: the waiting call holds no thread) ---------------------------


def _on_a_loop(work: Callable[[asyncio.AbstractEventLoop], Any]) -> Any:
    """Run `work(loop)`'s coroutine on an event loop of its own, as the gRPC server's."""

    async def main() -> Any:
        return await work(asyncio.get_running_loop())

    return asyncio.run(main())


def test_a_coroutine_waiting_on_a_key_is_woken_at_once_by_another_thread() -> None:
    waiters = Waiters(recheck=60.0)
    ready = threading.Event()

    async def work(loop: asyncio.AbstractEventLoop) -> tuple[bool, float]:
        waiting = asyncio.ensure_future(waiters.wait_async([node_key("cpu-001")], ready.is_set, 30.0))
        while waiters.waiting_on(node_key("cpu-001")) == 0:
            await asyncio.sleep(0.005)
        began = time.monotonic()

        def informer_thread() -> None:
            ready.set()
            waiters.wake(node_key("cpu-001"))

        threading.Thread(target=informer_thread).start()
        return await waiting, time.monotonic() - began

    woken, took = _on_a_loop(work)
    assert woken and took < 1.0
    assert waiters.waiting() == 0


def test_a_coroutine_nobody_wakes_looks_again_each_recheck_and_gives_up_at_its_timeout() -> None:
    waiters = Waiters(recheck=0.05)
    checks: list[float] = []

    def ready() -> bool:
        checks.append(time.monotonic())
        return False

    async def work(_: asyncio.AbstractEventLoop) -> bool:
        return await waiters.wait_async([node_key("cpu-001")], ready, 0.5)

    began = time.monotonic()
    assert _on_a_loop(work) is False
    assert 0.45 < time.monotonic() - began < 1.5
    assert len(checks) >= 5
    assert waiters.waiting() == 0


def test_a_cancelled_coroutine_leaves_nothing_registered() -> None:
    """The caller went away (grpc.aio cancels the call's coroutine): its waiter goes with it."""
    waiters = Waiters(recheck=60.0)

    async def work(_: asyncio.AbstractEventLoop) -> bool:
        waiting = asyncio.ensure_future(
            waiters.wait_async([node_key("cpu-001"), job_key(7)], lambda: False, 30)
        )
        while waiters.waiting() < 2:
            await asyncio.sleep(0.005)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return waiting.cancelled()

    assert _on_a_loop(work)
    assert waiters.waiting() == 0
    waiters.wake(node_key("cpu-001"))  # nobody left to wake, and no loop: nothing happens


def test_a_wake_while_the_coroutine_checks_is_not_lost() -> None:
    waiters = Waiters(recheck=60.0)
    calls = {"n": 0}

    def ready() -> bool:
        calls["n"] += 1
        if calls["n"] == 1:
            woke = threading.Thread(target=waiters.wake, args=(node_key("cpu-001"),))
            woke.start()
            woke.join()  # the change lands while the first check runs
            return False
        return True

    async def work(_: asyncio.AbstractEventLoop) -> bool:
        return await waiters.wait_async([node_key("cpu-001")], ready, 30.0)

    began = time.monotonic()
    assert _on_a_loop(work)
    assert time.monotonic() - began < 1.0
