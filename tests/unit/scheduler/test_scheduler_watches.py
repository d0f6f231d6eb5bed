"""What each source's change queues (tandem.scheduler.watches), read through the Pod informer's own
indexes (caches.POD_INDEXES): a change reaches only the placement keys it concerns."""

from __future__ import annotations

from typing import Any
from unittest import mock

from tandem import keys, placeholder
from tandem.informer import Informer
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.caches import POD_INDEXES, Caches
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.policy import parse
from tandem.scheduler.watches import SchedulerWatches
from tandem.slurm.models import Job, JobStatus
from tandem.watches import Change
from tandem.workqueue import WorkQueue
from tests.unit.scheduler.scheduler_world import report

SCHEDULER = "tandem-test"


def _pod(namespace: str, name: str, node: str = "", group: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": spec,
    }


def _informer(*pods: dict[str, Any]) -> Informer:
    """The Pod informer as main declares its indexes, holding these Pods."""
    informer = Informer(mock.Mock(), ["/api/v1/pods"], {}, indexes=POD_INDEXES)
    with informer._lock:
        for pod in pods:
            informer._put(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", pod)
    return informer


def _watches(informer: Informer, jobs: JobTracker | None = None, queue: Any = None) -> SchedulerWatches:
    tracker = jobs or JobTracker(SCHEDULER, mock.Mock())
    return SchedulerWatches(Caches(informer), tracker, Assumed(), queue or WorkQueue())


def _queued(queue: WorkQueue) -> list[str]:
    found = []
    while len(queue):
        key = queue.get()
        assert key is not None
        found.append(key)
        queue.done(key)
    return sorted(found)


def _node(cordoned: bool, version: str) -> dict[str, Any]:
    return {"metadata": {"name": "node-001", "resourceVersion": version}, "spec": {"unschedulable": cordoned}}


def test_a_node_change_queues_every_unbound_pod_and_no_bound_one() -> None:
    informer = _informer(
        _pod("team-a", "waiting"),
        _pod("team-b", "member", group="train"),
        _pod("team-a", "running", node="node-001"),
        _pod("team-b", "bound-member", node="node-002", group="serve"),
    )
    watches = _watches(informer)
    watches.on_node("node-001", _node(False, "1"), _node(False, "2"))  # a heartbeat
    assert _queued(watches.queue) == []
    watches.on_node("node-001", _node(False, "2"), _node(True, "3"))
    assert _queued(watches.queue) == ["team-a/waiting", "team-b/pg:train"]
    # Bound since: the index follows the informer.
    with informer._lock:
        informer._put("team-a/waiting", _pod("team-a", "waiting", node="node-003"))
    watches.on_topology_changed()
    assert _queued(watches.queue) == ["team-b/pg:train"]


def test_a_change_of_one_namespaces_rules_queues_only_that_namespaces_pods() -> None:
    informer = _informer(
        _pod("team-a", "one"),
        _pod("team-a", "two", node="node-001"),
        _pod("team-b", "other"),
        _pod("unlisted", "third"),
    )
    watches = _watches(informer)
    before = parse("default: {defaultUser: 1001}\nnamespaces: {team-a: {accounts: [k8s]}, team-b: {}}")
    after = parse("default: {defaultUser: 1001}\nnamespaces: {team-a: {accounts: [gpu]}, team-b: {}}")
    watches.on_policy_changed(before, after)
    # Bound or not: a bound Pod the new rules would refuse is told so.
    assert _queued(watches.queue) == ["team-a/one", "team-a/two"]
    # A namespace listed anew now follows its own rules, not the default.
    listed = parse(
        "default: {defaultUser: 1001}\nnamespaces: {team-a: {accounts: [gpu]}, team-b: {}, unlisted: {}}"
    )
    watches.on_policy_changed(after, listed)
    assert _queued(watches.queue) == ["unlisted/third"]


def test_a_change_of_the_default_rules_queues_every_pod() -> None:
    informer = _informer(_pod("team-a", "one"), _pod("team-b", "other", node="node-001"))
    watches = _watches(informer)
    watches.on_policy_changed(parse("default: {defaultUser: 1001}"), parse("default: {defaultUser: 1002}"))
    assert _queued(watches.queue) == ["team-a/one", "team-b/other"]


def _job(job_id: int, ref: placeholder.PodRef, nodes: tuple[str, ...], state: str = "RUNNING") -> JobStatus:
    name = placeholder.job_name(ref, SCHEDULER)
    return JobStatus(Job(job_id=job_id, name=name, admin_comment=name, state=state, nodes=nodes))


def test_a_moved_slurm_node_queues_only_the_keys_of_the_live_jobs_on_it_urgently() -> None:
    here, elsewhere, ended = _pod("team-a", "here"), _pod("team-a", "elsewhere"), _pod("team-a", "ended")
    members = [_pod("team-b", f"train-{i}", group="train") for i in range(2)]
    informer = _informer(here, elsewhere, ended, *members)
    jobs = JobTracker(SCHEDULER, mock.Mock())
    report(jobs, _job(1, placeholder.PodRef("team-a", "here", "uid-here"), ("cpu-001",)))
    report(jobs, _job(2, placeholder.PodRef("team-a", "elsewhere", "uid-elsewhere"), ("cpu-002",)))
    report(jobs, _job(3, placeholder.PodRef("team-a", "ended", "uid-ended"), ("cpu-001",), "COMPLETED"))
    report(jobs, _job(4, placeholder.PodRef("team-b", "pg:train", "pg-uid"), ("cpu-002", "cpu-001")))
    # A Pod deleted (its reconcile ran) and one made again under its name: neither is its job's.
    report(jobs, _job(5, placeholder.PodRef("team-a", "gone", "uid-gone"), ("cpu-001",)))
    report(jobs, _job(6, placeholder.PodRef("team-a", "elsewhere", "uid-older"), ("cpu-001",)))
    queue = mock.Mock()
    watches = _watches(informer, jobs, queue)
    watches.on_node_moved("cpu-001")
    assert queue.add.call_args_list == [
        mock.call("team-a/here", urgent=True),
        mock.call("team-b/pg:train", urgent=True),
    ]
    queue.reset_mock()
    watches.on_node_moved("cpu-009")
    queue.add.assert_not_called()


def test_the_jobs_on_a_slurm_node_follow_where_slurm_put_them() -> None:
    jobs = JobTracker(SCHEDULER, mock.Mock())
    ref = placeholder.PodRef("team-a", "p", "uid-p")
    report(jobs, _job(1, ref, ("cpu-001", "cpu-002")))
    assert [j.job_id for j in jobs.on_node("cpu-002")] == [1]
    report(jobs, _job(1, ref, ("cpu-003",)))  # requeued and started elsewhere
    assert jobs.on_node("cpu-002") == [] and [j.job_id for j in jobs.on_node("cpu-003")] == [1]
    report(jobs, _job(1, ref, ("cpu-003",), "COMPLETED"))
    assert jobs.on_node("cpu-003") == []


def test_a_predicate_only_reads_the_memory_which_forgets_once_the_pod_shows_the_write() -> None:
    """The echo of the job id this process wrote drops the change, however often the predicate is
    asked; the memory forgets the write once the Pod's change has gone by (controller-runtime's
    predicates are pure: what one says may not depend on how often it was called)."""
    old = _pod("team-a", "web")
    new = {
        **old,
        "metadata": {**old["metadata"], "resourceVersion": "2", "annotations": {keys.JOB_ID_ANNOTATION: "7"}},
    }
    queue = WorkQueue()
    watches = _watches(_informer(new), queue=queue)
    watches.assumed.recorded.assume("uid-web", 7, "2")
    echo = Change("team-a/web", old, new)
    assert watches._not_own_write_echo(echo) is False
    assert watches._not_own_write_echo(echo) is False  # asked again: the same answer
    assert watches.assumed.recorded.get("uid-web") == 7
    watches.on_pod("team-a/web", old, new)
    assert watches.assumed.recorded.get("uid-web") is None
    assert _queued(queue) == []
