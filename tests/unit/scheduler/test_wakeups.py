"""What queues a reconcile and what does not (tandem.scheduler.watches over the reconciler): the
echoes of this process's own writes, kubelet reports and the changes of a Pod or job already dealt
with queue nothing."""

from __future__ import annotations

from typing import Any

from tandem import keys
from tandem.scheduler.controller import Controller
from tandem.slurm.models import JobStatus
from tests.unit.scheduler.scheduler_world import (
    POD,
    FakePodCache,
    make_controller,
    make_pod,
    make_status,
    make_tracker,
    make_watches,
    report,
)


def test_a_node_locked_or_unlocked_by_tandem_sends_no_waiting_pod_to_be_judged_again() -> None:
    """Each job's start and end locks and unlocks its Node: that changes no fit, and judging every
    waiting Pod against every Node on each was the scheduler's largest cost at 64 Nodes (issue 22).
    A cordon still does."""
    from tandem.scheduler import eligibility

    def node(taints: list[dict[str, str]], cordoned: bool = False, version: str = "1") -> dict[str, Any]:
        return eligibility.slim_node(
            {
                "metadata": {"name": "node-001", "resourceVersion": version, "labels": {}},
                "spec": {"unschedulable": cordoned, "taints": taints},
                "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "4"}},
            }
        )

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod()
    controller, _, _ = make_controller(pods, make_tracker())
    watches = make_watches(controller)
    lock = {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"}
    watches.on_node("node-001", node([]), node([lock], version="2"))
    assert len(watches.queue) == 0
    watches.on_node("node-001", node([lock], version="2"), node([lock], cordoned=True, version="3"))
    assert len(watches.queue) == 1


def test_a_running_pods_kubelet_reports_queue_nothing_and_its_deletion_does() -> None:
    """kwok (a kubelet) reports a bound Pod Running, then Ready: two updates no decision reads,
    a fifth of the scheduler's reconciles in a burst before (issue 22)."""

    def queued(old: dict[str, Any], new: dict[str, Any]) -> bool:
        controller, _, _ = make_controller(FakePodCache(), make_tracker())
        watches = make_watches(controller)
        watches.on_pod(POD.key, old, new)
        return len(watches.queue) == 1

    bound = {
        **make_pod("7"),
        "spec": {**make_pod("7")["spec"], "nodeName": "node-001"},
        "status": {"phase": "Pending"},
    }
    running = {
        **bound,
        "metadata": {**bound["metadata"], "resourceVersion": "2"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "podIP": "10.0.0.9",
        },
    }
    assert not queued(bound, running)
    deleting = {**running, "metadata": {**running["metadata"], "deletionTimestamp": "2026-11-26T00:00:00Z"}}
    assert queued(running, deleting)
    assert queued(running, {**running, "status": {**running["status"], "phase": "Succeeded"}})
    preempted = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    assert queued(running, {**running, "status": {**running["status"], "conditions": [preempted]}})
    assert queued(make_pod("7"), bound), "the bind itself"
    assert queued(
        make_pod("7"), {**make_pod("7"), "status": {"phase": "Pending", "nominatedNodeName": "node-001"}}
    )


def _recorded_by_us() -> tuple[Controller, FakePodCache, dict[str, Any], dict[str, Any]]:
    """A Pod this controller submitted and recorded job 7 on: the Pod before, and as the informer
    then shows the write (the job id, the lock toleration, the version the write was answered)."""
    pods = FakePodCache()
    pods.synced = True
    before = make_pod()
    pods.pods[POD.key] = before
    controller, slurm, kube = make_controller(pods, make_tracker())
    slurm.submit_job.return_value = 7
    kube.merge_patch.return_value = {"metadata": {"resourceVersion": "2"}}
    controller.reconcile(POD.key)
    (_, patch), _ = kube.merge_patch.call_args
    after = {
        **before,
        "metadata": {
            **before["metadata"],
            "resourceVersion": "2",
            "annotations": patch["metadata"]["annotations"],
        },
        "spec": {**before["spec"], **patch.get("spec", {})},
    }
    return controller, pods, before, after


def test_the_informer_showing_a_record_this_controller_wrote_queues_nothing() -> None:
    """The reconcile that wrote it acted as if it was there already (it assumed it): a third of a
    Pod's reconciles decided nothing for such echoes (issue 40)."""
    controller, _, before, after = _recorded_by_us()
    watches = make_watches(controller)
    watches.on_pod(POD.key, before, after)
    assert len(watches.queue) == 0
    assert controller.assumed.recorded.get(POD.uid) is None, "forgotten: no reconcile comes to forget it"


def test_a_record_shown_with_any_other_change_is_reconciled() -> None:
    controller, _, before, after = _recorded_by_us()
    watches = make_watches(controller)
    relabelled = {**after, "metadata": {**after["metadata"], "labels": {"team": "b"}}}
    watches.on_pod(POD.key, before, relabelled)
    assert len(watches.queue) == 1


def test_the_informer_showing_a_bind_this_controller_made_queues_nothing() -> None:
    pods = FakePodCache()
    pods.synced = True
    unbound = make_pod(job_id="7")
    pods.pods[POD.key] = unbound
    controller, _, kube = make_controller(
        pods, make_tracker(make_status(started=True), hosts={"cpu-001": "node-001"})
    )
    watches = make_watches(controller)
    controller.reconcile(POD.key)
    assert [c.args[0] for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    scheduled = [{"type": "PodScheduled", "status": "True"}]
    bound = {
        **unbound,
        "metadata": {**unbound["metadata"], "resourceVersion": "3"},
        "spec": {**unbound["spec"], "nodeName": "node-001"},
        "status": {"conditions": scheduled},
    }
    watches.on_pod(POD.key, unbound, bound)
    assert len(watches.queue) == 0
    assert controller.assumed.bound.get(POD.uid) is None
    # Bound elsewhere than this controller bound it: looked at.
    controller.assumed.bound.assume(POD.uid, "node-001")
    watches.on_pod(POD.key, unbound, {**bound, "spec": {**bound["spec"], "nodeName": "node-002"}})
    assert len(watches.queue) == 1


def test_a_pod_deleted_after_its_job_was_cancelled_queues_nothing_and_one_with_a_live_job_does() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, slurm, _ = make_controller(pods, make_tracker(make_status()))
    watches = make_watches(controller)
    deleted = make_pod(job_id="7")
    watches.on_pod(POD.key, deleted, None)
    assert len(watches.queue) == 1, "its job still runs: the reconcile cancels it"
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)
    watches.queue.get()
    watches.queue.done(POD.key)
    watches.on_pod(POD.key, deleted, None)
    assert len(watches.queue) == 0


def test_a_job_that_ends_after_its_pod_went_queues_nothing_and_one_whose_pod_is_there_does() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, _, _ = make_controller(pods, make_tracker(make_status("COMPLETED")))
    watches = make_watches(controller)
    watches.on_job(POD, make_status("COMPLETED"))
    assert len(watches.queue) == 0
    pods.pods[POD.key] = make_pod(job_id="7")
    watches.on_job(POD, make_status("COMPLETED"))
    assert len(watches.queue) == 1


def test_a_job_stopping_after_its_deleting_pods_cancel_queues_nothing_until_a_job_is_left_running() -> None:
    """The Pod is being deleted (its grace period) and its reconcile cancelled the job: the job's
    stop (the placeholder's terminating call) and end that follow decide nothing (issue 40)."""
    pods = FakePodCache()
    pods.synced = True
    bound = {**make_pod(job_id="7"), "spec": {**make_pod(job_id="7")["spec"], "nodeName": "node-001"}}
    deleting = {**bound, "metadata": {**bound["metadata"], "deletionTimestamp": "2026-11-29T00:00:00Z"}}
    pods.pods[POD.key] = deleting
    controller, slurm, _ = make_controller(pods, make_tracker(make_status(started=True)))
    watches = make_watches(controller)

    watches.on_job(POD, make_status(started=True))
    assert len(watches.queue) == 1, "its job still runs, not cancelled yet: the reconcile cancels it"
    controller.reconcile(watches.queue.get() or "")
    watches.queue.done(POD.key)
    slurm.cancel_job.assert_called_once_with(7)

    def streamed(status: JobStatus) -> None:  # as the stream does: the tracker first, then the watch
        report(controller.jobs, status)
        watches.on_job(POD, status)

    terminating = JobStatus(make_status(started=True).job, started=True, terminating=True)
    streamed(terminating)
    streamed(make_status("CANCELLED"))
    assert len(watches.queue) == 0
    pods.pods[POD.key] = bound  # the same change of a live Pod's job: looked at
    streamed(terminating)
    assert len(watches.queue) == 1
