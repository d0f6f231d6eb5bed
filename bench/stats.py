"""What the benchmarks quote, and when a difference may be claimed (issue 55).

- Latency as percentiles with the count they came from (p50, p90, p99, p99.9, max): a p99.9 of
  200 samples is the maximum, and the reader must see that.
- A figure measured in several interleaved runs as its median with a bootstrap interval; two
  arms differ only when their intervals do not overlap.
- The order of the arms in each round of an interleaved run, rotated so that no arm always runs
  first (on a warm cache) or last (after the others' leftovers).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999))


def percentile(values: Sequence[float], q: float) -> float:
    """The sample at rank q of the sorted values (nearest rank; no interpolation)."""
    if not values:
        raise ValueError("a percentile of no samples")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


@dataclass(frozen=True)
class Percentiles:
    count: int
    p50: float
    p90: float
    p99: float
    p999: float
    max: float

    def as_json(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "p99.9": self.p999,
            "max": self.max,
        }


def percentiles(values: Sequence[float]) -> Percentiles:
    p50, p90, p99, p999 = (percentile(values, q) for _, q in QUANTILES)
    return Percentiles(len(values), p50, p90, p99, p999, max(values))


@dataclass(frozen=True)
class Interval:
    """A median and its bootstrap interval at `confidence`."""

    median: float
    low: float
    high: float
    confidence: float
    samples: int

    def separated_from(self, other: Interval) -> bool:
        """The two intervals do not overlap: the only case in which a difference is claimed."""
        return self.high < other.low or other.high < self.low

    def __str__(self) -> str:
        return f"{self.median:.3g} [{self.low:.3g}, {self.high:.3g}]"

    def as_json(self) -> dict[str, float]:
        """As a run's record keeps it (bench/report_curve.py, bench/report_arms.py read it)."""
        return {"median": round(self.median, 4), "low": round(self.low, 4), "high": round(self.high, 4)}


def median_interval(
    samples: Sequence[float], confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> Interval:
    """The median of per-run figures and its percentile-bootstrap interval: the medians of
    `resamples` resamples with replacement, cut at the two tails. Seeded, so a report is
    reproducible from the samples it prints."""
    if not samples:
        raise ValueError("an interval of no samples")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    rng = random.Random(seed)
    n = len(samples)
    medians = sorted(statistics.median(rng.choices(samples, k=n)) for _ in range(resamples))
    tail = (1 - confidence) / 2
    low = medians[round(tail * (resamples - 1))]
    high = medians[round((1 - tail) * (resamples - 1))]
    return Interval(statistics.median(samples), low, high, confidence, n)


def interleaved(arms: Sequence[str], rounds: int) -> list[list[str]]:
    """Each round's order of the arms: the first round as given, each next one rotated by one."""
    if len(set(arms)) != len(arms):
        raise ValueError(f"arms named twice: {list(arms)}")
    return [[arms[(r + i) % len(arms)] for i in range(len(arms))] for r in range(rounds)]
