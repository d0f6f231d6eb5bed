"""The API server's audit log as the benchmarks count it (devstack.audit, issue 55): one event per
request, by user, within a window; only Tandem's ServiceAccounts and kube-scheduler logged."""

from __future__ import annotations

import json
from pathlib import Path

from devstack import audit


def _event(user: str, at: str, stage: str = "ResponseComplete") -> str:
    return json.dumps(
        {"kind": "Event", "stage": stage, "requestReceivedTimestamp": at, "user": {"username": user}}
    )


def test_requests_are_counted_by_user_within_the_window(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    scheduler = "system:serviceaccount:tandem:tandem-scheduler"
    log.write_text(
        "\n".join(
            [
                _event(scheduler, "2026-12-02T01:00:00.500000Z"),  # before
                _event(scheduler, "2026-12-02T01:00:01.000000Z"),
                _event(audit.KUBE_SCHEDULER, "2026-12-02T01:00:02.250000Z"),
                "not json: a line cut by the rotation",
                _event("system:serviceaccount:tandem:tandem-syncer", "2026-12-02T01:00:03Z"),
                _event(scheduler, "2026-12-02T01:00:09Z"),  # after
            ]
        )
    )
    since = 1796173201.0  # 2026-12-02T01:00:01Z
    found = audit.count(log, since, since + 3)
    assert found == {scheduler: 1, audit.KUBE_SCHEDULER: 1, "system:serviceaccount:tandem:tandem-syncer": 1}
    assert audit.tandem_total(found) == 2


def test_the_policy_logs_only_what_is_counted_once_a_request() -> None:
    policy = json.loads(audit.policy_text())
    assert policy["omitStages"] == ["RequestReceived", "ResponseStarted"]
    assert policy["rules"][-1] == {"level": "None"}
    logged = [r for r in policy["rules"] if r["level"] != "None"]
    assert all(r["level"] == "Metadata" for r in logged)  # never a request's body
    assert {u for r in logged for u in r.get("users", []) + r.get("userGroups", [])} == {
        audit.KUBE_SCHEDULER,
        audit.TANDEM_GROUP,
    }
