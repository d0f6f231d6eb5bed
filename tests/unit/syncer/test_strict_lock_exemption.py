"""Who stays on a Node under a placeholder's strict lock (issue 18): DaemonSet Pods, the slurmd
Pods in their own namespace, and Tandem's Pods placed for a placeholder job that runs there, as
Slurm says. A label, a scheduler name or a job-id annotation is what any tenant can write: a Pod
that only carries them is evicted like any other. So is an owner reference (issue 50): a
DaemonSet's Pod stays only in a sharing namespace, for a DaemonSet the syncer's cache holds under
the reference's uid, whose own template tolerates the lock."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from tandem import keys, placeholder
from tandem.kube import JSON
from tandem.slurm.models import Job
from tandem.syncer.cluster import ClusterView, slim_daemonset, slim_pod
from tandem.syncer.holds import HoldStore
from tandem.syncer.locking import decide_lock
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodefacts import CacheFacts
from tests.unit.syncer_world import SLURMD_NS, World, _daemonset, _mirror, _pod, _slurmd

SCHEDULER = "tandem"
DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-1", "controller": True}
NODE = "node-001"
LOCK_TOLERATION = {"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}
# The DaemonSets the cache holds: (namespace, name, uid, their template's tolerations).
DAEMONSETS: tuple[tuple[str, str, str, list[JSON]], ...] = (
    ("kube-system", "agent", "ds-1", [LOCK_TOLERATION]),
    ("kube-system", "logs", "ds-logs", [{"operator": "Exists"}]),  # as logging DaemonSets do
    ("kube-system", "plain", "ds-plain", []),
    ("kube-system", "delayed", "ds-delayed", [{**LOCK_TOLERATION, "tolerationSeconds": 60}]),
    ("apps", "agent", "ds-apps", [LOCK_TOLERATION]),  # a tenant's, in a namespace that may not share
)


def _owned_by(name: str, uid: str | None, namespace: str = "kube-system", **ref: Any) -> JSON:
    """A Pod tolerating the lock (as a DaemonSet's Pods that may share do) whose controller
    reference names DaemonSet `name` with `uid` (None: none written)."""
    owner = {**DAEMONSET, "name": name, "uid": uid, **ref}
    if uid is None:
        del owner["uid"]
    pod = _pod(f"{name}-{uid}-pod", NODE, namespace=namespace, ownerReferences=[owner])
    pod["spec"]["tolerations"] = [LOCK_TOLERATION]
    return pod


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
    for namespace, name, uid, tolerations in DAEMONSETS:
        world.add_daemonset(_daemonset(name, namespace, uid, tolerations))
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
    return CacheFacts(world.cluster, world.mirror.state, "tandem", store, scheduler_name=SCHEDULER)


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


@pytest.mark.parametrize(
    ("pod", "stays"),
    [
        pytest.param(_owned_by("agent", "ds-1"), True, id="the real DaemonSet, tolerating the lock"),
        pytest.param(_owned_by("logs", "ds-logs"), True, id="a blanket toleration tolerates it too"),
        # Issue 50's attacks, each by a Pod that tolerates the lock itself.
        pytest.param(_owned_by("ghost", "ds-ghost"), False, id="a reference by hand, no such DaemonSet"),
        pytest.param(_owned_by("agent", "ds-old"), False, id="that name, another uid"),
        pytest.param(_owned_by("agent", None), False, id="that name, no uid"),
        pytest.param(_owned_by("plain", "ds-plain"), False, id="real, its template not tolerating"),
        pytest.param(_owned_by("delayed", "ds-delayed"), False, id="real, tolerating for a while only"),
        pytest.param(
            _owned_by("agent", "ds-apps", namespace="apps"), False, id="real, tolerating, not sharing"
        ),
        pytest.param(
            _owned_by("agent", "ds-1", namespace="apps"), False, id="another namespace's DaemonSet's uid"
        ),
        pytest.param(
            _owned_by("agent", "ds-1", apiVersion="extensions/v1beta1"), False, id="not apps/v1's kind"
        ),
        pytest.param(_owned_by("agent", "ds-1", kind="ReplicaSet"), False, id="not a DaemonSet"),
    ],
)
def test_a_daemonset_pod_shares_a_strict_lock_only_for_a_real_tolerating_daemonset(
    world: Here, pod: JSON, stays: bool
) -> None:
    world.add_pod(pod)
    assert (pod["metadata"]["uid"] in _facts(world).facts("cpu-001").sharers) is stays


def test_a_sharing_namespace_is_the_administrators_list(world: Here) -> None:
    """The same real, tolerating DaemonSet of a tenant's namespace shares once that namespace is
    listed (--lock-sharing-namespaces), and not before."""
    pod = _owned_by("agent", "ds-apps", namespace="apps")
    world.add_pod(pod)
    apps = frozenset({"apps"})
    listed = CacheFacts(
        world.cluster, world.mirror.state, "tandem", scheduler_name=SCHEDULER, sharing_namespaces=apps
    )
    assert pod["metadata"]["uid"] in listed.facts("cpu-001").sharers
    assert pod["metadata"]["uid"] not in _facts(world).facts("cpu-001").sharers


def test_a_strict_lock_evicts_a_pod_posing_as_a_daemonsets_and_spares_the_real_one(world: Here) -> None:
    forged, real = _owned_by("ghost", "ds-ghost"), _owned_by("agent", "ds-1")
    intolerant = _owned_by("plain", "ds-plain")
    for pod in (forged, real, intolerant):
        world.add_pod(pod)
    store = HoldStore()
    store.hold("cpu-001", 7, strict=True, deadline=store.clock() + 50)
    plan = decide_lock(_facts(world, store).facts("cpu-001"), store.clock())
    assert sorted(e.pod["metadata"]["name"] for e in plan.evict) == sorted(
        p["metadata"]["name"] for p in (forged, intolerant)
    )


def test_a_daemonset_that_goes_or_changes_has_its_pods_nodes_looked_at_again(world: Here) -> None:
    """Its Pods were spared for what the DaemonSet was: deleted, made again under its name, or its
    template no longer tolerating the lock, they are judged again (a lock waits on no timer)."""
    real = _owned_by("agent", "ds-1")
    world.add_pod(real)
    world.add_pod(_pod("elsewhere", "node-002"))
    looked: list[str] = []
    world.cluster.on_node_pods_changed = looked.append
    world.add_daemonset(_daemonset("agent", "kube-system", "ds-1", [LOCK_TOLERATION], version="2"))
    world.add_daemonset(_daemonset("logs", "kube-system", "ds-logs", [], version="2"))  # no Pods
    assert looked == []  # only its status moved; another DaemonSet's Pods are not these
    world.add_daemonset(_daemonset("agent", "kube-system", "ds-1", [], version="3"))
    assert looked == [NODE]
    assert real["metadata"]["uid"] not in _facts(world).facts("cpu-001").sharers
    world.remove_daemonset("kube-system/agent")
    world.add_daemonset(_daemonset("agent", "kube-system", "ds-new", [LOCK_TOLERATION]))
    assert looked == [NODE, NODE, NODE]
    assert real["metadata"]["uid"] not in _facts(world).facts("cpu-001").sharers  # not its uid


def test_the_caches_keep_what_names_a_daemonset_and_what_its_template_tolerates() -> None:
    """A Pod keeps its controller reference's uid (which DaemonSet it is, not only its name); a
    DaemonSet keeps who it is and its template's tolerations, nothing of its status or containers."""
    pod = _owned_by("agent", "ds-1")
    pod["metadata"]["ownerReferences"].append({**DAEMONSET, "name": "other", "uid": "x", "controller": False})
    assert slim_pod(pod)["metadata"]["ownerReferences"] == [DAEMONSET]
    assert slim_daemonset(_daemonset("agent", "kube-system", "ds-1", [LOCK_TOLERATION], version="4")) == {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-1", "resourceVersion": "4"},
        "spec": {"template": {"spec": {"tolerations": [LOCK_TOLERATION]}}},
    }


def test_the_daemonsets_are_watched_cluster_wide_and_read_before_the_caches_count_as_synced() -> None:
    view = ClusterView(mock.Mock(), SLURMD_NS)
    assert view.daemonsets.paths == ["/apis/apps/v1/daemonsets"]
    others = (view.pods, view.nodes, view.slices, view.taint_rules)
    for informer in others:
        for synced in informer._synced:
            synced.set()
    assert not view.synced and not view.wait_synced(0)
    for synced in view.daemonsets._synced:
        synced.set()
    assert view.synced and view.wait_synced(0)


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
