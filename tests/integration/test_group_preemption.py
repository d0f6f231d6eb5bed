"""Issue 21: kube-scheduler's workload-aware preemption takes a whole PodGroup (disruptionMode All)
at once; when that group is one Tandem placed, its one Slurm job is cancelled and its nodes freed
for the preemptor. Nothing of the group is left running or locked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import config
from devstack import kube as devkube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

NS = "default"
# The preemptor tolerates the lock (Tandem's group holds its Nodes): only a namespace the
# administrator lets share held Nodes may (issue 50).
OPS = config.OPS_NAMESPACE
LOW, HIGH = "tandem-test-low", "tandem-test-high"
LOCK_TOLERATION = {"key": "sunk.coreweave.com/lock", "operator": "Exists"}


@pytest.fixture
def custom(stack_cfg: StackConfig) -> Iterator[k8s.CustomObjectsApi]:
    if h.podgroups()[1] != "v1beta1":
        pytest.skip("workload-aware preemption (PodGroup disruptionMode) needs scheduling.k8s.io/v1beta1")
    api = devkube.api(stack_cfg)
    custom = k8s.CustomObjectsApi(api)
    scheduling = k8s.SchedulingV1Api(api)
    for name, value in ((LOW, 100), (HIGH, 1_000_000)):
        try:
            scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
        except ApiException as e:
            if e.status != 409:
                raise
    yield custom
    for ns in (NS, OPS):
        for item in custom.list_namespaced_custom_object(*h.podgroups()[:2], ns, h.podgroups()[2])["items"]:
            try:
                custom.delete_namespaced_custom_object(
                    *h.podgroups()[:2], ns, h.podgroups()[2], item["metadata"]["name"]
                )
            except ApiException as e:
                if e.status != 404:
                    raise
    for name in (LOW, HIGH):
        scheduling.delete_priority_class(name)


def _podgroup(
    custom: k8s.CustomObjectsApi, name: str, min_count: int, priority_class: str, namespace: str = NS
) -> None:
    custom.create_namespaced_custom_object(
        *h.podgroups()[:2],
        namespace,
        h.podgroups()[2],
        {
            "apiVersion": "/".join(h.podgroups()[:2]),
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": min_count}},
                "disruptionMode": {"all": {}},
                "priorityClassName": priority_class,
            },
        },
    )


def _pod(cfg: StackConfig, name: str, group: str, priority_class: str, **kw: Any) -> dict[str, Any]:
    pod = h.tandem_pod(cfg, name, cpu="30", **kw)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def test_a_tandem_group_preempted_as_a_whole_by_kube_scheduler_has_its_one_job_cancelled(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi
) -> None:
    victim = h.unique("batch")
    _podgroup(custom, victim, 2, LOW)
    for i in range(2):
        h.create(core, _pod(stack_cfg, f"{victim}-{i}", victim, LOW))

    def placed() -> list[k8s.V1Pod] | None:
        pods = [p for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith(victim)]
        return pods if len(pods) == 2 and all(p.spec.node_name for p in pods) else None

    members = h.wait_until("the low-priority group bound by Tandem", placed, 60)
    job_id = int(members[0].metadata.annotations[h.PREFIX + "job-id"])
    nodes = sorted(p.spec.node_name for p in members)

    # A higher-priority gang for kube-scheduler that fits only where Tandem's group runs.
    vip = h.unique("vip")
    _podgroup(custom, vip, 2, HIGH, OPS)
    for i in range(2):
        pod = _pod(stack_cfg, f"{vip}-{i}", vip, HIGH)
        pod["metadata"]["namespace"] = OPS
        pod["spec"].pop("schedulerName")
        pod["spec"]["tolerations"] = [LOCK_TOLERATION]
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                            ]
                        }
                    ]
                }
            }
        }
        h.create(core, pod)

    def preempted() -> bool:
        left = [
            p
            for p in core.list_namespaced_pod(NS).items
            if p.metadata.name.startswith(victim) and not p.metadata.deletion_timestamp
        ]
        return not left

    h.wait_until("kube-scheduler preempted the whole Tandem group", preempted, 60)
    h.wait_until("its Slurm job cancelled", lambda: job_id not in h.squeue_ids(stack_cfg), 60)

    def told() -> str | None:
        events = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={victim}").items
        return next((e.message for e in events if e.reason == "SlurmJobCancelled"), None)

    # The PodGroup outlives its Pods and says what became of its job.
    message = h.wait_until("the PodGroup told", told, 10)
    assert message.startswith(f"Slurm job {job_id} cancelled: "), message

    def vip_bound() -> list[str] | None:
        pods = [p for p in core.list_namespaced_pod(OPS).items if p.metadata.name.startswith(vip)]
        bound = sorted(p.spec.node_name for p in pods if p.spec.node_name)
        return bound if len(bound) == 2 else None

    assert h.wait_until("the preemptor bound on the freed Nodes", vip_bound, 90) == nodes
