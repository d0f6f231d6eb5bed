"""A restarted scheduler must not mistake "not listed yet" for "deleted" (CI caught it cancelling
the job of a Pod it had not yet listed)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tandem import placeholder
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


def _tracker_with_running_job() -> JobTracker:
    jobs = JobTracker(SCHEDULER, mock.Mock(), lambda pod, job: None)
    jobs._apply(
        slurm_pb2.SlurmJob(
            job_id=7,
            name=placeholder.job_name(POD, SCHEDULER),
            state=slurm_pb2.JOB_STATE_RUNNING,
            nodes=["cpu-001"],
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
