"""How many members a gang's workload asks for (tandem.scheduler.workloads): what decides whether a
core member that left is replaced or its node released."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest

from tandem.scheduler import workloads
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import Caches
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.watches import SchedulerWatches
from tandem.workqueue import WorkQueue
from tests.unit.scheduler.scheduler_world import SCHEDULER, FakePodCache, make_member


def kube_job(
    parallelism: Any = 4, completions: Any = 4, succeeded: int = 0, suspend: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": parallelism, "suspend": suspend}
    if completions is not None:
        spec["completions"] = completions
    return {
        "metadata": {"namespace": "default", "name": "train"},
        "spec": spec,
        "status": {"succeeded": succeeded},
    }


@pytest.mark.parametrize(
    ("job", "asked"),
    [
        (kube_job(4, 4), 4),
        (kube_job(1, 4), 1),
        (kube_job(6, 4), 4),  # never more than the completions left
        (kube_job(4, 4, succeeded=3), 1),
        (kube_job(4, None), 4),  # a work queue: its parallelism
        (kube_job(4, 4, suspend=True), 0),
        (kube_job("4", 4), None),  # not a count: not read
        (kube_job(-1, 4), None),
        (None, None),
    ],
)
def test_a_job_asks_for_its_parallelism_up_to_the_completions_left(job: Any, asked: int | None) -> None:
    assert workloads.asked(job) == asked


def owned(i: int, job: str = "train", controller: bool = True) -> dict[str, Any]:
    pod = make_member(i)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"{job}-uid", "controller": controller}
    ]
    return pod


def test_a_group_asks_what_its_one_job_asks_and_nothing_known_otherwise() -> None:
    jobs = {"default/train": kube_job(1, 4), "default/other": kube_job(3, 3)}
    assert workloads.asked_of([owned(0), owned(1)], jobs.get) == 1
    assert workloads.asked_of([owned(0), owned(1, "other")], jobs.get) is None  # two workloads
    assert workloads.asked_of([owned(0), make_member(1)], jobs.get) is None  # one made by hand
    assert workloads.asked_of([owned(0, controller=False)], jobs.get) is None  # not its controller
    assert workloads.asked_of([owned(0, "gone")], jobs.get) is None  # its Job not seen (yet)


def test_the_informer_keeps_only_the_count_and_a_status_update_is_no_change() -> None:
    full = kube_job(4, 4)
    full["status"].update(active=4, ready=4, conditions=[{"type": "Running"}])
    full["spec"]["template"] = {"spec": {"containers": [{"name": "x"}]}}
    slim = workloads.slim_job(full)
    assert slim["spec"] == {"parallelism": 4, "completions": 4, "suspend": False}
    assert slim["status"] == {"succeeded": 0}
    counted = kube_job(4, 4)
    counted["status"]["active"] = 3
    assert workloads.same_job(slim, workloads.slim_job(counted))
    assert not workloads.same_job(slim, workloads.slim_job(kube_job(1, 4)))


def test_a_job_that_asks_for_another_count_wakes_the_groups_of_its_pods() -> None:
    pods = FakePodCache()
    pods.pods = {f"default/train-{i}": owned(i) for i in range(3)}
    pods.pods["default/web"] = make_member(9)  # no Job's: not woken
    del pods.pods["default/web"]["spec"]["schedulingGroup"]
    queue = WorkQueue()
    watches = SchedulerWatches(Caches(pods), JobTracker(SCHEDULER, mock.Mock()), Assumed(), queue)
    watches.on_kube_job("default/train", kube_job(4, 4), kube_job(1, 4))
    assert len(queue) == 1 and queue.get() == "default/pg:train"
