"""Open-loop load: every arrival's time is fixed before the run starts (a seeded Poisson process),
each operation is started at its time whatever the system under test is doing, and its latency
counts from that intended time (issue 55).

A closed loop (N clients, each sending its next request when the last answered) offers less load
exactly when the system is slow, and a latency clocked from the actual send hides the wait for a
free client: coordinated omission. Here a slow system meets the same arrivals; the time an
arrival waited to be sent is its *slip*, recorded, and inside its latency.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass


def poisson_arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """The offsets (seconds from the start) of a Poisson process of `rate` per second, up to
    `seconds`: exponential gaps, the same for the same seed."""
    if rate <= 0 or seconds <= 0:
        raise ValueError(f"a rate ({rate}/s) and a length ({seconds} s) above zero")
    rng = random.Random(seed)
    arrivals: list[float] = []
    t = rng.expovariate(rate)
    while t < seconds:
        arrivals.append(t)
        t += rng.expovariate(rate)
    return arrivals


@dataclass(frozen=True)
class Sent:
    """One arrival: its index, and when it was meant to start and did (clock seconds)."""

    index: int
    intended: float
    sent: float

    @property
    def slip(self) -> float:
        return self.sent - self.intended

    def latency(self, done: float) -> float:
        """From the intended start, not the send: the slip is part of what the arrival waited."""
        return done - self.intended


def offer(
    arrivals: Sequence[float],
    act: Callable[[int], None],
    workers: int,
    clock: Callable[[], float] = time.monotonic,
) -> list[Sent]:
    """Start act(i) at `start + arrivals[i]` on up to `workers` threads, and return when every
    act has returned. An act that blocks delays only the arrivals that find no free worker,
    and their slip says by how much."""
    if workers < 1:
        raise ValueError(f"{workers} workers")
    start = clock()
    sent: list[Sent] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        intended = start + arrivals[i]
        delay = intended - clock()
        if delay > 0:
            time.sleep(delay)
        now = clock()
        with lock:
            sent.append(Sent(i, intended, now))
        act(i)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, range(len(arrivals))))
    return sorted(sent, key=lambda s: s.index)


def measured(sent: Sequence[Sent], start: float, warmup: float) -> list[Sent]:
    """The arrivals meant to start after the warm-up (the rest warm caches and pools up)."""
    return [s for s in sent if s.intended - start >= warmup]


def highest_within(p99_by_rate: dict[float, float], limit: float) -> float | None:
    """The highest offered rate whose p99 stays within `limit`, with every lower rate within it
    too (a rate past a failing one is not trusted); None if even the lowest fails."""
    best = None
    for rate in sorted(p99_by_rate):
        if p99_by_rate[rate] > limit:
            break
        best = rate
    return best
