"""What this process wrote and its caches do not show yet: kube-scheduler's assume cache, kopf's wait
for its own patch. An informer's copy lags a write by milliseconds; a reconcile in that window must
act on what was written, not on the older copy (or it writes, submits or announces the same thing
twice).

A write to the API server is assumed with the resourceVersion the server answered; it is dropped as
soon as the cache shows that version or a newer one (resourceVersions are etcd revisions: kube-
scheduler compares them as integers too). A write elsewhere (a Slurm job submitted, which no
resourceVersion follows) is assumed with no version and kept until the caller sees it and forgets
it. Either way an entry lives at most `ttl` seconds and at most `limit` entries are kept: a write
the cache never showed was lost, and after that long the cache is the better witness.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    version: str
    at: float


def version_of(answer: object) -> str:
    """The resourceVersion an API server's answer to a write carries ("" when it carries none)."""
    meta = answer.get("metadata") if isinstance(answer, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(version) if version else ""


def caught_up(seen: str | None, written: str) -> bool:
    """Whether a cached object of resourceVersion `seen` includes a write answered with `written`."""
    if not written:
        return False  # not a versioned write: only its owner knows when it is seen
    if seen is None or seen == "":
        return False
    if seen.isdigit() and written.isdigit():
        return int(seen) >= int(written)
    return seen == written  # opaque versions: only equality says anything


class AssumeCache(Generic[V]):
    def __init__(
        self, limit: int = 10_000, ttl: float = 300.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit, self.ttl, self.clock = limit, ttl, clock
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()
        self._lock = threading.Lock()

    def assume(self, key: str, value: V, version: str = "") -> None:
        """`key` was written as `value`; the API answered `version` ("" for a write outside it)."""
        with self._lock:
            self._entries[key] = _Entry(value, version, self.clock())
            self._entries.move_to_end(key)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def get(self, key: str, seen: str | None = None) -> V | None:
        """What was written for `key`, while the cache's copy (of resourceVersion `seen`) does not
        show it yet; None once it does, or when nothing is assumed."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if caught_up(seen, entry.version) or self.clock() - entry.at > self.ttl:
                del self._entries[key]
                return None
            return entry.value

    def forget(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
