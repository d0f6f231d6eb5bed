"""Which answers to an HTTP call mean "not reached, or not able to serve now: ask again", as opposed
to the server's answer. One rule for every client Tandem has (slurmrestd, the API server)."""

from __future__ import annotations

# 0: no answer at all (refused, reset, timed out); 429: overloaded (the API server's priority and
# fairness); 502/503/504: a proxy, or the server itself, could not serve now. A 500 is the server's
# answer (slurmrestd reports Slurm's refusals with it) and is not asked again.
UNREACHABLE_STATUSES = frozenset({0, 429, 502, 503, 504})


def unreachable(status: int) -> bool:
    return status in UNREACHABLE_STATUSES
