"""What `helm uninstall`'s cleanup acts on (tandem.syncer.uninstall_plan): which jobs it cancels,
which Pods it deletes, which jobs it waits for, what it removes from Nodes and slurmd Pods, and
which drains it resumes. The trust rules hold here too: a placeholder by its AdminComment only and
of this scheduler only; a drain resumed only if Tandem's own user set it with Tandem's words."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, Node
from tandem.syncer import uninstall_plan as plan
from tandem.syncer.facts import NodeFacts

SCHEDULER = "slurm-slurm"  # this release's scheduler name
OTHER = "team-b-tandem"  # another release's, on the same Slurm
SYNCER = "tandem"  # the syncer's own Slurm user
POD = placeholder.PodRef("demo", "web-0", "uid-1")
GROUP = placeholder.PodRef("demo", "pg:train", "uid-pg")


def job(job_id: int, admin_comment: str = "", name: str = "", state: str = "RUNNING") -> Job:
    return Job(job_id, name or admin_comment or "job", state, admin_comment=admin_comment)


def ours(job_id: int, ref: placeholder.PodRef = POD, state: str = "RUNNING") -> Job:
    reference = placeholder.job_name(ref, SCHEDULER)
    return job(job_id, admin_comment=reference, name=reference, state=state)


# -- which jobs ------------------------------------------------------------------------------------

JOB_ROWS = [
    ("this scheduler's placeholder", ours(1), True),
    ("this scheduler's gang placeholder", ours(2, GROUP), True),
    ("a finished placeholder (its Pods may still be there)", ours(3, state="COMPLETED"), True),
    (
        "another release's placeholder",
        job(4, admin_comment=placeholder.job_name(POD, OTHER)),
        False,
    ),
    (
        "a user's job named like a placeholder, no AdminComment",
        job(5, name=placeholder.job_name(POD, SCHEDULER)),
        False,
    ),
    (
        "a user's job whose own comment looks like a placeholder reference",
        Job(6, "x", "RUNNING", comment=placeholder.job_name(POD, SCHEDULER)),
        False,
    ),
    (
        "an AdminComment that is not a whole reference",
        job(7, admin_comment=f"tandem:{SCHEDULER}/demo/web-0"),
        False,
    ),
    ("an admin's own AdminComment", job(8, admin_comment="ticket 1234"), False),
    (
        "a scheduler whose name starts like ours",
        job(9, admin_comment=placeholder.job_name(POD, SCHEDULER + "-2")),
        False,
    ),
]


@pytest.mark.parametrize(("why", "candidate", "chosen"), JOB_ROWS, ids=[r[0] for r in JOB_ROWS])
def test_only_this_schedulers_placeholders_by_admin_comment(why: str, candidate: Job, chosen: bool) -> None:
    assert (plan.placeholder_jobs([candidate], SCHEDULER) == [candidate]) is chosen


def test_no_scheduler_name_chooses_nothing() -> None:
    assert plan.placeholder_jobs([ours(1)], "") == []


def test_finished_placeholders_are_not_cancelled_again() -> None:
    running, pending, done = ours(1), ours(2, state="PENDING"), ours(3, state="CANCELLED")
    assert plan.to_cancel([running, pending, done]) == [running, pending]


# -- which Pods ------------------------------------------------------------------------------------


def pod(
    name: str = "web-0",
    uid: str = "uid-1",
    namespace: str = "demo",
    scheduler: str = SCHEDULER,
    job_id: str | None = None,
    phase: str = "Running",
    deleting: bool = False,
) -> dict[str, Any]:
    annotations = {keys.JOB_ID_ANNOTATION: job_id} if job_id is not None else {}
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "annotations": annotations,
            "deletionTimestamp": "2026-01-01T00:00:00Z" if deleting else None,
        },
        "spec": {"schedulerName": scheduler},
        "status": {"phase": phase},
    }


POD_ROWS = [
    ("the Pod its job stands for", pod(), True),
    ("a Pending Pod whose job pends", pod(phase="Pending"), True),
    ("a new Pod that took the name (another uid)", pod(uid="uid-2"), False),
    ("a gang member carrying the group job's id", pod("train-0", "m0", job_id="2"), True),
    (
        "a Pod in another namespace carrying that id",
        pod("train-0", "m0", namespace="other", job_id="2"),
        False,
    ),
    (
        "a Pod naming another scheduler, with that id",
        pod("x", "m9", scheduler="default-scheduler", job_id="2"),
        False,
    ),
    ("a Pod carrying the id of a job that is no placeholder", pod("y", "m8", job_id="77"), False),
    ("a finished Pod", pod(phase="Succeeded"), False),
    ("a Pod already being deleted", pod(deleting=True), False),
]


@pytest.mark.parametrize(("why", "candidate", "chosen"), POD_ROWS, ids=[r[0] for r in POD_ROWS])
def test_the_pods_of_the_placeholders(why: str, candidate: dict[str, Any], chosen: bool) -> None:
    jobs = [ours(1), ours(2, GROUP), job(77)]
    assert (plan.placeholder_pods([candidate], jobs, SCHEDULER) == [candidate]) is chosen


# -- which jobs are still to wait for --------------------------------------------------------------

STATE_ROWS = [
    ("running", {1: ("RUNNING", ())}, [1]),
    ("pending", {1: ("PENDING", ())}, [1]),
    ("cancelled, epilog still running", {1: ("CANCELLED", ("COMPLETING",))}, [1]),
    ("cancelled and done", {1: ("CANCELLED", ())}, []),
    ("completed", {1: ("COMPLETED", ())}, []),
    ("no longer listed", {}, []),
]


@pytest.mark.parametrize(("why", "states", "left"), STATE_ROWS, ids=[r[0] for r in STATE_ROWS])
def test_a_job_has_ended_once_finished_and_its_epilog_done(
    why: str, states: dict[int, tuple[str, tuple[str, ...]]], left: list[int]
) -> None:
    assert plan.not_ended([1], states) == left


# -- what is left on Nodes and slurmd Pods ---------------------------------------------------------

LOCK = {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"}
OTHER_TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}


def node(
    taints: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-001", "annotations": annotations or {}},
        "spec": {"taints": taints or []},
        "status": {"conditions": conditions or []},
    }


NODE_ROWS = [
    ("nothing of Tandem's", node([OTHER_TAINT], {"team": "a"}), plan.NodeLeftovers("node-001")),
    ("the lock taint", node([OTHER_TAINT, LOCK]), plan.NodeLeftovers("node-001", lock_taint=True)),
    (
        "the lock taint with another value or effect (by its key, as the syncer removes it)",
        node([{"key": keys.LOCK_KEY, "value": "x", "effect": "NoSchedule"}]),
        plan.NodeLeftovers("node-001", lock_taint=True),
    ),
    (
        "the drain annotation",
        node(annotations={keys.DRAIN_ANNOTATION: "maintenance"}),
        plan.NodeLeftovers("node-001", annotations=(keys.DRAIN_ANNOTATION,)),
    ),
    (
        "another annotation under the prefix is not Tandem's",
        node(annotations={keys.PREFIX + "nodeset": "gpu"}),
        plan.NodeLeftovers("node-001"),
    ),
    (
        "the SlurmCordon condition",
        node(conditions=[{"type": "Ready", "status": "True"}, {"type": "SlurmCordon", "status": "True"}]),
        plan.NodeLeftovers("node-001", cordon_condition=True),
    ),
]


@pytest.mark.parametrize(("why", "obj", "left"), NODE_ROWS, ids=[r[0] for r in NODE_ROWS])
def test_what_tandem_left_on_a_node(why: str, obj: dict[str, Any], left: plan.NodeLeftovers) -> None:
    assert plan.node_leftovers(obj) == left
    assert left.any is (left != plan.NodeLeftovers("node-001"))


def test_removing_the_lock_taint_keeps_every_other_in_its_order() -> None:
    second = {"key": "b", "effect": "NoExecute"}
    assert plan.taints_without_lock([OTHER_TAINT, LOCK, second]) == [OTHER_TAINT, second]


def slurmd_pod(
    name: str, namespace: str = "slurm", lock: str | None = None, label: bool = True
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE} if label else {},
            "annotations": {keys.LOCK_KEY: lock} if lock is not None else {},
        }
    }


def test_every_slurmd_pod_with_a_lock_annotation_whatever_its_value() -> None:
    pods = [
        slurmd_pod("cpu-001", lock="locked"),
        slurmd_pod("cpu-002", lock="false"),
        slurmd_pod("cpu-003"),
        slurmd_pod("cpu-004", namespace="tenant", lock="locked"),  # the label outside: not slurmd
        slurmd_pod("cpu-005", lock="locked", label=False),
    ]
    assert plan.locked_slurmd_pods(pods, "slurm") == ["cpu-001", "cpu-002"]


# -- which drains are resumed ----------------------------------------------------------------------


def drained(reason: str, by: str = SYNCER) -> Node:
    return Node("cpu-001", "IDLE", ("DRAIN",), reason, by)


def kube_node(
    cordoned: bool = False, ready: bool = True, health: dict[str, dict[str, str]] | None = None
) -> dict[str, Any]:
    """As tandem.syncer.cluster.slim_node projects it."""
    return {
        "metadata": {"name": "node-001"},
        "spec": {"unschedulable": cordoned},
        "status": {"ready": ready, "health": health or {}},
    }


def slim_slurmd(ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": "cpu-001"}, "spec": {"nodeName": "node-001"}, "status": {"ready": ready}}


def facts(
    slurm: Node | None,
    node_obj: dict[str, Any] | None = None,
    slurmd_obj: dict[str, Any] | None = None,
    killwait_pod: dict[str, Any] | None = None,
    node_name: str = "node-001",
    own_user: str = SYNCER,
    health_conditions: tuple[str, ...] = (),
) -> NodeFacts:
    return NodeFacts(
        slurm_node="cpu-001",
        slurm=slurm,
        kube_node_name=node_name,
        kube_node=node_obj,
        slurmd_pod=slurmd_obj if slurmd_obj is not None else slim_slurmd(),
        killwait_pod=killwait_pod,
        own_user=own_user,
        health_conditions=health_conditions,
    )


CORDONED = "k8s: Node node-001 is cordoned"
KILLWAIT = keys.killwait_drain_reason("demo", "web-0", 7)
LOCK_TIMEOUT = keys.lock_timeout_drain_reason(
    9, "node-001", "demo/db-0 (its PodDisruptionBudget db allows no disruption)"
)
UNHEALTHY = "k8s: Node node-001 has GpuUnhealthy: gpu 3: XID 79"
GPU_BAD = {"GpuUnhealthy": {"status": "True", "message": "gpu 3: XID 79"}}
STILL_THERE = {
    "metadata": {"namespace": "demo", "name": "web-0", "annotations": {keys.JOB_ID_ANNOTATION: "7"}},
    "spec": {"nodeName": "node-001"},
    "status": {"phase": "Running"},
}

DRAIN_ROWS: list[tuple[str, NodeFacts, bool | None]] = [
    ("not drained", facts(Node("cpu-001", "IDLE"), kube_node()), None),
    ("an admin's drain", facts(drained("maintenance", by="root"), kube_node()), False),
    ("an admin's drain in Tandem's words", facts(drained(CORDONED, by="root"), kube_node()), False),
    ("Slurm's own prolog-error drain", facts(drained("Prolog error", by="slurm"), kube_node()), False),
    ("Tandem's user, a reason Tandem never writes", facts(drained("disk full"), kube_node()), False),
    ("no own user known: nothing is Tandem's", facts(drained(CORDONED), kube_node(), own_user=""), False),
    (
        "Tandem's cordon drain, the Node still cordoned",
        facts(drained(CORDONED), kube_node(cordoned=True)),
        False,
    ),
    ("Tandem's cordon drain, the Node uncordoned", facts(drained(CORDONED), kube_node()), True),
    (
        "Tandem's NotReady drain, the Node Ready again",
        facts(drained("k8s: Node node-001 is NotReady"), kube_node()),
        True,
    ),
    (
        "Tandem's drain for a deleted Node, still gone",
        facts(drained("k8s: Node node-001 was deleted"), None),
        False,
    ),
    (
        "Tandem's slurmd drain, the slurmd Pod still not ready",
        facts(drained("k8s: slurmd Pod cpu-001 is not ready"), kube_node(), slim_slurmd(ready=False)),
        False,
    ),
    (
        "Tandem's health drain, the condition still True",
        facts(drained(UNHEALTHY), kube_node(health=GPU_BAD), health_conditions=("GpuUnhealthy",)),
        False,
    ),
    (
        "Tandem's health drain, the condition cleared",
        facts(drained(UNHEALTHY), kube_node(), health_conditions=("GpuUnhealthy",)),
        True,
    ),
    (
        "an admin's drain in health words, the condition cleared",
        facts(drained(UNHEALTHY, by="root"), kube_node(), health_conditions=("GpuUnhealthy",)),
        False,
    ),
    (
        "NHC's drain (root, its own words)",
        facts(drained("NHC: gpu 3 ECC errors", by="root"), kube_node()),
        False,
    ),
    ("Tandem's KillWait drain, the Pod gone", facts(drained(KILLWAIT), kube_node()), True),
    (
        "Tandem's KillWait drain, the Pod still running there",
        facts(drained(KILLWAIT), kube_node(), killwait_pod=STILL_THERE),
        False,
    ),
    ("an admin's drain in KillWait's words", facts(drained(KILLWAIT, by="root"), kube_node()), False),
    ("Tandem's lock-timeout drain", facts(drained(LOCK_TIMEOUT), kube_node()), True),
    ("an admin's drain in lock-timeout words", facts(drained(LOCK_TIMEOUT, by="root"), kube_node()), False),
]


@pytest.mark.parametrize(("why", "f", "resume"), DRAIN_ROWS, ids=[r[0] for r in DRAIN_ROWS])
def test_only_tandems_own_drains_are_resumed_once_their_reason_is_gone(
    why: str, f: NodeFacts, resume: bool | None
) -> None:
    verdict = plan.drain_verdict(f)
    assert (verdict.resume if verdict is not None else None) is resume
    if verdict is not None:
        assert verdict.why


def test_a_drain_left_for_a_cause_says_what_still_holds() -> None:
    verdict = plan.drain_verdict(facts(drained(CORDONED), kube_node(cordoned=True)))
    assert verdict == plan.DrainVerdict(False, "Node node-001 is cordoned: resume it once that is fixed")


def test_the_lock_timeout_reason_is_told_from_others() -> None:
    assert keys.is_lock_timeout_drain(LOCK_TIMEOUT)
    assert not keys.is_lock_timeout_drain(KILLWAIT)
    assert not keys.is_lock_timeout_drain(CORDONED)
    assert not keys.is_lock_timeout_drain("k8s: job x could not lock node-001: a did not leave")
