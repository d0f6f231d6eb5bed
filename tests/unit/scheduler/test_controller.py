"""The scheduler's reconciler and its runner, with caches faked: what happens before the caches
are filled (CI caught a restarted scheduler cancelling the job of a Pod it had not listed yet), how
failures come back (backoff, never for a terminal error), what is counted (it runs for months)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from tandem.metrics import REGISTRY
from tandem.runner import NotYet, Runner, TerminalError
from tandem.scheduler import actions, groups
from tandem.scheduler.killwait_source import KillWait
from tandem.scheduler.placements import placement
from tandem.slurm.models import JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.v1 import scheduler_pb2
from tandem.workqueue import WorkQueue
from tests.unit.scheduler.scheduler_world import (
    POD,
    FakePodCache,
    make_controller,
    make_gang,
    make_manager,
    make_member,
    make_pod,
    make_status,
    make_tracker,
    report,
    wait_for,
)


def test_no_worker_runs_before_the_pods_are_listed() -> None:
    pods = FakePodCache()
    controller, slurm, _ = make_controller(pods, make_tracker(make_status()))
    queue = WorkQueue()
    queue.add(POD.key)
    manager = make_manager(controller, pods, queue)
    manager.start()
    time.sleep(0.3)
    slurm.cancel_job.assert_not_called()  # the Pod is not gone: it is not listed yet
    pods.synced = True
    assert wait_for(lambda: slurm.cancel_job.called)  # listed, and really not there
    slurm.cancel_job.assert_called_once_with(7)
    manager.stop()


def test_no_worker_runs_before_the_job_list_arrives() -> None:
    pods = FakePodCache()
    pods.synced = True
    jobs = make_tracker(make_status())
    jobs._synced.clear()
    controller, slurm, _ = make_controller(pods, jobs)
    queue = WorkQueue()
    queue.add(POD.key)
    manager = make_manager(controller, pods, queue)
    manager.start()
    time.sleep(0.3)
    slurm.cancel_job.assert_not_called()
    manager.stop()


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


def test_a_member_alone_submits_nothing_and_its_own_key_never_places_it() -> None:
    controller, slurm, _ = make_gang(make_member(0))
    controller.reconcile(f"{POD.namespace}/train-0")
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_not_called()


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
    make_controller(pods, make_tracker())
    rendered = REGISTRY.render()
    for state, count in (("pending", 1), ("bound", 1), ("refused", 1)):
        assert f'tandem_pods{{state="{state}"}} {count}.0\n' in rendered


# --- Slurm's KillWait, as it is now ------------------------------------------------------------------


def test_each_decision_reads_kill_wait_as_it_is_now_and_the_job_is_told_it() -> None:
    pods = FakePodCache()
    pods.synced = True
    pod = make_pod()
    pod["spec"]["terminationGracePeriodSeconds"] = 40
    pods.pods[POD.key] = pod
    controller, slurm, _ = make_controller(pods, make_tracker())
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
    pods.pods[POD.key] = make_pod()
    controller, slurm, _ = make_controller(pods, make_tracker())
    controller.settings.kill_wait = lambda: None
    with pytest.raises(NotYet, match="KillWait is not known yet"):
        controller.reconcile(POD.key)
    slurm.submit_job.assert_not_called()
    # A placement read still answers (as if Slurm's default applied).
    assert placement(controller, pods.pods[POD.key]).state == scheduler_pb2.PLACEMENT_STATE_PENDING


def test_a_bind_tells_how_many_reconciles_its_key_took() -> None:
    """tandem_scheduler_reconciles_to_bind: how often a Pod's key woke before its bind (issue 40)."""

    def observed(le: str) -> float:
        return REGISTRY.sample("tandem_scheduler_reconciles_to_bind_bucket", le=le) or 0.0

    pods = FakePodCache()
    pods.synced = True
    pods.pods[POD.key] = make_pod(job_id="7")
    pending = JobStatus(replace(make_status("PENDING").job, nodes=(), state_reason=""))
    jobs = make_tracker(pending, hosts={"cpu-001": "node-001"})
    controller, _, _ = make_controller(pods, jobs)
    two_before, three_before = observed("2.0"), observed("3.0")
    controller.reconcile(POD.key)  # pending: nothing to do yet
    report(jobs, make_status(started=True))
    controller.reconcile(POD.key)  # started: bound, on the second look
    assert observed("2.0") == two_before + 1
    assert observed("3.0") == three_before + 1


def test_a_gated_pod_gets_no_job_until_its_gates_are_gone() -> None:
    """Kueue holds a Pod group's members with a scheduling gate until it admits them: Tandem, like
    kube-scheduler, places a Pod only once its gates are removed."""
    pods = FakePodCache()
    pods.synced = True
    gated = make_pod()
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    pods.pods = {POD.key: gated}
    controller, slurm, kube = make_controller(pods, make_tracker(hosts={"cpu-001": "node-001"}))
    slurm.submit_job.return_value = 7
    controller.reconcile(POD.key)
    slurm.submit_job.assert_not_called()
    kube.merge_patch.assert_not_called()
    del gated["spec"]["schedulingGates"]
    controller.reconcile(POD.key)
    slurm.submit_job.assert_called_once()


def test_gated_members_do_not_count_toward_a_gang() -> None:
    ungated, held = make_member(0), make_member(1)
    held["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    controller, slurm, _ = make_gang(ungated, held)
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_not_called()
    del held["spec"]["schedulingGates"]
    controller.reconcile(f"{POD.namespace}/pg:train")
    slurm.submit_job.assert_called_once()
