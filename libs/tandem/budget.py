"""How long a prolog's lock may take: one number, set at the top and passed down with the call.

The prolog waits TANDEM_LOCK_TIMEOUT seconds (default LOCK_SECONDS) and sends that number to the
gateway; the gateway gives the syncer a margin less as the call's deadline; the syncer keeps a
margin of its own to drain the node and answer before the gateway gives up. So the hops stay in
order by construction, whatever an operator sets at the top. The syncer's --lock-timeout is only
an optional cap below that.
"""

from __future__ import annotations

# prolog.sh's default budget (tests/unit/hooks/test_budget.py pins the script to it). Keep it below
# Slurm's PrologEpilogTimeout, or Slurm kills the prolog first.
LOCK_SECONDS = 55.0
# Each hop answers this much before its caller stops waiting.
HOP_MARGIN_SECONDS = 1.0
# The longest any hook call may ask to wait: a body's `timeout` above it is refused.
MAX_CALL_SECONDS = 600.0


def below(seconds: float) -> float:
    """What the next hop down gets of a caller's `seconds`."""
    return max(1.0, seconds - HOP_MARGIN_SECONDS)


def lock_wait(remaining: float | None, cap: float = 0.0) -> float:
    """How long the syncer waits for Pods to leave a Node: the caller's deadline less a margin
    (without a deadline, what a default prolog's call would have left), at most `cap` when set."""
    wait = below(remaining if remaining is not None else below(LOCK_SECONDS))
    return min(wait, cap) if cap > 0 else wait
