"""The scheduler's reconciler and its runner, with caches faked: what happens before the caches
are filled (CI caught a restarted scheduler cancelling the job of a Pod it had not listed yet), how
failures come back (backoff, never for a terminal error), what is counted and what is remembered
(it runs for months)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest

from tandem import keys, placeholder, reasons
from tandem.manager import Election, Manager
from tandem.metrics import REGISTRY
from tandem.runner import NotYet, Runner, TerminalError
from tandem.scheduler import actions, decide, groups, podstate
from tandem.scheduler import caches as ctl
from tandem.scheduler.act import act
from tandem.scheduler.caches import POD_INDEXES, Caches
from tandem.scheduler.controller import Controller
from tandem.scheduler.controller_settings import ControllerSettings
from tandem.scheduler.hands import Writers
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.jobspec import PlaceholderConfig
from tandem.scheduler.killwait_source import FROM_FLAG, KillWait
from tandem.scheduler.placements import placement
from tandem.scheduler.policy import parse
from tandem.scheduler.watches import SchedulerWatches
from tandem.slurm.models import HetComponent, Job, JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.slurm.wire import node_from_proto
from tandem.v1 import scheduler_pb2, slurm_pb2
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


def _controller(pods: FakePodCache, jobs: JobTracker) -> tuple[Controller, mock.Mock, mock.Mock]:
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


def _watches(controller: Controller) -> SchedulerWatches:
    """What the informers and the job stream call back, queueing into a queue of their own."""
    return SchedulerWatches(controller.caches, controller.jobs, controller.assumed, WorkQueue())


def _status(state: str = "RUNNING", started: bool = False, node: str = "cpu-001") -> JobStatus:
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


def _tracker(status: JobStatus | None = None, hosts: dict[str, str] | None = None) -> JobTracker:
    jobs = JobTracker(SCHEDULER, mock.Mock(), lambda pod, job: None)
    if status is not None:
        report(jobs, status)
    for slurm_node, kube_node in (hosts or {}).items():
        report_node(jobs, slurm_pb2.SlurmNode(name=slurm_node, kube_node=kube_node))
    jobs._synced.set()
    return jobs


def _pod(job_id: str = "", requests: dict[str, str] | None = None) -> dict[str, Any]:
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


def _manager(controller: Controller, pods: FakePodCache, queue: WorkQueue) -> Manager:
    """The controller's runner under a manager that waits for the Pods and the Slurm jobs."""
    manager = Manager(mock.Mock(), Election(enabled=False, namespace="", lease="test"))
    manager.add_source("Pods", pods, lambda stop: None)
    manager.add_source("Slurm jobs", controller.jobs, lambda stop: None)
    manager.add_controller(Runner("test", queue, controller.reconcile))
    return manager


def _wait(predicate: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_no_worker_runs_before_the_pods_are_listed() -> None:
    pods = FakePodCache()
    controller, slurm, _ = _controller(pods, _tracker(_status()))
    queue = WorkQueue()
    queue.add(POD.key)
    manager = _manager(controller, pods, queue)
    manager.start()
    time.sleep(0.3)
    slurm.cancel_job.assert_not_called()  # the Pod is not gone: it is not listed yet
    pods.synced = True
    assert _wait(lambda: slurm.cancel_job.called)  # listed, and really not there
    slurm.cancel_job.assert_called_once_with(7)
    manager.stop()


def test_no_worker_runs_before_the_job_list_arrives() -> None:
    pods = FakePodCache()
    pods.synced = True
    jobs = _tracker(_status())
    jobs._synced.clear()
    controller, slurm, _ = _controller(pods, jobs)
    queue = WorkQueue()
    queue.add(POD.key)
    manager = _manager(controller, pods, queue)
    manager.start()
    time.sleep(0.3)
    slurm.cancel_job.assert_not_called()
    manager.stop()


def test_a_cancelled_job_is_cancelled_once_and_forgotten_once_it_ended() -> None:
    pods = FakePodCache()
    pods.synced = True
    jobs = _tracker(_status())
    controller, slurm, _ = _controller(pods, jobs)
    watches = _watches(controller)
    controller.reconcile(POD.key)
    controller.reconcile(POD.key)
    slurm.cancel_job.assert_called_once_with(7)  # once is enough while it shuts down
    watches.on_job(POD, _status("CANCELLED"))
    assert len(controller.assumed.cancelled) == 0


def test_a_submitted_job_id_is_kept_only_until_the_pod_carries_it() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, slurm, _ = _controller(pods, _tracker())
    slurm.submit_job.return_value = 7
    pods.pods[POD.key] = _pod()
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) == 7
    pods.pods[POD.key] = _pod("7")  # the informer caught up with the annotation
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None
    assert controller.assumed.recorded.get(POD.uid) is None
    slurm.submit_job.assert_called_once()


def test_a_pod_deleted_before_its_annotation_was_seen_leaves_nothing_behind() -> None:
    pods = FakePodCache()
    pods.synced = True
    controller, _, _ = _controller(pods, _tracker(_status()))
    controller.assumed.submitted.assume(POD.uid, 7)
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None


def test_a_pod_is_bound_where_the_syncer_says_its_slurmd_pod_is_now() -> None:
    """A NodeSet replaced a broken Node: slurmd cpu-001 moved from node-001 to node-009, and the
    syncer published it. The scheduler reads no slurmd Pod itself."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod("7")
    jobs = _tracker(_status(started=True), hosts={"cpu-001": "node-001"})
    moved: list[str] = []
    jobs.on_node_moved = moved.append
    report_node(jobs, slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-009"))
    assert moved == ["cpu-001"]
    controller, _, kube = _controller(pods, jobs)
    controller.reconcile(POD.key)
    kube.get.assert_not_called()
    (path, body), _ = kube.post.call_args
    assert path.endswith(f"/pods/{POD.name}/binding")
    assert body["target"]["name"] == "node-009"


def _valid_count() -> float:
    return REGISTRY.sample("tandem_pods_validated_total", result="valid", reason="") or 0.0


def test_a_pod_is_counted_valid_once_however_often_its_submit_is_retried() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, _ = _controller(pods, _tracker())
    slurm.submit_job.side_effect = [SlurmApiError("down", 503), SlurmApiError("down", 503), 7]
    before = _valid_count()
    for _ in range(2):
        with pytest.raises(SlurmApiError):
            controller.reconcile(POD.key)
    controller.reconcile(POD.key)
    assert slurm.submit_job.call_count == 3
    assert _valid_count() - before == 1


def test_a_failing_key_comes_back_later_each_time() -> None:
    queue = WorkQueue(backoff_base=0.25, backoff_cap=2.0)
    calls: list[float] = []

    def reconcile(key: str) -> None:
        calls.append(time.monotonic())
        raise SlurmApiError("slurmrestd down", 503)

    runner = Runner("test-backoff", queue, reconcile)
    delays = []
    for _ in range(5):
        runner.handle("a")
        delays.append(_came_back_after(queue, "a"))
    assert queue.failures("a") == 5
    assert delays[-1] == pytest.approx(2.0, abs=0.1)  # capped
    assert delays[:3] == pytest.approx([0.25, 0.5, 1.0], abs=0.05)


def _came_back_after(queue: WorkQueue, key: str) -> float:
    """How long from now `key` was put off; it is then taken off the queue's clock, as if it came
    back (a key is put off once, at its earliest time)."""
    now = time.monotonic()
    (at,) = [when for when, k in queue._delayed if k == key]
    queue._delayed.clear()
    queue._ready_at.pop(key)
    return at - now


def test_a_key_that_succeeds_starts_its_backoff_over() -> None:
    queue = WorkQueue()
    outcomes: list[Exception | None] = [SlurmApiError("down", 503), None]

    def reconcile(key: str) -> None:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome

    runner = Runner("test-forget", queue, reconcile)
    runner.handle("a")
    runner.handle("a")
    assert queue.failures("a") == 0


def test_a_placement_read_changes_nothing_a_reconcile_relies_on() -> None:
    """Before: the read-only gRPC placement() observed the Pod the way a reconcile does, and
    observing forgot the job ids this process had written (issue 19)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod("7")
    controller, _, _ = _controller(pods, _tracker())
    controller.assumed.submitted.assume(POD.uid, 7)
    placement(controller, pods.pods[POD.key])
    assert controller.assumed.submitted.get(POD.uid) == 7
    controller.reconcile(POD.key)
    assert controller.assumed.submitted.get(POD.uid) is None  # the reconcile saw the cache carry it


def test_not_yet_comes_back_after_the_keys_own_growing_backoff() -> None:
    """Before: a Pod waiting for the syncer to say where its Slurm node runs was looked at again
    every second, forever, whatever the runner's backoff said (issue 19)."""
    queue = WorkQueue()

    def reconcile(key: str) -> None:
        raise NotYet("no Node known to host Slurm node cpu-009 yet")

    runner = Runner("test-not-yet", queue, reconcile)
    delays = []
    for _ in range(3):
        runner.handle("a")
        delays.append(_came_back_after(queue, "a"))
    assert queue.failures("a") == 3
    assert delays == pytest.approx([0.25, 0.5, 1.0], abs=0.05)


def test_a_terminal_error_is_never_retried() -> None:
    queue = WorkQueue()

    def reconcile(key: str) -> None:
        raise TerminalError("the Pod must change first")

    Runner("test-terminal", queue, reconcile).handle("a")
    assert queue._delayed == [] and len(queue) == 0


def _member(i: int, job_id: str = "") -> dict[str, Any]:
    pod = _pod(job_id)
    pod["metadata"].update(name=f"train-{i}", uid=f"uid-{i}")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    return pod


PODGROUP = {
    "apiVersion": f"{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSIONS[0]}",
    "kind": keys.PODGROUP_KIND,
    "metadata": {"namespace": POD.namespace, "name": "train", "uid": "pg-uid", "resourceVersion": "1"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def _gang(*members: dict[str, Any], min_count: int = 2) -> tuple[Controller, mock.Mock, mock.Mock]:
    pods = FakePodCache()
    pods.synced = True
    pods.pods = {f"{POD.namespace}/{m['metadata']['name']}": m for m in members}
    slurm, kube = mock.Mock(), mock.Mock()
    slurm.submit_job.return_value = 9
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    jobs = _tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
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


def test_a_member_alone_submits_nothing_and_its_own_key_never_places_it() -> None:
    controller, slurm, _ = _gang(_member(0))
    controller.reconcile(f"{POD.namespace}/train-0")
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_not_called()


def test_a_complete_group_is_one_job_of_a_node_per_member_recorded_on_each() -> None:
    controller, slurm, kube = _gang(_member(0), _member(1))
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
    first, second = _member(0), _member(1)
    first["metadata"]["annotations"][keys.PREFIX + "partiton"] = "batch"  # misspelt
    resources = second["spec"]["containers"][0]["resources"]
    resources["limits"] = dict(resources["requests"])  # Guaranteed, whole CPUs
    controller, slurm, _ = _gang(first, second)
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
    controller, _, kube = _gang(_member(0, "9"), _member(1, "9"))
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


def test_slurmrestd_flapping_between_socket_errors_is_announced_once() -> None:
    """Connection reset, then refused: the same trouble, one condition and one Event."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, kube = _controller(pods, _tracker())
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
    pods.pods[POD.key] = _pod()
    controller, slurm, kube = _controller(pods, _tracker())
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
    pods.pods[POD.key] = {**_pod(), "status": {"conditions": [condition]}}
    assert not podstate.refused(pods.pods[POD.key])
    controller.reconcile(POD.key)  # the runner's retry: submitted this time
    assert slurm.submit_job.call_count == 2


def test_a_submit_refused_for_another_reason_is_not_tried_again() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, kube = _controller(pods, _tracker())
    error = "Requested node configuration is not available"
    slurm.submit_job.side_effect = SlurmApiError(f"POST job/submit: HTTP 500: {error}", 500, errors=(error,))
    controller.reconcile(POD.key)
    status = [c.args[1] for c in kube.strategic_patch.call_args_list if c.args[0].endswith("/status")]
    assert status[-1]["status"]["conditions"][0]["reason"] == "SlurmSubmitFailed"


def test_the_pods_gauge_counts_pending_bound_and_refused() -> None:
    """What the dashboard's Pods panel and a person watching a queue read."""
    pods = FakePodCache()
    refused = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "ValidationFailed",
        "message": "no",
    }
    pods.pods = {
        "a": {"metadata": {"name": "a"}, "spec": {}, "status": {}},
        "b": {"metadata": {"name": "b"}, "spec": {"nodeName": "node-001"}, "status": {"phase": "Running"}},
        "c": {"metadata": {"name": "c"}, "spec": {}, "status": {"conditions": [refused]}},
        "d": {"metadata": {"name": "d"}, "spec": {"nodeName": "node-001"}, "status": {"phase": "Succeeded"}},
    }
    _controller(pods, _tracker())
    rendered = REGISTRY.render()
    for state, count in (("pending", 1), ("bound", 1), ("refused", 1)):
        assert f'tandem_pods{{state="{state}"}} {count}.0\n' in rendered


def test_a_pods_second_live_job_is_seen_as_a_duplicate_of_the_recorded_one() -> None:
    """A submit whose answer was lost (Slurm took it) and its retry: two live jobs of one Pod.
    The recorded one is the Pod's job; the other is cancelled, whichever id is higher."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = {**_pod(job_id="9"), "metadata": {**_pod(job_id="9")["metadata"], "uid": POD.uid}}
    jobs = _tracker()
    for job_id in (9, 12):
        name = placeholder.job_name(POD, SCHEDULER)
        report(jobs, JobStatus(Job(job_id=job_id, name=name, admin_comment=name, state="PENDING")))
    controller, _, _ = _controller(pods, jobs)
    observed = controller.observer.observe(groups.target(POD.key))
    assert observed.job is not None and observed.job.job_id == 9
    assert observed.duplicates == (12,)


def test_a_recorded_job_id_is_trusted_only_until_the_cache_shows_the_write() -> None:
    """The job id written on the Pod is the truth while the informer's copy is older than the
    write's resourceVersion; once the cache shows that version, the cache says (here: someone
    removed the annotation, so it is written again)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, kube = _controller(pods, _tracker())
    slurm.submit_job.return_value = 7
    kube.merge_patch.return_value = {"metadata": {"resourceVersion": "5"}}
    controller.reconcile(POD.key)
    assert controller.observer.observe(groups.target(POD.key)).recorded == {
        POD.uid: 7
    }  # the copy (version 1) lags
    pods.pods[POD.key] = {**_pod(), "metadata": {**_pod()["metadata"], "resourceVersion": "5"}}
    assert controller.observer.observe(groups.target(POD.key)).recorded == {}
    controller.reconcile(POD.key)
    assert kube.merge_patch.call_count == 2  # recorded again
    slurm.submit_job.assert_called_once()


def test_excluded_nodes_set_are_remembered_until_slurm_reports_them() -> None:
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod("7")
    pending = _status("PENDING")
    controller, _, _ = _controller(pods, _tracker(pending))
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
    pods.pods[POD.key] = _pod()
    jobs = _tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"})
    controller, _, _ = _controller(pods, jobs)
    controller.caches.cluster = _cordoned_second_node()
    observed, _ = controller.decision(groups.target(POD.key))
    assert all(_plain(getattr(observed, f.name)) for f in dataclasses.fields(observed))
    assert isinstance(observed.fits, dict) and observed.fits[POD.uid].excluded == ("cpu-002",)
    report_node(jobs, slurm_pb2.SlurmNode(name="cpu-001", kube_node="node-002"))  # after observing
    assert observed.fits[POD.uid].excluded == ("cpu-002",)  # the snapshot holds


def test_a_group_observation_is_a_snapshot_too() -> None:
    import dataclasses

    controller, _, _ = _gang(_member(0), _member(1))
    controller.caches.cluster = _cordoned_second_node()
    observed, _ = controller.decision(groups.target(f"{POD.namespace}/pg:train"))
    assert all(_plain(getattr(observed, f.name)) for f in dataclasses.fields(observed))
    assert isinstance(observed.fits, dict)
    assert {uid: f.excluded for uid, f in observed.fits.items()} == {
        "uid-0": ("cpu-002",),
        "uid-1": ("cpu-002",),
    }


def test_the_job_is_built_from_the_annotations_validation_passed() -> None:
    """The submit builds the job from what decide validated (its Validation), not from a second
    read of the Pod (issue 19)."""
    pods = FakePodCache()
    pods.synced = True
    pod = _pod()
    pod["metadata"]["annotations"][keys.PARTITION] = "batch"
    pods.pods[POD.key] = pod
    controller, slurm, _ = _controller(pods, _tracker())
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
    controller, slurm, _ = _gang(_member(0), _member(1))
    slurm.submit_job.side_effect = SlurmApiError("down", 503)
    with pytest.raises(SlurmApiError):
        controller.reconcile(f"{POD.namespace}/pg:train")
    controller.hands.announce.flush()
    posted = [
        (c.args[0]["metadata"]["name"], c.args[2])
        for c in controller.writers.events.record.call_args_list  # type: ignore[attr-defined]
    ]
    assert posted == [("train-0", "SlurmUnavailable"), ("train-1", "SlurmUnavailable")]


def test_a_members_placement_is_where_its_group_stands() -> None:
    """Before: a member was judged as a Pod alone, so one its group refuses (the members disagree
    on the partition) was reported pending (issue 19)."""
    first, second = _member(0), _member(1)
    first["metadata"]["annotations"][keys.PARTITION] = "a"
    controller, _, _ = _gang(first, second)
    placed = placement(controller, first)
    assert placed.state == scheduler_pb2.PLACEMENT_STATE_INVALID
    ref = placeholder.PodRef(POD.namespace, "pg:train", "pg-uid")
    name = placeholder.job_name(ref, SCHEDULER)
    controller, _, _ = _gang(_member(0, "9"), _member(1, "9"))
    nodes = ("cpu-001", "cpu-002")
    report(
        controller.jobs,
        JobStatus(Job(job_id=9, name=name, admin_comment=name, state="RUNNING", nodes=nodes), started=True),
    )
    placed = placement(controller, _member(1, "9"))
    assert placed.job_id == 9 and placed.state == scheduler_pb2.PLACEMENT_STATE_STARTED


def test_a_pending_group_job_minCount_grew_past_is_cancelled_told_and_replaced() -> None:
    """Kubernetes 1.37 made gang.minCount mutable: a pending job of 2 for a group now of 3 is
    cancelled with a Normal Event on each member, and once it ended one job of 3 is submitted and
    recorded on the members it kept (issue 21)."""
    members = [_member(i, "9") for i in range(3)]
    controller, slurm, kube = _gang(*members, min_count=3)
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


# --- Slurm's KillWait, as it is now ------------------------------------------------------------------


def test_each_decision_reads_kill_wait_as_it_is_now_and_the_job_is_told_it() -> None:
    pods = FakePodCache()
    pods.synced = True
    pod = _pod()
    pod["spec"]["terminationGracePeriodSeconds"] = 40
    pods.pods[POD.key] = pod
    controller, slurm, _ = _controller(pods, _tracker())
    now = KillWait(30.0, "Slurm's running configuration")
    controller.settings.kill_wait = lambda: now
    _, action = controller.decision(groups.target(POD.key))
    assert isinstance(action, actions.Reject)
    assert "(KillWait 30s minus 5s, KillWait from Slurm's running configuration), got 40" in action.message
    now = KillWait(60.0, "slurm.conf at /etc/slurm/slurm.conf")  # raised in Slurm: no restart
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    spec = slurm.submit_job.call_args.args[0]
    assert spec.environment["TANDEM_KILL_WAIT"] == "60"


def test_nothing_is_decided_until_kill_wait_is_known() -> None:
    """slurmrestd unreachable since the start: a Pod is neither refused for a guessed KillWait nor
    submitted; the key comes back after its backoff."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, _ = _controller(pods, _tracker())
    controller.settings.kill_wait = lambda: None
    with pytest.raises(NotYet, match="KillWait is not known yet"):
        controller.reconcile(POD.key)
    slurm.submit_job.assert_not_called()
    # A placement read still answers (as if Slurm's default applied).
    assert placement(controller, pods.pods[POD.key]).state == scheduler_pb2.PLACEMENT_STATE_PENDING


# --- CompositePodGroup: one heterogeneous job --------------------------------------------------


def _child(name: str, min_count: int) -> dict[str, Any]:
    meta = {"namespace": POD.namespace, "name": name, "uid": f"pg-{name}", "resourceVersion": "1"}
    return {
        **PODGROUP,
        "metadata": meta,
        "spec": {
            "parentCompositePodGroupName": "serve",
            "schedulingPolicy": {"gang": {"minCount": min_count}},
        },
    }


def _composite_member(podgroup: str, i: int, cpu: str) -> dict[str, Any]:
    pod = _pod(requests={"cpu": cpu, "memory": "1Gi"})
    pod["metadata"].update(name=f"{podgroup}-{i}", uid=f"uid-{podgroup}-{i}")
    pod["spec"]["schedulingGroup"] = {"podGroupName": podgroup}
    return pod


def _composite(*members: dict[str, Any]) -> tuple[Controller, mock.Mock, JobTracker]:
    pods = FakePodCache()
    pods.synced = True
    pods.pods = {f"{POD.namespace}/{m['metadata']['name']}": m for m in members}
    slurm = mock.Mock()
    slurm.submit_job.return_value = 12
    cfg = PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={}, scheduler_name=SCHEDULER)
    hosts = {f"cpu-00{i}": f"node-00{i}" for i in range(1, 5)}
    jobs = _tracker(hosts=hosts)
    composite = {
        "apiVersion": f"{keys.PODGROUP_GROUP}/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"namespace": POD.namespace, "name": "serve", "uid": "cpg-uid", "resourceVersion": "1"},
        "spec": {"schedulingPolicy": {"gang": {}}},
    }
    children = {
        f"{POD.namespace}/{c['metadata']['name']}": c for c in (_child("decode", 2), _child("prefill", 1))
    }
    controller = Controller(
        Caches(pods, FakeObjects(children), FakeObjects({f"{POD.namespace}/serve": composite})),
        jobs,
        Writers.of(mock.Mock(), slurm, mock.Mock()),
        ControllerSettings(cfg, fixed(30.0), policy=lambda: parse("default: {defaultUser: 1001}")),
    )
    return controller, slurm, jobs


SERVE = [
    _composite_member("prefill", 0, "4"),
    _composite_member("decode", 0, "1"),
    _composite_member("decode", 1, "1"),
]


def test_a_composite_pod_group_is_one_het_job_a_component_per_podgroup_sized_by_its_own_pods() -> None:
    controller, slurm, _ = _composite(*SERVE)
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
    controller, slurm, _ = _composite(*SERVE[:2])
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
    controller, _, jobs = _composite(*members)
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
    pods.pods[POD.key] = _pod()
    controller, _, _ = _controller(pods, _tracker())
    watches = _watches(controller)
    lock = {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"}
    watches.on_node("node-001", node([]), node([lock], version="2"))
    assert len(watches.queue) == 0
    watches.on_node("node-001", node([lock], version="2"), node([lock], cordoned=True, version="3"))
    assert len(watches.queue) == 1


def test_a_pod_alone_is_submitted_with_its_annotation_and_no_event() -> None:
    """Its job is in its PodScheduled condition while it pends and in its Scheduled Event once
    bound: a SlurmJobSubmitted Event as well was one API request in four per Pod (issue 22)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, slurm, kube = _controller(pods, _tracker())
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    slurm.submit_job.assert_called_once()
    controller.hands.announce.flush()
    record: mock.Mock = controller.writers.events.record  # type: ignore[assignment]
    assert [c.args[2] for c in record.call_args_list] == []
    assert [c.args[0] for c in kube.merge_patch.call_args_list] == [
        f"/api/v1/namespaces/{POD.namespace}/pods/{POD.name}"
    ]


def test_a_pod_is_bound_once_even_when_a_reconcile_comes_before_the_informer_shows_it() -> None:
    """Before: a second reconcile in the window between the binding and the informer's copy bound
    the Pod again (a 409 and a retry; 24 of 224 bindings for 200 Pods at 64 Nodes, issue 22)."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod(job_id="7")
    jobs = _tracker(_status(started=True), hosts={"cpu-001": "node-001"})
    controller, _, kube = _controller(pods, jobs)
    controller.reconcile(POD.key)
    controller.reconcile(POD.key)  # the informer still shows the Pod unbound
    bindings = [c.args[0] for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert len(bindings) == 1
    # Once the informer shows the binding, nothing is assumed any more.
    pods.pods[POD.key] = {**_pod(job_id="7"), "spec": {**_pod()["spec"], "nodeName": "node-001"}}
    controller.reconcile(POD.key)
    assert controller.assumed.bound.get(POD.uid) is None


def test_a_job_just_pending_writes_nothing_and_comes_back_when_its_reason_would_show() -> None:
    """One status write and one watch event per Pod less (issue 22): a job that pends for a moment
    leaves its Pod's condition alone; still pending later, Slurm's reason is written then."""
    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod("7")
    pending = JobStatus(replace(_status("PENDING").job, nodes=(), state_reason="Resources"))
    controller, _, kube = _controller(pods, _tracker(pending))
    after = controller.reconcile(POD.key)
    assert after is not None and 0 < after <= decide.PENDING_AFTER_SECONDS
    assert kube.strategic_patch.call_count == 0 and kube.merge_patch.call_count == 0
    with mock.patch("tandem.scheduler.jobs.time.monotonic", return_value=time.monotonic() + after):
        assert controller.reconcile(POD.key) is None
    (path, patch), _ = kube.strategic_patch.call_args
    assert path.endswith("/status") and patch["status"]["conditions"][0]["reason"] == reasons.REASON_PENDING


def test_a_running_pods_kubelet_reports_queue_nothing_and_its_deletion_does() -> None:
    """kwok (a kubelet) reports a bound Pod Running, then Ready: two updates no decision reads,
    a fifth of the scheduler's reconciles in a burst before (issue 22)."""

    def queued(old: dict[str, Any], new: dict[str, Any]) -> bool:
        controller, _, _ = _controller(FakePodCache(), _tracker())
        watches = _watches(controller)
        watches.on_pod(POD.key, old, new)
        return len(watches.queue) == 1

    bound = {
        **_pod("7"),
        "spec": {**_pod("7")["spec"], "nodeName": "node-001"},
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
    assert queued(_pod("7"), bound), "the bind itself"
    assert queued(_pod("7"), {**_pod("7"), "status": {"phase": "Pending", "nominatedNodeName": "node-001"}})


class _BoundByNode(FakePodCache):
    def by_index(self, index: str, value: str) -> list[Any]:
        return [p for p in self.pods.values() if ctl.node_index(p) == [value]]


def test_a_pod_bound_to_a_node_takes_its_room_in_the_next_fit() -> None:
    """Each Node's room is summed once per change (eligibility.RoomLedger): the bound-Pod informer's
    change must reach the sum, or a full Node would be offered to Slurm again."""
    from tandem.scheduler import eligibility

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod()
    controller, _, _ = _controller(pods, _tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"}))
    watches = _watches(controller)
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
    pods.pods[POD.key] = _pod()
    controller, _, _ = _controller(pods, _tracker(hosts={"cpu-001": "node-001", "cpu-002": "node-002"}))
    watches = _watches(controller)
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


def _recorded_by_us() -> tuple[Controller, FakePodCache, dict[str, Any], dict[str, Any]]:
    """A Pod this controller submitted and recorded job 7 on: the Pod before, and as the informer
    then shows the write (the job id, the lock toleration, the version the write was answered)."""
    pods = FakePodCache()
    pods.synced = True
    before = _pod()
    pods.pods[POD.key] = before
    controller, slurm, kube = _controller(pods, _tracker())
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
    watches = _watches(controller)
    watches.on_pod(POD.key, before, after)
    assert len(watches.queue) == 0
    assert controller.assumed.recorded.get(POD.uid) is None, "forgotten: no reconcile comes to forget it"


def test_a_record_shown_with_any_other_change_is_reconciled() -> None:
    controller, _, before, after = _recorded_by_us()
    watches = _watches(controller)
    relabelled = {**after, "metadata": {**after["metadata"], "labels": {"team": "b"}}}
    watches.on_pod(POD.key, before, relabelled)
    assert len(watches.queue) == 1


def test_the_informer_showing_a_bind_this_controller_made_queues_nothing() -> None:
    pods = FakePodCache()
    pods.synced = True
    unbound = _pod(job_id="7")
    pods.pods[POD.key] = unbound
    controller, _, kube = _controller(pods, _tracker(_status(started=True), hosts={"cpu-001": "node-001"}))
    watches = _watches(controller)
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
    controller, slurm, _ = _controller(pods, _tracker(_status()))
    watches = _watches(controller)
    deleted = _pod(job_id="7")
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
    controller, _, _ = _controller(pods, _tracker(_status("COMPLETED")))
    watches = _watches(controller)
    watches.on_job(POD, _status("COMPLETED"))
    assert len(watches.queue) == 0
    pods.pods[POD.key] = _pod(job_id="7")
    watches.on_job(POD, _status("COMPLETED"))
    assert len(watches.queue) == 1


def test_a_job_stopping_after_its_deleting_pods_cancel_queues_nothing_until_a_job_is_left_running() -> None:
    """The Pod is being deleted (its grace period) and its reconcile cancelled the job: the job's
    stop (the placeholder's terminating call) and end that follow decide nothing (issue 40)."""
    pods = FakePodCache()
    pods.synced = True
    bound = {**_pod(job_id="7"), "spec": {**_pod(job_id="7")["spec"], "nodeName": "node-001"}}
    deleting = {**bound, "metadata": {**bound["metadata"], "deletionTimestamp": "2026-11-29T00:00:00Z"}}
    pods.pods[POD.key] = deleting
    controller, slurm, _ = _controller(pods, _tracker(_status(started=True)))
    watches = _watches(controller)

    watches.on_job(POD, _status(started=True))
    assert len(watches.queue) == 1, "its job still runs, not cancelled yet: the reconcile cancels it"
    controller.reconcile(watches.queue.get() or "")
    watches.queue.done(POD.key)
    slurm.cancel_job.assert_called_once_with(7)

    def streamed(status: JobStatus) -> None:  # as the stream does: the tracker first, then the watch
        report(controller.jobs, status)
        watches.on_job(POD, status)

    terminating = JobStatus(_status(started=True).job, started=True, terminating=True)
    streamed(terminating)
    streamed(_status("CANCELLED"))
    assert len(watches.queue) == 0
    pods.pods[POD.key] = bound  # the same change of a live Pod's job: looked at
    streamed(terminating)
    assert len(watches.queue) == 1


def test_a_bind_tells_how_many_reconciles_its_key_took() -> None:
    """tandem_scheduler_reconciles_to_bind: how often a Pod's key woke before its bind (issue 40)."""

    def observed(le: str) -> float:
        return REGISTRY.sample("tandem_scheduler_reconciles_to_bind_bucket", le=le) or 0.0

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = _pod(job_id="7")
    pending = JobStatus(replace(_status("PENDING").job, nodes=(), state_reason=""))
    jobs = _tracker(pending, hosts={"cpu-001": "node-001"})
    controller, _, _ = _controller(pods, jobs)
    two_before, three_before = observed("2.0"), observed("3.0")
    controller.reconcile(POD.key)  # pending: nothing to do yet
    report(jobs, _status(started=True))
    controller.reconcile(POD.key)  # started: bound, on the second look
    assert observed("2.0") == two_before + 1
    assert observed("3.0") == three_before + 1


def test_a_gated_pod_gets_no_job_until_its_gates_are_gone() -> None:
    """Kueue holds a Pod group's members with a scheduling gate until it admits them: Tandem, like
    kube-scheduler, places a Pod only once its gates are removed."""
    pods = FakePodCache()
    pods.synced = True
    gated = _pod()
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    pods.pods = {POD.key: gated}
    controller, slurm, kube = _controller(pods, _tracker(hosts={"cpu-001": "node-001"}))
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    slurm.submit_job.assert_not_called()
    kube.merge_patch.assert_not_called()
    del gated["spec"]["schedulingGates"]
    controller.reconcile(POD.key)
    slurm.submit_job.assert_called_once()


def test_gated_members_do_not_count_toward_a_gang() -> None:
    ungated, held = _member(0), _member(1)
    held["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    controller, slurm, _ = _gang(ungated, held)
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_not_called()
    del held["spec"]["schedulingGates"]
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
