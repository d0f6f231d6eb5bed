"""What a controller reads before it acts, registered once: the runner starts its workers when
every source has synced, and readiness says which have not and why (controller-runtime's manager
waits for its caches the same way; here the same list serves both, so a cache the workers wait
for can never be missing from /readyz)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


class Sources:
    def __init__(self, sources: Sequence[Source]) -> None:
        self.sources = tuple(sources)

    def synced(self) -> bool:
        return all(s.synced() for s in self.sources)

    def waiting_for(self) -> list[str]:
        """One line per source not synced yet: what, and the last error if there was one."""
        return [s.waiting() for s in self.sources if not s.synced()]
