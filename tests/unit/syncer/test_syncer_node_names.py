"""The syncer refuses a node name that is not one Slurm node's, whoever calls (issue 18): a hostlist,
`ALL` or a path would lock, unlock or drain more than one node, or reach another slurmrestd URL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2
from tests.unit.servicer_calls import call as served


class Aborted(Exception):
    pass


CALLS: dict[str, Callable[[str], Any]] = {
    "AcquireNodeLock": lambda node: syncer_pb2.AcquireNodeLockRequest(slurm_node=node, job_id=42),
    "ReleaseNodeLock": lambda node: syncer_pb2.ReleaseNodeLockRequest(slurm_node=node, job_id=42),
    "GetNodeLock": lambda node: syncer_pb2.GetNodeLockRequest(slurm_node=node),
    "DrainNode": lambda node: syncer_pb2.DrainNodeRequest(slurm_node=node, reason="k8s: test"),
}


@pytest.mark.parametrize("node", ["gpu-[000-999]", "ALL", "../job/5", "a b", "x" * 300, ""])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_name_that_is_not_one_node_is_invalid_argument_and_touches_nothing(call: str, node: str) -> None:
    locker, slurm = mock.Mock(), mock.Mock()
    servicer = SyncerServicer(mock.Mock(), locker, slurm, mock.Mock(), 30.0)
    servicer.active = True
    context: Any = mock.Mock()
    context.abort.side_effect = Aborted
    with pytest.raises(Aborted):
        served(getattr(servicer, call), CALLS[call](node), context)
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "slurm_node" in message
    assert not locker.method_calls and not slurm.method_calls
