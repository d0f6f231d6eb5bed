"""A clock a test moves by hand: called, it says the time; `sleep` moves it on at once."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
