"""The policy source never reopens: a deleted or unparsable ConfigMap keeps the last good policy,
one absent from the start leaves the built-in one, and each of these says so (a Warning Event on
the ConfigMap, the gauge tandem_policy_stale, a readiness reason)."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest

from tandem import keys
from tandem.kube import KubeError
from tandem.metrics import REGISTRY
from tandem.scheduler import policy as p
from tandem.scheduler import policy_source as ps

REF = "tandem/tandem-policy"
STRICT = 'namespaces: {team-a: {userIds: ["1001"]}}\ndefault: {defaultUser: 1001}\n'


def configmap(text: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "tandem",
            "name": "tandem-policy",
            "uid": "cm-uid",
            "resourceVersion": version,
        },
        "data": {"policy.yaml": text},
    }


def source() -> tuple[ps.PolicySource, mock.Mock, mock.Mock]:
    events, changed = mock.Mock(), mock.Mock()
    return ps.PolicySource(mock.Mock(), REF, changed, events), events, changed


def recorded(events: mock.Mock, count: int = 1) -> list[tuple[Any, ...]]:
    """The Events posted (off the informer's thread), once `count` of them are."""
    deadline = time.monotonic() + 5
    while events.record.call_count < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return [c.args for c in events.record.call_args_list]


def gauge() -> dict[str, float]:
    lines = [line for line in REGISTRY.render().splitlines() if line.startswith("tandem_policy_stale{")]
    return {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in lines}


def test_a_good_policy_applies_and_nothing_is_stale() -> None:
    src, events, changed = source()
    src._changed("tandem/tandem-policy", None, configmap(STRICT))
    assert src.current() == p.parse(STRICT) and src.stale == ""
    changed.assert_called_once()
    assert set(gauge().values()) == {0}
    assert events.record.call_count == 0


def test_a_deleted_configmap_keeps_the_last_good_policy_and_says_so() -> None:
    src, events, changed = source()
    src._changed("tandem/tandem-policy", None, configmap(STRICT))
    src._changed("tandem/tandem-policy", configmap(STRICT), None)
    assert src.current() == p.parse(STRICT)  # never reopens
    assert p.check(src.current(), "team-a", {keys.USER_ID: "0"}).problems
    assert src.stale == (
        "tenant policy ConfigMap tandem/tandem-policy was deleted: the last good policy stays until it is "
        "created again"
    )
    assert gauge()[ps.DELETED] == 1 and gauge()[ps.ABSENT] == 0
    [(obj, type_, reason, message)] = recorded(events)
    assert (obj["kind"], obj["metadata"]["name"], obj["metadata"]["uid"]) == (
        "ConfigMap",
        "tandem-policy",
        "cm-uid",
    )
    assert (type_, reason, message) == ("Warning", ps.EVENT_STALE, src.stale)
    assert changed.call_count == 1  # nothing to judge again: the policy did not change


def test_an_unparsable_configmap_keeps_the_last_good_policy_and_a_fix_applies_again() -> None:
    src, events, _ = source()
    src._changed("k", None, configmap(STRICT))
    src._changed("k", configmap(STRICT), configmap("namespaces: {a: {acounts: [k8s]}}", "2"))
    assert src.current() == p.parse(STRICT)
    assert src.stale.startswith("tenant policy ConfigMap tandem/tandem-policy does not parse (policy.yaml:")
    assert src.stale.endswith(
        "unknown rule(s) acounts (known: accounts, constraints, defaultUser, "
        "exclusive, groupIds, maxPriority, maxTimeoutMinutes, nodes, partitions, "
        "qos, reservations, userIds, workingDirs)): the last good policy stays"
    )
    assert gauge()[ps.UNPARSABLE] == 1
    src._changed("k", None, configmap(STRICT + "\n", "3"))
    assert src.stale == "" and set(gauge().values()) == {0}
    assert [(t, r) for _, t, r, _ in recorded(events, 2)] == [
        ("Warning", ps.EVENT_STALE),
        ("Normal", ps.EVENT_APPLIED),
    ]


def test_an_unparsable_configmap_from_the_start_leaves_the_builtin_policy() -> None:
    src, _, _ = source()
    src._changed("k", None, configmap("default: {userIds: [root]}"))
    assert src.current() == p.BUILTIN
    assert src.stale.endswith(": the built-in policy applies")


class FakeInformer:
    def __init__(self, synced_after: int, items: list[dict[str, Any]], stop: threading.Event) -> None:
        self.calls, self.synced_after, self._items, self.stop = 0, synced_after, items, stop

    def wait_synced(self, timeout: float) -> bool:
        self.calls += 1
        if self.synced_after < 0 and self.calls > 1:
            self.stop.set()  # never synced: end the test's loop
        return 0 <= self.synced_after < self.calls

    def items(self) -> list[dict[str, Any]]:
        return self._items


def test_a_configmap_absent_from_the_start_leaves_the_builtin_policy_and_says_so() -> None:
    src, events, _ = source()
    stop = threading.Event()
    src.informer = FakeInformer(0, [], stop)  # type: ignore[assignment]
    src._watch_sync(stop)
    assert src.current() == p.BUILTIN
    assert src.stale == (
        "tenant policy ConfigMap tandem/tandem-policy is not found: the built-in policy applies until it "
        "is created (no uid or gid 0, no default user, priority at most 10000)"
    )
    assert gauge()[ps.ABSENT] == 1
    [(obj, type_, reason, _)] = recorded(events)
    assert (obj["metadata"]["name"], type_, reason) == ("tandem-policy", "Warning", ps.EVENT_STALE)
    # Then created: it applies.
    src._changed("k", None, configmap(STRICT))
    assert src.current() == p.parse(STRICT) and src.stale == ""


def test_a_configmap_the_scheduler_may_not_read_is_a_readiness_reason() -> None:
    kube = mock.Mock()
    kube.get.side_effect = KubeError(403, "Forbidden", 'configmaps is forbidden: User "x" cannot list')
    src = ps.PolicySource(kube, REF, mock.Mock(), mock.Mock())
    stop = threading.Event()
    src.informer = FakeInformer(-1, [], stop)  # type: ignore[assignment]
    src._watch_sync(stop)
    assert src.current() == p.BUILTIN
    assert src.stale == (
        "tenant policy ConfigMap tandem/tandem-policy cannot be read (HTTP 403 Forbidden: configmaps is "
        'forbidden: User "x" cannot list): no Pod is scheduled until it can'
    )
    assert gauge()[ps.UNREAD] == 1


def test_the_configmap_reference_is_namespace_and_name() -> None:
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        ps.PolicySource(mock.Mock(), "tandem-policy", lambda old, new: None, mock.Mock())
