"""A Pod's placement key, followed from its informer event to its bind (tests/unit/key_walk.py),
passes through few functions and seldom comes back into a module it left: what a newcomer reads
to follow it (issue 52)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit import key_walk

# 41 since a Pod alone's reconcile reads every job of its name (JobTracker.for_pod_key), not only
# its uid's: a StatefulSet's Pod made again at once must not leave the earlier Pod's job running.
MOST_FUNCTIONS = 41
MOST_RETURNS = 2


@pytest.mark.parametrize("walk_of", [key_walk.pod_alone, key_walk.gang], ids=["pod alone", "gang"])
def test_a_keys_walk_from_event_to_bind_is_short(walk_of: Callable[[], key_walk.Walk]) -> None:
    walk = walk_of()
    assert walk.bound, "the walk ends with its Pods bound"
    assert walk.functions <= MOST_FUNCTIONS, sorted(set(walk.calls))
    assert walk.returns <= MOST_RETURNS, walk.reentries
