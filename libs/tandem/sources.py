"""What a controller reads before it acts, as a person reads it on /readyz. The manager
(tandem.manager) holds one list of them: its workers start when every source has synced, and
readiness says which have not and why, so a cache the workers wait for can never be missing from
/readyz."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class Syncing(Protocol):
    """An informer or a stream: whether it has read everything once, and why not if it failed."""

    @property
    def synced(self) -> bool: ...

    @property
    def trouble(self) -> str: ...


@dataclass(frozen=True)
class Source:
    # What it is, as a person reads it on /readyz: "Nodes", "the tenant policy".
    name: str
    synced: Callable[[], bool]
    # Why it has not synced: the last error ("" when it merely has not answered yet).
    trouble: Callable[[], str] = lambda: ""

    @classmethod
    def of(cls, name: str, what: Syncing) -> Source:
        return cls(name, lambda: what.synced, lambda: what.trouble)

    def waiting(self) -> str:
        """What readiness says while it has not synced: what, and the last error if there was one."""
        trouble = self.trouble()
        return f"{self.name}: not read yet" + (f" ({trouble})" if trouble else "")

    def timed_out(self, after: float) -> str:
        """What readiness says once it has not synced for `after` seconds (a cache-sync timeout)."""
        return f"caches not synced after {after:g}s: {self.name}: {self.trouble() or 'no answer yet'}"
