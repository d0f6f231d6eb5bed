"""The lab's Prometheus as a test reads it: instant queries and the alerts it has firing."""

from __future__ import annotations

import time
from typing import Any

import httpx

from devstack import prometheus
from devstack.config import StackConfig


def query(cfg: StackConfig, expr: str) -> list[dict[str, Any]]:
    """An instant query's vector (or [] for an empty answer); a bad expression raises."""
    reply = httpx.get(f"{prometheus.url(cfg)}/api/v1/query", params={"query": expr}, timeout=10)
    body = reply.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('error', reply.text)}")
    result = body["data"]["result"]
    if body["data"]["resultType"] == "scalar":
        return [{"metric": {}, "value": result}]
    return list(result)


def alerts(cfg: StackConfig, name: str, state: str = "firing") -> list[dict[str, Any]]:
    reply = httpx.get(f"{prometheus.url(cfg)}/api/v1/alerts", timeout=10).json()
    return [a for a in reply["data"]["alerts"] if a["labels"]["alertname"] == name and a["state"] == state]


def wait_firing(cfg: StackConfig, name: str, timeout: float, **labels: str) -> tuple[dict[str, Any], float]:
    """The first firing alert `name` carrying `labels`, and the seconds it took to fire."""
    began = time.monotonic()
    while True:
        for alert in alerts(cfg, name):
            if all(alert["labels"].get(k) == v for k, v in labels.items()):
                return alert, time.monotonic() - began
        if time.monotonic() - began > timeout:
            pending = alerts(cfg, name, "pending")
            raise AssertionError(f"{name} {labels} not firing after {timeout:.0f}s (pending: {pending})")
        time.sleep(0.5)


def wait_scraped(cfg: StackConfig, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
    """The answer to `expr` once it is not empty (the next scrapes may be a few seconds away)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = query(cfg, expr)
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(0.5)
