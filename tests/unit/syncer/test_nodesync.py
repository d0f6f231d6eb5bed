"""Node state both ways: the plan for one Slurm node, from its Node, its slurmd Pod and Slurm."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from tandem import keys, scripts
from tandem.slurm.models import Node
from tandem.syncer import health
from tandem.syncer import nodesync as ns
from tandem.syncer.cluster import ClusterView, slim_node
from tandem.syncer.facts import NodeFacts
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodeapply import NodeSync
from tandem.syncer.nodefacts import CacheFacts
from tests.unit.syncer_world import whole_listing_slurm


def kube_node(
    cordoned: bool = False,
    ready: bool = True,
    deleting: bool = False,
    shown: str | None = None,
    health: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """As tandem.syncer.cluster.slim_node keeps it; `health`: the listed conditions it keeps."""
    return {
        "metadata": {
            "name": "node-001",
            "deletionTimestamp": "2026-01-01T00:00:00Z" if deleting else None,
            "annotations": {keys.DRAIN_ANNOTATION: shown} if shown is not None else {},
        },
        "spec": {"unschedulable": cordoned},
        "status": {"ready": ready, "slurmCordon": shown, "health": health or {}},
    }


def slurmd(deleting: bool = False, ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {"name": "cpu-001", "deletionTimestamp": "2026-01-01T00:00:00Z" if deleting else None},
        "spec": {"nodeName": "node-001"},
        "status": {"phase": "Running", "ready": ready},
    }


IDLE = Node("cpu-001", "IDLE")
KILLWAIT = keys.killwait_drain_reason("a", "b", 7)


def app_pod(node: str = "node-001", job: str = "7", phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "a", "name": "b", "annotations": {keys.JOB_ID_ANNOTATION: job}},
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


SYNCER = "tandem"  # the syncer's own Slurm user


def drained(reason: str, by: str = SYNCER) -> Node:
    return Node("cpu-001", "IDLE", ("DRAIN",), reason, by)


def facts(
    slurm: Node | None = IDLE,
    node: dict[str, Any] | None = None,
    pod: dict[str, Any] | None = None,
    name: str = "node-001",
    stuck: dict[str, Any] | None = None,
    health_conditions: tuple[str, ...] = (),
    own_user: str = SYNCER,
) -> NodeFacts:
    return NodeFacts(
        "cpu-001",
        slurm,
        name,
        node if node is not None else kube_node(),
        pod if pod is not None else slurmd(),
        stuck,
        own_user,
        health_conditions,
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
        "a KillWait drain stays while its Pod still runs on the Node",
        facts(drained(KILLWAIT), kube_node(shown=KILLWAIT), stuck=app_pod()),
        ns.Plan(),
    ),
    (
        "a KillWait drain stays while its Pod, not bound, still holds the job",
        facts(drained(KILLWAIT), kube_node(shown=KILLWAIT), stuck=app_pod(node="", job="7")),
        ns.Plan(),
    ),
    (
        "a KillWait drain whose Pod is gone is resumed",
        facts(drained(KILLWAIT), kube_node(shown=KILLWAIT), stuck=None),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "a KillWait drain whose Pod finished is resumed",
        facts(drained(KILLWAIT), kube_node(shown=KILLWAIT), stuck=app_pod(phase="Succeeded")),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "a KillWait drain whose Pod's name was taken by a new Pod elsewhere is resumed",
        facts(drained(KILLWAIT), kube_node(shown=KILLWAIT), stuck=app_pod(node="node-005", job="9")),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "a KillWait drain whose Pod is gone, on a cordoned Node: the cordon is the reason now",
        facts(drained(KILLWAIT), kube_node(cordoned=True, shown=KILLWAIT), stuck=None),
        ns.Plan(drain="k8s: Node node-001 is cordoned", show=("k8s: Node node-001 is cordoned", True)),
    ),
    (
        "a drain that only looks like KillWait's (no Pod named) is an admin's",
        facts(drained("k8s: pod ?/? still running at KillWait (job 7)"), stuck=None),
        ns.Plan(show=("k8s: pod ?/? still running at KillWait (job 7)", True)),
    ),
    (
        "our words in an admin's drain: uncordoned, it is still not resumed",
        facts(
            drained("k8s: Node node-001 is cordoned", by="root"),
            kube_node(shown="k8s: Node node-001 is cordoned"),
        ),
        ns.Plan(),
    ),
    (
        "a KillWait drain someone else made is not resumed when its Pod goes",
        facts(drained(KILLWAIT, by="alice"), kube_node(shown=KILLWAIT), stuck=None),
        ns.Plan(),
    ),
    (
        "a Slurm that does not say who drained: nothing is resumed",
        facts(drained(KILLWAIT, by=""), kube_node(shown=KILLWAIT), stuck=None),
        ns.Plan(),
    ),
    (
        "our own cause, drained by an admin first: the admin's drain is shown, not taken over",
        facts(drained("maintenance", by="root"), kube_node(cordoned=True, shown="maintenance")),
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
def test_each_case(why: str, f: NodeFacts, plan: ns.Plan) -> None:
    assert ns.decide(f) == plan, why


# -- health conditions (--health-conditions) ------------------------------------------------------


def condition(status: str, message: str = "") -> dict[str, str]:
    return {"status": status, "message": message}


GPU = ("GpuUnhealthy",)
GPU_DRAIN = "k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79"
GPU_BAD = {"GpuUnhealthy": condition("True", "gpu 3: XID 79")}
DEADLOCK_DRAIN = "k8s: Node node-001 has KernelDeadlock: task docker:7 blocked for more than 120 seconds"
DEADLOCK = {"KernelDeadlock": condition("True", "task docker:7 blocked for more than 120 seconds")}
CORDON_DRAIN = "k8s: Node node-001 is cordoned"
NHC = "NHC: gpu 3 ECC errors"
LONG = "x" * 400

HEALTH_ROWS = [
    (
        "a listed condition True drains, naming it and its message",
        facts(node=kube_node(health=GPU_BAD), health_conditions=GPU),
        ns.Plan(drain=GPU_DRAIN, show=(GPU_DRAIN, True)),
    ),
    (
        "a listed condition True without a message: the type alone",
        facts(node=kube_node(health={"GpuUnhealthy": condition("True")}), health_conditions=GPU),
        ns.Plan(
            drain="k8s: Node node-001 has GpuUnhealthy", show=("k8s: Node node-001 has GpuUnhealthy", True)
        ),
    ),
    (
        "a listed condition False or Unknown: nothing",
        facts(
            node=kube_node(
                health={"GpuUnhealthy": condition("False"), "KernelDeadlock": condition("Unknown")}
            ),
            health_conditions=(*GPU, "KernelDeadlock"),
        ),
        ns.Plan(),
    ),
    (
        "drained by us and shown while it holds: nothing more",
        facts(drained(GPU_DRAIN), kube_node(shown=GPU_DRAIN, health=GPU_BAD), health_conditions=GPU),
        ns.Plan(),
    ),
    (
        "cleared (False): our drain resumed, the Node cleared",
        facts(
            drained(GPU_DRAIN),
            kube_node(shown=GPU_DRAIN, health={"GpuUnhealthy": condition("False", "healthy")}),
            health_conditions=GPU,
        ),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "cleared (Unknown): our drain resumed",
        facts(
            drained(GPU_DRAIN),
            kube_node(shown=GPU_DRAIN, health={"GpuUnhealthy": condition("Unknown")}),
            health_conditions=GPU,
        ),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "cleared (the condition gone from the Node): our drain resumed",
        facts(drained(GPU_DRAIN), kube_node(shown=GPU_DRAIN), health_conditions=GPU),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "its type no longer configured: our drain resumed though the condition is still True",
        facts(drained(GPU_DRAIN), kube_node(shown=GPU_DRAIN, health=GPU_BAD), health_conditions=()),
        ns.Plan(resume=True, show=("", False)),
    ),
    (
        "an admin's drain in the same words, cleared: not resumed",
        facts(
            drained(GPU_DRAIN, by="root"),
            kube_node(shown=GPU_DRAIN, health={"GpuUnhealthy": condition("False")}),
            health_conditions=GPU,
        ),
        ns.Plan(),
    ),
    (
        "an admin's drain while the condition holds: not taken over",
        facts(
            drained("maintenance", by="root"),
            kube_node(shown="maintenance", health=GPU_BAD),
            health_conditions=GPU,
        ),
        ns.Plan(),
    ),
    (
        "a condition True that is not listed is ignored",
        facts(node=kube_node(health=DEADLOCK), health_conditions=GPU),
        ns.Plan(),
    ),
    (
        "cordoned and unhealthy: the cordon is the one cause",
        facts(node=kube_node(cordoned=True, health=GPU_BAD), health_conditions=GPU),
        ns.Plan(drain=CORDON_DRAIN, show=(CORDON_DRAIN, True)),
    ),
    (
        "NotReady and unhealthy: NotReady is the one cause",
        facts(node=kube_node(ready=False, health=GPU_BAD), health_conditions=GPU),
        ns.Plan(drain="k8s: Node node-001 is NotReady", show=("k8s: Node node-001 is NotReady", True)),
    ),
    (
        "uncordoned while still unhealthy: our drain now names the condition",
        facts(drained(CORDON_DRAIN), kube_node(shown=CORDON_DRAIN, health=GPU_BAD), health_conditions=GPU),
        ns.Plan(drain=GPU_DRAIN, show=(GPU_DRAIN, True)),
    ),
    (
        "cordoned while our health drain holds: the cordon is said",
        facts(
            drained(GPU_DRAIN),
            kube_node(cordoned=True, shown=GPU_DRAIN, health=GPU_BAD),
            health_conditions=GPU,
        ),
        ns.Plan(drain=CORDON_DRAIN, show=(CORDON_DRAIN, True)),
    ),
    (
        "a new message of the same condition: the reason it was drained with stays",
        facts(
            drained("k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79 at 10:00:01"),
            kube_node(
                shown="k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79 at 10:00:01",
                health={"GpuUnhealthy": condition("True", "gpu 3: XID 79 at 10:05:17")},
            ),
            health_conditions=GPU,
        ),
        ns.Plan(),
    ),
    (
        "the message changed and someone resumed it: drained again with the new message",
        facts(
            IDLE,
            kube_node(
                shown="k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79 at 10:00:01",
                health={"GpuUnhealthy": condition("True", "gpu 3: XID 79 at 10:05:17")},
            ),
            health_conditions=GPU,
        ),
        ns.Plan(
            drain="k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79 at 10:05:17",
            show=("k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79 at 10:05:17", True),
        ),
    ),
    (
        "another listed condition holds instead: our drain names it",
        facts(
            drained(GPU_DRAIN),
            kube_node(shown=GPU_DRAIN, health={"GpuUnhealthy": condition("False"), **DEADLOCK}),
            health_conditions=(*GPU, "KernelDeadlock"),
        ),
        ns.Plan(drain=DEADLOCK_DRAIN, show=(DEADLOCK_DRAIN, True)),
    ),
    (
        "two hold: the first listed names the reason",
        facts(
            node=kube_node(health={**GPU_BAD, **DEADLOCK}),
            health_conditions=("KernelDeadlock", *GPU),
        ),
        ns.Plan(drain=DEADLOCK_DRAIN, show=(DEADLOCK_DRAIN, True)),
    ),
    (
        "the message on one line, trimmed",
        facts(
            node=kube_node(health={"GpuUnhealthy": condition("True", "  gpu 3:\n\tXID 79\r\n\x00 ")}),
            health_conditions=GPU,
        ),
        ns.Plan(drain=GPU_DRAIN, show=(GPU_DRAIN, True)),
    ),
    (
        "a long message: the whole reason capped at 200 characters",
        facts(node=kube_node(health={"GpuUnhealthy": condition("True", LONG)}), health_conditions=GPU),
        ns.Plan(
            drain=f"k8s: Node node-001 has GpuUnhealthy: {LONG}"[:197] + "...",
            show=(f"k8s: Node node-001 has GpuUnhealthy: {LONG}"[:197] + "...", True),
        ),
    ),
    # Slurm's own HealthCheckProgram (NHC) drains as root, in its own words: shown like any drain,
    # never resumed by the syncer.
    (
        "NHC's drain shows on the Node",
        facts(drained(NHC, by="root")),
        ns.Plan(show=(NHC, True)),
    ),
    (
        "NHC's drain, shown: left alone while the Node is well",
        facts(drained(NHC, by="root"), kube_node(shown=NHC)),
        ns.Plan(),
    ),
    (
        "NHC's drain while the syncer too acts as root: not our words, not resumed",
        facts(drained(NHC, by="root"), kube_node(shown=NHC), own_user="root"),
        ns.Plan(),
    ),
    (
        "NHC's drain while a listed condition holds: no second drain",
        facts(drained(NHC, by="root"), kube_node(shown=NHC, health=GPU_BAD), health_conditions=GPU),
        ns.Plan(),
    ),
]


@pytest.mark.parametrize(("why", "f", "plan"), HEALTH_ROWS, ids=[r[0] for r in HEALTH_ROWS])
def test_health_conditions(why: str, f: NodeFacts, plan: ns.Plan) -> None:
    assert ns.decide(f) == plan, why


def test_the_node_cache_keeps_only_the_listed_conditions_and_a_bounded_message() -> None:
    raw = {
        "metadata": {"name": "node-001"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "message": "kubelet is posting ready status"},
                {"type": "GpuUnhealthy", "status": "True", "message": LONG, "lastHeartbeatTime": "t"},
                {"type": "KernelDeadlock", "status": "False", "message": "kernel has no deadlock"},
                {"type": "MemoryPressure", "status": "False"},
            ]
        },
    }
    kept = slim_node(raw, ("GpuUnhealthy", "KernelDeadlock", "FrequentKubeletRestart"))["status"]["health"]
    assert kept == {
        "GpuUnhealthy": {"status": "True", "message": LONG[: health.REASON_MAX]},
        "KernelDeadlock": {"status": "False", "message": "kernel has no deadlock"},
    }
    assert slim_node(raw)["status"]["health"] == {}


def test_a_listed_condition_reaches_the_pass_from_the_caches() -> None:
    """The setting flows: ClusterView keeps the listed conditions, CacheFacts hands the list to
    the pass, the pass drains."""
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = []
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    kube = mock.Mock()
    view = ClusterView(kube, "slurm", health_conditions=GPU)
    raw_node = {
        "metadata": {"name": "node-001", "resourceVersion": "1"},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "GpuUnhealthy", "status": "True", "message": "gpu 3: XID 79"},
            ]
        },
    }
    raw_slurmd = {
        "metadata": {
            "namespace": "slurm",
            "name": "cpu-001",
            "uid": "u1",
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
        },
        "spec": {"nodeName": "node-001"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    with view.nodes._lock:
        view.nodes._put("node-001", view.nodes._keep(raw_node))
    with view.pods._lock:
        view.pods._put("slurm/cpu-001", view.pods._keep(raw_slurmd))
    f = CacheFacts(view, mirror.state, SYNCER).facts("cpu-001")
    assert f.health_conditions == GPU
    assert ns.decide(f).drain == GPU_DRAIN


def test_a_deleted_node_drains_its_slurm_node() -> None:
    f = NodeFacts("cpu-001", IDLE, "node-001", None, slurmd())
    assert ns.decide(f).drain == "k8s: Node node-001 was deleted"


def test_a_resume_by_hand_between_two_polls_is_seen_and_drained_again() -> None:
    """Before: the mirror kept the node as last polled (idle); a drain by the sync and a resume by
    someone else between two polls looked like no change, and the cause went unenforced (CI)."""
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = []
    slurm.list_nodes.return_value = [Node("cpu-001", "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    changed: list[str] = []
    mirror.state.on_node_changed(changed.append)
    facts = mock.Mock()
    facts.facts.side_effect = lambda name: NodeFacts(
        name, mirror.state.node(name), "node-001", kube_node(cordoned=True, shown="x"), slurmd()
    )
    sync = NodeSync(mock.Mock(), slurm, facts, mirror.expect_node)
    sync.reconcile("cpu-001")
    assert slurm.drain_node.call_count == 1
    sync.reconcile("cpu-001")  # the mirror knows the drain now: no second one
    assert slurm.drain_node.call_count == 1
    mirror.poll_once()  # someone resumed it by hand: Slurm says idle again
    assert changed == ["cpu-001"]
    sync.reconcile("cpu-001")
    assert slurm.drain_node.call_count == 2


def test_the_killwait_reason_names_the_pod_and_job() -> None:
    assert keys.killwait_drain_of(KILLWAIT) == ("a", "b", 7)
    assert keys.killwait_drain_of("k8s: pod a/b still running at KillWait") is None
    assert keys.killwait_drain_of("maintenance") is None


def test_the_placeholder_script_drains_with_the_same_words() -> None:
    """Its drain, made when Tandem cannot answer (and only by a Pod user Slurm lets drain), says
    the same; it is that user's, so the node sync leaves it to an admin."""
    script = (scripts.DIR / "placeholder.sh").read_text()
    shell = (
        'reason="k8s: pod ${TANDEM_POD_NAMESPACE:-?}/${TANDEM_POD_NAME:-?} '
        'still running at KillWait (job ${job})"'
    )
    assert shell in script
    said = (
        shell.split('"')[1].replace("${TANDEM_POD_NAMESPACE:-?}", "a").replace("${TANDEM_POD_NAME:-?}", "b")
    )
    assert said.replace("${job}", "7") == KILLWAIT


def test_an_update_that_moves_only_what_the_syncer_does_not_keep_wakes_no_pass() -> None:
    """A kubelet's reports on a Pod's containers and a Node's heartbeat move its resourceVersion
    and nothing the syncer keeps (slim_pod, slim_node): no node's pass, no waiter (issue 40)."""
    view = ClusterView(mock.Mock(), "slurm")
    changed: list[str] = []
    view.on_slurm_node_changed = changed.append
    view.on_node_pods_changed = lambda kube_node: changed.append(f"pods on {kube_node}")

    def informer_sees(informer: Any, key: str, obj: dict[str, Any]) -> None:  # as a watch event does
        with informer._lock:
            old = informer._put(key, informer._keep(obj))
        informer.on_change(key, old, informer._keep(obj))

    slurmd_pod = {
        "metadata": {
            "namespace": "slurm",
            "name": "cpu-001",
            "uid": "u1",
            "resourceVersion": "1",
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
        },
        "spec": {"nodeName": "node-001"},
        "status": {"phase": "Running"},
    }
    running = {**app_pod(), "spec": {**app_pod()["spec"], "nodeName": "node-001"}}
    running["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    informer_sees(view.pods, "slurm/cpu-001", slurmd_pod)
    informer_sees(view.pods, "a/b", running)
    changed.clear()

    def version(obj: dict[str, Any], v: str, **status: Any) -> dict[str, Any]:
        moved = {**obj, "metadata": {**obj["metadata"], "resourceVersion": v}}
        return {**moved, "status": {**obj["status"], **status}}

    informer_sees(view.pods, "a/b", version(running, "7", containerStatuses=[{"name": "c", "ready": True}]))
    informer_sees(view.pods, "slurm/cpu-001", version(slurmd_pod, "8", podIP="10.0.0.2"))
    assert changed == []
    cached = view.pods.get("slurm/cpu-001")
    assert cached is not None and cached["metadata"]["resourceVersion"] == "8", "the cache holds it"
    informer_sees(view.pods, "a/b", version(running, "9", phase="Succeeded"))
    informer_sees(view.pods, "slurm/cpu-001", version(slurmd_pod, "10", phase="Failed"))
    assert changed == ["pods on node-001", "cpu-001"]


def test_a_pod_that_goes_brings_its_killwait_drained_node_back() -> None:
    """Before: nothing looked at a KillWait drain again once its Pod went; the node stayed drained
    for good (30-minute two-replica soak: gpu-000 `k8s: pod bench/soak-pod-570 ...`)."""
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = []
    slurm.list_nodes.return_value = [drained(KILLWAIT), Node("cpu-002", "IDLE")]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    kube = mock.Mock()
    view = ClusterView(kube, "slurm")
    woken: list[str] = []
    view.on_pod_gone = lambda p: woken.extend(ns.drained_for(mirror.state.nodes(), p))

    def informer_sees(pod: dict[str, Any] | None) -> None:  # as a watch event does
        with view.pods._lock:
            old = view.pods._put("a/b", pod)
        view.pods.on_change("a/b", old, pod)

    informer_sees(app_pod())
    sync = NodeSync(kube, slurm, CacheFacts(view, mirror.state, SYNCER), mirror.expect_node)
    sync.reconcile("cpu-001")
    slurm.resume_node.assert_not_called()  # no slurmd Pod known, but the stuck Pod still runs
    informer_sees({**app_pod(), "metadata": {**app_pod()["metadata"], "labels": {"x": "y"}}})
    assert woken == []  # still running: nothing to look at
    informer_sees(None)
    assert woken == ["cpu-001"]
    sync = NodeSync(kube, slurm, CacheFacts(view, mirror.state, SYNCER), mirror.expect_node)
    sync.reconcile("cpu-001")
    slurm.resume_node.assert_called_once_with("cpu-001")
