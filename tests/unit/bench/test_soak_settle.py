"""The soak's settle (bench/soak.py): it ends once every invariant has read 0 for a quiet spell,
not after a fixed wait, and never ends early on a count that is not 0 (issue 51)."""

from __future__ import annotations

from collections.abc import Callable

from bench.soak import settled
from tests.unit.fake_clock import Clock


def _reads(*counts: int) -> tuple[Clock, list[int], Callable[[], dict[str, int]]]:
    clock, seen = Clock(), list(counts)
    calls: list[int] = []

    def invariants() -> dict[str, int]:
        value = seen.pop(0) if seen else counts[-1]
        calls.append(value)
        return {"locked_idle_nodes": value}

    return clock, calls, invariants


def test_a_stack_quiet_at_once_settles_after_the_quiet_spell_not_the_most() -> None:
    clock, _, invariants = _reads(0)
    counts, took = settled(invariants, most=90, quiet=40, every=5, clock=clock, sleep=clock.sleep)
    assert counts == {"locked_idle_nodes": 0} and took == 40


def test_a_count_that_comes_back_starts_the_quiet_spell_again() -> None:
    clock, calls, invariants = _reads(1, 0, 0, 2, 0)
    counts, took = settled(invariants, most=90, quiet=40, every=5, clock=clock, sleep=clock.sleep)
    assert counts == {"locked_idle_nodes": 0} and took == 20 + 40
    assert calls[:5] == [1, 0, 0, 2, 0]


def test_a_count_that_never_goes_is_reported_after_the_most() -> None:
    clock, _, invariants = _reads(3)
    counts, took = settled(invariants, most=90, quiet=40, every=5, clock=clock, sleep=clock.sleep)
    assert counts == {"locked_idle_nodes": 3} and took == 90
