"""One builder at a time per cached product, across processes.

CI builds the later legs' tools in the background while the first leg runs (`devstack prebuild`);
a leg that needs a product still being built waits for that build instead of writing the same
`.partial` beside it, then finds the product cached (issue 51).
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_path(product: Path) -> Path:
    return product.with_name(product.name + ".lock")


@contextmanager
def held(product: Path, what: str) -> Iterator[None]:
    """Hold `product`'s build lock; say so when another process holds it and for how long we waited.
    The caller checks again whether the product exists once it holds the lock."""
    path = lock_path(product)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another process building {what} ...", flush=True)
            started = time.monotonic()
            fcntl.flock(f, fcntl.LOCK_EX)
            print(f"  {what}: waited {time.monotonic() - started:.0f}s for the other build", flush=True)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(
    product: Path, what: str, build: Callable[[], None], built: Callable[[], bool] | None = None
) -> None:
    """`build()` unless the product is built (`built()`, by default: `product` exists), by one
    process at a time: a caller that waited for another's build finds it done and builds nothing."""
    done = built or product.exists
    if done():
        return
    with held(product, what):
        if not done():
            build()
