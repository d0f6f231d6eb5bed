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
    by_user = [r for r in logged if "users" in r or "userGroups" in r]
    assert {u for r in by_user for u in r.get("users", []) + r.get("userGroups", [])} == {
        audit.KUBE_SCHEDULER,
        audit.TANDEM_GROUP,
    }
    # Anyone else: only a Pod's deletion (who deleted it), never what the benchmarks count.
    (anyone,) = [r for r in logged if r not in by_user]
    assert anyone["verbs"] == ["delete"] and anyone["resources"] == [{"group": "", "resources": ["pods"]}]


def test_the_requests_on_one_pod_say_who_did_what(tmp_path: Path) -> None:
    def on(name: str, verb: str, user: str, at: str, code: int, sub: str = "") -> str:
        ref = {
            "resource": "pods",
            "namespace": "default",
            "name": name,
            **({"subresource": sub} if sub else {}),
        }
        return json.dumps(
            {
                "verb": verb,
                "user": {"username": user},
                "objectRef": ref,
                "responseStatus": {"code": code},
                "requestReceivedTimestamp": at,
            }
        )

    scheduler = "system:serviceaccount:tandem:tandem-scheduler"
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                on("web", "patch", scheduler, "2026-12-02T01:00:01.250000Z", 200),
                on("web-2", "delete", "kubernetes-admin", "2026-12-02T01:00:01.500000Z", 200),  # another
                '{not json "web"',
                on("web", "create", scheduler, "2026-12-02T01:00:02.000000Z", 201, "binding"),
                on("web", "delete", "kubernetes-admin", "2026-12-02T01:00:03.000000Z", 200),
            ]
        )
    )
    assert audit.on_object(log, "pods", "default", "web") == [
        f"01:00:01.250 {scheduler} patch 200",
        f"01:00:02.000 {scheduler} create/binding 201",
        "01:00:03.000 kubernetes-admin delete 200",
    ]
    assert audit.on_object(tmp_path / "none.log", "pods", "default", "web") == []
