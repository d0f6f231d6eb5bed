"""Issue 10: a group of Pods (a gang PodGroup, an Indexed Job's PodGroup, an LWS replica group) is
one Slurm job with a node per member, bound all at once or not at all, and lives and ends as one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import config, stack
from devstack import kube as devkube
from devstack.config import StackConfig
from devstack.procs import Daemon
from tandem import keys
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

NS = "default"
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


@pytest.fixture
def custom(stack_cfg: StackConfig) -> Iterator[k8s.CustomObjectsApi]:
    """Deletes what a test made (Jobs, LWSs, PodGroups) before `clean` deletes the Pods."""
    api = devkube.api(stack_cfg)
    custom = k8s.CustomObjectsApi(api)
    yield custom
    k8s.BatchV1Api(api).delete_collection_namespaced_job(NS, propagation_policy="Background")
    for kind in (LWS, h.podgroups()):
        h.delete_custom_objects(custom, kind, NS)


def _podgroup(custom: k8s.CustomObjectsApi, name: str, min_count: int) -> dict[str, Any]:
    return dict(
        custom.create_namespaced_custom_object(
            *h.podgroups()[:2],
            NS,
            h.podgroups()[2],
            {
                "apiVersion": "/".join(h.podgroups()[:2]),
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            },
        )
    )


def _member(cfg: StackConfig, name: str, group: str, **kw: Any) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, name, **kw)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def _template(cfg: StackConfig) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, "x")
    return {"metadata": {"labels": {}}, "spec": pod["spec"]}


def _pods(core: k8s.CoreV1Api, selector: str = "") -> list[k8s.V1Pod]:
    return [
        p
        for p in core.list_namespaced_pod(NS, label_selector=selector).items
        if not p.metadata.deletion_timestamp
    ]


def _all_bound(core: k8s.CoreV1Api, count: int, selector: str = "") -> list[k8s.V1Pod] | None:
    pods = _pods(core, selector)
    return pods if len(pods) == count and all(p.spec.node_name for p in pods) else None


def _one_job_on_distinct_nodes(cfg: StackConfig, pods: list[k8s.V1Pod]) -> int:
    """Every member carries the same job id, sits on its own Node, and that job holds those nodes."""
    ids = {(p.metadata.annotations or {}).get(h.PREFIX + "job-id") for p in pods}
    assert len(ids) == 1 and None not in ids, ids
    job_id = int(ids.pop() or 0)
    nodes = [p.spec.node_name for p in pods]
    assert len(set(nodes)) == len(pods), nodes
    job = h.rest_job(cfg, job_id)
    assert job["node_count"] == len(pods)
    held = {h.kube_node_of(n) for n in expand(job["nodes"])}
    assert set(nodes) == held, (nodes, held)
    return job_id


def _group_condition(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    pg = custom.get_namespaced_custom_object(*h.podgroups()[:2], NS, h.podgroups()[2], name)
    return next(
        (c for c in (pg.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupScheduled"),
        None,
    )


def test_an_indexed_job_of_three_is_one_slurm_job_on_three_nodes(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    batch = k8s.BatchV1Api(devkube.api(stack_cfg))
    batch.create_namespaced_job(
        NS,
        {
            "metadata": {"name": h.unique("train")},
            "spec": {
                "completionMode": "Indexed",
                "completions": 3,
                "parallelism": 3,
                **h.indexed_job_gang(3),
                "template": {
                    **_template(stack_cfg),
                    "spec": {**_template(stack_cfg)["spec"], "restartPolicy": "Never"},
                },
            },
        },
    )
    pods = h.wait_until("three members bound", lambda: _all_bound(core, 3), 60)
    _one_job_on_distinct_nodes(stack_cfg, pods)
    group = pods[0].spec.scheduling_group.pod_group_name
    condition = h.wait_until("PodGroupScheduled=True", lambda: _group_condition(custom, group), 10)
    assert condition["status"] == "True"


@pytest.mark.usefixtures("late_controllers")
def test_a_leaderworkerset_of_two_groups_of_two_is_two_jobs_of_two_nodes(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("infer")
    custom.create_namespaced_custom_object(
        *LWS[:2],
        NS,
        LWS[2],
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": _template(stack_cfg)},
            },
        },
    )
    selector = f"leaderworkerset.sigs.k8s.io/name={name}"
    pods = h.wait_until("four members bound", lambda: _all_bound(core, 4, selector), 90)
    jobs = set()
    for index in ("0", "1"):
        group = [p for p in pods if p.metadata.labels["leaderworkerset.sigs.k8s.io/group-index"] == index]
        job_id = _one_job_on_distinct_nodes(stack_cfg, group)
        jobs.add(job_id)
        # The leader runs where the job's batch script runs.
        leader = next(
            p for p in group if p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
        )
        assert leader.spec.node_name == h.kube_node_of(h.rest_job(stack_cfg, job_id)["batch_host"])
    assert len(jobs) == 2


def test_a_podgroup_waits_for_its_minimum_then_binds_all(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("gang")
    _podgroup(custom, group, 3)
    for i in range(2):
        h.create(core, _member(stack_cfg, f"{group}-{i}", group))

    def waiting() -> list[str] | None:
        messages = [
            (h.scheduled_condition(p) or k8s.V1PodCondition(type="", status="")).message or ""
            for p in _pods(core)
        ]
        return messages if all("1 still missing" in m for m in messages) and len(messages) == 2 else None

    h.wait_until("each member says one is missing", waiting, 20)
    assert not h.squeue_ids(stack_cfg)  # no job before the minimum
    h.create(core, _member(stack_cfg, f"{group}-2", group))
    pods = h.wait_until("three members bound", lambda: _all_bound(core, 3), 60)
    _one_job_on_distinct_nodes(stack_cfg, pods)


def test_without_enough_free_nodes_the_whole_group_pends(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    total = len(stack_cfg.slurm_node_names())
    blocker = h.sbatch(stack_cfg, "--exclusive", f"--nodes={total - 2}")
    h.wait_until(
        "blocker running", lambda: "R" in h.squeue(stack_cfg, "-h", "-j", str(blocker), "-o", "%t"), 30
    )
    group = h.unique("big")
    _podgroup(custom, group, 3)
    for i in range(3):
        h.create(
            core, _member(stack_cfg, f"{group}-{i}", group, annotations={h.PREFIX + "exclusive": "none"})
        )

    def pending_everywhere() -> dict[str, Any] | None:
        pods = _pods(core)
        reasons = [
            (h.scheduled_condition(p) or k8s.V1PodCondition(type="", status="")).message or "" for p in pods
        ]
        condition = _group_condition(custom, group)
        if len(pods) == 3 and all("is pending" in r for r in reasons) and condition:
            return condition
        return None

    condition = h.wait_until("Slurm's reason on every member and the PodGroup", pending_everywhere, 30)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert not any(p.spec.node_name for p in _pods(core))
    h.scancel(stack_cfg, blocker)
    pods = h.wait_until("three members bound once nodes free up", lambda: _all_bound(core, 3), 60)
    _one_job_on_distinct_nodes(stack_cfg, pods)


def test_a_mincount_grown_while_the_job_pends_becomes_one_job_of_the_new_size(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """Kubernetes 1.37 lets gang.minCount change (issue 21): the pending job of 2 is cancelled
    and the group runs as one job of 3, every member on a node of it."""
    total = len(stack_cfg.slurm_node_names())
    blocker = h.sbatch(stack_cfg, "--exclusive", f"--nodes={total}")
    h.wait_until(
        "blocker running", lambda: "R" in h.squeue(stack_cfg, "-h", "-j", str(blocker), "-o", "%t"), 30
    )
    try:
        group = h.unique("grow")
        _podgroup(custom, group, 2)
        for i in range(2):
            h.create(core, _member(stack_cfg, f"{group}-{i}", group))
        first = h.wait_until("the job of 2", lambda: h.job_id_of(core, f"{group}-0"), 30)
        assert h.rest_job(stack_cfg, first)["node_count"] == 2
        try:
            custom.patch_namespaced_custom_object(
                *h.podgroups()[:2],
                NS,
                h.podgroups()[2],
                group,
                {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}},
            )
        except ApiException as e:
            if e.status == 422 and h.podgroups()[1] == "v1alpha2":
                pytest.skip("Kubernetes 1.36's v1alpha2 PodGroup keeps minCount immutable")
            raise
        h.create(core, _member(stack_cfg, f"{group}-2", group))
        h.wait_until("the job of 2 cancelled", lambda: first not in h.squeue_ids(stack_cfg), 30)
        # The Event follows the cancel: squeue may show the job gone first.
        said = h.wait_until(
            "the member told why",
            lambda: [e.message for e in h.events_for(core, f"{group}-0") if e.reason == "SlurmJobCancelled"],
            10,
        )
        assert f"minCount grew to 3 while Slurm job {first} (2 nodes) was pending" in said[0], said
    finally:
        h.scancel(stack_cfg, blocker)
    pods = h.wait_until("three members bound", lambda: _all_bound(core, 3), 60)
    assert _one_job_on_distinct_nodes(stack_cfg, pods) != first


def test_scancel_deletes_every_member(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("gone")
    _podgroup(custom, group, 2)
    for i in range(2):
        h.create(core, _member(stack_cfg, f"{group}-{i}", group))
    pods = h.wait_until("members bound", lambda: _all_bound(core, 2), 60)
    job_id = _one_job_on_distinct_nodes(stack_cfg, pods)
    h.scancel(stack_cfg, job_id)
    h.wait_until("every member deleted", lambda: not core.list_namespaced_pod(NS).items, 30)


def test_a_deleted_member_is_replaced_on_the_same_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    batch = k8s.BatchV1Api(devkube.api(stack_cfg))
    batch.create_namespaced_job(
        NS,
        {
            "metadata": {"name": h.unique("replace")},
            "spec": {
                "completionMode": "Indexed",
                "completions": 2,
                "parallelism": 2,
                **h.indexed_job_gang(2),
                "backoffLimit": 5,
                "template": {
                    **_template(stack_cfg),
                    "spec": {**_template(stack_cfg)["spec"], "restartPolicy": "Never"},
                },
            },
        },
    )
    pods = h.wait_until("members bound", lambda: _all_bound(core, 2), 60)
    job_id = _one_job_on_distinct_nodes(stack_cfg, pods)
    victim = pods[0]
    h.delete_pod(core, victim.metadata.name)

    def replacement() -> k8s.V1Pod | None:
        for p in _pods(core):
            if p.metadata.uid not in {q.metadata.uid for q in pods} and p.spec.node_name:
                return p
        return None

    new = h.wait_until("the replacement bound", replacement, 60)
    assert new.spec.node_name == victim.spec.node_name
    assert (new.metadata.annotations or {}).get(h.PREFIX + "job-id") == str(job_id)
    assert h.squeue_ids(stack_cfg) == {job_id}  # the same job all along


def test_deleting_the_whole_group_cancels_its_job_and_releases_the_locks(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("whole")
    _podgroup(custom, group, 2)
    for i in range(2):
        h.create(core, _member(stack_cfg, f"{group}-{i}", group))
    pods = h.wait_until("members bound", lambda: _all_bound(core, 2), 60)
    _one_job_on_distinct_nodes(stack_cfg, pods)
    for p in pods:
        h.delete_pod(core, p.metadata.name)
    h.wait_until("the group's job gone", lambda: not h.squeue_ids(stack_cfg), 60)


def test_a_group_that_can_never_fit_gets_one_warning_and_no_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    size = len(stack_cfg.slurm_node_names()) + 1
    group = h.unique("huge")
    _podgroup(custom, group, size)
    for i in range(size):
        h.create(core, _member(stack_cfg, f"{group}-{i}", group, cpu="100m", memory="64Mi"))

    def warnings() -> list[k8s.CoreV1Event] | None:
        found = [e for e in h.events_for(core, group) if e.type == "Warning"]
        return found or None

    found = h.wait_until("a Warning Event on the PodGroup", warnings, 30)
    assert len(found) == 1 and "can never be placed" in found[0].message
    assert not h.squeue_ids(stack_cfg)


def test_members_that_disagree_are_all_refused_and_the_podgroup_says_why(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("odd")
    _podgroup(custom, group, 2)
    h.create(core, _member(stack_cfg, f"{group}-0", group, annotations={h.PREFIX + "partition": "high"}))
    h.create(core, _member(stack_cfg, f"{group}-1", group))

    def refused() -> list[str] | None:
        conditions = [h.scheduled_condition(p) for p in _pods(core)]
        if len(conditions) == 2 and all(c is not None and c.reason == "ValidationFailed" for c in conditions):
            return [c.message for c in conditions if c is not None]
        return None

    messages = h.wait_until("both members refused", refused, 20)
    assert all("must be the same on every member" in m for m in messages)

    # The PodGroup's condition follows its members' (it said "1 still missing" while one was seen).
    def says_why() -> dict[str, Any] | None:
        c = _group_condition(custom, group)
        return c if c is not None and "must be the same on every member" in c["message"] else None

    condition = h.wait_until("the PodGroup says why", says_why, 10)
    assert condition["status"] == "False"
    assert any(e.type == "Warning" for e in h.events_for(core, group))
    assert not h.squeue_ids(stack_cfg)


@pytest.mark.short_kill_wait
@pytest.mark.slurm_timer
def test_at_killwait_only_the_node_whose_member_is_still_there_is_drained(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("stuck")
    _podgroup(custom, group, 2)
    slow = _member(stack_cfg, f"{group}-0", group)
    slow["metadata"]["annotations"].update(devkube.delete_delay(h.STUCK_SECONDS))
    h.create(core, slow)
    h.create(core, _member(stack_cfg, f"{group}-1", group))
    pods = h.wait_until("members bound", lambda: _all_bound(core, 2), 60)
    job_id = _one_job_on_distinct_nodes(stack_cfg, pods)
    by_name = {p.metadata.name: p.spec.node_name for p in pods}
    slurm_of = {h.kube_node_of(n): n for n in stack_cfg.slurm_node_names()}
    stuck_node, quick_node = slurm_of[by_name[f"{group}-0"]], slurm_of[by_name[f"{group}-1"]]
    # Issue 50: a Pod of another namespace carrying the group's job id, still there at KillWait,
    # kept its node drained as if it were a member. It is not the group's: that node stays up.
    impostor = h.unique("impostor")
    h.create(
        core,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": impostor,
                "namespace": config.OPS_NAMESPACE,
                "annotations": {keys.JOB_ID_ANNOTATION: str(job_id), **devkube.delete_delay(60)},
            },
            "spec": {
                "nodeName": by_name[f"{group}-1"],
                "tolerations": [{"key": keys.LOCK_KEY, "operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
    )
    try:
        h.scancel(stack_cfg, job_id)

        def drained() -> str | None:
            state, reason = h.node_state(stack_cfg, stuck_node)
            return reason if "drain" in state else None

        reason = h.wait_until("the stuck member's node drained before KillWait", drained, 40, every=0.5)
        assert f"{group}-0" in reason
        assert "drain" not in h.node_state(stack_cfg, quick_node)[0]
        h.wait_until("members gone", lambda: not core.list_namespaced_pod(NS).items, 60, every=0.5)
        h.wait_until(
            "the stuck member's node resumed once it is gone",
            lambda: "drain" not in h.node_state(stack_cfg, stuck_node)[0],
            15,
            every=0.5,
        )
    finally:
        h.wait_until("members gone", lambda: not core.list_namespaced_pod(NS).items, 60, every=0.5)
        h.delete_pod(core, impostor, config.OPS_NAMESPACE, grace=0)
        h.resume_if_drained(stack_cfg, stuck_node)
        h.resume_if_drained(stack_cfg, quick_node)


@pytest.mark.venv
def test_a_scheduler_killed_mid_group_still_makes_one_job_and_binds_each_member_once(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    group = h.unique("crash")
    _podgroup(custom, group, 3)
    for i in range(3):
        h.create(core, _member(stack_cfg, f"{group}-{i}", group))
    h.wait_until("the group's job submitted", lambda: h.squeue_ids(stack_cfg), 30, every=0.02)
    daemon = Daemon("tandem-scheduler", stack_cfg.run_dir, stack_cfg.log_dir)
    pid = daemon.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    h.wait_until("scheduler dead", lambda: not daemon.alive(), 10)
    stack.up_as_built(stack_cfg)
    pods = h.wait_until("three members bound", lambda: _all_bound(core, 3), 60)
    job_id = _one_job_on_distinct_nodes(stack_cfg, pods)
    assert h.squeue_ids(stack_cfg) == {job_id}
    bound_events = [e for p in pods for e in h.events_for(core, p.metadata.name) if e.reason == "Scheduled"]
    assert len(bound_events) == 3  # each member bound once
