"""An informer's snapshot is copied once per change of its cache and shared until the next; an
update that shows nothing new (`same`) keeps the cached object and moves nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tandem import keys
from tandem.informer import Informer
from tandem.scheduler import eligibility


class OneList:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return {
            "kind": "NodeList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "9"},
            "items": self.items,
        }


def node(name: str, version: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": version, "labels": {"rack": "r1"}},
        "spec": {"taints": taints or []},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "4"}},
    }


def nodes_informer(items: list[dict[str, Any]]) -> Informer:
    informer = Informer(
        OneList(items),  # type: ignore[arg-type]
        ["/api/v1/nodes"],
        {},
        transform=eligibility.slim_node,
        same=eligibility.same_node,
    )
    informer._list("/api/v1/nodes")
    return informer


def test_a_snapshot_is_shared_until_the_cache_changes() -> None:
    informer = nodes_informer([node("a", "1"), node("b", "2")])
    first = informer.snapshot()
    assert informer.snapshot() is first
    assert set(first) == {"a", "b"}
    with pytest.raises(TypeError):
        first["c"] = {}  # type: ignore[index]
    with informer._lock:
        informer._put("c", eligibility.slim_node(node("c", "3")))
    second = informer.snapshot()
    assert second is not first and set(second) == {"a", "b", "c"}
    assert set(first) == {"a", "b"}  # a snapshot already handed out does not change under its reader


def test_a_lock_or_heartbeat_keeps_the_cached_node_and_its_snapshot() -> None:
    informer = nodes_informer([node("a", "1")])
    cached, snap, generation = informer.get("a"), informer.snapshot(), informer.generation
    locked = node("a", "5", taints=[{"key": keys.LOCK_KEY, "value": "job-1", "effect": "NoExecute"}])
    with informer._lock:
        informer._put("a", eligibility.slim_node(locked))
    assert informer.get("a") is cached
    assert informer.generation == generation and informer.snapshot() is snap

    tainted = node("a", "6", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}])
    with informer._lock:
        informer._put("a", eligibility.slim_node(tainted))
    assert informer.get("a") is not cached
    assert informer.generation == generation + 1 and informer.snapshot() is not snap


def test_without_same_every_update_is_a_change() -> None:
    informer = Informer(OneList([node("a", "1")]), ["/api/v1/nodes"], {})  # type: ignore[arg-type]
    informer._list("/api/v1/nodes")
    generation = informer.generation
    with informer._lock:
        informer._put("a", node("a", "2"))
    assert informer.generation == generation + 1
