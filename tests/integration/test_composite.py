"""Issue 21: a group whose members differ in shape is one Slurm heterogeneous job, a component per
kind of member sized by its own Pods: a CompositePodGroup (a component per child PodGroup), and a
LeaderWorkerSet whose leader template differs from its workers' (leader, workers). All bound or
none, each member on a node of its own component; it lives and ends as one job."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import kube as devkube
from devstack import slurm
from devstack.config import StackConfig
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

NS = "default"
GROUP = "scheduling.k8s.io"
COMPOSITES = (GROUP, "v1alpha3", "compositepodgroups")
LWS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")


@pytest.fixture
def custom(stack_cfg: StackConfig) -> Iterator[k8s.CustomObjectsApi]:
    """Skips where CompositePodGroups are not served (Kubernetes 1.36); deletes what a test made."""
    api = devkube.api(stack_cfg)
    custom = k8s.CustomObjectsApi(api)
    try:
        custom.list_namespaced_custom_object(*COMPOSITES[:2], NS, COMPOSITES[2])
    except ApiException as e:
        if e.status == 404:
            pytest.skip("this apiserver serves no CompositePodGroups (scheduling.k8s.io/v1alpha3)")
        raise
    yield custom
    for kind in (LWS, h.podgroups(), COMPOSITES):
        h.delete_custom_objects(custom, kind, NS)


def _composite(custom: k8s.CustomObjectsApi, name: str, children: dict[str, int]) -> None:
    """A gang CompositePodGroup and its child PodGroups (name -> minCount), written by hand."""
    custom.create_namespaced_custom_object(
        *COMPOSITES[:2],
        NS,
        COMPOSITES[2],
        {
            "apiVersion": f"{GROUP}/v1alpha3",
            "kind": "CompositePodGroup",
            "metadata": {"name": name},
            "spec": {
                "workloadRef": {"workloadName": name, "templateName": "serve"},
                "schedulingPolicy": {"gang": {"minGroupCount": len(children)}},
            },
        },
    )
    for child, min_count in children.items():
        custom.create_namespaced_custom_object(
            *h.podgroups()[:2],
            NS,
            h.podgroups()[2],
            {
                "apiVersion": "/".join(h.podgroups()[:2]),
                "kind": "PodGroup",
                "metadata": {"name": child},
                "spec": {
                    "parentCompositePodGroupName": name,
                    "workloadRef": {"workloadName": name, "templateName": child.rsplit("-", 1)[-1]},
                    "schedulingPolicy": {"gang": {"minCount": min_count}},
                },
            },
        )


def _scheduled(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    composite = custom.get_namespaced_custom_object(*COMPOSITES[:2], NS, COMPOSITES[2], name)
    conditions = (composite.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodGroupScheduled" and c["status"] == "True"), None)


def _member(cfg: StackConfig, name: str, podgroup: str, **kw: Any) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, name, **kw)
    pod["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
    return pod


def _bound(core: k8s.CoreV1Api, count: int, selector: str = "") -> list[k8s.V1Pod] | None:
    pods = [
        p
        for p in core.list_namespaced_pod(NS, label_selector=selector).items
        if not p.metadata.deletion_timestamp
    ]
    return pods if len(pods) == count and all(p.spec.node_name for p in pods) else None


def _components(cfg: StackConfig, job_id: int) -> list[dict[str, str]]:
    """Each component of a het job as `scontrol show job` prints it (JobId, HetJobOffset, NodeList,
    TresPerNode, ...): what an operator sees."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", str(job_id)],
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.splitlines() if line]


def _squeue(cfg: StackConfig) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i"], env=slurm.slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout
    return sorted(out.split())


def _one_het_job(cfg: StackConfig, pods: list[k8s.V1Pod], component_of: dict[str, int]) -> int:
    """Every member carries the het job's id and runs on a node of its own component."""
    ids = {(p.metadata.annotations or {}).get(h.PREFIX + "job-id") for p in pods}
    assert len(ids) == 1 and None not in ids, ids
    job_id = int(ids.pop() or 0)
    components = _components(cfg, job_id)
    assert [c["HetJobOffset"] for c in components] == [str(i) for i in range(len(components))]
    for pod in pods:
        nodes = {h.kube_node_of(n) for n in expand(components[component_of[pod.metadata.name]]["NodeList"])}
        assert pod.spec.node_name in nodes, (pod.metadata.name, pod.spec.node_name, nodes)
    assert len({p.spec.node_name for p in pods}) == len(pods)
    return job_id


def test_a_composite_podgroup_is_one_het_job_a_component_per_podgroup_sized_by_its_own_pods(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("serve")
    decode, prefill = f"{name}-decode", f"{name}-prefill"
    _composite(custom, name, {decode: 2, prefill: 1})
    h.create(core, _member(stack_cfg, f"{prefill}-0", prefill, cpu="4", gpus=2))
    h.create(core, _member(stack_cfg, f"{decode}-0", decode))

    # Not all of it there: nothing is submitted, and the members say what is missing.
    def waiting() -> k8s.V1PodCondition | None:
        c = h.scheduled_condition(core.read_namespaced_pod(f"{decode}-0", NS))
        return c if c is not None and c.reason == "WaitingForGroupMembers" else None

    pending = h.wait_until("the members told what is missing", waiting, 30)
    assert f"1 of {decode}" in pending.message, pending.message
    assert not _squeue(stack_cfg)
    h.create(core, _member(stack_cfg, f"{decode}-1", decode))
    pods = h.wait_until("all three bound", lambda: _bound(core, 3), 60)
    # Components in PodGroup name order: decode (2 nodes), prefill (1 node with 2 GPUs).
    component_of = {f"{decode}-0": 0, f"{decode}-1": 0, f"{prefill}-0": 1}
    job_id = _one_het_job(stack_cfg, pods, component_of)
    assert _squeue(stack_cfg) == [f"{job_id}+0", f"{job_id}+1"]
    decoders, prefiller = _components(stack_cfg, job_id)
    assert (decoders["NumNodes"], prefiller["NumNodes"]) == ("2", "1")
    assert "gpu:2" in prefiller.get("TresPerNode", "") and "gpu" not in decoders.get("TresPerNode", "")
    assert (decoders["MinCPUsNode"], prefiller["MinCPUsNode"]) == ("1", "4")
    # The CompositePodGroup says so, as a PodGroup does.
    condition = h.wait_until("PodGroupScheduled=True on the composite", lambda: _scheduled(custom, name), 10)
    assert condition["status"] == "True", condition

    # Deleting every member cancels the whole job, every component.
    for pod in pods:
        h.delete_pod(core, pod.metadata.name)
    h.wait_until("the het job gone", lambda: not _squeue(stack_cfg), 60)


def test_scancel_of_a_het_job_deletes_every_member_of_every_component(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("het")
    workers, leader = f"{name}-workers", f"{name}-leader"
    _composite(custom, name, {leader: 1, workers: 2})
    h.create(core, _member(stack_cfg, f"{leader}-0", leader, cpu="2"))
    for i in range(2):
        h.create(core, _member(stack_cfg, f"{workers}-{i}", workers))
    pods = h.wait_until("all three bound", lambda: _bound(core, 3), 60)
    job_id = _one_het_job(stack_cfg, pods, {f"{leader}-0": 0, f"{workers}-0": 1, f"{workers}-1": 1})
    h.scancel(stack_cfg, job_id)
    h.wait_until("every member deleted", lambda: not core.list_namespaced_pod(NS).items, 60)


@pytest.mark.usefixtures("late_controllers")
def test_a_leaderworkerset_whose_leader_differs_is_a_two_component_het_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    name = h.unique("lws")
    worker = h.tandem_pod(stack_cfg, "x")
    leader = h.tandem_pod(stack_cfg, "x", cpu="6")
    custom.create_namespaced_custom_object(
        *LWS[:2],
        NS,
        LWS[2],
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {
                    "size": 3,
                    "leaderTemplate": {"metadata": {"labels": {}}, "spec": leader["spec"]},
                    "workerTemplate": {"metadata": {"labels": {}}, "spec": worker["spec"]},
                },
            },
        },
    )
    selector = f"leaderworkerset.sigs.k8s.io/name={name}"
    pods = h.wait_until("leader and two workers bound", lambda: _bound(core, 3, selector), 90)
    component_of = {
        p.metadata.name: 0 if p.metadata.labels["leaderworkerset.sigs.k8s.io/worker-index"] == "0" else 1
        for p in pods
    }
    job_id = _one_het_job(stack_cfg, pods, component_of)
    leaders, workers = _components(stack_cfg, job_id)
    assert (leaders["NumNodes"], leaders["MinCPUsNode"]) == ("1", "6")
    assert (workers["NumNodes"], workers["MinCPUsNode"]) == ("2", "1")
    # The leader runs where the job's batch script runs.
    leader_pod = next(p for p, c in component_of.items() if c == 0)
    assert next(p.spec.node_name for p in pods if p.metadata.name == leader_pod) == h.kube_node_of(
        leaders["BatchHost"]
    )


@pytest.mark.short_kill_wait
@pytest.mark.slurm_timer
def test_at_killwait_only_the_node_of_a_member_still_there_is_drained_in_any_component(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    """The placeholder's script runs on the first component's node; a member of the second that
    outlives KillWait still has its own node drained (the syncer reads the het job whole)."""
    name = h.unique("stuck")
    leader, workers = f"{name}-leader", f"{name}-workers"
    _composite(custom, name, {leader: 1, workers: 2})
    h.create(core, _member(stack_cfg, f"{leader}-0", leader, cpu="2"))
    slow = _member(stack_cfg, f"{workers}-0", workers)
    slow["metadata"]["annotations"].update(devkube.delete_delay(h.STUCK_SECONDS))
    h.create(core, slow)
    h.create(core, _member(stack_cfg, f"{workers}-1", workers))
    pods = h.wait_until("all three bound", lambda: _bound(core, 3), 60)
    job_id = _one_het_job(stack_cfg, pods, {f"{leader}-0": 0, f"{workers}-0": 1, f"{workers}-1": 1})
    slurm_of = {h.kube_node_of(n): n for n in stack_cfg.slurm_node_names()}
    by_name = {p.metadata.name: slurm_of[p.spec.node_name] for p in pods}
    stuck = by_name[f"{workers}-0"]
    try:
        h.scancel(stack_cfg, job_id)

        def drained() -> str | None:
            state, reason = h.node_state(stack_cfg, stuck)
            return reason if "drain" in state else None

        reason = h.wait_until("the stuck member's node drained before KillWait", drained, 40, every=0.5)
        assert f"{workers}-0" in reason, reason
        for other in (by_name[f"{leader}-0"], by_name[f"{workers}-1"]):
            assert "drain" not in h.node_state(stack_cfg, other)[0], other
        h.wait_until("members gone", lambda: not core.list_namespaced_pod(NS).items, 60, every=0.5)
        h.wait_until(
            "the stuck member's node resumed once it is gone",
            lambda: "drain" not in h.node_state(stack_cfg, stuck)[0],
            15,
            every=0.5,
        )
    finally:
        h.wait_until("members gone", lambda: not core.list_namespaced_pod(NS).items, 60, every=0.5)
        h.resume_if_drained(stack_cfg, stuck)
