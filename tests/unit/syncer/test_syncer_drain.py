"""DrainNode is a placeholder's drain of its own node at KillWait: checked against Slurm (the job
is that placeholder and holds that node), with the reason the syncer writes; over REST only, and
when slurmrestd says no, the caller learns why (and whether to retry)."""

from __future__ import annotations

from unittest import mock

import grpc
import pytest

from tandem import keys, placeholder
from tandem.slurm.models import Job, JobStatus
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2
from tests.unit.syncer_world import JOB_KEY, bound, token_for

REF = placeholder.job_name(placeholder.PodRef("apps", "web", "uid-1"), "tandem")


class Aborted(Exception):
    pass


def _servicer(
    error: SlurmApiError | None = None, job: Job | None = None, occupied: bool = True, others: bool = False
) -> tuple[SyncerServicer, mock.Mock]:
    slurm = mock.Mock()
    slurm.drain_node.side_effect = error
    mirror = mock.Mock()
    # At KillWait the job was cancelled and its script still runs: Slurm shows it COMPLETING.
    job = job or Job(7, REF, "CANCELLED", nodes=("cpu-001",), admin_comment=bound(REF), flags=("COMPLETING",))
    mirror.refresh_job.return_value = JobStatus(job)
    locks = mock.Mock()
    locks.occupied.return_value = occupied
    locks.drained_by_others.return_value = others
    servicer = SyncerServicer(mirror, locks, slurm, mock.Mock(), 30.0, job_keys=lambda: [JOB_KEY])
    servicer.active = True
    return servicer, slurm


def _context() -> mock.Mock:
    context = mock.Mock()
    context.abort.side_effect = Aborted
    return context


def _drain(
    node: str = "cpu-001", reference: str = REF, reason: str = "anything"
) -> syncer_pb2.DrainNodeRequest:
    return syncer_pb2.DrainNodeRequest(
        slurm_node=node, job_id=7, placeholder=reference, job_token=token_for(reference), reason=reason
    )


def test_the_node_is_drained_over_rest_with_the_reason_the_syncer_writes() -> None:
    servicer, slurm = _servicer()
    answer = servicer.DrainNode(_drain(reason="k8s: whatever the caller says"), _context())
    slurm.drain_node.assert_called_once_with("cpu-001", keys.killwait_drain_reason("apps", "web", 7))
    assert answer.drained


def test_a_running_jobs_token_drains_nothing() -> None:
    """Issue 50: a Pod's user reads its placeholder's token and asks for a drain while the job
    runs (to take over an administrator's drain): refused, since Slurm says the job has not ended."""
    servicer, slurm = _servicer(job=Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=bound(REF)))
    context = _context()
    with pytest.raises(Aborted):
        servicer.DrainNode(_drain(), context)
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "has not ended (RUNNING)" in message
    slurm.drain_node.assert_not_called()


def test_an_administrators_drain_is_not_overwritten_at_killwait() -> None:
    """Issue 50: the node is drained by someone else (bad-gpu): it stays drained with that reason,
    which Tandem would otherwise own and resume when the Pod goes; the script is told drained."""
    servicer, slurm = _servicer(others=True)
    answer = servicer.DrainNode(_drain(), _context())
    slurm.drain_node.assert_not_called()
    assert answer.drained


def test_a_node_no_pod_of_the_job_runs_on_is_not_drained_and_the_caller_is_told() -> None:
    """Issue 37: the script of a job Tandem cancelled before its Pod was bound drained its node
    when its terminating call got no answer. The answer says drained=false, so it does not run
    scontrol either."""
    servicer, slurm = _servicer(occupied=False)
    answer = servicer.DrainNode(_drain(), _context())
    slurm.drain_node.assert_not_called()
    assert not answer.drained
    args = servicer.locks.occupied.call_args.args  # type: ignore[attr-defined]
    assert args[1] == placeholder.PodRef("apps", "web", "uid-1") and args[2] == "cpu-001"


@pytest.mark.parametrize(
    ("request_", "why"),
    [
        (_drain(node="cpu-002"), "is not allocated cpu-002"),
        (
            _drain(reference=placeholder.job_name(placeholder.PodRef("apps", "db", "uid-2"), "tandem")),
            "is not the placeholder",
        ),
        (syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: no job named"), "are required"),
    ],
)
def test_a_drain_for_another_job_or_node_is_refused_and_drains_nothing(
    request_: syncer_pb2.DrainNodeRequest, why: str
) -> None:
    servicer, slurm = _servicer()
    context = _context()
    with pytest.raises(Aborted):
        servicer.DrainNode(request_, context)
    assert why in context.abort.call_args.args[1]
    slurm.drain_node.assert_not_called()


def test_a_job_only_named_like_the_placeholder_cannot_drain() -> None:
    servicer, slurm = _servicer(job=Job(7, REF, "RUNNING", nodes=("cpu-001",)))  # no AdminComment
    context = _context()
    with pytest.raises(Aborted):
        servicer.DrainNode(_drain(), context)
    assert context.abort.call_args.args[0] == grpc.StatusCode.PERMISSION_DENIED
    slurm.drain_node.assert_not_called()


@pytest.mark.parametrize(
    ("status", "code"),
    [(0, grpc.StatusCode.UNAVAILABLE), (503, grpc.StatusCode.UNAVAILABLE), (500, grpc.StatusCode.INTERNAL)],
)
def test_a_refusal_names_the_node_and_slurmrestds_answer(status: int, code: grpc.StatusCode) -> None:
    error = SlurmApiError("POST node/cpu-001: HTTP 500: Invalid node name specified", status)
    servicer, _ = _servicer(error)
    context = _context()
    with pytest.raises(Aborted):
        servicer.DrainNode(_drain(), context)
    got, message = context.abort.call_args.args
    assert got == code
    assert "cpu-001" in message and "Invalid node name specified" in message
