"""A Pod's requests and validation are worked out once per version of the Pod and of what it is
checked against (tandem.scheduler.podmemo)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys
from tandem.scheduler import podmemo, validation
from tandem.scheduler.policy import BUILTIN, Policy


def _pod(
    version: str = "1", cpu: str = "2", uid: str = "u-1", annotations: dict[str, str] | None = None
) -> Any:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": version,
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    calls = {"validate": 0, "requests": 0}
    real_validate, real_requests = validation.validate, validation.effective_requests

    def validate(*args: Any, **kwargs: Any) -> validation.Validation:
        calls["validate"] += 1
        return real_validate(*args, **kwargs)

    def requests(pod: Any) -> dict[str, int]:
        calls["requests"] += 1
        return real_requests(pod)

    monkeypatch.setattr(validation, "validate", validate)
    monkeypatch.setattr(validation, "effective_requests", requests)
    return calls


@pytest.fixture
def memo() -> podmemo.PodMemo:
    return podmemo.PodMemo()


def test_one_version_of_a_pod_is_validated_once(counted: dict[str, int], memo: podmemo.PodMemo) -> None:
    first = memo.validate(_pod(), 30.0, False, BUILTIN, "flag")
    again = memo.validate(_pod(), 30.0, False, BUILTIN, "flag")
    assert again is first and counted["validate"] == 1


def test_a_new_version_a_new_policy_or_another_kill_wait_is_validated_again(
    counted: dict[str, int], memo: podmemo.PodMemo
) -> None:
    memo.validate(_pod(), 30.0, False, BUILTIN, "flag")
    memo.validate(_pod(version="2"), 30.0, False, BUILTIN, "flag")
    memo.validate(_pod(version="2"), 30.0, False, Policy(), "flag")
    memo.validate(_pod(version="2"), 60.0, False, Policy(), "flag")
    assert counted["validate"] == 4


def test_what_changed_with_the_version_is_seen(memo: podmemo.PodMemo) -> None:
    assert memo.requests(_pod(cpu="2"))["cpu"] == 2000
    assert memo.requests(_pod(version="2", cpu="3"))["cpu"] == 3000
    bad = _pod(version="3", annotations={keys.PRIORITY: "x"})
    fields = [p.field for p in memo.validate(bad, 30.0, False, BUILTIN, "flag").errors]
    assert f"metadata.annotations[{keys.PRIORITY}]" in fields


def test_requests_that_do_not_parse_raise_each_time(counted: dict[str, int], memo: podmemo.PodMemo) -> None:
    for _ in range(2):
        with pytest.raises(ValueError):
            memo.requests(_pod(cpu="lots"))
    assert counted["requests"] == 1


def test_a_pod_without_a_version_is_worked_out_every_time(
    counted: dict[str, int], memo: podmemo.PodMemo
) -> None:
    pod = _pod()
    del pod["metadata"]["resourceVersion"]
    memo.requests(pod)
    memo.requests(pod)
    assert counted["requests"] == 2


def test_the_oldest_pods_are_forgotten_first() -> None:
    entries: podmemo._Memo[int] = podmemo._Memo(capacity=2)
    for uid in ("a", "b", "c"):
        entries.get(_pod(uid=uid), None, None, lambda: 1)
    assert len(entries) == 2
    assert entries.get(_pod(uid="a"), None, None, lambda: 2) == 2  # forgotten: worked out anew


def test_two_schedulers_in_one_process_share_no_memo(counted: dict[str, int]) -> None:
    podmemo.PodMemo().validate(_pod(), 30.0, False, BUILTIN, "flag")
    podmemo.PodMemo().validate(_pod(), 30.0, False, BUILTIN, "flag")
    assert counted["validate"] == 2


def test_a_pod_is_remembered_once_whatever_its_versions(
    counted: dict[str, int], memo: podmemo.PodMemo
) -> None:
    for version in range(1, 9):  # a Pod's life: created, job id, conditions, bound, ...
        memo.requests(_pod(version=str(version)))
    assert len(memo._requests) == 1
    memo.requests(_pod(version="8"))
    assert counted["requests"] == 8  # the latest version is still remembered
