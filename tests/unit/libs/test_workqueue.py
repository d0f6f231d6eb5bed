from __future__ import annotations

import threading
import time

from tandem.metrics import REGISTRY
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


def test_a_key_made_urgent_then_queued_again_is_handed_out_once_per_queueing() -> None:
    q = WorkQueue()
    for key in ("a", "b", "c"):
        q.add(key)
    q.add("b", urgent=True)
    assert q.get() == "b"
    q.done("b")
    q.add("b")  # its routine place from before the promotion must not hand it out twice
    taken: list[str] = []
    while len(q):
        got = q.get()
        assert got is not None
        taken.append(got)
        q.done(got)
    assert sorted(taken) == ["a", "b", "c"]


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


def _queue_metric(sample: str, queue: WorkQueue) -> float:
    return REGISTRY.sample(sample, controller=queue.name) or 0.0


def test_a_key_taken_has_its_time_in_the_queue_observed() -> None:
    q = WorkQueue(name="test-queue-duration")
    q.add("a")
    time.sleep(0.05)
    assert q.get() == "a"
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_count", q) == 1
    assert 0.05 <= _queue_metric("tandem_workqueue_queue_duration_seconds_sum", q) < 5
    # As /metrics shows it: the controller's name, the buckets the histogram had.
    rendered = REGISTRY.render()
    bucket = 'tandem_workqueue_queue_duration_seconds_bucket{controller="test-queue-duration"'
    assert f'{bucket},le="0.01"}} 0.0\n' in rendered
    assert f'{bucket},le="+Inf"}} 1.0\n' in rendered
    assert 'tandem_workqueue_adds_total{controller="test-queue-duration"} 1.0\n' in rendered


def test_a_key_added_again_before_it_is_taken_is_one_add_timed_from_the_first() -> None:
    q = WorkQueue(name="test-queue-adds")
    q.add("a")
    time.sleep(0.05)
    q.add("a")
    q.add("b", urgent=True)
    assert [q.get(), q.get()] == ["b", "a"]
    assert _queue_metric("tandem_workqueue_adds_total", q) == 2
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_sum", q) >= 0.05


def test_a_key_changed_while_worked_on_waits_from_its_change() -> None:
    """client-go's: the time counts from the add, through the worker still holding the key."""
    q = WorkQueue(name="test-queue-dirty")
    q.add("a")
    assert q.get() == "a"
    q.add("a")
    q.add("a")
    time.sleep(0.05)
    q.done("a")
    assert q.get() == "a"
    assert _queue_metric("tandem_workqueue_adds_total", q) == 2
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_count", q) == 2
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_sum", q) >= 0.05


def test_a_delayed_key_waits_from_when_it_is_due_not_from_when_it_was_asked_for() -> None:
    q = WorkQueue(name="test-queue-delayed")
    q.add_after("a", 0.1)
    assert _queue_metric("tandem_workqueue_adds_total", q) == 0
    assert q.get() == "a"
    assert _queue_metric("tandem_workqueue_adds_total", q) == 1
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_count", q) == 1
    assert _queue_metric("tandem_workqueue_queue_duration_seconds_sum", q) < 0.05
