"""A stop event for the soak's loops in unit tests."""

from __future__ import annotations


class Ticks:
    """A stop event that lets a loop go round `n` times."""

    def __init__(self, n: int) -> None:
        self.n = n

    def wait(self, timeout: float) -> bool:
        self.n -= 1
        return self.n < 0
