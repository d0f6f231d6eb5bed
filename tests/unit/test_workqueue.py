from __future__ import annotations

import threading
import time

from tandem.workqueue import WorkQueue


def test_a_key_is_queued_once_however_often_it_changes() -> None:
    q = WorkQueue()
    for _ in range(3):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get() == "a"
    assert q.get() == "b"


def test_urgent_keys_jump_the_queue_even_if_already_queued() -> None:
    q = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    q.add("c", urgent=True)
    q.add("d", urgent=True)
    assert [q.get() for _ in range(4)] == ["d", "c", "a", "b"]


def test_a_key_changed_while_being_worked_on_comes_back_after_done() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get() == "a"
    q.add("a")  # changed meanwhile: must not be handed to a second worker now
    assert len(q) == 0
    q.done("a")
    assert q.get() == "a"


def test_add_after_delays_and_shutdown_wakes_workers() -> None:
    q = WorkQueue()
    q.add_after("later", 0.2)
    started = time.monotonic()
    assert q.get() == "later"
    assert time.monotonic() - started >= 0.15
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    q.shutdown()
    worker.join(2)
    assert got == [None]


def test_a_key_delayed_several_times_comes_once_at_its_earliest_time() -> None:
    """Before: each add_after was a pass of its own (a node's every pass asked to look again when a
    hold's grace ends: ~3 passes a job, a minute later)."""
    q = WorkQueue()
    q.add_after("a", 0.3)
    q.add_after("a", 0.1)
    q.add_after("a", 0.5)
    started = time.monotonic()
    assert q.get() == "a"
    assert time.monotonic() - started < 0.25
    q.done("a")
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    worker.join(0.8)  # past every later time asked for
    assert got == [] and worker.is_alive()
    q.add_after("a", 0.0)  # asked again after it came: comes again
    worker.join(2)
    assert got == ["a"]
