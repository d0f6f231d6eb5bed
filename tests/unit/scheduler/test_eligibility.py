"""Which Slurm nodes a Pod is offered: each of kube-scheduler's filters that Tandem applies, and
the message a person reads when none is left."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys
from tandem.scheduler import eligibility as e
from tandem.slurm.hostlist import compress

NODES = [f"cpu-00{i}" for i in range(1, 5)]


def node(name: str, labels: dict[str, str] | None = None, **kw: Any) -> dict[str, Any]:
    return e.slim_node(
        {
            "metadata": {"name": name, "labels": labels or {}, "deletionTimestamp": kw.get("deleting")},
            "spec": {"unschedulable": kw.get("cordoned", False), "taints": kw.get("taints", [])},
            "status": {
                "conditions": [{"type": "Ready", "status": "False" if kw.get("not_ready") else "True"}],
                "allocatable": kw.get("allocatable", {"cpu": "4", "memory": "8Gi", "pods": "110"}),
            },
        }
    )


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": "p", "labels": {}},
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            **spec,
        },
    }


def bound(
    node_name: str, cpu: str = "1", labels: dict[str, str] | None = None, phase: str = "Running"
) -> dict[str, Any]:
    return e.slim_bound_pod(
        {
            "metadata": {"namespace": "default", "name": f"on-{node_name}", "labels": labels or {}},
            "spec": {
                "nodeName": node_name,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
            },
            "status": {"phase": phase},
        }
    )


def judge(
    p: dict[str, Any], nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None
) -> e.Eligibility:
    by_name = {n["metadata"]["name"]: n for n in nodes}
    on: dict[str, list[dict[str, Any]]] = {}
    for b in pods or []:
        on.setdefault(b["spec"]["nodeName"], []).append(b)
    return e.judge(
        p,
        {"cpu": 1000, "memory": 1 << 30},
        {s: s.replace("cpu", "node") for s in NODES},
        by_name,
        lambda n: e.room_of(on.get(n, [])),
    )


def four(**per_node: Any) -> list[dict[str, Any]]:
    return [node(f"node-00{i}", **per_node.get(f"node-00{i}", {})) for i in range(1, 5)]


def test_every_node_fits_a_plain_pod() -> None:
    assert judge(pod(), four()).excluded == ()


CASES = [
    ("cordoned", four(**{"node-001": {"cordoned": True}}), None, "1 node(s) were unschedulable"),
    ("not ready", four(**{"node-002": {"not_ready": True}}), None, "1 node(s) were not ready"),
    (
        "being deleted",
        four(**{"node-002": {"deleting": "2026-01-01T00:00:00Z"}}),
        None,
        "1 node(s) were being deleted",
    ),
    (
        "untolerated taint",
        four(**{"node-003": {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]}}),
        None,
        "1 node(s) had untolerated taint {dedicated: infer}",
    ),
    ("full", four(), [bound("node-004", cpu="3500m")], "1 Insufficient cpu"),
    (
        "too many pods",
        four(**{"node-001": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "1"}}}),
        [bound("node-001", cpu="0")],
        "1 Too many pods",
    ),
]


@pytest.mark.parametrize(("why", "nodes", "pods", "reason"), CASES, ids=[c[0] for c in CASES])
def test_each_filter_excludes_its_node_and_says_why(
    why: str, nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None, reason: str
) -> None:
    result = judge(pod(), nodes, pods)
    assert len(result.excluded) == 1, why
    assert result.message() == f"3/4 nodes are available: {reason}."


def test_the_lock_taint_and_prefer_no_schedule_never_exclude() -> None:
    taints = [
        {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"},
        {"key": "soft", "effect": "PreferNoSchedule"},
    ]
    assert judge(pod(), four(**{"node-001": {"taints": taints}})).excluded == ()


def test_a_tolerated_taint_does_not_exclude() -> None:
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    p = pod(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "infer"}])
    assert judge(p, four(**{"node-001": {"taints": [taint]}})).excluded == ()
    everything = pod(tolerations=[{"operator": "Exists"}])
    assert judge(everything, four(**{"node-001": {"taints": [taint]}})).excluded == ()


def test_node_selector_and_every_affinity_operator() -> None:
    nodes = four(
        **{
            "node-001": {"labels": {"pool": "a", "gen": "3"}},
            "node-002": {"labels": {"pool": "b", "gen": "5"}},
            "node-003": {"labels": {"pool": "c"}},
        }
    )
    assert judge(pod(nodeSelector={"pool": "a"}), nodes).excluded == ("cpu-002", "cpu-003", "cpu-004")

    def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
        selector = {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}

    def allowed(*terms: list[dict[str, Any]]) -> list[str]:
        return sorted(set(NODES) - set(judge(pod(affinity=affinity(*terms)), nodes).excluded))

    assert allowed([{"key": "pool", "operator": "In", "values": ["a", "b"]}]) == ["cpu-001", "cpu-002"]
    assert allowed([{"key": "pool", "operator": "NotIn", "values": ["a"]}]) == [
        "cpu-002",
        "cpu-003",
        "cpu-004",
    ]
    assert allowed([{"key": "gen", "operator": "Exists"}]) == ["cpu-001", "cpu-002"]
    assert allowed([{"key": "pool", "operator": "DoesNotExist"}]) == ["cpu-004"]
    assert allowed([{"key": "gen", "operator": "Gt", "values": ["4"]}]) == ["cpu-002"]
    assert allowed([{"key": "gen", "operator": "Lt", "values": ["4"]}]) == ["cpu-001"]
    # Terms are ORed, expressions in a term ANDed.
    assert allowed(
        [
            {"key": "pool", "operator": "In", "values": ["a"]},
            {"key": "gen", "operator": "Gt", "values": ["4"]},
        ],
        [{"key": "pool", "operator": "In", "values": ["c"]}],
    ) == ["cpu-003"]


def test_required_anti_affinity_on_the_hostname() -> None:
    term = {
        "topologyKey": e.HOSTNAME,
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    p = pod(affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}})
    pods = [
        bound("node-002", cpu="0", labels={"app": "web"}),
        bound("node-003", cpu="0", labels={"app": "db"}),
    ]
    result = judge(p, four(), pods)
    assert result.excluded == ("cpu-002",)
    assert result.message() == "3/4 nodes are available: 1 node(s) didn't match pod anti-affinity rules."


def test_finished_pods_free_their_room() -> None:
    assert judge(pod(), four(), [bound("node-004", cpu="4", phase="Succeeded")]).excluded == ()


def test_the_message_counts_each_reason_most_first() -> None:
    taint = {"key": "dedicated", "value": "infer", "effect": "NoExecute"}
    nodes = four(
        **{
            "node-001": {"labels": {"pool": "a"}},
            "node-002": {"labels": {"pool": "b"}},
            "node-003": {"labels": {"pool": "b"}},
            "node-004": {"labels": {"pool": "a"}, "taints": [taint]},
        }
    )
    result = judge(pod(nodeSelector={"pool": "a"}), nodes)
    assert result.message() == (
        "1/4 nodes are available: 2 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {dedicated: infer}."
    )


def test_a_slurm_node_without_a_node_is_excluded() -> None:
    result = e.judge(
        pod(),
        {"cpu": 1000},
        {"cpu-001": "node-001", "cpu-009": ""},
        {"node-001": node("node-001")},
        lambda _: e.NO_ROOM_TAKEN,
    )
    assert result.excluded == ("cpu-009",)
    assert compress(list(result.excluded)) == "cpu-009"


def test_a_nodes_room_is_summed_once_until_what_it_holds_changes() -> None:
    on: dict[str, list[dict[str, Any]]] = {"node-001": [bound("node-001", cpu="1")]}
    reads: list[str] = []

    def pods_on(n: str) -> list[dict[str, Any]]:
        reads.append(n)
        return list(on.get(n, []))

    ledger = e.RoomLedger(pods_on)
    assert ledger.room("node-001").used["cpu"] == 1000
    assert ledger.room("node-001").used["cpu"] == 1000
    assert reads == ["node-001"]  # the second Pod judged reads the sum, not the Pods
    on["node-001"].append(bound("node-001", cpu="2"))
    ledger.changed("node-001")
    assert ledger.room("node-001").used["cpu"] == 3000
    assert len(ledger.room("node-001").running) == 2


def test_a_change_while_a_room_is_summed_is_not_lost() -> None:
    """The informer changes its cache, then tells the ledger: a sum read in between is kept only
    until the next read."""
    on: dict[str, list[dict[str, Any]]] = {"node-001": []}
    ledger: e.RoomLedger

    def pods_on(n: str) -> list[dict[str, Any]]:
        held = list(on[n])
        on[n] = [bound("node-001", cpu="4")]  # the cache changes while the sum is taken
        ledger.changed(n)
        return held

    ledger = e.RoomLedger(pods_on)
    assert ledger.room("node-001").used == {}
    assert ledger.room("node-001").used["cpu"] == 4000


def _versioned(n: dict[str, Any], version: str) -> dict[str, Any]:
    n["metadata"]["resourceVersion"] = version
    return n


def test_pods_of_one_shape_are_judged_once_per_node_version_on_the_nodes_own_state() -> None:
    verdicts = e.ShapeVerdicts()
    taint = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
    nodes = [_versioned(node("node-001", taints=[taint]), "5"), _versioned(node("node-002"), "6")]
    hosts = {"cpu-001": "node-001", "cpu-002": "node-002"}

    def fit(p: dict[str, Any], ns: list[dict[str, Any]]) -> e.Eligibility:
        by_name = {n["metadata"]["name"]: n for n in ns}
        return e.judge(p, {"cpu": 1000}, hosts, by_name, lambda _: e.room_of([]), verdicts=verdicts)

    for _ in range(3):  # a burst of Pods from one template
        assert fit(pod(), nodes).excluded == ("cpu-001",)
    assert verdicts.worked_out == 2

    tolerant = pod(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert fit(tolerant, nodes).excluded == ()  # another shape: judged on its own
    assert verdicts.worked_out == 4

    # The taint goes: a new version of the Node, judged again; the other Node's verdict stays.
    untainted = [_versioned(node("node-001"), "9"), nodes[1]]
    assert fit(pod(), untainted).excluded == ()
    assert verdicts.worked_out == 5


def test_a_reused_verdict_still_leaves_the_room_to_each_pod() -> None:
    verdicts = e.ShapeVerdicts()
    nodes = {"node-001": _versioned(node("node-001", allocatable={"cpu": "2", "pods": "110"}), "3")}
    hosts = {"cpu-001": "node-001"}
    full = e.room_of([bound("node-001", cpu="2")])
    empty = e.room_of([])
    assert e.judge(pod(), {"cpu": 1000}, hosts, nodes, lambda _: empty, verdicts=verdicts).excluded == ()
    refused = e.judge(pod(), {"cpu": 1000}, hosts, nodes, lambda _: full, verdicts=verdicts)
    assert refused.excluded == ("cpu-001",)
    assert "Insufficient cpu" in refused.message()
    assert verdicts.worked_out == 1
