"""The scheduler's reconciler with its caches faked: what it does before its caches are filled (CI
caught a restarted scheduler cancelling the job of a Pod it had not listed yet), and what it keeps
remembering (it runs for months)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tandem import keys, placeholder
from tandem.scheduler.controller import Controller
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.jobspec import PlaceholderConfig
from tandem.v1 import slurm_pb2
from tandem.workqueue import WorkQueue

SCHEDULER = "tandem-test"
POD = placeholder.PodRef("default", "trainer", "uid-1")


class FakePodCache:
    """The Pod informer, before and after its first list."""

    def __init__(self) -> None:
        self.synced = False
        self.pods: dict[str, Any] = {}

    def get(self, key: str) -> Any | None:
        return self.pods.get(key)

    def items(self) -> list[Any]:
        return list(self.pods.values())


def _controller(pods: FakePodCache, jobs: JobTracker, queue: mock.Mock) -> tuple[Controller, mock.Mock]:
    slurm = mock.Mock()
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    controller = Controller(mock.Mock(), slurm, jobs, mock.Mock(), queue, pods, cfg, 30.0, "slurm")
    return controller, slurm


def _tracker_with_running_job(script_started: bool = False) -> JobTracker:
    jobs = JobTracker(SCHEDULER, mock.Mock(), lambda pod, job: None)
    jobs._apply(
        slurm_pb2.SlurmJob(
            job_id=7,
            name=placeholder.job_name(POD, SCHEDULER),
            state=slurm_pb2.JOB_STATE_RUNNING,
            nodes=["cpu-001"],
            script_started=script_started,
        )
    )
    jobs._synced.set()
    return jobs


def test_a_pod_not_yet_listed_keeps_its_job_and_is_looked_at_again() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    controller, slurm = _controller(pods, _tracker_with_running_job(), queue)
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_not_called()
    queue.add_after.assert_called_once_with(POD.key, mock.ANY)


def test_once_the_pods_are_listed_a_missing_pod_has_its_job_cancelled() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    controller, slurm = _controller(pods, _tracker_with_running_job(), queue)
    pods.synced = True
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)


def test_nothing_is_cancelled_before_the_job_list_arrives() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    pods.synced = True
    jobs = _tracker_with_running_job()
    jobs._synced.clear()
    controller, slurm = _controller(pods, jobs, queue)
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_not_called()
    queue.add_after.assert_called_once_with(POD.key, mock.ANY)


def _with_job_state(jobs: JobTracker, state: Any) -> None:
    job = slurm_pb2.SlurmJob()
    known = jobs.get(7)
    assert known is not None
    job.CopyFrom(known)
    job.state = state
    jobs._apply(job)


def test_a_cancelled_job_is_forgotten_once_it_has_ended() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    pods.synced = True
    jobs = _tracker_with_running_job()
    controller, slurm = _controller(pods, jobs, queue)
    controller.reconcile(POD.key)
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)  # once is enough while it shuts down
    _with_job_state(jobs, slurm_pb2.JOB_STATE_CANCELLED)
    controller.reconcile(POD.key)
    assert controller._cancelled == set()


def _pod(job_id: str = "") -> dict[str, Any]:
    annotations = {keys.JOB_ID_ANNOTATION: job_id} if job_id else {}
    return {
        "metadata": {
            "namespace": POD.namespace,
            "name": POD.name,
            "uid": POD.uid,
            "annotations": annotations,
        },
        "spec": {},
    }


def test_a_submitted_job_id_is_kept_only_until_the_pod_carries_it() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    controller, _ = _controller(pods, _tracker_with_running_job(), queue)
    controller._submitted[POD.uid] = 7
    assert controller._recorded_job_id(_pod()) == 7  # the cache has not seen the annotation yet
    assert controller._recorded_job_id(_pod("7")) == 7
    assert controller._submitted == {}


def test_a_pod_deleted_before_its_annotation_was_seen_leaves_nothing_behind() -> None:
    pods, queue = FakePodCache(), mock.Mock(spec=WorkQueue)
    pods.synced = True
    controller, _ = _controller(pods, _tracker_with_running_job(), queue)
    controller._submitted[POD.uid] = 7
    controller.reconcile(POD.key)
    assert controller._submitted == {}


def test_a_pod_is_bound_where_its_slurmd_pod_is_now_not_where_it_was() -> None:
    """A NodeSet replaced a broken Node: slurmd cpu-001 moved from node-001 to node-009."""
    pods = FakePodCache()
    pods.synced = True
    pod = _pod("7")
    pod["spec"] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    }
    pods.pods[POD.key] = pod
    jobs = _tracker_with_running_job(script_started=True)
    controller, _ = _controller(pods, jobs, mock.Mock(spec=WorkQueue))
    kube = mock.Mock()
    controller.kube = controller.api.kube = kube
    controller._kube_nodes["cpu-001"] = "node-001"  # what an earlier bind learnt
    kube.get.return_value = {"spec": {"nodeName": "node-009"}}
    controller.reconcile(POD.key)
    (path, body), _ = kube.post.call_args
    assert path.endswith(f"/pods/{POD.name}/binding")
    assert body["target"]["name"] == "node-009"
