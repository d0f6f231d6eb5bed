"""A benchmark run counts only when it did the work right (bench/checks.py, issue 55): each Pod
bound once, on a node of its own Slurm job, and nothing left locked or running after it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench import checks, report
from devstack import audit
from tandem import keys
from tandem.slurm.models import Job


def _pod(name: str, node: str = "", job_id: int | None = None) -> dict[str, Any]:
    annotations = {keys.JOB_ID_ANNOTATION: str(job_id)} if job_id is not None else {}
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"nodeName": node} if node else {},
    }


def _job(job_id: int, pod: str, node: str, state: str = "RUNNING") -> Job:
    return Job(job_id=job_id, name=f"tandem:s/bench/{pod}/uid-{pod}", state=state, nodes=(node,))


HOSTS = {"cpu-001": "node-001", "cpu-002": "node-002"}


def test_a_pod_on_its_own_jobs_node_passes_and_every_other_placement_is_named() -> None:
    snap = checks.Snapshot(
        pods=(
            _pod("right", "node-001", 1),
            _pod("waiting"),  # not bound: the unbound check's to say
            _pod("elsewhere", "node-001", 2),
            _pod("borrowed", "node-002", 1),
            _pod("jobless", "node-002", 9),
        ),
        jobs={1: _job(1, "right", "cpu-001"), 2: _job(2, "elsewhere", "cpu-002")},
        kube_node_of=HOSTS,
    )
    assert checks.placements(snap) == [
        "elsewhere is bound to node-001, not to a node of its Slurm job 2",
        "borrowed is bound for Slurm job 1, another Pod's",
        "jobless is bound with no Slurm job of its own",
    ]


def test_each_pod_is_bound_by_one_request() -> None:
    counted = Counter({"a": 1, "b": 2})
    assert checks.bindings(["a", "b", "c"], counted) == [
        "b was bound 2 times",
        "c was bound by no request logged",
    ]
    assert checks.unbound(["a", "b", "c"], ["a"]) == ["2 Pods never bound (b, c)"]
    assert checks.unbound(["a"], ["a"]) == []


def test_a_job_a_lock_or_a_taint_left_after_the_run_is_named() -> None:
    slurmd = [
        {"metadata": {"name": "cpu-001", "annotations": {keys.LOCK_KEY: "locked"}}},
        {"metadata": {"name": "cpu-002", "annotations": {keys.LOCK_KEY: "false"}}},
    ]
    nodes: list[dict[str, Any]] = [
        {
            "metadata": {"name": "node-001"},
            "spec": {"taints": [{"key": keys.LOCK_KEY, "effect": "NoExecute"}]},
        },
        {"metadata": {"name": "node-002"}, "spec": {}},
    ]
    assert checks.leftovers(slurmd, nodes, [_job(4, "p", "cpu-001")]) == [
        "Slurm job 4 (tandem:s/bench/p/uid-p) still RUNNING",
        "cpu-001 is still locked",
        "Node node-001 still has the lock taint",
    ]
    assert checks.leftovers(slurmd[1:], nodes[1:], []) == []


def test_the_api_server_counts_each_pods_bindings_by_its_scheduler(tmp_path: Path) -> None:
    scheduler = "system:serviceaccount:tandem:tandem-scheduler"

    def binding(name: str, at: str, user: str = scheduler, namespace: str = "bench") -> str:
        ref = {"resource": "pods", "namespace": namespace, "name": name, "subresource": "binding"}
        return json.dumps(
            {"verb": "create", "user": {"username": user}, "objectRef": ref, "requestReceivedTimestamp": at}
        )

    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                binding("bench-0", "2026-12-02T01:00:01Z"),
                binding("bench-0", "2026-12-02T01:00:02Z"),
                binding("bench-1", "2026-12-02T01:00:02Z", user="system:kube-scheduler"),
                binding("bench-2", "2026-12-02T01:00:02Z", namespace="default"),
                binding("bench-3", "2026-12-02T01:00:09Z"),  # after the window
            ]
        )
    )
    since = 1796173200.0  # 2026-12-02T01:00:00Z
    assert audit.bindings_in(log, "bench", scheduler, since, since + 5) == Counter({"bench-0": 2})


def test_a_run_that_failed_its_checks_says_so_in_its_row(tmp_path: Path) -> None:
    run = {
        "name": "burst",
        "label": "after",
        "nodes": 8,
        "command": [".venv/bin/python", "bench/schedule.py"],
        "commit": "abc1234",
        "at": "2026-12-02T05:00:00+00:00",
        "machine": {"cpus": 2},
        "result": {"tandem_rate": 30.0, "checks_failed": ["bench-3 was bound 2 times"]},
    }
    (tmp_path / "burst.jsonl").write_text(json.dumps(run) + "\n")
    (row,) = [
        line for line in report.render(report.load(tmp_path)).splitlines() if line.startswith("| after")
    ]
    assert row.startswith("| after (**failed**: bench-3 was bound 2 times) |")
