"""The lab API server's audit log, kept for what the benchmarks count (issue 55): each request that
Tandem's ServiceAccounts or kube-scheduler make, once (at its end), with who made it and when it
was received. The API server's own count, not a client's: a request a service forgot to count, or
one its library retried, is in it.

Only those users, at the Metadata level (no bodies), and every user's deletion of a Pod (who
deleted a Pod is what a test's failure asks first): everything else is not logged."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from devstack import config
from devstack.config import StackConfig

KUBE_SCHEDULER = "system:kube-scheduler"
# Every ServiceAccount of Tandem's namespace: the scheduler's, the syncer's, the hooks gateway's.
TANDEM_GROUP = f"system:serviceaccounts:{config.TANDEM_NAMESPACE}"
MAX_SIZE_MB = 200


def log_path(cfg: StackConfig) -> Path:
    return cfg.state_dir / "log" / "kube-apiserver-audit.log"


def policy_text() -> str:
    return json.dumps(
        {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            # One event per request, at its end (a watch's too).
            "omitStages": ["RequestReceived", "ResponseStarted"],
            "rules": [
                {"level": "Metadata", "users": [KUBE_SCHEDULER]},
                {"level": "Metadata", "userGroups": [TANDEM_GROUP]},
                {
                    "level": "Metadata",
                    "verbs": ["delete"],
                    "resources": [{"group": "", "resources": ["pods"]}],
                },
                {"level": "None"},
            ],
        }
    )


def flags(cfg: StackConfig) -> list[str]:
    """The API server's audit flags; its policy written beside its other state."""
    policy = cfg.state_dir / "audit-policy.json"
    policy.write_text(policy_text())
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={log_path(cfg)}",
        f"--audit-log-maxsize={MAX_SIZE_MB}",
        "--audit-log-maxbackup=1",
        "--audit-log-format=json",
    ]


def requests_by_user(cfg: StackConfig, since: float, until: float) -> Counter[str]:
    """Requests received between `since` and `until` (epoch seconds), by user: the whole log."""
    return count(log_path(cfg), since, until)


def requests_on(cfg: StackConfig, resource: str, namespace: str, name: str) -> list[str]:
    """Each logged request on one object (its subresources too), oldest first: when, who, what
    and the answer's code, for a failure message."""
    return on_object(log_path(cfg), resource, namespace, name)


def _events(path: Path, needle: str = "") -> Iterator[tuple[dict[str, Any], float]]:
    """Each logged event with when it was received (epoch seconds); with `needle`, only lines
    holding it are parsed (most lines, not). A line cut by the rotation is skipped."""
    if not path.exists():
        return
    with path.open(errors="replace") as lines:
        for line in lines:
            if needle not in line:
                continue
            try:
                event = json.loads(line)
                at = datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00"))
            except (ValueError, KeyError, TypeError):
                continue
            yield event, at.timestamp()


def _user(event: dict[str, Any]) -> str:
    return str((event.get("user") or {}).get("username") or "?")


def on_object(path: Path, resource: str, namespace: str, name: str) -> list[str]:
    said: list[str] = []
    wanted = {"resource": resource, "namespace": namespace, "name": name}
    for event, _ in _events(path, f'"{name}"'):
        ref = event.get("objectRef") or {}
        if any(ref.get(k) != v for k, v in wanted.items()):
            continue
        verb = str(event.get("verb", "?")) + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        code = (event.get("responseStatus") or {}).get("code", "?")
        said.append(f"{str(event['requestReceivedTimestamp'])[11:23]} {_user(event)} {verb} {code}")
    return said


def bindings(cfg: StackConfig, namespace: str, user: str, since: float, until: float) -> Counter[str]:
    """How many times `user` bound each Pod of `namespace` between `since` and `until`, by name."""
    return bindings_in(log_path(cfg), namespace, user, since, until)


def bindings_in(path: Path, namespace: str, user: str, since: float, until: float) -> Counter[str]:
    found: Counter[str] = Counter()
    for event, at in _events(path, '"binding"'):
        ref = event.get("objectRef") or {}
        if (
            since <= at <= until
            and event.get("verb") == "create"
            and ref.get("subresource") == "binding"
            and ref.get("namespace") == namespace
            and _user(event) == user
        ):
            found[str(ref.get("name"))] += 1
    return found


def count(path: Path, since: float, until: float) -> Counter[str]:
    return Counter(_user(event) for event, at in _events(path) if since <= at <= until)


def tandem_total(found: Counter[str]) -> int:
    """Of a count by user, the requests Tandem's services made."""
    prefix = f"system:serviceaccount:{config.TANDEM_NAMESPACE}:"
    return sum(n for user, n in found.items() if user.startswith(prefix))
