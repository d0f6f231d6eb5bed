"""An epilog's release after a placeholder's end read from Slurm asks Slurm nothing more, but never
releases a requeued run's newer hold."""

from __future__ import annotations

from tandem.syncer.holds import HoldStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_release_after_the_job_was_read_ended_needs_no_read_of_slurm() -> None:
    clock = Clock()
    store = HoldStore(clock=clock)
    store.hold("n1", 7, strict=True, deadline=200.0)
    clock.now += 1
    store.left(7)
    assert store.release_left("n1", 7) is not None
    assert store.holds_of("n1") == []


def test_a_requeued_runs_newer_hold_is_not_released_without_asking_slurm() -> None:
    clock = Clock()
    store = HoldStore(clock=clock)
    store.hold("n1", 7, strict=True, deadline=200.0)
    clock.now += 1
    store.left(7)
    clock.now += 1
    store.hold("n1", 7, strict=True, deadline=300.0)  # the requeued run's prolog
    assert store.release_left("n1", 7) is None
    assert store.holds_of("n1") == [7]


def test_a_job_never_read_ended_must_ask_slurm() -> None:
    store = HoldStore(clock=Clock())
    store.hold("n1", 7, strict=True, deadline=200.0)
    assert store.release_left("n1", 7) is None
