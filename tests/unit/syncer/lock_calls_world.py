"""The hook calls of a prolog, an epilog and a placeholder against the syncer's core
(tests/unit/syncer_world.py's Stack), as the tests of tests/unit/syncer make them."""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

from tandem.slurm.models import Job
from tandem.syncer.mirror import SlurmMirror
from tandem.v1 import syncer_pb2
from tests.unit.servicer_calls import call
from tests.unit.syncer_world import (
    Stack,
    World,
    bound,
    node_token_for,
)

# cpu-001's own credential: the bound token of its slurmd Pod (tandem.nodetoken).
NODE_TOKEN = node_token_for("cpu-001")


def new_stack(made: list[Stack], world: World, mirror: SlurmMirror, **kw: Any) -> Stack:
    stack = Stack(world, mirror, **kw)
    made.append(stack)
    return stack


def submitted_and_seen(mirror: SlurmMirror, job_id: int, name: str) -> None:
    """A job the scheduler announced, seen once by the poll with its AdminComment (the binding its
    token names); slurmrestd may not answer for it afterwards."""
    mirror.job_submitted(job_id, name)
    mirror._apply_job_list([Job(job_id, name, "PENDING", admin_comment=bound(name))], time.monotonic())


def call_context(remaining: float = 10.0) -> Any:
    context = mock.Mock()
    context.time_remaining.return_value = remaining
    context.abort.side_effect = RuntimeError
    return context


def acquire(stack: Stack, job_id: int, strict: bool = True, remaining: float = 10.0) -> Any:
    return call(
        stack.servicer.AcquireNodeLock,
        syncer_pb2.AcquireNodeLockRequest(
            slurm_node="cpu-001", job_id=job_id, strict=strict, node_token=NODE_TOKEN
        ),
        call_context(remaining),
    )


def release(stack: Stack, job_id: int, slurm_node: str = "cpu-001") -> Any:
    return call(
        stack.servicer.ReleaseNodeLock,
        syncer_pb2.ReleaseNodeLockRequest(
            slurm_node=slurm_node, job_id=job_id, node_token=node_token_for(slurm_node)
        ),
        call_context(),
    )


def until(what: str, ok: Any, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
