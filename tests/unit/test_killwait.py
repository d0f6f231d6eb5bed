"""At KillWait: which of a placeholder job's Pods still run, and which Slurm nodes they keep
drained, as a table (tandem.syncer.killwait)."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, JobStatus
from tandem.syncer import killwait

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
    ("its Pod is not bound yet", pod(node=""), ["web"]),
]


@pytest.mark.parametrize(("why", "current", "left"), POD_ROWS, ids=[r[0] for r in POD_ROWS])
def test_the_pods_a_job_still_has(why: str, current: dict[str, Any] | None, left: list[str]) -> None:
    found = killwait.job_pods(status(), POD, (), current, host)
    assert [p["metadata"]["name"] for p in found] == left, why


def test_a_groups_pods_are_every_member_that_carries_its_job() -> None:
    members = [pod("train-0", "u0", "node-001"), pod("train-1", "u1", "node-002", phase="Failed")]
    found = killwait.job_pods(status(("cpu-001", "cpu-002")), GROUP, members, None, host)
    assert [p["metadata"]["name"] for p in found] == ["train-0"]


TARGET_ROWS = [
    ("a Pod on the job's node keeps that node", ("cpu-001",), [pod()], {"cpu-001": "web"}),
    ("nothing left: nothing drained", ("cpu-001",), [], {}),
    ("a Pod not bound keeps the node its script ran on", ("cpu-001",), [pod(node="")], {"cpu-002": "web"}),
    (
        "a group: only the node whose member still runs",
        ("cpu-001", "cpu-002"),
        [pod("train-1", "u1", "node-002")],
        {"cpu-002": "train-1"},
    ),
    ("a job Slurm lists no nodes for: the script's node", (), [pod(node="node-002")], {"cpu-002": "web"}),
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
