"""Node state both ways: the plan for one Slurm node, from its Node, its slurmd Pod and Slurm."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from tandem import keys
from tandem.slurm.models import Node
from tandem.syncer import nodesync as ns
from tandem.syncer.mirror import SlurmMirror


def kube_node(
    cordoned: bool = False, ready: bool = True, deleting: bool = False, shown: str | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "node-001",
            "deletionTimestamp": "2026-01-01T00:00:00Z" if deleting else None,
            "annotations": {keys.DRAIN_ANNOTATION: shown} if shown is not None else {},
        },
        "spec": {"unschedulable": cordoned},
        "status": {"ready": ready, "slurmCordon": shown},
    }


def slurmd(deleting: bool = False, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "cpu-001", "deletionTimestamp": "2026-01-01T00:00:00Z" if deleting else None},
        "spec": {"nodeName": "node-001"},
        "status": {"phase": "Running", "ready": ready},
    }


IDLE = Node("cpu-001", "IDLE")


def drained(reason: str) -> Node:
    return Node("cpu-001", "IDLE", ("DRAIN",), reason)


def facts(
    slurm: Node | None = IDLE,
    node: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
    name: str = "node-001",
) -> ns.NodeFacts:
    return ns.NodeFacts(
        "cpu-001",
        slurm,
        name,
        node if node is not None else kube_node(),
        pod if pod is not None else slurmd(),
    )


ROWS = [
    ("all well", facts(), ns.Plan()),
    (
        "cordoned",
        facts(node=kube_node(cordoned=True)),
        ns.Plan(drain="k8s: Node node-001 is cordoned", show=("k8s: Node node-001 is cordoned", True)),
    ),
    (
        "NotReady",
        facts(node=kube_node(ready=False)),
        ns.Plan(drain="k8s: Node node-001 is NotReady", show=("k8s: Node node-001 is NotReady", True)),
    ),
    (
        "Node deleting",
        facts(node=kube_node(deleting=True)),
        ns.Plan(
            drain="k8s: Node node-001 is being deleted", show=("k8s: Node node-001 is being deleted", True)
        ),
    ),
    (
        "slurmd Pod deleting",
        facts(pod=slurmd(deleting=True)),
        ns.Plan(
            drain="k8s: slurmd Pod cpu-001 is being deleted",
            show=("k8s: slurmd Pod cpu-001 is being deleted", True),
        ),
    ),
    (
        "slurmd Pod not ready",
        facts(pod=slurmd(ready=False)),
        ns.Plan(
            drain="k8s: slurmd Pod cpu-001 is not ready", show=("k8s: slurmd Pod cpu-001 is not ready", True)
        ),
    ),
    (
        "cordoned and already drained by us, shown",
        facts(
            drained("k8s: Node node-001 is cordoned"),
            kube_node(cordoned=True, shown="k8s: Node node-001 is cordoned"),
        ),
        ns.Plan(),
    ),
    (
        "uncordoned: our drain resumed, the Node cleared",
        facts(drained("k8s: Node node-001 is cordoned"), kube_node(shown="k8s: Node node-001 is cordoned")),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "an admin's drain is left alone, and shown",
        facts(drained("maintenance")),
        ns.Plan(show=("maintenance", True)),
    ),
    (
        "cordoned while an admin's drain holds: no second drain",
        facts(drained("maintenance"), kube_node(cordoned=True, shown="maintenance")),
        ns.Plan(),
    ),
    (
        "a KillWait drain is not ours to resume",
        facts(
            drained("k8s: pod a/b still running at KillWait (job 7)"),
            kube_node(shown="k8s: pod a/b still running at KillWait (job 7)"),
        ),
        ns.Plan(),
    ),
    (
        "down shows on the Node",
        facts(Node("cpu-001", "DOWN", (), "Not responding")),
        ns.Plan(show=("Not responding", True)),
    ),
    ("back: the Node is cleared", facts(IDLE, kube_node(shown="maintenance")), ns.Plan(show=("", False))),
    ("no mirror yet: nothing", facts(None, kube_node(cordoned=True)), ns.Plan()),
]


@pytest.mark.parametrize(("why", "f", "plan"), ROWS, ids=[r[0] for r in ROWS])
def test_each_case(why: str, f: ns.NodeFacts, plan: ns.Plan) -> None:
    assert ns.decide(f) == plan, why


def test_a_deleted_node_drains_its_slurm_node() -> None:
    f = ns.NodeFacts("cpu-001", IDLE, "node-001", None, slurmd())
    assert ns.decide(f).drain == "k8s: Node node-001 was deleted"


def test_a_resume_by_hand_between_two_polls_is_seen_and_drained_again() -> None:
    """Before: the mirror kept the node as last polled (idle); a drain by the sync and a resume by
    someone else between two polls looked like no change, and the cause went unenforced (CI)."""
    slurm = mock.Mock()
    slurm.list_jobs.return_value = []
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    changed: list[str] = []
    mirror.on_node_changed = changed.append
    facts = mock.Mock()
    facts.facts.side_effect = lambda name: ns.NodeFacts(
        name, mirror.node(name), "node-001", kube_node(cordoned=True, shown="x"), slurmd()
    )
    sync = ns.NodeSync(mock.Mock(), slurm, facts, mirror.expect_node)
    sync.reconcile("cpu-001")
    assert slurm.drain_node.call_count == 1
    sync.reconcile("cpu-001")  # the mirror knows the drain now: no second one
    assert slurm.drain_node.call_count == 1
    mirror.poll_once()  # someone resumed it by hand: Slurm says idle again
    assert changed == ["cpu-001"]
    sync.reconcile("cpu-001")
    assert slurm.drain_node.call_count == 2
