"""The scheduler's reconciler over faked caches, as the unit tests of tests/unit/scheduler build it:
a Pod informer and PodGroup informers that are dicts, a job tracker fed by hand, Slurm and the API
server as mocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from unittest import mock

from tandem import keys, placeholder
from tandem.manager import Election, Manager
from tandem.metrics import REGISTRY
from tandem.runner import Runner
from tandem.scheduler import groups
from tandem.scheduler.caches import POD_INDEXES, Caches
from tandem.scheduler.controller import Controller
from tandem.scheduler.controller_settings import ControllerSettings
from tandem.scheduler.hands import Writers
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.jobspec import PlaceholderConfig
from tandem.scheduler.killwait_source import FROM_FLAG, KillWait
from tandem.scheduler.policy import parse
from tandem.scheduler.watches import SchedulerWatches
from tandem.slurm.models import Job, JobStatus
from tandem.slurm.wire import node_from_proto
from tandem.v1 import slurm_pb2
from tandem.workqueue import WorkQueue


def fixed(seconds: float) -> Callable[[], KillWait | None]:
    """A KillWait as --slurm-kill-wait fixes it."""
    value = KillWait(seconds, FROM_FLAG)
    return lambda: value


def report(jobs: JobTracker, status: JobStatus, trace_context: dict[str, str] | None = None) -> None:
    """A job's change as the syncer's stream brings it, on its own."""
    jobs._apply_batch([(status, trace_context or {})])


def report_node(jobs: JobTracker, msg: slurm_pb2.SlurmNode) -> None:
    """A Slurm node's change (the Node hosting it) as the syncer's stream brings it."""
    jobs._apply_batch([], [node_from_proto(msg)])


SCHEDULER = "tandem-test"


POD = placeholder.PodRef("default", "trainer", "uid-1")


class FakePodCache:
    """The Pod informer, before and after its first list."""

    def __init__(self) -> None:
        self.synced = False
        self.trouble = ""
        self.pods: dict[str, Any] = {}

    def get(self, key: str) -> Any | None:
        return self.pods.get(key)

    def items(self) -> list[Any]:
        return list(self.pods.values())

    def by_index(self, index: str, value: str) -> list[Any]:
        return [p for p in self.pods.values() if value in POD_INDEXES[index](p)]


class FakeObjects:
    """An informer of PodGroups (indexed by their CompositePodGroup) or of CompositePodGroups."""

    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects

    def get(self, key: str) -> Any | None:
        return self.objects.get(key)

    def by_index(self, index: str, value: str) -> list[Any]:
        return [o for o in self.objects.values() if groups.parent_index(o) == [value]]


def make_controller(pods: FakePodCache, jobs: JobTracker) -> tuple[Controller, mock.Mock, mock.Mock]:
    slurm, kube = mock.Mock(), mock.Mock()
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    # The lab's policy: Pods without user-id run as tandem-pods.
    lab = parse("default: {defaultUser: 1001}")
    controller = Controller(
        Caches(pods),
        jobs,
        Writers.of(kube, slurm, mock.Mock()),
        ControllerSettings(cfg, fixed(30.0), policy=lambda: lab),
    )
    return controller, slurm, kube


def make_watches(controller: Controller) -> SchedulerWatches:
    """What the informers and the job stream call back, queueing into a queue of their own."""
    return SchedulerWatches(controller.caches, controller.jobs, controller.assumed, WorkQueue())


def make_status(state: str = "RUNNING", started: bool = False, node: str = "cpu-001") -> JobStatus:
    return JobStatus(
        Job(
            job_id=7,
            name=placeholder.job_name(POD, SCHEDULER),
            admin_comment=placeholder.job_name(POD, SCHEDULER),
            state=state,
            nodes=(node,),
        ),
        started=started,
    )


def make_tracker(status: JobStatus | None = None, hosts: dict[str, str] | None = None) -> JobTracker:
    jobs = JobTracker(SCHEDULER, mock.Mock(), lambda pod, job: None)
    if status is not None:
        report(jobs, status)
    for slurm_node, kube_node in (hosts or {}).items():
        report_node(jobs, slurm_pb2.SlurmNode(name=slurm_node, kube_node=kube_node))
    jobs._synced.set()
    return jobs


def make_pod(job_id: str = "", requests: dict[str, str] | None = None) -> dict[str, Any]:
    annotations = {keys.JOB_ID_ANNOTATION: job_id} if job_id else {}
    return {
        "metadata": {
            "namespace": POD.namespace,
            "name": POD.name,
            "uid": POD.uid,
            "resourceVersion": "1",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {"name": "c", "resources": {"requests": requests or {"cpu": "1", "memory": "1Gi"}}}
            ],
        },
    }


def make_manager(controller: Controller, pods: FakePodCache, queue: WorkQueue) -> Manager:
    """The controller's runner under a manager that waits for the Pods and the Slurm jobs."""
    manager = Manager(mock.Mock(), Election(enabled=False, namespace="", lease="test"))
    manager.add_source("Pods", pods, lambda stop: None)
    manager.add_source("Slurm jobs", controller.jobs, lambda stop: None)
    manager.add_controller(Runner("test", queue, controller.reconcile))
    return manager


def wait_for(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def valid_count() -> float:
    return REGISTRY.sample("tandem_pods_validated_total", result="valid", reason="") or 0.0


def make_member(i: int, job_id: str = "") -> dict[str, Any]:
    pod = make_pod(job_id)
    pod["metadata"].update(name=f"train-{i}", uid=f"uid-{i}")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    return pod


PODGROUP = {
    "apiVersion": f"{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSIONS[0]}",
    "kind": keys.PODGROUP_KIND,
    "metadata": {"namespace": POD.namespace, "name": "train", "uid": "pg-uid", "resourceVersion": "1"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def make_gang(*members: dict[str, Any], min_count: int = 2) -> tuple[Controller, mock.Mock, mock.Mock]:
    pods = FakePodCache()
    pods.synced = True
    pods.pods = {f"{POD.namespace}/{m['metadata']['name']}": m for m in members}
    slurm, kube = mock.Mock(), mock.Mock()
    slurm.submit_job.return_value = 9
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    jobs = make_tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
    podgroup = {**PODGROUP, "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
    podgroups = FakeObjects({f"{POD.namespace}/train": podgroup})
    lab = parse("default: {defaultUser: 1001}")  # Pods without user-id run as tandem-pods
    controller = Controller(
        Caches(pods, podgroups),
        jobs,
        Writers.of(kube, slurm, mock.Mock()),
        ControllerSettings(cfg, fixed(30.0), policy=lambda: lab),
    )
    return controller, slurm, kube


# --- CompositePodGroup: one heterogeneous job --------------------------------------------------


def make_child(name: str, min_count: int) -> dict[str, Any]:
    meta = {"namespace": POD.namespace, "name": name, "uid": f"pg-{name}", "resourceVersion": "1"}
    return {
        **PODGROUP,
        "metadata": meta,
        "spec": {
            "parentCompositePodGroupName": "serve",
            "schedulingPolicy": {"gang": {"minCount": min_count}},
        },
    }


def make_composite_member(podgroup: str, i: int, cpu: str) -> dict[str, Any]:
    pod = make_pod(requests={"cpu": cpu, "memory": "1Gi"})
    pod["metadata"].update(name=f"{podgroup}-{i}", uid=f"uid-{podgroup}-{i}")
    pod["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
    return pod


def make_composite(*members: dict[str, Any]) -> tuple[Controller, mock.Mock, JobTracker]:
    pods = FakePodCache()
    pods.synced = True
    pods.pods = {f"{POD.namespace}/{m['metadata']['name']}": m for m in members}
    slurm = mock.Mock()
    slurm.submit_job.return_value = 12
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    hosts = {f"cpu-00{i}": f"node-00{i}" for i in range(1, 5)}
    jobs = make_tracker(hosts=hosts)
    composite = {
        "apiVersion": f"{keys.PODGROUP_GROUP}/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"namespace": POD.namespace, "name": "serve", "uid": "cpg-uid", "resourceVersion": "1"},
        "spec": {"schedulingPolicy": {"gang": {}}},
    }
    children = {
        f"{POD.namespace}/{c['metadata']['name']}": c
        for c in (make_child("decode", 2), make_child("prefill", 1))
    }
    controller = Controller(
        Caches(pods, FakeObjects(children), FakeObjects({f"{POD.namespace}/serve": composite})),
        jobs,
        Writers.of(mock.Mock(), slurm, mock.Mock()),
        ControllerSettings(cfg, fixed(30.0), policy=lambda: parse("default: {defaultUser: 1001}")),
    )
    return controller, slurm, jobs


SERVE = [
    make_composite_member("prefill", 0, "4"),
    make_composite_member("decode", 0, "1"),
    make_composite_member("decode", 1, "1"),
]
