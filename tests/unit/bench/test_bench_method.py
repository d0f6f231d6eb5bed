"""The benchmark method (issue 55): open-loop arrivals whose latency counts from the intended
start, percentiles with their counts, medians with bootstrap intervals, interleaved arms."""

from __future__ import annotations

import itertools
import statistics
import threading
import time

import pytest

from bench import openloop, stats


def test_poisson_arrivals_are_fixed_by_the_seed_and_average_the_rate() -> None:
    arrivals = openloop.poisson_arrivals(50, 200, seed=3)
    assert arrivals == openloop.poisson_arrivals(50, 200, seed=3)
    assert arrivals != openloop.poisson_arrivals(50, 200, seed=4)
    assert arrivals == sorted(arrivals) and arrivals[0] > 0 and arrivals[-1] < 200
    assert 9_500 < len(arrivals) < 10_500  # 50/s for 200 s, give or take 5 %
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    # Exponential gaps: the standard deviation equals the mean (a fixed pace would have none).
    assert statistics.stdev(gaps) == pytest.approx(statistics.mean(gaps), rel=0.1)


@pytest.mark.parametrize(("rate", "seconds"), [(0, 10), (-1, 10), (5, 0)])
def test_no_load_is_refused(rate: float, seconds: float) -> None:
    with pytest.raises(ValueError, match="above zero"):
        openloop.poisson_arrivals(rate, seconds, seed=1)


def test_a_system_that_stalls_meets_the_same_arrivals_and_the_wait_is_in_the_latency() -> None:
    """One worker, and the first act stalls 0.3 s: the arrivals behind it are sent late, and
    their latency from the intended start says so; clocked from the send it would not."""
    arrivals = [0.0, 0.05, 0.10, 0.15]
    done: dict[int, float] = {}

    def act(i: int) -> None:
        if i == 0:
            time.sleep(0.3)
        done[i] = time.monotonic()

    sent = openloop.offer(arrivals, act, workers=1)
    assert [s.index for s in sent] == [0, 1, 2, 3]
    late = sent[1:]
    assert all(s.slip > 0.1 for s in late), [round(s.slip, 3) for s in sent]
    assert all(s.latency(done[s.index]) >= 0.3 - arrivals[s.index] - 0.01 for s in late)
    assert all(done[s.index] - s.sent < 0.05 for s in late)  # what a send-clocked latency shows


def test_with_enough_workers_every_arrival_is_sent_on_time() -> None:
    """Each act outlives every later arrival: on too few workers the last would be sent an act's
    length late (0.5 s) or more. The bound is half that, since a loaded machine (a fresh CI run
    building beside the unit tests) delays a thread's start by tens of milliseconds."""
    arrivals = [i * 0.02 for i in range(10)]
    began = threading.Event()

    def act(i: int) -> None:
        began.set()
        time.sleep(0.5)

    sent = openloop.offer(arrivals, act, workers=10)
    assert began.is_set() and max(s.slip for s in sent) < 0.25
    assert len(sent) == len(arrivals)


def test_the_warm_up_is_left_out_by_intended_time() -> None:
    sent = [openloop.Sent(i, 100.0 + t, 100.0 + t + 5) for i, t in enumerate([0.5, 1.0, 2.0, 3.0])]
    assert [s.index for s in openloop.measured(sent, start=100.0, warmup=1.0)] == [1, 2, 3]


def test_the_highest_rate_within_the_limit_stops_at_the_first_that_fails() -> None:
    assert openloop.highest_within({10: 0.5, 20: 0.8, 30: 1.5, 40: 0.9}, limit=1.0) == 20
    assert openloop.highest_within({10: 1.5}, limit=1.0) is None


def test_percentiles_come_with_their_count() -> None:
    values = [float(i) for i in range(1, 1001)]
    p = stats.percentiles(values)
    assert (p.count, p.p50, p.p90, p.p99, p.p999, p.max) == (1000, 501.0, 900.0, 990.0, 999.0, 1000.0)
    assert stats.percentiles([2.0]).as_json() == {
        "count": 1,
        "p50": 2.0,
        "p90": 2.0,
        "p99": 2.0,
        "p99.9": 2.0,
        "max": 2.0,
    }
    with pytest.raises(ValueError, match="no samples"):
        stats.percentiles([])


def test_the_interval_holds_the_median_and_narrows_with_more_runs() -> None:
    few = stats.median_interval([10.0, 12.0, 11.0, 30.0, 9.0], seed=1)
    assert few.median == 11.0 and few.low <= few.median <= few.high
    assert few == stats.median_interval([10.0, 12.0, 11.0, 30.0, 9.0], seed=1)
    many = stats.median_interval([10.0, 12.0, 11.0, 30.0, 9.0] * 8, seed=1)
    assert many.high - many.low <= few.high - few.low
    assert str(few).startswith("11 [")


def test_a_difference_is_claimed_only_when_the_intervals_separate() -> None:
    fast = stats.median_interval([1.0, 1.1, 0.9, 1.05, 0.95], seed=2)
    slow = stats.median_interval([2.0, 2.1, 1.9, 2.05, 1.95], seed=2)
    noisy = stats.median_interval([0.5, 3.0, 1.5, 2.5, 1.0], seed=2)
    assert fast.separated_from(slow) and slow.separated_from(fast)
    assert not fast.separated_from(noisy) and not noisy.separated_from(slow)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5])
def test_a_confidence_outside_zero_to_one_is_refused(confidence: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        stats.median_interval([1.0], confidence=confidence)


def test_each_arm_runs_in_each_position_once_every_len_arms_rounds() -> None:
    arms = ["bare", "bare-in-tandem", "kube-scheduler", "tandem"]
    rounds = stats.interleaved(arms, 4)
    assert rounds[0] == arms
    for position in range(4):
        assert sorted(r[position] for r in rounds) == sorted(arms)
    with pytest.raises(ValueError, match="named twice"):
        stats.interleaved(["a", "a"], 2)
