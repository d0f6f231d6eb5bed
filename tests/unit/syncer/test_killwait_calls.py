"""A placeholder's end (JobTerminating): the call waits on the caches for its Pods to go, and the
node sync drains at KillWait each node where one still runs."""

from __future__ import annotations

import threading
import time
from typing import Any
from unittest import mock

import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.cluster import slim_node
from tandem.syncer.mirror import SlurmMirror
from tandem.v1 import syncer_pb2
from tests.unit.servicer_calls import call
from tests.unit.syncer.lock_calls_world import call_context, new_stack, submitted_and_seen, until
from tests.unit.syncer_world import (
    Stack,
    World,
    _mirror,
    _pod,
    _slurmd,
    bound,
    token_for,
)


def test_a_terminating_job_waits_on_the_informer_not_on_the_api(stacks: list[Stack]) -> None:
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", "node-001"))
    mirror = _mirror(synced=True)
    submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    servicer = new_stack(stacks, world, mirror).servicer
    threading.Timer(0.2, world.remove_pod, ["apps/trainer"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    began = time.monotonic()
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    assert time.monotonic() - began < 1.0
    assert world.kube.reads() == []


@pytest.mark.parametrize(
    ("annotations", "node"),
    [
        ({keys.JOB_ID_ANNOTATION: "9"}, "node-001"),  # the Pod recorded another job
        ({}, "node-003"),  # bound away from this job's node (its record not cached yet)
        ({keys.JOB_ID_ANNOTATION: "7"}, ""),  # never bound (issue 37: its claim could not be mapped)
    ],
    ids=["records another job", "bound elsewhere", "never bound"],
)
def test_a_duplicate_jobs_end_does_not_wait_for_the_pod_of_another_job(
    annotations: dict[str, str], node: str, stacks: list[Stack]
) -> None:
    """A submit retried after its answer was lost left two jobs; the scheduler cancels the one the
    Pod did not record. Before: its placeholder waited for the Pod (alive, on its own job) until
    KillWait and drained its node ("k8s: pod ... still running at KillWait"): three in one run."""
    world = World()
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    world.add_pod(_pod("trainer", node, annotations=annotations))
    mirror = _mirror(synced=True)
    submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror._push(7, "cpu-001")
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    world.add_pod(_slurmd("cpu-001", "node-001"))
    # Its Node there: a pass over cpu-001 would drain it at once for a Node that is gone.
    world.add_node("node-001")
    stack = new_stack(stacks, world, mirror)
    servicer, slurm = stack.servicer, stack.slurm
    servicer.terminating_timeout = 2
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()


def test_a_group_job_waits_for_every_member_and_drains_only_the_nodes_one_still_holds(
    stacks: list[Stack],
) -> None:
    """The node sync makes the drain the call asks for (one drain path, retried by the runner), and
    the call answers with what it drained; the Pod that keeps the node drained is told."""
    world = World()
    for slurm_node, node in (("cpu-001", "node-001"), ("cpu-002", "node-002")):
        world.add_pod(_slurmd(slurm_node, node))
        world.add_node(node)
    for name, node in (("train-0", "node-001"), ("train-1", "node-002")):
        world.add_pod(_pod(name, node, annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    nodes = (Node("cpu-001", "ALLOCATED"), Node("cpu-002", "ALLOCATED"))
    mirror = _mirror(synced=True, nodes=nodes)
    name = placeholder.job_name(ref, "tandem")
    allocation = Job(7, name, "RUNNING", nodes=("cpu-001", "cpu-002"), admin_comment=bound(name))
    mirror.slurm.get_job_components = mock.Mock(return_value=[allocation])  # type: ignore[method-assign]
    mirror.refresh_job(7)
    events = mock.Mock()
    stack = new_stack(stacks, world, mirror, events=events)
    stack.servicer.terminating_timeout = 0.6
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    answer = call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        call_context(10.0),
    )
    assert not answer.pod_gone
    assert list(answer.drained_slurm_nodes) == ["cpu-002"]
    stack.slurm.drain_node.assert_called_once()
    node, reason = stack.slurm.drain_node.call_args.args
    assert node == "cpu-002" and "apps/train-1 still running at KillWait (job 7)" in reason
    # The pass posts the Event just after it settles the drain, which may answer the call first.
    until("the drain's Event posted", lambda: events.record.called)
    stack.sync._event_pool.shutdown(wait=True)
    told = [(c.args[0]["metadata"]["name"], c.args[2]) for c in events.record.call_args_list]
    assert ("train-1", "SlurmNodeDrained") in told


def test_a_killwait_drain_slurm_refused_is_not_reported_drained(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    world.add_pod(_pod("trainer", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "trainer", "uid-trainer")
    name = placeholder.job_name(ref, "tandem")
    mirror = _mirror(synced=True)
    mirror.slurm.get_job_components = mock.Mock(  # type: ignore[method-assign]
        return_value=[Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))]
    )
    slurm = mock.Mock()
    slurm.drain_node.side_effect = SlurmApiError("slurmrestd: connection refused", 0)
    stack = new_stack(stacks, world, mirror, slurm=slurm)
    stack.servicer.terminating_timeout = 0.2
    answer = call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=name, job_token=token_for(name)
        ),
        call_context(10.0),
    )
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == []
    assert slurm.drain_node.called
    # The script drains its node itself on that answer; the node sync keeps trying while the Pod
    # runs, and forgets the deadline once the Pod is gone.
    entry = stack.holds.killwait_of(7)
    assert entry is not None and entry.answered
    world.remove_pod("apps/trainer")
    until("the KillWait deadline forgotten", lambda: stack.holds.killwait_of(7) is None)


def _ended_placeholder(slurm_node: Node) -> tuple[World, SlurmMirror, str]:
    """A placeholder job 7 on cpu-001 (Node node-001) that ended while its Pod still runs."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    world.add_pod(_pod("trainer", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    name = placeholder.job_name(placeholder.PodRef("apps", "trainer", "uid-trainer"), "tandem")
    mirror = _mirror(synced=True, nodes=(slurm_node,))
    mirror.slurm.get_job_components = mock.Mock(  # type: ignore[method-assign]
        return_value=[Job(7, name, "RUNNING", nodes=("cpu-001",), admin_comment=bound(name))]
    )
    return world, mirror, name


def _terminating(stack: Stack, name: str, remaining: float = 10.0) -> Any:
    return call(
        stack.servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7, slurm_node="cpu-001", placeholder=name, job_token=token_for(name)
        ),
        call_context(remaining),
    )


def test_a_pod_still_running_at_killwait_has_its_node_drained_then_not_before(
    stacks: list[Stack],
) -> None:
    """The call records a deadline and waits; the node's pass drains at it (not at once), and the
    call answers with the drain; the Pod is told."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    drained_at: list[float] = []
    slurm = mock.Mock()
    slurm.drain_node.side_effect = lambda node, reason: drained_at.append(time.monotonic())
    events = mock.Mock()
    stack = new_stack(stacks, world, mirror, slurm=slurm, events=events)
    stack.servicer.terminating_timeout = 0.5
    began = time.monotonic()
    answer = _terminating(stack, name)
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == ["cpu-001"]
    assert len(drained_at) == 1 and drained_at[0] - began >= 0.45
    node, reason = slurm.drain_node.call_args.args
    assert (node, reason) == ("cpu-001", keys.killwait_drain_reason("apps", "trainer", 7))
    assert stack.holds.killwait_of(7) is None
    until("the drain's Event posted", lambda: events.record.called)  # as in the group job's
    stack.sync._event_pool.shutdown(wait=True)
    assert [c.args[2] for c in events.record.call_args_list] == ["SlurmNodeDrained"]


def test_a_pod_that_goes_before_killwait_leaves_its_node_undrained(stacks: list[Stack]) -> None:
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    stack = new_stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 0.4
    threading.Timer(0.1, world.remove_pod, ["apps/trainer"]).start()
    began = time.monotonic()
    assert _terminating(stack, name).pod_gone
    assert time.monotonic() - began < 0.35  # answered when the Pod went, not at the deadline
    assert stack.holds.killwait_of(7) is None
    time.sleep(0.5)  # past the deadline the call recorded: no pass drains for it
    stack.slurm.drain_node.assert_not_called()


def test_a_node_already_drained_for_the_pod_is_not_drained_again(stacks: list[Stack]) -> None:
    reason = keys.killwait_drain_reason("apps", "trainer", 7)
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED", ("DRAIN",), reason, "tandem"))
    stack = new_stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 0.2
    answer = _terminating(stack, name)
    assert not answer.pod_gone and list(answer.drained_slurm_nodes) == ["cpu-001"]
    stack.slurm.drain_node.assert_not_called()


def test_a_node_in_its_backoff_is_still_drained_at_killwait(stacks: list[Stack]) -> None:
    """Slurm refused the drain of the node's cordon, so its pass went back into a long backoff; the
    KillWait drain still comes at drain_at (the deadline's own pass), not when the backoff ends."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    cordoned = {"metadata": {"name": "node-001", "resourceVersion": "2"}, "spec": {"unschedulable": True}}
    with world.cluster.nodes._lock:
        world.cluster.nodes._put("node-001", slim_node(cordoned))
    drained_at: list[float] = []

    def drain(node: str, reason: str) -> None:
        if reason.startswith("k8s: Node"):
            raise SlurmApiError("slurmrestd: busy", 503)
        drained_at.append(time.monotonic())

    slurm = mock.Mock()
    slurm.drain_node.side_effect = drain
    stack = new_stack(stacks, world, mirror, slurm=slurm)
    stack.queue.backoff_base = stack.queue.backoff_cap = 5.0
    stack.servicer.terminating_timeout = 0.5
    began = time.monotonic()
    answer = _terminating(stack, name)
    assert list(answer.drained_slurm_nodes) == ["cpu-001"]
    assert len(drained_at) == 1 and drained_at[0] - began < 1.5


def test_a_call_asked_again_is_not_cut_short_by_the_first_ones_answer(stacks: list[Stack]) -> None:
    """The script asked again (through a restarted gateway) while the first call still waited:
    the first's answer at its deadline leaves the second's deadline, which waits for the Pod."""
    world, mirror, name = _ended_placeholder(Node("cpu-001", "ALLOCATED"))
    stack = new_stack(stacks, world, mirror)
    stack.servicer.terminating_timeout = 5
    answers: list[Any] = []
    first = threading.Thread(target=lambda: answers.append(_terminating(stack, name, remaining=2.0)))
    first.start()
    time.sleep(0.2)
    threading.Timer(2.0, world.remove_pod, ["apps/trainer"]).start()
    began = time.monotonic()
    second = _terminating(stack, name)
    first.join()
    assert not answers[0].pod_gone  # at its own deadline, nothing drained yet
    assert second.pod_gone and time.monotonic() - began >= 1.5
    stack.slurm.drain_node.assert_not_called()


def test_a_group_job_whose_members_all_left_answers_gone(stacks: list[Stack]) -> None:
    world = World()
    world.add_pod(_pod("train-0", "node-001", annotations={keys.JOB_ID_ANNOTATION: "7"}))
    ref = placeholder.PodRef("apps", "pg:train", "pg-uid")
    mirror = _mirror(synced=True)
    submitted_and_seen(mirror, 7, placeholder.job_name(ref, "tandem"))
    mirror.slurm.get_job_components = mock.Mock(return_value=[])  # type: ignore[method-assign]
    stack = new_stack(stacks, world, mirror)
    servicer, slurm = stack.servicer, stack.slurm
    threading.Timer(0.1, world.remove_pod, ["apps/train-0"]).start()
    context = mock.Mock()
    context.time_remaining.return_value = 10
    answer = call(
        servicer.JobTerminating,
        syncer_pb2.JobTerminatingRequest(
            job_id=7,
            slurm_node="cpu-001",
            placeholder=placeholder.job_name(ref, "tandem"),
            job_token=token_for(placeholder.job_name(ref, "tandem")),
        ),
        context,
    )
    assert answer.pod_gone
    slurm.drain_node.assert_not_called()
