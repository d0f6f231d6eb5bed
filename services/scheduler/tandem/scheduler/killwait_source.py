"""Slurm's KillWait, which Pods' grace periods are checked against (tandem.scheduler.validation)
and each placeholder job is told (TANDEM_KILL_WAIT): read from Slurm and followed without a restart.

Where it comes from, the first that applies:

1. `--slurm-kill-wait`: an operator's override, fixed for the life of the process;
2. Slurm's running configuration: slurmrestd's GET /conf (Slurm 26.05, data-parser v0.0.45);
3. a copy of slurm.conf (`--slurm-conf-file`; the chart mounts global.slurm.confConfigMap), for a
   slurmrestd without /conf (Slurm 24.11);
4. Slurm's own default, 30s (also what a slurm.conf without KillWait= means).

Each answer says where it came from, in words a Pod's Event can cite. Read again at most every
REFRESH_SECONDS, when asked; a failed read keeps the last good value (logged once per failure
streak). Until a first read works, an unreachable slurmrestd gives no value at all (the controller
waits: a Pod refused for a KillWait guessed wrong would stay refused), while a missing or malformed
slurm.conf falls back to Slurm's default (an operator's mistake that waiting would not mend).

A change applies from the next decision on: a Pod not submitted yet is checked against the new
value, and so is one submitted but not bound yet (refused, its job cancelled, when it no longer
fits: as for a policy change); a bound Pod is only warned (WouldBeRefused). A Pod already refused
for its grace period is not looked at again: a refusal is final until the Pod is recreated
(tandem.reasons.REFUSED_REASONS; nothing un-refuses a Pod), and un-refusing only the Pods whose sole problem
was the grace period would need that problem recorded on each, for a value that rarely grows.
Recreate the Pod after raising KillWait.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tandem.slurm.rest import SlurmApiError

log = logging.getLogger(__name__)

# Slurm's KillWait when slurm.conf sets none.
DEFAULT_KILL_WAIT_SECONDS = 30
# How often Slurm is asked again (a decision asks each time; the answer is cached in between).
REFRESH_SECONDS = 60.0
# KillWait is a uint16 in slurmctld.
MAX_KILL_WAIT_SECONDS = 0xFFFF

FROM_FLAG = "--slurm-kill-wait"
FROM_SLURM = "Slurm's running configuration"
FROM_DEFAULT = "Slurm's default"


def from_file(path: str) -> str:
    return f"slurm.conf at {path}"


@dataclass(frozen=True)
class KillWait:
    seconds: float
    # Where the value came from, as a Pod's Event cites it ("KillWait 30s, from <source>").
    source: str


class SlurmConfError(ValueError):
    """slurm.conf's KillWait= is not a whole number of seconds Slurm would take."""


class ConfReader(Protocol):
    """What the source asks of slurmrestd (tandem.slurm.rest.SlurmRestClient is one)."""

    def get_conf(self) -> dict[str, Any] | None: ...


# `KillWait=30` anywhere on a line (slurm.conf allows several key=value pairs on one), any case.
_KILL_WAIT = re.compile(r"(?:^|\s)killwait\s*=\s*(\S*)", re.IGNORECASE)
_INCLUDE = re.compile(r"^\s*include\s", re.IGNORECASE)


def parse_kill_wait(text: str) -> int | None:
    """KillWait= of slurm.conf text, in seconds; None when it sets none (Slurm's default then).

    Keys are case-insensitive, `#` starts a comment, and the last one wins (as in slurmctld).
    `Include` lines name other files, which are not read: KillWait= belongs in the main file.
    Raises SlurmConfError on a value that is not a whole number of seconds.
    """
    found: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0]
        if _INCLUDE.match(line):
            continue
        for m in _KILL_WAIT.finditer(line):
            found = _whole_seconds(m[1], f"line {number}: KillWait={m[1]}")
    return found


def _whole_seconds(value: object, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        seconds = int(value)
    else:
        raise SlurmConfError(f"{what} is not a whole number of seconds")
    if not 0 <= seconds <= MAX_KILL_WAIT_SECONDS:
        raise SlurmConfError(f"{what} is out of range (0 to {MAX_KILL_WAIT_SECONDS} seconds)")
    return seconds


class KillWaitSource:
    """The current KillWait and where it came from; safe to ask from every worker at once."""

    def __init__(
        self,
        override: float | None = None,
        slurm: ConfReader | None = None,
        conf_file: str = "",
        refresh_seconds: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._override = None if override is None else KillWait(float(override), FROM_FLAG)
        self._slurm = slurm
        self._conf_file = conf_file
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._value: KillWait | None = None
        self._due = float("-inf")
        self._refreshing = False
        self._failing = False

    def current(self) -> KillWait | None:
        """The value now: read again when due (by one caller; the others get the last value
        meanwhile). None only until a first read works (slurmrestd unreachable so far)."""
        if self._override is not None:
            return self._override
        with self._lock:
            if self._refreshing or self._clock() < self._due:
                return self._value
            self._refreshing = True
        fresh: KillWait | None = None
        problem = ""
        try:
            fresh, problem = self._read()
        finally:
            with self._lock:
                self._refreshing = False
                self._due = self._clock() + self._refresh_seconds
                value = self._keep(fresh, problem)
        return value

    def _keep(self, fresh: KillWait | None, problem: str) -> KillWait | None:
        """With the lock held: the new value, or the last good one when reading failed."""
        if problem:
            if not self._failing:
                kept = (
                    f"; kept KillWait {self._value.seconds:g}s from {self._value.source}"
                    if self._value
                    else ""
                )
                log.error("could not read Slurm's KillWait: %s%s", problem, kept)
            self._failing = True
            if self._value is not None or fresh is None:
                return self._value
        elif self._failing:
            log.info("Slurm's KillWait read again")
            self._failing = False
        if fresh is not None and fresh != self._value:
            log.info("KillWait is %gs, from %s", fresh.seconds, fresh.source)
            self._value = fresh
        return self._value

    def _read(self) -> tuple[KillWait | None, str]:
        """(value, problem): a value and no problem; none and a problem (slurmrestd did not say);
        or a fallback value with the problem that led to it (a bad slurm.conf)."""
        if self._slurm is not None:
            try:
                conf = self._slurm.get_conf()
                if conf is not None:
                    seconds = _whole_seconds(conf.get("KillWait"), "slurmrestd's /conf KillWait")
                    return KillWait(float(seconds), FROM_SLURM), ""
            except (SlurmApiError, SlurmConfError) as e:
                return None, str(e)
        if not self._conf_file:
            return KillWait(float(DEFAULT_KILL_WAIT_SECONDS), FROM_DEFAULT), ""
        where = from_file(self._conf_file)
        try:
            found = parse_kill_wait(Path(self._conf_file).read_text(errors="replace"))
        except OSError as e:
            problem = f"{where}: {e.strerror or e}"
        except SlurmConfError as e:
            problem = f"{where}: {e}"
        else:
            if found is None:
                return KillWait(float(DEFAULT_KILL_WAIT_SECONDS), f"{FROM_DEFAULT} ({where} sets none)"), ""
            return KillWait(float(found), where), ""
        fallback = KillWait(float(DEFAULT_KILL_WAIT_SECONDS), f"{FROM_DEFAULT} ({where} unreadable)")
        return fallback, problem
