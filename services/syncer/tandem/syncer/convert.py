"""Mirror and lock values -> protobuf messages (proto/tandem/v1)."""

from __future__ import annotations

from typing import Any

from tandem.keys import LockState
from tandem.slurm.models import Node
from tandem.syncer.locks import NodeLockView
from tandem.syncer.mirror import JobStatus
from tandem.v1 import lock_pb2, slurm_pb2

_NODE_STATES = {
    "IDLE": slurm_pb2.NODE_STATE_IDLE,
    "ALLOCATED": slurm_pb2.NODE_STATE_ALLOCATED,
    "MIXED": slurm_pb2.NODE_STATE_MIXED,
    "DOWN": slurm_pb2.NODE_STATE_DOWN,
    "UNKNOWN": slurm_pb2.NODE_STATE_UNKNOWN,
    "FUTURE": slurm_pb2.NODE_STATE_FUTURE,
}
_LOCK_STATES = {
    LockState.FALSE: lock_pb2.LOCK_STATE_FALSE,
    LockState.PENDING: lock_pb2.LOCK_STATE_PENDING,
    LockState.LOCKED: lock_pb2.LOCK_STATE_LOCKED,
    LockState.LOCKED_STRICT: lock_pb2.LOCK_STATE_LOCKED_STRICT,
}


def job_state(state: str) -> Any:
    try:
        return slurm_pb2.JobState.Value(f"JOB_STATE_{state}")
    except ValueError:
        return slurm_pb2.JOB_STATE_UNSPECIFIED


def job(status: JobStatus) -> slurm_pb2.SlurmJob:
    j = status.job
    return slurm_pb2.SlurmJob(
        job_id=j.job_id,
        name=j.name,
        state=slurm_pb2.JOB_STATE_GONE if status.gone else job_state(j.state),
        state_reason=j.state_reason,
        nodes=list(j.nodes),
        partition=j.partition,
        comment=j.comment,
        script_started=status.started,
        terminating=status.terminating,
        user_id=j.user_id,
        group_id=j.group_id,
    )


def node(n: Node) -> slurm_pb2.SlurmNode:
    return slurm_pb2.SlurmNode(
        name=n.name,
        state=_NODE_STATES.get(n.state, slurm_pb2.NODE_STATE_UNKNOWN),
        flags=list(n.flags),
        reason=n.reason,
    )


def lock(view: NodeLockView) -> lock_pb2.NodeLock:
    return lock_pb2.NodeLock(
        slurm_node=view.slurm_node,
        kube_node=view.kube_node,
        state=_LOCK_STATES[view.state],
        job_ids=view.job_ids,
        blocking_pods=view.blocking_pods,
    )
