"""DrainNode goes over REST only; when slurmrestd says no, the caller learns why (and whether to retry)."""

from __future__ import annotations

from unittest import mock

import grpc
import pytest

from tandem.slurm.rest import SlurmApiError
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2


class Aborted(Exception):
    pass


def _servicer(error: SlurmApiError | None = None) -> tuple[SyncerServicer, mock.Mock]:
    slurm = mock.Mock()
    slurm.drain_node.side_effect = error
    servicer = SyncerServicer(mock.Mock(), mock.Mock(), slurm, mock.Mock(), 30.0)
    servicer.active = True
    return servicer, slurm


def _context() -> mock.Mock:
    context = mock.Mock()
    context.abort.side_effect = Aborted
    return context


def test_the_node_is_drained_over_rest_with_the_reason() -> None:
    servicer, slurm = _servicer()
    servicer.DrainNode(syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: test"), _context())
    slurm.drain_node.assert_called_once_with("cpu-001", "k8s: test")


@pytest.mark.parametrize(
    ("status", "code"),
    [(0, grpc.StatusCode.UNAVAILABLE), (503, grpc.StatusCode.UNAVAILABLE), (500, grpc.StatusCode.INTERNAL)],
)
def test_a_refusal_names_the_node_and_slurmrestds_answer(status: int, code: grpc.StatusCode) -> None:
    error = SlurmApiError("POST node/cpu-001: HTTP 500: Invalid node name specified", status)
    servicer, _ = _servicer(error)
    context = _context()
    with pytest.raises(Aborted):
        servicer.DrainNode(syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: test"), context)
    got, message = context.abort.call_args.args
    assert got == code
    assert "cpu-001" in message and "Invalid node name specified" in message
