"""DrainNode is a placeholder's drain of its own node at KillWait (its script's call when its
JobTerminating got no answer): checked against Slurm (the job is that placeholder, holds that node
and has ended), then made by the node's pass as every KillWait drain is, with the reason the syncer
writes. The call writes nothing itself; when the pass cannot drain in time, the caller learns why
and drains the node itself."""

from __future__ import annotations

from unittest import mock

import grpc
import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.calls import Refused
from tandem.v1 import syncer_pb2
from tests.unit.servicer_calls import call
from tests.unit.syncer.lock_calls_world import call_context, new_stack, until
from tests.unit.syncer_world import Stack, World, _mirror, _pod, _slurmd, bound, token_for

REF = placeholder.job_name(placeholder.PodRef("apps", "web", "uid-web"), "tandem")
# At KillWait the job was cancelled and its script still runs: Slurm shows it COMPLETING.
ENDED = Job(7, REF, "CANCELLED", nodes=("cpu-001",), admin_comment=bound(REF), flags=("COMPLETING",))


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def _stack(
    stacks: list[Stack],
    job: Job = ENDED,
    slurm_node: Node | None = None,
    pod_on: str = "node-001",
    slurm: mock.Mock | None = None,
) -> Stack:
    """Slurm node cpu-001 on Node node-001; the placeholder's Pod apps/web there unless `pod_on`
    says elsewhere ("" for nowhere)."""
    world = World()
    world.add_pod(_slurmd("cpu-001", "node-001"))
    world.add_node("node-001")
    if pod_on:
        world.add_pod(_pod("web", pod_on, annotations={keys.JOB_ID_ANNOTATION: "7"}))
    mirror = _mirror(synced=True, nodes=(slurm_node or Node("cpu-001", "ALLOCATED"),))
    mirror.slurm.get_job_components = mock.Mock(return_value=[job])  # type: ignore[method-assign]
    return new_stack(stacks, world, mirror, slurm=slurm)


def _context() -> mock.Mock:
    context: mock.Mock = call_context(5.0)

    async def abort(code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)

    context.abort.side_effect = abort
    return context


def _drain(
    stack: Stack, node: str = "cpu-001", reference: str = REF, reason: str = "anything"
) -> syncer_pb2.DrainNodeResponse:
    request = syncer_pb2.DrainNodeRequest(
        slurm_node=node, job_id=7, placeholder=reference, job_token=token_for(reference), reason=reason
    )
    answer: syncer_pb2.DrainNodeResponse = call(stack.servicer.DrainNode, request, _context())
    return answer


def test_the_nodes_pass_drains_it_with_the_reason_the_syncer_writes(stacks: list[Stack]) -> None:
    stack = _stack(stacks)
    answer = _drain(stack, reason="k8s: whatever the caller says")
    stack.slurm.drain_node.assert_called_once_with("cpu-001", keys.killwait_drain_reason("apps", "web", 7))
    assert answer.drained
    assert stack.holds.killwait_of(7) is None  # answered: nothing left for a pass to do


def test_the_call_itself_writes_nothing_to_slurm(stacks: list[Stack]) -> None:
    """Issue 52: the servicer records and waits; the node's pass writes (and retries)."""
    stack = _stack(stacks)
    stack.servicer.slurm = mock.Mock()
    assert _drain(stack).drained
    stack.servicer.slurm.assert_not_called()
    stack.servicer.slurm.drain_node.assert_not_called()
    stack.slurm.drain_node.assert_called_once()


def test_a_running_jobs_token_drains_nothing(stacks: list[Stack]) -> None:
    """Issue 50: a Pod's user reads its placeholder's token and asks for a drain while the job
    runs (to take over an administrator's drain): refused, since Slurm says the job has not ended."""
    stack = _stack(stacks, job=Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=bound(REF)))
    with pytest.raises(Aborted) as e:
        _drain(stack)
    assert (
        e.value.code == grpc.StatusCode.FAILED_PRECONDITION and "has not ended (RUNNING)" in e.value.details
    )
    stack.slurm.drain_node.assert_not_called()


def test_an_administrators_drain_is_not_overwritten_at_killwait(stacks: list[Stack]) -> None:
    """Issue 50: the node is drained by someone else (bad-gpu): it stays drained with that reason,
    which Tandem would otherwise own and resume when the Pod goes; the script is told drained."""
    stack = _stack(stacks, slurm_node=Node("cpu-001", "ALLOCATED", ("DRAIN",), "bad-gpu", "root"))
    assert _drain(stack).drained
    stack.slurm.drain_node.assert_not_called()


@pytest.mark.parametrize("pod_on", ["node-002", ""], ids=["bound elsewhere", "never bound"])
def test_a_node_no_pod_of_the_job_runs_on_is_not_drained_and_the_caller_is_told(
    pod_on: str, stacks: list[Stack]
) -> None:
    """Issue 37: the script of a job Tandem cancelled before its Pod was bound drained its node
    when its terminating call got no answer. The answer says drained=false, so it does not run
    scontrol either."""
    stack = _stack(stacks, pod_on=pod_on)
    assert not _drain(stack).drained
    stack.slurm.drain_node.assert_not_called()


@pytest.mark.parametrize(
    ("node", "reference", "why"),
    [
        ("cpu-002", REF, "is not allocated cpu-002"),
        (
            "cpu-001",
            placeholder.job_name(placeholder.PodRef("apps", "db", "uid-2"), "tandem"),
            "is not the placeholder",
        ),
    ],
)
def test_a_drain_for_another_job_or_node_is_refused_and_drains_nothing(
    node: str, reference: str, why: str, stacks: list[Stack]
) -> None:
    stack = _stack(stacks)
    with pytest.raises(Aborted) as e:
        _drain(stack, node=node, reference=reference)
    assert why in e.value.details
    stack.slurm.drain_node.assert_not_called()


def test_a_drain_naming_no_job_is_refused(stacks: list[Stack]) -> None:
    stack = _stack(stacks)
    request = syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: no job named")
    with pytest.raises((Aborted, Refused)) as e:
        call(stack.servicer.DrainNode, request, _context())
    assert "are required" in str(e.value)
    stack.slurm.drain_node.assert_not_called()


def test_a_job_only_named_like_the_placeholder_cannot_drain(stacks: list[Stack]) -> None:
    stack = _stack(stacks, job=Job(7, REF, "CANCELLED", nodes=("cpu-001",), flags=("COMPLETING",)))
    with pytest.raises(Aborted) as e:
        _drain(stack)  # no AdminComment: not a job Tandem submitted for this Pod
    assert e.value.code == grpc.StatusCode.PERMISSION_DENIED
    stack.slurm.drain_node.assert_not_called()


def test_a_drain_slurm_refuses_names_the_node_and_the_pass_tries_again_while_the_pod_runs(
    stacks: list[Stack],
) -> None:
    slurm = mock.Mock()
    slurm.drain_node.side_effect = SlurmApiError(
        "POST node/cpu-001: HTTP 500: Invalid node name specified", 500
    )
    stack = _stack(stacks, slurm=slurm)
    with pytest.raises(Aborted) as e:
        _drain(stack)
    # UNAVAILABLE: the script drains its node itself with scontrol (placeholder.sh).
    assert e.value.code == grpc.StatusCode.UNAVAILABLE and "cpu-001 not drained" in e.value.details
    tries = slurm.drain_node.call_count
    until("the pass tries again", lambda: slurm.drain_node.call_count > tries)
    stack.world.remove_pod("apps/web")
    until("the deadline forgotten once the Pod is gone", lambda: stack.holds.killwait_of(7) is None)
