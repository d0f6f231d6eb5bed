"""Which Pods stay on a locked Node: the toleration rules the lock applies."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys
from tandem.kube import tolerates


def _pod(*tolerations: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"tolerations": list(tolerations)}}


LOCK = {"key": keys.LOCK_KEY, "value": keys.LOCK_TAINT_VALUE, "effect": keys.LOCK_TAINT_EFFECT}


@pytest.mark.parametrize(
    ("pod", "stays"),
    [
        (_pod(), False),
        (_pod({"key": keys.LOCK_KEY, "operator": "Exists"}), True),
        (_pod({"key": keys.LOCK_KEY, "operator": "Equal", "value": "true", "effect": "NoExecute"}), True),
        (_pod({"key": keys.LOCK_KEY, "operator": "Equal", "value": "false"}), False),
        (_pod({"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoSchedule"}), False),
        (_pod({"operator": "Exists"}), True),  # tolerates every taint
        (_pod({"key": "other", "operator": "Exists"}), False),
        # The taint manager evicts it once the seconds are up: it must leave before the job starts.
        (_pod({"key": keys.LOCK_KEY, "operator": "Exists", "tolerationSeconds": 600}), False),
        (_pod({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}), False),
    ],
)
def test_a_pod_stays_on_a_locked_node_only_if_it_tolerates_the_lock_for_good(
    pod: dict[str, Any], stays: bool
) -> None:
    assert tolerates(pod, LOCK["key"], LOCK["value"], LOCK["effect"]) is stays
