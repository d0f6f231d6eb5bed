"""Who stays on a Node under a placeholder's strict lock (issue 18): DaemonSet Pods, the slurmd
Pods in their own namespace, and Tandem's Pods placed for a placeholder job that runs there, as
Slurm says. A label, a scheduler name or a job-id annotation is what any tenant can write: a Pod
that only carries them is evicted like any other."""

from __future__ import annotations

from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.kube import JSON
from tandem.slurm.models import Job
from tandem.syncer.holds import HoldStore
from tandem.syncer.locking import decide_lock
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodefacts import CacheFacts
from tests.unit.syncer_world import SLURMD_NS, World, _mirror, _pod, _slurmd

SCHEDULER = "tandem"
DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-1", "controller": True}
NODE = "node-001"


def _tandem_pod(name: str, job_id: str | None, namespace: str = "apps", **meta: Any) -> JSON:
    pod = _pod(name, NODE, namespace=namespace, **meta)
    pod["spec"]["schedulerName"] = SCHEDULER
    # Tandem adds the lock's toleration to its Pods; a tenant can write it into theirs too.
    pod["spec"]["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]
    if job_id is not None:
        pod["metadata"]["annotations"] = {keys.JOB_ID_ANNOTATION: job_id}
    return pod


def _placeholder(job_id: int, ref: placeholder.PodRef, nodes: tuple[str, ...] = ("cpu-001",)) -> Job:
    name = placeholder.job_name(ref, SCHEDULER)
    return Job(job_id, name, "RUNNING", nodes=nodes, admin_comment=name)


class Here(World):
    """cpu-001 on node-001, and the placeholder jobs Slurm runs."""

    mirror: SlurmMirror


@pytest.fixture
def world() -> Here:
    world = Here()
    world.add_pod(_slurmd("cpu-001", NODE))
    world.add_pod(_slurmd("cpu-002", "node-002"))
    world.add_node(NODE)
    jobs = (
        _placeholder(7, placeholder.PodRef("apps", "web", "uid-web")),
        _placeholder(8, placeholder.PodRef("apps", "pg:train", "pg-uid")),
        _placeholder(9, placeholder.PodRef("apps", "far", "uid-far"), nodes=("cpu-002",)),
        Job(10, placeholder.job_name(placeholder.PodRef("apps", "fake", "uid-fake"), SCHEDULER), "RUNNING",
            nodes=("cpu-001",)),  # named like a placeholder, not marked as one
    )  # fmt: skip
    world.mirror = _mirror(synced=True, jobs=jobs)
    return world


def _facts(world: Here, store: HoldStore | None = None) -> CacheFacts:
    return CacheFacts(world.cluster, world.mirror, "tandem", store, scheduler_name=SCHEDULER)


@pytest.mark.parametrize(
    ("pod", "stays"),
    [
        (_tandem_pod("web", "7"), True),  # its own job, here
        (_tandem_pod("train-0", "8"), True),  # a member of the group's job, here
        (_tandem_pod("train-0", "8", namespace="other"), False),  # another namespace's group
        (_tandem_pod("intruder", "7"), False),  # another Pod's job id
        (_tandem_pod("far", "9"), False),  # its job runs elsewhere: it was not placed here
        (_tandem_pod("fake", "10"), False),  # a Slurm user's job named like a placeholder
        (_tandem_pod("nameonly", None), False),  # only the scheduler name
        (_tandem_pod("huge", "9" * 5000), False),  # not a job id at all
        (_pod("sneaky", NODE, labels={keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE}), False),
        (
            _pod(
                "cpu-009",
                NODE,
                namespace=SLURMD_NS,
                labels={keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
            ),
            True,
        ),
        (_pod("agent", NODE, namespace="kube-system", ownerReferences=[DAEMONSET]), True),
        # Issue 50: any tenant can write a DaemonSet owner reference on its own Pod.
        (_pod("squatter", NODE, namespace="apps", ownerReferences=[DAEMONSET]), False),
        (
            _pod(
                "nocontrol",
                NODE,
                namespace="kube-system",
                ownerReferences=[{**DAEMONSET, "controller": False}],
            ),
            False,
        ),
    ],
    ids=lambda v: v["metadata"]["name"] if isinstance(v, dict) else str(v),
)
def test_who_may_share_a_strict_lock(world: Here, pod: JSON, stays: bool) -> None:
    world.add_pod(pod)
    assert (pod["metadata"]["uid"] in _facts(world).facts("cpu-001").sharers) is stays


def test_a_tenant_pod_posing_as_tandems_is_evicted_by_a_strict_lock(world: Here) -> None:
    world.add_pod(_tandem_pod("intruder", "7"))
    world.add_pod(_tandem_pod("web", "7"))
    store = HoldStore()
    store.hold("cpu-001", 7, strict=True, deadline=store.clock() + 50)
    plan = decide_lock(_facts(world, store).facts("cpu-001"), store.clock())
    assert [e.pod["metadata"]["name"] for e in plan.evict] == ["intruder"]


@pytest.mark.parametrize(
    ("value", "job_id"),
    [("42", 42), ("4294967295", 4294967295), ("0", None), ("4294967296", None), ("²", None),
     ("9" * 5000, None), ("-1", None), (" 42", None), ("", None)],
)  # fmt: skip
def test_a_recorded_job_id_is_a_32_bit_ascii_number_or_nothing(value: str, job_id: int | None) -> None:
    """Before: decide's int() took '²' (ValueError) and raised on 5,000 digits on every pass."""
    assert keys.recorded_job_id({"metadata": {"annotations": {keys.JOB_ID_ANNOTATION: value}}}) == job_id
