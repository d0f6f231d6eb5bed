"""Hook calls wait on the keys they name: a change to one of them wakes the call at once, a change
to another key does not make it look again, and a missed wake costs a recheck, not the call."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

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
    assert len(call.checks) >= 5


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
