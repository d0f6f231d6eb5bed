"""What a reconcile observes (tandem.scheduler.observe): a snapshot of plain values, this
process's own writes the caches do not show yet, and which Nodes would take a member."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

from tandem import keys, placeholder
from tandem.scheduler import actions, groups
from tandem.scheduler import caches as ctl
from tandem.scheduler.act import act
from tandem.scheduler.placements import placement
from tandem.slurm.models import Job, JobStatus
from tandem.v1 import scheduler_pb2, slurm_pb2
from tests.unit.scheduler.scheduler_world import (
    POD,
    SCHEDULER,
    FakePodCache,
    make_controller,
    make_gang,
    make_member,
    make_pod,
    make_status,
    make_tracker,
    make_watches,
    report,
    report_node,
)


def test_a_placement_read_changes_nothing_a_reconcile_relies_on() -> None:
    """Before: the read-only gRPC placement() observed the Pod the way a reconcile does, and
    observing forgot the job ids this process had written (issue 19)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod("7")
    controller, _, _ = make_controller(pods, make_tracker())
    controller.assumed.submitted.assume(POD.uid, 7)
    placement(controller, pods.pods[POD.key])
    assert controller.assumed.submitted.get(POD.uid) == 7
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None  # the reconcile saw the cache carry it


def test_a_pods_second_live_job_is_seen_as_a_duplicate_of_the_recorded_one() -> None:
    """A submit whose answer was lost (Slurm took it) and its retry: two live jobs of one Pod.
    The recorded one is the Pod's job; the other is cancelled, whichever id is higher."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = {
        **make_pod(job_id="9"),
        "metadata": {**make_pod(job_id="9")["metadata"], "uid": POD.uid},
    }
    jobs = make_tracker()
    for job_id in (9, 12):
        name = placeholder.job_name(POD, SCHEDULER)
        report(jobs, JobStatus(Job(job_id=job_id, name=name, admin_comment=name, state="PENDING")))
    controller, _, _ = make_controller(pods, jobs)
    observed = controller.observer.observe(groups.target(POD.key))
    assert observed.job is not None and observed.job.job_id == 9
    assert observed.duplicates == (12,)


def test_a_recorded_job_id_is_trusted_only_until_the_cache_shows_the_write() -> None:
    """The job id written on the Pod is the truth while the informer's copy is older than the
    write's resourceVersion; once the cache shows that version, the cache says (here: someone
    removed the annotation, so it is written again)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, kube = make_controller(pods, make_tracker())
    slurm.submit_job.return_value = 7
    kube.merge_patch.return_value = {"metadata": {"resourceVersion": "5"}}
    controller.reconcile(POD.key)
    assert controller.observer.observe(groups.target(POD.key)).recorded == {
        POD.uid: 7
    }  # the copy (version 1) lags
    pods.pods[POD.key] = {**make_pod(), "metadata": {**make_pod()["metadata"], "resourceVersion": "5"}}
    assert controller.observer.observe(groups.target(POD.key)).recorded == {}
    controller.reconcile(POD.key)
    assert kube.merge_patch.call_count == 2  # recorded again
    slurm.submit_job.assert_called_once()


def test_excluded_nodes_set_are_remembered_until_slurm_reports_them() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod("7")
    pending = make_status("PENDING")
    controller, _, _ = make_controller(pods, make_tracker(pending))
    controller.hands.remember_excludes(7, "cpu-002")
    assert controller.observer.observe(groups.target(POD.key)).job_excludes == frozenset({"cpu-002"})
    reported = JobStatus(
        Job(
            job_id=7,
            name=pending.job.name,
            admin_comment=pending.job.name,
            state="PENDING",
            excluded_nodes=("cpu-002",),
        )
    )
    report(controller.jobs, reported)
    controller.reconcile(POD.key)
    assert len(controller.assumed.excludes) == 0


def test_a_constraint_set_is_acted_on_once_and_remembered_until_slurm_reports_it() -> None:
    """Issue 53: a pending gang's job given the domains that can hold it now; the next reconcile,
    before the job stream shows it, does not set it again."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod("7")
    pending = make_status("PENDING")
    controller, slurm, _ = make_controller(pods, make_tracker(pending))
    o = controller.observer.observe(groups.target(POD.key))
    act(controller.hands, controller.settings.placeholder, o, actions.Constrain(7, "[l1-a-abcde|l1-b-fghij]"))
    slurm.set_constraints.assert_called_once_with(7, "[l1-a-abcde|l1-b-fghij]")
    assert controller.observer.observe(groups.target(POD.key)).job_constraint == "[l1-a-abcde|l1-b-fghij]"
    reported = JobStatus(replace(pending.job, features="[l1-a-abcde|l1-b-fghij]"))
    report(controller.jobs, reported)
    controller.reconcile(POD.key)
    assert len(controller.assumed.constraints) == 0
    assert controller.observer.observe(groups.target(POD.key)).job_constraint is None


def _cordoned_second_node() -> ctl.ClusterCaches:
    from tandem.scheduler import eligibility

    def node(name: str, cordoned: bool) -> dict[str, Any]:
        return eligibility.slim_node(
            {
                "metadata": {"name": name, "labels": {}},
                "spec": {"unschedulable": cordoned, "taints": []},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                },
            }
        )

    nodes = {"node-001": node("node-001", False), "node-002": node("node-002", True)}
    bound = FakePodCache()
    bound.synced = True
    return ctl.ClusterCaches(nodes=mock.Mock(get=nodes.get, snapshot=lambda: dict(nodes)), bound=bound)


def _plain(value: object) -> bool:
    """A value a snapshot may hold: data, never something that reads a live cache when called."""
    return not callable(value) or isinstance(value, type)


def test_an_observation_is_a_snapshot_of_plain_values_with_the_fit_judged_when_asked() -> None:
    """Before: observe handed decide callables into the live caches (the Node mapping, the fit),
    so a decision read whatever the caches held when it got there (issue 19)."""
    import dataclasses

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    jobs = make_tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
    controller, _, _ = make_controller(pods, jobs)
    controller.caches.cluster = _cordoned_second_node()
    observed, _ = controller.decision(groups.target(POD.key))
    assert all(_plain(getattr(observed, f.name)) for f in dataclasses.fields(observed))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)
    report_node(jobs, slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-002"))  # after observing
    assert observed.fits[POD.uid].excluded == ("cpu-002",)  # the snapshot holds


def test_a_group_observation_is_a_snapshot_too() -> None:
    import dataclasses

    controller, _, _ = make_gang(make_member(0), make_member(1))
    controller.caches.cluster = _cordoned_second_node()
    observed, _ = controller.decision(groups.target(f"{POD.namespace}/pg:train"))
    assert all(_plain(getattr(observed, f.name)) for f in dataclasses.fields(observed))
    assert isinstance(observed.fits, dict)
    assert {uid: f.excluded for uid, f in observed.fits.items()} == {
        "uid-0": ("cpu-002",),
        "uid-1": ("cpu-002",),
    }


def test_a_members_placement_is_where_its_group_stands() -> None:
    """Before: a member was judged as a Pod alone, so one its group refuses (the members disagree
    on the partition) was reported pending (issue 19)."""
    first, second = make_member(0), make_member(1)
    first["metadata"]["annotations"][keys.PARTITION] = "a"
    controller, _, _ = make_gang(first, second)
    placed = placement(controller, first)
    assert placed.state == scheduler_pb2.PLACEMENT_STATE_INVALID
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    name = placeholder.job_name(ref, SCHEDULER)
    controller, _, _ = make_gang(make_member(0, "9"), make_member(1, "9"))
    nodes = ("cpu-001", "cpu-002")
    report(
        controller.jobs,
        JobStatus(Job(job_id=9, name=name, admin_comment=name, state="RUNNING", nodes=nodes), started=True),
    )
    placed = placement(controller, make_member(1, "9"))
    assert placed.job_id == 9 and placed.state == scheduler_pb2.PLACEMENT_STATE_STARTED


class _BoundByNode(FakePodCache):
    def by_index(self, index: str, value: str) -> list[Any]:
        return [p for p in self.pods.values() if ctl.node_index(p) == [value]]


def test_a_pod_bound_to_a_node_takes_its_room_in_the_next_fit() -> None:
    """Each Node's room is summed once per change (eligibility.RoomLedger): the bound-Pod informer's
    change must reach the sum, or a full Node would be offered to Slurm again."""
    from tandem.scheduler import eligibility

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, _, _ = make_controller(
        pods, make_tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
    )
    watches = make_watches(controller)
    bound = _BoundByNode()
    bound.synced = True
    controller.caches.cluster = ctl.ClusterCaches(nodes=_cordoned_second_node().nodes, bound=bound)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)
    hog = eligibility.slim_bound_pod(
        {
            "metadata": {"namespace": "default", "name": "hog", "uid": "hog"},
            "spec": {"nodeName": "node-001", "containers": [{"resources": {"requests": {"cpu": "4"}}}]},
            "status": {"phase": "Running"},
        }
    )
    bound.pods["default/hog"] = hog
    watches.on_bound_pod("default/hog", None, hog)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-001", "cpu-002")
    bound.pods.pop("default/hog")
    watches.on_bound_pod("default/hog", hog, None)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)


def test_this_schedulers_own_bound_pod_takes_its_room_though_the_bound_informer_leaves_it_out() -> None:
    """The bound-Pod informer leaves this scheduler's Pods out (each update would be decoded twice):
    what a Node holds learns of them from the scheduler's own Pod informer, full Pods, and its
    Room frees when one goes."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, _, _ = make_controller(
        pods, make_tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
    )
    watches = make_watches(controller)
    bound, own = _BoundByNode(), _BoundByNode()
    bound.synced = own.synced = True
    controller.caches.cluster = ctl.ClusterCaches(nodes=_cordoned_second_node().nodes, bound=bound, own=own)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)
    mine = {
        "metadata": {"namespace": "default", "name": "mine", "uid": "mine"},
        "spec": {
            "schedulerName": SCHEDULER,
            "nodeName": "node-001",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "4"}}}],
        },
        "status": {"phase": "Running"},
    }
    own.pods["default/mine"] = mine
    watches.on_pod("default/mine", None, mine)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-001", "cpu-002")
    own.pods.pop("default/mine")
    watches.on_pod("default/mine", mine, None)
    observed, _ = controller.decision(groups.target(POD.key))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)
