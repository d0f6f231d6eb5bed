"""At KillWait: which of a placeholder job's Pods still run, and which Slurm nodes they keep
drained, as a table (tandem.syncer.killwait)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, JobStatus
from tandem.syncer import killwait
from tandem.syncer.holds import HoldStore, KillWait

HOSTS = {"cpu-001": "node-001", "cpu-002": "node-002"}
POD = placeholder.PodRef("apps", "web", "uid-web")
GROUP = placeholder.PodRef("apps", "pg:train", "uid-pg")


def status(nodes: tuple[str, ...] = ("cpu-001",), job_id: int = 7) -> JobStatus:
    return JobStatus(Job(job_id=job_id, name="x", state="CANCELLED", nodes=nodes))


def pod(
    name: str = "web", uid: str = "uid-web", node: str = "node-001", job: str = "7", phase: str = "Running"
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "apps",
            "name": name,
            "uid": uid,
            "annotations": {keys.JOB_ID_ANNOTATION: job} if job else {},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def host(slurm_node: str) -> str:
    return HOSTS.get(slurm_node, "")


POD_ROWS = [
    ("its Pod runs on the job's node", pod(), ["web"]),
    ("its Pod is gone", None, []),
    ("its Pod finished", pod(phase="Succeeded"), []),
    ("its Pod records another job (a retried submit's)", pod(job="9"), []),
    ("its Pod is bound to a Node the job does not hold", pod(node="node-009"), []),
    # Issue 37: a Pod whose claim Slurm's GPUs could not be mapped to was never bound; its job,
    # cancelled by Tandem, waited for it until KillWait and drained the node it never ran on.
    ("its Pod was never bound: it occupies no node", pod(node=""), []),
    ("its Pod is bound but finished", pod(phase="Failed"), []),
]


@pytest.mark.parametrize(("why", "current", "left"), POD_ROWS, ids=[r[0] for r in POD_ROWS])
def test_the_pods_a_job_still_has(why: str, current: dict[str, Any] | None, left: list[str]) -> None:
    found = killwait.job_pods(status(), POD, (), current, host)
    assert [p["metadata"]["name"] for p in found] == left, why


def test_a_groups_pods_are_every_member_that_carries_its_job_and_occupies_one_of_its_nodes() -> None:
    members = [
        pod("train-0", "u0", "node-001"),
        pod("train-1", "u1", "node-002", phase="Failed"),
        pod("train-2", "u2", ""),  # never bound
        pod("train-3", "u3", "node-009"),  # bound to a Node of none of the job's nodes
    ]
    found = killwait.job_pods(status(("cpu-001", "cpu-002")), GROUP, members, None, host)
    assert [p["metadata"]["name"] for p in found] == ["train-0"]


def test_a_pod_of_another_namespace_carrying_a_groups_job_id_keeps_no_node_drained() -> None:
    """Issue 50: a tenant writes another gang's job id on a Pod of its own namespace, on a Node of
    that gang's job: it is no member, so it neither keeps the job's call waiting nor drains."""
    squatter = pod("squat", "u9", "node-002")
    squatter["metadata"]["namespace"] = "tenant"
    members = [pod("train-0", "u0", "node-001"), squatter]
    job = status(("cpu-001", "cpu-002"))
    found = killwait.job_pods(job, GROUP, members, None, host)
    assert [p["metadata"]["name"] for p in found] == ["train-0"]
    assert set(killwait.drain_targets(job, "cpu-001", found, host)) == {"cpu-001"}


TARGET_ROWS = [
    ("a Pod on the job's node keeps that node", ("cpu-001",), [pod()], {"cpu-001": "web"}),
    ("nothing left: nothing drained", ("cpu-001",), [], {}),
    ("a Pod never bound keeps no node, not even its script's", ("cpu-001",), [pod(node="")], {}),
    ("a Pod bound to a Node the job does not hold keeps none", ("cpu-001",), [pod(node="node-009")], {}),
    (
        "a group: only the node whose member still runs",
        ("cpu-001", "cpu-002"),
        [pod("train-1", "u1", "node-002")],
        {"cpu-002": "train-1"},
    ),
    ("a job Slurm lists no nodes for: the script's node", (), [pod(node="node-002")], {"cpu-002": "web"}),
    ("a job Slurm lists no nodes for, its Pod not bound: nothing", (), [pod(node="")], {}),
]


@pytest.mark.parametrize(("why", "nodes", "pods", "drained"), TARGET_ROWS, ids=[r[0] for r in TARGET_ROWS])
def test_the_nodes_kept_drained(
    why: str, nodes: tuple[str, ...], pods: list[dict[str, Any]], drained: dict[str, str]
) -> None:
    targets = killwait.drain_targets(status(nodes), "cpu-002", pods, host)
    assert {n: p["metadata"]["name"] for n, p in targets.items()} == drained, why


def test_the_reason_names_the_pod_and_job_as_the_node_sync_reads_it() -> None:
    reason = killwait.drain_reason(pod(), 7)
    assert keys.killwait_drain_of(reason) == ("apps", "web", 7)


# -- the deadline JobTerminating records, as each node's pass decides on it --------------------

DRAIN_AT = 100.0
REASON = killwait.drain_reason(pod(), 7)


def due(current: dict[str, Any] | None = None, gone: bool = False, job_id: int = 7) -> killwait.NodeKillWait:
    return killwait.NodeKillWait(job_id, DRAIN_AT, current, gone)


DECIDE_ROWS = [
    # (why, deadlines, drained with, now, may drain, the job drained, settled, requeue_after)
    ("before drain_at: back at drain_at", [due(pod())], None, 96.0, True, None, (), 4.0),
    ("at drain_at, its Pod still here: drained", [due(pod())], None, DRAIN_AT, True, 7, (), None),
    ("after drain_at, its Pod still here: drained", [due(pod())], None, 130.0, True, 7, (), None),
    (
        "its Pods went before drain_at: settled, no drain",
        [due(gone=True)],
        None,
        96.0,
        True,
        None,
        ((7, False),),
        None,
    ),
    ("at drain_at, no Pod of it here: settled", [due()], None, DRAIN_AT, True, None, ((7, False),), None),
    (
        "drained with its reason already: not again",
        [due(pod())],
        REASON,
        DRAIN_AT,
        True,
        None,
        ((7, True),),
        None,
    ),
    (
        "drained for another reason: drained with the Pod's",
        [due(pod())],
        "k8s: x",
        DRAIN_AT,
        True,
        7,
        (),
        None,
    ),
    ("a lock's drain goes first: soon again", [due(pod())], None, DRAIN_AT, False, None, (), 1.0),
    # Issue 50: an administrator's drain (a bad GPU) stays as it is: overwritten, it would be
    # Tandem's, resumed when the Pod goes.
    (
        "drained by someone else: settled as drained, not drained again",
        [due(pod())],
        "bad-gpu",
        DRAIN_AT,
        True,
        None,
        ((7, True),),
        None,
    ),
    (
        "two jobs due: one drain a pass, the next at once",
        [due(pod()), due(pod("batch", "u-b", job="8"), job_id=8)],
        None,
        DRAIN_AT,
        True,
        7,
        (),
        0.0,
    ),
    ("nothing recorded (a new leader): nothing", [], None, DRAIN_AT, True, None, (), None),
]


@pytest.mark.parametrize(
    ("why", "deadlines", "reason", "now", "may", "drained", "settled", "after"),
    DECIDE_ROWS,
    ids=[r[0] for r in DECIDE_ROWS],
)
def test_a_nodes_killwait_deadlines(
    why: str,
    deadlines: list[killwait.NodeKillWait],
    reason: str | None,
    now: float,
    may: bool,
    drained: int | None,
    settled: tuple[tuple[int, bool], ...],
    after: float | None,
) -> None:
    others = reason is not None and not reason.startswith("k8s:")  # the table's other writers
    plan = killwait.decide(deadlines, reason, now, may_drain=may, others_drain=others)
    assert (plan.drain.job_id if plan.drain else None, plan.settle, plan.after) == (
        drained,
        settled,
        after,
    ), why


def test_a_group_job_on_two_nodes_drains_each_node_a_member_still_runs_on() -> None:
    """drain_targets, for the whole job, says which node each pass drains."""
    group = status(("cpu-001", "cpu-002"))
    both = [pod("train-0", "u0", "node-001"), pod("train-1", "u1", "node-002")]

    def drains(pods: list[dict[str, Any]]) -> dict[str, object]:
        targets = killwait.drain_targets(group, "cpu-001", pods, host)
        plans = {n: killwait.decide([due(targets.get(n), gone=not pods)], None, DRAIN_AT) for n in HOSTS}
        return {n: p.drain.reason if p.drain else p.settle for n, p in plans.items()}

    assert drains(both) == {
        "cpu-001": killwait.drain_reason(both[0], 7),
        "cpu-002": killwait.drain_reason(both[1], 7),
    }
    assert drains(both[1:]) == {"cpu-001": ((7, False),), "cpu-002": killwait.drain_reason(both[1], 7)}


def test_the_store_keeps_a_deadline_until_each_node_settled_it() -> None:
    """What the call waits for: every node of the job drained, spared or refused; answered, the
    deadline goes, unless a drain Slurm refused is still to be made while the Pod runs."""
    store = HoldStore(clock=lambda: 0.0)
    store.killwait(KillWait(7, GROUP, "cpu-001", status(("cpu-001", "cpu-002")), DRAIN_AT))
    assert [k.job_id for k in store.memory("cpu-002").killwaits] == [7]
    store.killwait_settled("cpu-001", 7, drained=False)
    assert store.memory("cpu-001").killwaits == ()  # settled there: no pass looks at it again
    entry = store.killwait_of(7)
    assert entry is not None and not entry.outcome_known
    store.killwait_refused("cpu-002", 7)
    entry = store.killwait_of(7)
    assert entry is not None and entry.outcome_known and entry.drained == frozenset()
    store.answer_killwait(7, DRAIN_AT + 3, pod_gone=False)  # another call's answer: not this entry's
    assert store.killwait_of(7) == entry
    store.answer_killwait(7, DRAIN_AT, pod_gone=False)
    assert [k.job_id for k in store.memory("cpu-002").killwaits] == [7]  # tried again
    store.killwait_settled("cpu-002", 7, drained=True)
    assert store.killwait_of(7) is None


def test_a_new_leaders_store_holds_no_deadline() -> None:
    """Crash row: the leader died while answering; its deadlines died with it, so no pass of the
    new one drains for them. The call failed, and the placeholder's script, given no answer,
    drains its own node (libs/tandem/scripts/placeholder.sh)."""
    assert HoldStore().memory("cpu-001").killwaits == ()
    assert HoldStore().killwait_of(7) is None
