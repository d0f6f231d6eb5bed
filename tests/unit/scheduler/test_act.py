"""What a reconcile does (tandem.scheduler.act, submitting, announce): the job submitted and
recorded, the members bound, a job cancelled, and the Events and conditions a person reads."""

from __future__ import annotations

import time
from dataclasses import replace
from unittest import mock

import pytest

from tandem import keys, placeholder, reasons
from tandem.runner import NotYet
from tandem.scheduler import actions, decide, groups, podapi, podstate, submitting, validation
from tandem.scheduler.act import act
from tandem.scheduler.announce import Announcer
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.hands import Hands, Writers
from tandem.scheduler.jobspec import PlaceholderConfig
from tandem.slurm.models import HetComponent, Job, JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.v1 import slurm_pb2
from tests.unit.scheduler.scheduler_world import (
    POD,
    PODGROUP,
    SCHEDULER,
    SERVE,
    FakePodCache,
    make_composite,
    make_controller,
    make_gang,
    make_member,
    make_pod,
    make_status,
    make_tracker,
    make_watches,
    report,
    report_node,
    valid_count,
)


def test_a_cancelled_job_is_cancelled_once_and_forgotten_once_it_ended() -> None:
    pods = FakePodCache()
    pods.synced = True
    jobs = make_tracker(make_status())
    controller, slurm, _ = make_controller(pods, jobs)
    watches = make_watches(controller)
    controller.reconcile(POD.key)
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)  # once is enough while it shuts down
    watches.on_job(POD, make_status("CANCELLED"))
    assert len(controller.assumed.cancelled) == 0


def test_a_pod_replaced_by_one_of_its_name_at_once_has_its_job_cancelled_not_orphaned() -> None:
    """A StatefulSet's Pod deleted and made again within one reconcile: the key shows only the new
    Pod, whose jobs are found by its uid. Before, the old Pod's job 7 ran on until the new Pod went
    too (seen on a fresh CI run: 30 s and more)."""
    pods = FakePodCache()
    pods.synced = True
    controller, slurm, _ = make_controller(pods, make_tracker(make_status(started=True)))
    slurm.submit_job.return_value = 8
    again = make_pod()
    again["metadata"]["uid"] = "uid-2"
    pods.pods[POD.key] = again
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)
    controller.reconcile(POD.key)  # then the new Pod's own job, and job 7 is not cancelled twice
    slurm.cancel_job.assert_called_once()
    spec = slurm.submit_job.call_args.args[0]
    assert spec.name.endswith("/uid-2")


def test_a_submitted_job_id_is_kept_only_until_the_pod_carries_it() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, slurm, _ = make_controller(pods, make_tracker())
    slurm.submit_job.return_value = 7
    pods.pods[POD.key] = make_pod()
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) == 7
    pods.pods[POD.key] = make_pod("7")  # the informer caught up with the annotation
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None
    assert controller.assumed.recorded.get(POD.uid) is None
    slurm.submit_job.assert_called_once()


def test_a_pod_deleted_before_its_annotation_was_seen_leaves_nothing_behind() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, _, _ = make_controller(pods, make_tracker(make_status()))
    controller.assumed.submitted.assume(POD.uid, 7)
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None


def test_a_pod_is_bound_where_the_syncer_says_its_slurmd_pod_is_now() -> None:
    """A NodeSet replaced a broken Node: slurmd cpu-001 moved from node-001 to node-009, and the
    syncer published it. The scheduler reads no slurmd Pod itself."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod("7")
    jobs = make_tracker(make_status(started=True), hosts={"cpu-001": "node-001"})
    moved: list[str] = []
    jobs.on_node_moved = moved.append
    report_node(jobs, slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-009"))
    assert moved == ["cpu-001"]
    controller, _, kube = make_controller(pods, jobs)
    controller.reconcile(POD.key)
    kube.get.assert_not_called()
    (path, body), _ = kube.post.call_args
    assert path.endswith(f"/pods/{POD.name}/binding")
    assert body["target"]["name"] == "node-009"


def test_a_pod_is_counted_valid_once_however_often_its_submit_is_retried() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, _ = make_controller(pods, make_tracker())
    slurm.submit_job.side_effect = [SlurmApiError("down", 503), SlurmApiError("down", 503), 7]
    before = valid_count()
    for _ in range(2):
        with pytest.raises(SlurmApiError):
            controller.reconcile(POD.key)
    controller.reconcile(POD.key)
    assert slurm.submit_job.call_count == 3
    assert valid_count() - before == 1


def test_a_complete_group_is_one_job_of_a_node_per_member_recorded_on_each() -> None:
    controller, slurm, kube = make_gang(make_member(0), make_member(1))
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
    spec = slurm.submit_job.call_args.args[0]
    assert spec.nodes == 2 and spec.name == f"tandem:{SCHEDULER}/{POD.namespace}/pg:train/pg-uid"
    recorded = [c.args[0] for c in kube.merge_patch.call_args_list]
    assert recorded == [f"/api/v1/namespaces/{POD.namespace}/pods/train-{i}" for i in range(2)]
    # The next look (neither the stream nor the informer shows the job yet) records and submits
    # nothing more. Before: each member's job id was written again (issue 19).
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
    assert kube.merge_patch.call_count == 2


def test_a_members_warnings_are_posted_as_a_pod_alones_are() -> None:
    """Before: a group's job was submitted without the UnknownAnnotation and StaticCPU Events a
    Pod alone gets, so a gang member's owner never heard of a misspelt annotation (issue 19)."""
    first, second = make_member(0), make_member(1)
    first["metadata"]["annotations"][keys.PREFIX + "partiton"] = "batch"  # misspelt
    resources = second["spec"]["containers"][0]["resources"]
    resources["limits"] = dict(resources["requests"])  # Guaranteed, whole CPUs
    controller, slurm, _ = make_gang(first, second)
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
    controller.hands.announce.flush()
    posted = [
        (c.args[0]["metadata"]["name"], c.args[2])
        for c in controller.writers.events.record.call_args_list  # type: ignore[attr-defined]
    ]
    assert ("train-0", "UnknownAnnotation") in posted
    assert ("train-1", "StaticCPU") in posted


def test_a_started_group_job_binds_every_member_in_one_pass() -> None:
    controller, _, kube = make_gang(make_member(0, "9"), make_member(1, "9"))
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    report(
        controller.jobs,
        JobStatus(
            Job(
                job_id=9,
                name=placeholder.job_name(ref, SCHEDULER),
                admin_comment=placeholder.job_name(ref, SCHEDULER),
                state="RUNNING",
                nodes=("cpu-001", "cpu-002"),
            ),
            started=True,
        ),
    )
    controller.reconcile(f"{POD.namespace}/pg:train")
    bindings = [c.args for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert [(path.split("/")[-2], body["target"]["name"]) for path, body in bindings] == [
        ("train-0", "node-001"),
        ("train-1", "node-002"),
    ]


def test_a_member_joining_a_running_gang_is_bound_right_after_its_job_id_is_recorded() -> None:
    """A replacement of a deleted member: its job runs already, and the informer's copy of the
    scheduler's own write brings no reconcile (watches: own write shown). Before, the member waited
    for the next resync (60 s, seen in the lab's chart leg) unless another change came."""
    bound = make_member(0, "9")
    bound["spec"]["nodeName"] = "node-001"
    controller, _, kube = make_gang(bound, make_member(1))
    kube.merge_patch.return_value = {"metadata": {"resourceVersion": "2"}}
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    name = placeholder.job_name(ref, SCHEDULER)
    job = Job(job_id=9, name=name, admin_comment=name, state="RUNNING", nodes=("cpu-001", "cpu-002"))
    report(controller.jobs, JobStatus(job, started=True))
    key = f"{POD.namespace}/pg:train"
    assert controller.reconcile(key) == 0.0  # recorded, and looked at again at once
    assert [c.args[1]["metadata"]["annotations"] for c in kube.merge_patch.call_args_list] == [
        {keys.JOB_ID_ANNOTATION: "9"}
    ]
    controller.reconcile(key)
    bindings = [c.args for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert [(path.split("/")[-2], body["target"]["name"]) for path, body in bindings] == [
        ("train-1", "node-002")
    ]


def test_slurmrestd_flapping_between_socket_errors_is_announced_once() -> None:
    """Connection reset, then refused: the same trouble, one condition and one Event."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, kube = make_controller(pods, make_tracker())
    url = "http://127.0.0.1:1"
    slurm.submit_job.side_effect = [
        SlurmApiError(
            f"slurmrestd at {url} unreachable: [Errno 104] Connection reset by peer",
            summary=f"slurmrestd at {url} unreachable",
        ),
        SlurmApiError(
            f"slurmrestd at {url} unreachable: [Errno 111] Connection refused",
            summary=f"slurmrestd at {url} unreachable",
        ),
    ]
    for _ in range(2):
        with pytest.raises(SlurmApiError):
            controller.reconcile(POD.key)
    status_writes = [c for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    assert len(status_writes) == 1
    controller.hands.announce.flush()
    events = [c.args[2] for c in controller.writers.events.record.call_args_list]  # type: ignore[attr-defined]
    assert events == ["SlurmUnavailable"]


@pytest.mark.parametrize(
    "error", ["Requested topology configuration is not available", "ESLURM_REQUESTED_TOPO_CONFIG_UNAVAILABLE"]
)
def test_a_submit_refused_for_slurms_topology_as_it_is_now_is_tried_again(error: str) -> None:
    """Seen in the lab: a Pod submitted while the syncer rewrote Slurm's topology got "Requested
    topology configuration is not available" and was refused for good (Pending, no job, for ever).
    That refusal is about the topology now, not the Pod: the Pod waits, says why, and is tried again."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, kube = make_controller(pods, make_tracker())
    slurm.submit_job.side_effect = [
        SlurmApiError(
            f"POST job/submit: HTTP 500: Batch job submission failed: {error}", 500, errors=(error,)
        ),
        7,
    ]
    with pytest.raises(NotYet):
        controller.reconcile(POD.key)
    status = [c.args[1] for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    condition = status[-1]["status"]["conditions"][0]
    assert condition["reason"] == "Unschedulable", condition
    assert "topology as it is now, retrying" in condition["message"]
    pods.pods[POD.key] = {**make_pod(), "status": {"conditions": [condition]}}
    assert not podstate.refused(pods.pods[POD.key])
    controller.reconcile(POD.key)  # the runner's retry: submitted this time
    assert slurm.submit_job.call_count == 2


def test_slurms_record_of_a_refused_submit_is_not_taken_for_the_pods_job() -> None:
    """A CI run: slurmctld keeps a record of some refused submits (FAILED, BadConstraints, no node,
    with the placeholder's name). The scheduler took it for the Pod's job, which "ended before the
    Pod was bound", and deleted the Pod it was about to submit again."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    jobs = make_tracker()
    controller, slurm, kube = make_controller(pods, jobs)
    error = "Requested topology configuration is not available"
    slurm.submit_job.side_effect = [
        SlurmApiError(
            f"POST job/submit: HTTP 500: Batch job submission failed: {error}", 500, errors=(error,)
        ),
        7,
    ]
    with pytest.raises(NotYet):
        controller.reconcile(POD.key)
    name = placeholder.job_name(POD, SCHEDULER)
    record = Job(job_id=6, name=name, admin_comment=name, state="FAILED", state_reason="BadConstraints")
    report(jobs, JobStatus(record))
    status = [c.args[1] for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    pods.pods[POD.key] = {**make_pod(), "status": {"conditions": [status[-1]["status"]["conditions"][0]]}}
    controller.reconcile(POD.key)
    kube.delete.assert_not_called()
    assert slurm.submit_job.call_count == 2
    assert jobs.for_pod_key(POD.key) == []


def test_a_placeholder_slurm_failed_while_it_pended_still_ends_its_unbound_pod() -> None:
    """Only a record first seen refused is nobody's: a job seen pending that Slurm then failed is
    the Pod's, and it ended."""
    name = placeholder.job_name(POD, SCHEDULER)
    jobs = make_tracker(JobStatus(Job(job_id=7, name=name, admin_comment=name, state="PENDING")))
    report(
        jobs,
        JobStatus(
            Job(job_id=7, name=name, admin_comment=name, state="FAILED", state_reason="BadConstraints")
        ),
    )
    assert [j.job_id for j in jobs.for_pod_key(POD.key)] == [7]
    assert jobs.for_pod_key(POD.key)[0].ended


def test_a_submit_refused_for_another_reason_is_not_tried_again() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, kube = make_controller(pods, make_tracker())
    error = "Requested node configuration is not available"
    slurm.submit_job.side_effect = SlurmApiError(f"POST job/submit: HTTP 500: {error}", 500, errors=(error,))
    controller.reconcile(POD.key)
    status = [c.args[1] for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    assert status[-1]["status"]["conditions"][0]["reason"] == "SlurmSubmitFailed"


def test_the_job_is_built_from_the_annotations_validation_passed() -> None:
    """The submit builds the job from what decide validated (its Validation), not from a second
    read of the Pod (issue 19)."""
    pods = FakePodCache()
    pods.synced = True
    pod = make_pod()
    pod["metadata"]["annotations"][keys.PARTITION] = "batch"
    pods.pods[POD.key] = pod
    controller, slurm, _ = make_controller(pods, make_tracker())
    slurm.submit_job.return_value = 7
    observed, action = controller.decision(groups.target(POD.key))
    assert isinstance(action, actions.Submit)
    pod["metadata"]["annotations"][keys.PARTITION] = "edited-since"
    act(controller.hands, controller.settings.placeholder, observed, action)
    spec = slurm.submit_job.call_args.args[0]
    assert spec.partition == "batch" and spec.user_id == 1001


def test_a_group_whose_slurm_is_down_is_told_as_a_pod_alone_is() -> None:
    """Before: the members' condition changed but no SlurmUnavailable Event was posted, unlike
    for a Pod alone (issue 19)."""
    controller, slurm, _ = make_gang(make_member(0), make_member(1))
    slurm.submit_job.side_effect = SlurmApiError("down", 503)
    with pytest.raises(SlurmApiError):
        controller.reconcile(f"{POD.namespace}/pg:train")
    controller.hands.announce.flush()
    posted = [
        (c.args[0]["metadata"]["name"], c.args[2])
        for c in controller.writers.events.record.call_args_list  # type: ignore[attr-defined]
    ]
    assert posted == [("train-0", "SlurmUnavailable"), ("train-1", "SlurmUnavailable")]


def test_a_pending_group_job_minCount_grew_past_is_cancelled_told_and_replaced() -> None:
    """Kubernetes 1.37 made gang.minCount mutable: a pending job of 2 for a group now of 3 is
    cancelled with a Normal Event on each member, and once it ended one job of 3 is submitted and
    recorded on the members it kept (issue 21)."""
    members = [make_member(i, "9") for i in range(3)]
    controller, slurm, kube = make_gang(*members, min_count=3)
    report_node(controller.jobs, slurm_pb2.SlurmNode(name="cpu-003", kube_node="node-003"))
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    name = placeholder.job_name(ref, SCHEDULER)
    asked = Job(
        job_id=9, name=name, admin_comment=name, state="PENDING", state_reason="Resources", node_count=2
    )
    report(controller.jobs, JobStatus(asked))
    slurm.submit_job.return_value = 10
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.cancel_job.assert_called_once_with(9)
    controller.reconcile(f"{POD.namespace}/pg:train")  # still pending: cancelled once
    slurm.cancel_job.assert_called_once_with(9)
    slurm.submit_job.assert_not_called()
    report(controller.jobs, JobStatus(replace(asked, state="CANCELLED", state_reason="")))
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
    assert slurm.submit_job.call_args.args[0].nodes == 3
    kube.delete.assert_not_called()
    assert controller.observer.observe(groups.target(f"{POD.namespace}/pg:train")).recorded == {
        f"uid-{i}": 10 for i in range(3)
    }
    controller.hands.announce.flush()
    posted = [
        (c.args[0]["metadata"]["name"], c.args[1:])
        for c in controller.writers.events.record.call_args_list  # type: ignore[attr-defined]
    ]
    message = (
        "PodGroup default/train's minCount grew to 3 while Slurm job 9 (2 nodes) was pending: "
        "cancelling it to place the group as one job of 3"
    )
    assert posted[:3] == [(f"train-{i}", ("Normal", "SlurmJobCancelled", message)) for i in range(3)]
    assert posted[3] == (
        "train",
        (
            "Normal",
            "SlurmJobSubmitted",
            "job 10 for PodGroup default/train (3 nodes, one per member) submitted",
        ),
    )


def test_a_composite_pod_group_is_one_het_job_a_component_per_podgroup_sized_by_its_own_pods() -> None:
    controller, slurm, _ = make_composite(*SERVE)
    # A member's own key and its PodGroup's place nothing: the CompositePodGroup's does.
    controller.reconcile(f"{POD.namespace}/decode-0")
    controller.reconcile(f"{POD.namespace}/pg:decode")
    slurm.submit_job.assert_not_called()
    controller.reconcile(f"{POD.namespace}/cpg:serve")
    spec = slurm.submit_job.call_args.args[0]
    assert spec.name == placeholder.job_name(
        placeholder.PodRef(POD.namespace, "cpg:serve", "cpg-uid"), SCHEDULER
    )
    # Components in PodGroup name order: decode (2 nodes of 1 CPU), prefill (1 node of 4 CPUs).
    assert [(c.nodes, c.cpus) for c in spec.components] == [(2, 1), (1, 4)]


def test_a_composite_waits_for_every_component_and_says_which_lacks_members() -> None:
    controller, slurm, _ = make_composite(*SERVE[:2])
    controller.reconcile(f"{POD.namespace}/cpg:serve")
    slurm.submit_job.assert_not_called()
    kube: mock.Mock = controller.writers.pods.kube  # type: ignore[assignment]
    writes = [c.args[1] for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    message = writes[0]["status"]["conditions"][0]["message"]
    assert "CompositePodGroup default/serve needs 3 members" in message and "1 of decode" in message


def test_each_member_of_a_het_job_is_bound_to_a_node_of_its_own_component() -> None:
    members = [
        {**m, "metadata": {**m["metadata"], "annotations": {keys.JOB_ID_ANNOTATION: "12"}}} for m in SERVE
    ]
    controller, _, jobs = make_composite(*members)
    name = placeholder.job_name(placeholder.PodRef(POD.namespace, "cpg:serve", "cpg-uid"), SCHEDULER)
    report(
        jobs,
        JobStatus(
            Job(
                12,
                name,
                "RUNNING",
                nodes=("cpu-003", "cpu-004", "cpu-001"),
                node_count=3,
                admin_comment=name,
                components=(HetComponent(12, 2, ("cpu-003", "cpu-004")), HetComponent(14, 1, ("cpu-001",))),
            ),
            started=True,
        ),
    )
    controller.reconcile(f"{POD.namespace}/cpg:serve")
    kube: mock.Mock = controller.writers.pods.kube  # type: ignore[assignment]
    bound = {
        body["metadata"]["name"]: body["target"]["name"]
        for path, body in (c.args for c in kube.post.call_args_list)
        if path.endswith("/binding")
    }
    assert bound == {"decode-0": "node-003", "decode-1": "node-004", "prefill-0": "node-001"}


def test_a_pod_alone_is_submitted_with_its_annotation_and_no_event() -> None:
    """Its job is in its PodScheduled condition while it pends and in its Scheduled Event once
    bound: a SlurmJobSubmitted Event as well was one API request in four per Pod (issue 22)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, slurm, kube = make_controller(pods, make_tracker())
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    slurm.submit_job.assert_called_once()
    controller.hands.announce.flush()
    record: mock.Mock = controller.writers.events.record  # type: ignore[assignment]
    assert [c.args[2] for c in record.call_args_list] == []
    assert [c.args[0] for c in kube.merge_patch.call_args_list] == [
        f"/api/v1/namespaces/{POD.namespace}/pods/{POD.name}"
    ]


def test_a_pod_alone_that_tolerates_the_lock_is_written_once_by_its_binding() -> None:
    """Created with the lock toleration (the chart's admission policy gives it one), a Pod alone
    needs no write after its submit: the binding records its job id, two API requests per Pod
    instead of three (issue 55). The job is its own by its uid in the job's name meanwhile."""
    pods = FakePodCache()
    pods.synced = True
    tolerating = make_pod()
    tolerating["spec"]["tolerations"] = [podapi.LOCK_TOLERATION]
    pods.pods[POD.key] = tolerating
    jobs = make_tracker(hosts={"cpu-001": "node-001"})
    controller, slurm, kube = make_controller(pods, jobs)
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    slurm.submit_job.assert_called_once()
    assert kube.merge_patch.call_args_list == []  # nothing written to the Pod
    report(jobs, make_status(started=True))
    controller.reconcile(POD.key)
    assert kube.merge_patch.call_args_list == []
    (binding,) = [c.args[1] for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert binding["metadata"]["annotations"] == {keys.JOB_ID_ANNOTATION: "7"}
    assert binding["target"]["name"] == "node-001"


def test_a_pod_is_bound_once_even_when_a_reconcile_comes_before_the_informer_shows_it() -> None:
    """Before: a second reconcile in the window between the binding and the informer's copy bound
    the Pod again (a 409 and a retry; 24 of 224 bindings for 200 Pods at 64 Nodes, issue 22)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod(job_id="7")
    jobs = make_tracker(make_status(started=True), hosts={"cpu-001": "node-001"})
    controller, _, kube = make_controller(pods, jobs)
    controller.reconcile(POD.key)
    controller.reconcile(POD.key)  # the informer still shows the Pod unbound
    bindings = [c.args[0] for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert len(bindings) == 1
    # Once the informer shows the binding, nothing is assumed any more.
    pods.pods[POD.key] = {**make_pod(job_id="7"), "spec": {**make_pod()["spec"], "nodeName": "node-001"}}
    controller.reconcile(POD.key)
    assert controller.assumed.bound.get(POD.uid) is None


def test_a_job_just_pending_writes_nothing_and_comes_back_when_its_reason_would_show() -> None:
    """One status write and one watch event per Pod less (issue 22): a job that pends for a moment
    leaves its Pod's condition alone; still pending later, Slurm's reason is written then."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod("7")
    pending = JobStatus(replace(make_status("PENDING").job, nodes=(), state_reason="Resources"))
    controller, _, kube = make_controller(pods, make_tracker(pending))
    after = controller.reconcile(POD.key)
    assert after is not None and 0 < after <= decide.PENDING_AFTER_SECONDS
    assert kube.strategic_patch.call_count == 0 and kube.merge_patch.call_count == 0
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=time.monotonic() + after):
        assert controller.reconcile(POD.key) is None
    (path, patch), _ = kube.strategic_patch.call_args
    assert path.endswith("/status") and patch["status"]["conditions"][0]["reason"] == reasons.REASON_PENDING


def _submit_refused_for_features(own_constraints: str) -> tuple[mock.Mock, BaseException | None]:
    """A gang asking for one rack, submitted while Slurm does not have the racks' features."""
    members = (make_member(0), make_member(1))
    group = groups.resolve(
        groups.target(f"{POD.namespace}/pg:train"), members, {"default/train": PODGROUP}.get
    )
    assert group is not None
    annotations = {keys.USER_ID: "1001", **({keys.CONSTRAINTS: own_constraints} if own_constraints else {})}
    valid = validation.Validation(
        (), (), requests={"cpu": 1000, "memory": 1 << 30}, job_annotations=annotations
    )
    slurm, pods = mock.Mock(), mock.Mock()
    slurm.submit_job.side_effect = SlurmApiError(
        "POST job/submit: HTTP 500: Batch job submission failed: Invalid feature specification",
        500,
        errors=("Invalid feature specification",),
    )
    hands = Hands(
        Writers(slurm, pods, mock.Mock(), mock.Mock()),
        Assumed(),
        make_tracker(),
        Announcer(mock.Mock(), pods),
    )
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    action = actions.Submit(members, (valid, valid), domains=("[l1-rack-a-abcde|l1-rack-b-fghij]",))
    try:
        submitting.submit(hands, cfg, group, action, 30.0)
    except (NotYet, SlurmApiError) as e:
        return pods, e
    return pods, None


def test_a_gang_naming_racks_slurm_does_not_have_yet_waits_and_is_tried_again() -> None:
    """Seen in the lab (issue 53): racks labelled, and a gang created right after them named rack
    features Slurm did not have yet (its reconfigure had dropped them): "Invalid feature
    specification", refused for good, Pending with no job for ever. It waits and is tried again."""
    pods, raised = _submit_refused_for_features("")
    assert isinstance(raised, NotYet)
    reason, message = pods.set_unscheduled.call_args.args[1:]
    assert reason == reasons.REASON_UNSCHEDULABLE and "topology domains" in message and "retrying" in message


def test_a_gang_whose_own_constraints_name_an_unknown_feature_is_refused_as_before() -> None:
    pods, raised = _submit_refused_for_features("nvlink")
    assert raised is None
    assert pods.set_unscheduled.call_args.args[1] == reasons.REASON_SUBMIT_FAILED
