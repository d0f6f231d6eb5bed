"""The bearer tokens the hooks API accepts, re-read when their file changes.

A Kubernetes Secret volume swaps its files through a symlink (`..data`) when the Secret changes:
a stat that follows the link sees another inode. So a rotated token is picked up within
`check_every` seconds, without a restart. The Slurm nodes get the new token at their own pace
(kubelet's sync, a config tool's run), so the previous token is still accepted for `grace`
seconds after the change: a prolog that read the old file a moment ago does not fail and drain its
node. `grace=0` refuses the old token at once (revoking a leaked one).
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

DEFAULT_GRACE = 120.0
_Clock = Callable[[], float]


class BearerTokens:
    """Decides whether a presented bearer token is one we accept now."""

    def __init__(
        self,
        token: str = "",
        *,
        path: str = "",
        grace: float = DEFAULT_GRACE,
        check_every: float = 1.0,
        clock: _Clock = time.monotonic,
    ) -> None:
        self.path = path
        self.grace = grace
        self.check_every = check_every
        self._clock = clock
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._checked = clock()
        self._previous = b""
        self._previous_until = 0.0
        self._current = (self._read() if path else token).encode()
        if not self._current:
            where = f"{path} is empty" if path else "no token given"
            raise ValueError(
                f"the hooks API needs a bearer token ({where}); anonymous calls are never served"
            )

    @classmethod
    def from_file(cls, path: str, grace: float = DEFAULT_GRACE) -> BearerTokens:
        return cls(path=path, grace=grace)

    def accepts(self, presented: str) -> bool:
        current, previous = self._tokens()
        given = presented.encode()
        # Both compared, always: the time taken says nothing about which one (if any) matched.
        now_ok = hmac.compare_digest(given, current)
        old_ok = bool(previous) and hmac.compare_digest(given, previous)
        return now_ok or old_ok

    def values(self) -> tuple[bytes, ...]:
        """The secrets accepted now: the current one, and the previous one within its grace."""
        current, previous = self._tokens()
        return (current, previous) if previous else (current,)

    def _tokens(self) -> tuple[bytes, bytes]:
        if self.path:
            self._refresh()
        with self._lock:
            previous = self._previous if self._clock() < self._previous_until else b""
            return self._current, previous

    def _refresh(self) -> None:
        """Re-read the file if it changed, at most once per `check_every` (a stat is cheap; a
        flood of requests still makes one a second)."""
        now = self._clock()
        with self._lock:
            if now - self._checked < self.check_every:
                return
            self._checked = now
            try:
                st = os.stat(self.path)
            except OSError as e:
                log.warning("cannot stat the hooks token file; keeping the token", extra={"error": str(e)})
                return
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            try:
                token = self._read().encode()
            except OSError as e:
                log.warning("cannot read the hooks token file; keeping the token", extra={"error": str(e)})
                return
            if not token:
                # Caught mid-rewrite (truncated, not yet written): the next check reads it again.
                return
            if token != self._current:
                self._previous, self._previous_until = self._current, now + self.grace
                self._current = token
                log.info("hooks token changed", extra={"grace_seconds": self.grace})

    def _read(self) -> str:
        st = os.stat(self.path)
        with open(self.path) as f:
            token = f.read().strip()
        if token:
            self._stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        return token
