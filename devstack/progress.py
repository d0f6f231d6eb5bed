"""Say what a long first-time step is doing, and for how long, while it runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def step(what: str, every: float = 30.0) -> Iterator[None]:
    """Print `what` at the start, the time so far every `every` seconds, and the total at the end."""
    started = time.monotonic()
    print(f"{what} ...", flush=True)
    done = threading.Event()

    def tick() -> None:
        while not done.wait(every):
            print(f"  still {what}: {time.monotonic() - started:.0f}s so far", flush=True)

    ticker = threading.Thread(target=tick, name="progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
    print(f"  {what}: done in {time.monotonic() - started:.0f}s", flush=True)
