"""Issue 53: an elastic gang on the lab. An Indexed Job of parallelism 4 whose PodGroup's minCount is
2 runs as a core Slurm job of 2 nodes and one job per extra member, each linked to the core by its
name and niced below it; a higher-tier `sbatch` that needs two of those nodes takes the extras back
and leaves the core running; scaled 4 -> 6 -> 1, the Slurm side follows, the core shrunk in place
and its released node given to a job waiting for it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config
from devstack import kube as devkube
from devstack.config import StackConfig
from devstack.slurm import slurm_env
from tandem import keys, reasons
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

NS = "default"
LINGER_S = 3.0


@pytest.fixture
def batch(stack_cfg: StackConfig) -> Iterator[k8s.BatchV1Api]:
    """Deletes the test's Jobs before `clean` deletes their Pods (else the Job makes them again)."""
    if h.podgroups()[1] == "v1alpha2":
        pytest.skip("Kubernetes 1.36's Job controller makes minCount its parallelism: no extras")
    api = k8s.BatchV1Api(devkube.api(stack_cfg))
    yield api
    api.delete_collection_namespaced_job(NS, propagation_policy="Background")


def _cpu_nodes_only(cfg: StackConfig) -> str:
    """The GPU nodes, excluded: the gang and the preemptor meet on the four CPU nodes."""
    return ",".join(config.slurm_node_name(i) for i in range(cfg.nodes) if config.is_gpu_node(i))


def _elastic_job(cfg: StackConfig, name: str, parallelism: int, min_count: int) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, "x", {h.PREFIX + "excluded-nodes": _cpu_nodes_only(cfg)})
    # A deleted member lingers (kwok's delay) long enough to read what was written on it first.
    pod["metadata"]["annotations"].update(devkube.delete_delay(LINGER_S))
    return {
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": parallelism,
            "parallelism": parallelism,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            "template": {
                "metadata": {"annotations": pod["metadata"]["annotations"]},
                "spec": {**pod["spec"], "restartPolicy": "Never"},
            },
        },
    }


def _members(core: k8s.CoreV1Api, job: str) -> dict[int, k8s.V1Pod]:
    """The Job's live Pods by completion index."""
    pods = core.list_namespaced_pod(NS, label_selector=f"job-name={job}").items
    return {
        int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"]): p
        for p in pods
        if not p.metadata.deletion_timestamp
    }


def _all_bound(core: k8s.CoreV1Api, job: str, count: int) -> dict[int, k8s.V1Pod] | None:
    """The Job's `count` live Pods, once every one is bound."""
    members = _members(core, job)
    return members if len(members) == count and all(p.spec.node_name for p in members.values()) else None


def _job_ids(members: dict[int, k8s.V1Pod]) -> dict[int, int]:
    return {
        i: int(job_id)
        for i, p in members.items()
        if (job_id := (p.metadata.annotations or {}).get(h.PREFIX + "job-id"))
    }


def test_an_indexed_job_above_its_mincount_runs_a_core_and_extras_and_slurm_takes_extras_back_first(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    name = h.unique("elastic")
    batch.create_namespaced_job(NS, _elastic_job(stack_cfg, name, parallelism=4, min_count=2))

    bound = h.wait_until("the core and both extras bound", lambda: _all_bound(core, name, 4), 60)
    ids = _job_ids(bound)
    # The core: indexes 0 and 1 on one job of two nodes; each extra on a job of its own.
    assert ids[0] == ids[1] and len({ids[0], ids[2], ids[3]}) == 3, ids
    core_job = h.rest_job(stack_cfg, ids[0])
    assert core_job["node_count"] == 2 and core_job["job_state"] == "RUNNING"
    for i in (2, 3):
        extra = h.rest_job(stack_cfg, ids[i])
        assert extra["node_count"] == 1 and extra["job_state"] == "RUNNING", extra
        assert extra["name"].endswith(f"+x.{bound[i].metadata.uid}"), extra["name"]
        assert extra["nice"] == 1000 and extra["user_id"] == core_job["user_id"]
    assert len({p.spec.node_name for p in bound.values()}) == 4

    # Two whole CPU nodes, at a higher tier: Slurm preempts the two extras, not the core, and each
    # extra's Pod is told so (DisruptionTarget, which a Job's podFailurePolicy can ignore).
    extras = {bound[i].metadata.name for i in (2, 3)}
    winner = h.sbatch(
        stack_cfg, "--partition=high", "--exclusive", "-N2", f"--exclude={_cpu_nodes_only(stack_cfg)}"
    )

    def told() -> dict[str, Any] | None:
        pods = [h.get_pod(core, n) for n in extras]
        found = {
            p.metadata.name: c
            for p in pods
            if p is not None and p.metadata.deletion_timestamp
            for c in p.status.conditions or []
            if c.type == keys.DISRUPTION_TARGET
        }
        return found if len(found) == 2 else None

    disrupted = h.wait_until("both extras told they were preempted", told, 30, every=0.05)
    for c in disrupted.values():
        assert c.status == "True" and c.reason == reasons.PREEMPTED_BY_SLURM, c
        assert "was preempted (Slurm takes extras back before the core)" in c.message, c.message
    h.wait_until("the preemptor running", lambda: h.rest_job(stack_cfg, winner)["job_state"] == "RUNNING", 60)
    for i in (2, 3):
        assert h.rest_job(stack_cfg, ids[i])["job_state"] in ("PREEMPTED", "CANCELLED")
    assert h.rest_job(stack_cfg, ids[0])["job_state"] == "RUNNING"
    now = _members(core, name)
    assert {i: p.metadata.uid for i, p in now.items() if i < 2} == {i: bound[i].metadata.uid for i in (0, 1)}
    assert all(now[i].spec.node_name == bound[i].spec.node_name for i in (0, 1))


def test_parallelism_up_gives_each_new_member_a_job_and_down_cancels_the_extras_jobs_first(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    name = h.unique("elastic")
    # The core alone first: the Job controller removes its newest Pods first on a scale-down, so
    # that the ones it removes are the extras (Pods made together are removed in no set order).
    spec = _elastic_job(stack_cfg, name, parallelism=2, min_count=2)
    spec["spec"]["completions"] = 6
    spec["spec"]["template"]["metadata"]["annotations"].pop(h.PREFIX + "excluded-nodes")  # all 8 nodes
    batch.create_namespaced_job(NS, spec)

    h.wait_until("the core bound", lambda: _all_bound(core, name, 2), 60)
    started = time.monotonic()
    batch.patch_namespaced_job(name, NS, {"spec": {"parallelism": 6}})
    grown = h.wait_until("four extras bound", lambda: _all_bound(core, name, 6), 60)
    took_up = time.monotonic() - started
    ids = _job_ids(grown)
    core_id = ids[0]
    assert ids[1] == core_id and len({ids[i] for i in range(2, 6)} | {core_id}) == 5, ids
    assert len({p.spec.node_name for p in grown.values()}) == 6  # a node per member

    started = time.monotonic()
    batch.patch_namespaced_job(name, NS, {"spec": {"parallelism": 2}})

    def extras_gone() -> bool:
        return all(
            h.rest_job(stack_cfg, ids[i])["job_state"] not in ("RUNNING", "PENDING") for i in range(2, 6)
        )

    h.wait_until("every extra's job ended", extras_gone, 60)
    took_down = time.monotonic() - started
    assert h.rest_job(stack_cfg, core_id)["job_state"] == "RUNNING"
    left = _members(core, name)
    assert sorted(left) == [0, 1] and all(left[i].metadata.uid == grown[i].metadata.uid for i in (0, 1))
    print(
        f"\n[measure] parallelism 2 -> 6: four extras bound in {took_up:.2f}s; "
        f"6 -> 2: their jobs ended in {took_down:.2f}s"
    )


def _slurm_node(kube_node: str) -> str:
    return config.slurm_node_name(int(kube_node.split("-")[1]))


def test_an_elastic_indexed_job_scaled_4_6_1_grows_and_shrinks_slurm_and_frees_the_cores_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    """An elastic Indexed Job (completions changed with parallelism, so the Job controller removes
    the highest indexes): 4 -> 6 gives the two new members jobs of their own; 6 -> 1 ends the extras'
    jobs and shrinks the core in place to index 0's node, its batch host, and an exclusive `sbatch`
    waiting for index 1's node runs there."""
    name = h.unique("elastic")
    spec = _elastic_job(stack_cfg, name, parallelism=4, min_count=2)
    spec["spec"]["template"]["metadata"]["annotations"].pop(h.PREFIX + "excluded-nodes")  # all 8 nodes
    batch.create_namespaced_job(NS, spec)
    four = h.wait_until("the core and both extras bound", lambda: _all_bound(core, name, 4), 60)
    core_id = _job_ids(four)[0]
    host, other = (_slurm_node(four[i].spec.node_name) for i in (0, 1))
    assert expand(h.rest_job(stack_cfg, core_id)["nodes"]) == sorted([host, other])

    started = time.monotonic()
    batch.patch_namespaced_job(name, NS, {"spec": {"parallelism": 6, "completions": 6}})
    six = h.wait_until("four extras bound", lambda: _all_bound(core, name, 6), 60)
    took_up = time.monotonic() - started
    ids = _job_ids(six)
    assert ids[1] == core_id and len({ids[i] for i in range(2, 6)} | {core_id}) == 5, ids
    assert len({p.spec.node_name for p in six.values()}) == 6

    # A job that needs index 1's node whole waits behind the core.
    waiting = h.sbatch(stack_cfg, "--exclusive", "-N1", f"--nodelist={other}")
    h.wait_until("the sbatch pending", lambda: h.rest_job(stack_cfg, waiting)["job_state"] == "PENDING", 10)

    started = time.monotonic()
    one = {"parallelism": 1, "completions": 1, "scheduling": {"schedulingPolicy": {"gang": {"minCount": 1}}}}
    batch.patch_namespaced_job(name, NS, {"spec": one})

    def shrunk() -> bool:
        return expand(h.rest_job(stack_cfg, core_id)["nodes"]) == [host]

    h.wait_until("the core shrunk to index 0's node", shrunk, 60)
    took_shrink = time.monotonic() - started
    h.wait_until(
        "the waiting sbatch running on the released node",
        lambda: h.rest_job(stack_cfg, waiting)["job_state"] == "RUNNING",
        30,
    )
    took_freed = time.monotonic() - started
    assert expand(h.rest_job(stack_cfg, waiting)["nodes"]) == [other]
    for i in range(2, 6):
        assert h.rest_job(stack_cfg, ids[i])["job_state"] not in ("RUNNING", "PENDING"), i
    assert h.rest_job(stack_cfg, core_id)["job_state"] == "RUNNING"
    left = h.wait_until("index 0 alone", lambda: _all_bound(core, name, 1), 30)
    assert left[0].metadata.uid == four[0].metadata.uid and left[0].spec.node_name == four[0].spec.node_name

    # Slurm's accounting records the resize; the PodGroup says what was released.
    sacct = subprocess.run(
        ["sacct", "-j", str(core_id), "-D", "-X", "-n", "-P", "-o", "JobID,State,NodeList"],
        env=slurm_env(stack_cfg),
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    assert "RESIZING" in sacct, sacct
    events = core.list_namespaced_event(NS, field_selector=f"reason={reasons.EVENT_JOB_SHRUNK}").items
    said = [e.message for e in events if f"Slurm job {core_id} shrunk in place to {host}" in e.message]
    assert said and f"{other} released" in said[0], [e.message for e in events]
    print(
        f"\n[measure] parallelism 4 -> 6: two extras bound in {took_up:.2f}s; 6 -> 1: core shrunk in"
        f" {took_shrink:.2f}s, the waiting sbatch ran on the released node at {took_freed:.2f}s"
    )
