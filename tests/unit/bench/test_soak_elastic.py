"""The soak's invariants over elastic gangs (issue 53): a whole core with an extra waiting for a node
is no partly bound gang; an extra's job lives only while its member does, and runs only while its
core does."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any
from unittest import mock

import pytest

from bench import soak
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeError
from tests.unit.bench.stops import Ticks

SCHEDULER = "tandem"
CORE = f"tandem:{SCHEDULER}/soak/pg:el/pg-uid"


def _pod(name: str, uid: str, node: str = "", job: int | None = None, owner: str = "") -> dict[str, Any]:
    annotations = {keys.JOB_ID_ANNOTATION: str(job)} if job is not None else {}
    owners = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "controller": True}] if owner else []
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "schedulingGroup": {"podGroupName": "el"}}
    if node:
        spec["nodeName"] = node
        spec["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists"}]
    return {
        "metadata": {
            "name": name,
            "namespace": "soak",
            "uid": uid,
            "annotations": annotations,
            "ownerReferences": owners,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


PODGROUP = {
    "metadata": {"name": "el", "namespace": "soak"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def _counts(
    pods: list[dict[str, Any]], jobs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> dict[str, int]:
    world = soak.Soak.__new__(soak.Soak)
    world.cfg = mock.Mock(spec=StackConfig, scheduler_name=SCHEDULER, nodes=8)
    world.podgroup_api = "scheduling.k8s.io/v1beta1"
    world.misplaced_drains = set()
    world.cores_preempted_first = set()
    world.shard_node = None
    world.kube = mock.Mock()
    world.kube.get.side_effect = lambda path: (
        {"items": [PODGROUP]}
        if path.endswith("/podgroups")
        else {"items": pods}
        if path == "/api/v1/pods"
        else {}
    )
    monkeypatch.setattr(soak, "slurm_jobs", lambda cfg, also=(): jobs)
    monkeypatch.setattr(soak, "slurm_nodes", lambda cfg: {})
    monkeypatch.setattr(soak.Soak, "_gpus_given_twice", lambda self: 0)
    monkeypatch.setattr(soak.Soak, "_node", lambda self, name: {"metadata": {"name": name}})
    return world.invariants()


def _job(job_id: int, name: str, node: str, state: str = "RUNNING") -> dict[str, Any]:
    return {"id": job_id, "name": name, "state": state, "nodes": [node] if state != "PENDING" else []}


def _extra(uid: str) -> str:
    return f"{CORE}+x.{uid}"


def test_a_whole_core_with_an_extra_waiting_keeps_every_invariant(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [
        _pod("el-0", "u0", "node-001", 7),
        _pod("el-1", "u1", "node-003", 7),
        _pod("el-2", "u2", "node-005", 8),
        _pod("el-3", "u3"),  # waits for a node (its job pends, or is not submitted yet)
    ]
    jobs = [
        {"id": 7, "name": CORE, "state": "RUNNING", "nodes": ["cpu-001", "cpu-003"]},
        _job(8, _extra("u2"), "cpu-005"),
        _job(9, _extra("u3"), "", state="PENDING"),
    ]
    assert not any(_counts(pods, jobs, monkeypatch).values())


def test_a_gang_bound_short_of_its_mincount_is_partly_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    pods = [_pod("el-0", "u0", "node-001", 7), _pod("el-1", "u1"), _pod("el-2", "u2")]
    jobs = [{"id": 7, "name": CORE, "state": "RUNNING", "nodes": ["cpu-001"]}]
    assert _counts(pods, jobs, monkeypatch)["partly_bound_gangs"] == 1
    # An elastic Job's core its workload shrank to one node, grown back: whole, the others wait.
    owned = [
        _pod(
            p["metadata"]["name"],
            p["metadata"]["uid"],
            "node-001" if i == 0 else "",
            7 if i == 0 else None,
            owner="train",
        )
        for i, p in enumerate(pods)
    ]
    assert _counts(owned, jobs, monkeypatch)["partly_bound_gangs"] == 0


def test_an_extras_job_runs_only_beside_its_core_and_lives_only_with_its_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pods = [_pod("el-0", "u0", "", 7), _pod("el-1", "u1", "", 7), _pod("el-2", "u2", "node-005", 8)]
    jobs = [
        {"id": 7, "name": CORE, "state": "PENDING", "nodes": []},  # requeued
        _job(8, _extra("u2"), "cpu-005"),
        _job(10, _extra("gone"), "cpu-007"),  # its member was deleted
    ]
    counts = _counts(pods, jobs, monkeypatch)
    assert counts["extras_without_core"] == 2
    assert counts["jobs_without_pod"] == 1


def test_a_node_of_an_elastic_jobs_core_with_no_member_on_it_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its Job asked for one member; the core still holds the node the other left."""
    job = "train"
    pods = [_pod("el-0", "u0", "node-001", 7, owner=job)]
    jobs = [{"id": 7, "name": CORE, "state": "RUNNING", "nodes": ["cpu-001", "cpu-003"]}]
    assert _counts(pods, jobs, monkeypatch)["core_nodes_without_member"] == 1
    # Shrunk to the node its member holds: nothing held for nobody.
    shrunk = [{"id": 7, "name": CORE, "state": "RUNNING", "nodes": ["cpu-001"]}]
    assert _counts(pods, shrunk, monkeypatch)["core_nodes_without_member"] == 0
    # Still going (a Pod being deleted runs on its node): held for it.
    going = [*pods, _pod("el-1", "u1", "node-003", 7, owner=job)]
    going[1]["metadata"]["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    assert _counts(going, jobs, monkeypatch)["core_nodes_without_member"] == 0
    # Only an extra left beside a core job whose batch host Slurm keeps: nothing Slurm would
    # release; a second node kept for nobody is counted.
    extra = [_pod("el-3", "u3", "node-005", 8, owner=job)]
    kept = [shrunk[0], _job(8, _extra("u3"), "cpu-005")]
    assert _counts(extra, kept, monkeypatch)["core_nodes_without_member"] == 0
    assert _counts(extra, [jobs[0], kept[1]], monkeypatch)["core_nodes_without_member"] == 1


def test_a_core_preempted_while_an_extra_of_its_group_ran_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = iter(
        [
            [_job(7, CORE, "cpu-001"), _job(8, _extra("u2"), "cpu-005")],
            [_job(7, CORE, "cpu-001", state="PREEMPTED"), _job(8, _extra("u2"), "cpu-005")],
        ]
    )
    monkeypatch.setattr(soak, "slurm_jobs", lambda cfg, also=(): next(samples))
    world = soak.Soak.__new__(soak.Soak)
    world.cfg = mock.Mock(spec=StackConfig)
    world.cores_preempted_first = set()
    world.watch_elastic(Ticks(2))  # type: ignore[arg-type]
    assert world.cores_preempted_first == {7}
    # The extras taken back first, then the core: nothing to count.
    samples = iter(
        [
            [_job(7, CORE, "cpu-001"), _job(8, _extra("u2"), "cpu-005", state="PREEMPTED")],
            [_job(7, CORE, "cpu-001", state="PREEMPTED")],
        ]
    )
    world.cores_preempted_first = set()
    world.watch_elastic(Ticks(2))  # type: ignore[arg-type]
    assert world.cores_preempted_first == set()


def test_the_elastic_job_is_scaled_as_an_elastic_indexed_job_its_mincount_never_above_its_size() -> None:
    """Completions move with parallelism (the Job controller then removes the highest indexes, the
    extras first), and the API server refuses a gang minCount above the parallelism."""
    world = soak.Soak.__new__(soak.Soak)
    world.cfg = mock.Mock(spec=StackConfig, scheduler_name=SCHEDULER)
    world.namespace, world.batch_jobs = "soak", "/apis/batch/v1/namespaces/soak/jobs"
    world.done = Counter()
    world.kube = mock.Mock()
    world.kube.merge_patch.side_effect = KubeError(404, "NotFound", "not found")
    sizes = set()
    for seed in range(12):
        world.rng = random.Random(seed)
        world.scale_elastic_job()
        scale = world.kube.merge_patch.call_args.args[1]["spec"]
        size, min_count = scale["parallelism"], scale["scheduling"]["schedulingPolicy"]["gang"]["minCount"]
        sizes.add(size)
        assert scale["completions"] == size and min_count == min(2, size)
        made = world.kube.post.call_args.args[1]["spec"]
        assert made["completionMode"] == "Indexed" and made["completions"] == made["parallelism"]
    assert 1 in sizes and max(sizes) > 2
    assert world.done["elastic job scaled"] == 12
