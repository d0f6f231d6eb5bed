"""The scheduler's PodScheduled=False writes: once per (reason, message), even from a stale cache."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tandem.scheduler.podapi import PodApi


def _pod(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
        "status": {"conditions": list(conditions)},
    }


def test_a_second_reconcile_on_a_stale_copy_writes_nothing() -> None:
    kube = mock.Mock()
    api = PodApi(kube)
    stale = _pod()  # the informer has not seen the first write yet
    assert api.set_unscheduled(stale, "SlurmUnavailable", "slurmrestd unreachable") is True
    assert api.set_unscheduled(stale, "SlurmUnavailable", "slurmrestd unreachable") is False
    assert kube.strategic_patch.call_count == 1


def test_a_different_message_is_written() -> None:
    kube = mock.Mock()
    api = PodApi(kube)
    api.set_unscheduled(_pod(), "SlurmJobPending", "Slurm job 7 is pending: Priority")
    assert api.set_unscheduled(_pod(), "SlurmJobPending", "Slurm job 7 is pending: Resources") is True
    assert kube.strategic_patch.call_count == 2


def test_once_bound_the_same_condition_may_be_written_again() -> None:
    kube = mock.Mock()
    api = PodApi(kube)
    api.set_unscheduled(_pod(), "SlurmJobPending", "pending")
    bound = _pod({"type": "PodScheduled", "status": "True"})
    assert api.set_unscheduled(bound, "SlurmJobPending", "pending") is True


def test_the_cached_copy_alone_also_prevents_a_write() -> None:
    kube = mock.Mock()
    cached = _pod({"type": "PodScheduled", "status": "False", "reason": "R", "message": "m"})
    assert PodApi(kube).set_unscheduled(cached, "R", "m") is False
    kube.strategic_patch.assert_not_called()


def test_a_written_condition_is_trusted_only_until_the_cache_shows_its_version() -> None:
    """The write answered resourceVersion 5: a copy older than that is stale (no second write);
    a copy at 5 or later is the truth, and if someone replaced the condition since, it is written
    again. Before: the memory was kept (up to 10,000 Pods) whatever the cache showed (issue 19)."""
    kube = mock.Mock()
    kube.strategic_patch.return_value = {"metadata": {"resourceVersion": "5"}}
    api = PodApi(kube)
    stale = _pod()
    stale["metadata"]["resourceVersion"] = "4"
    assert api.set_unscheduled(stale, "R", "m") is True
    assert api.set_unscheduled(stale, "R", "m") is False
    overwritten = _pod({"type": "PodScheduled", "status": "False", "reason": "Other", "message": "x"})
    overwritten["metadata"]["resourceVersion"] = "6"
    assert api.set_unscheduled(overwritten, "R", "m") is True
    assert kube.strategic_patch.call_count == 2
