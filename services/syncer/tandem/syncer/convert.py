"""Lock views -> protobuf messages (proto/tandem/v1/lock.proto). Jobs and nodes convert in
tandem.slurm.wire, shared with the scheduler that reads them back."""

from __future__ import annotations

from tandem.keys import LockState
from tandem.syncer.locking import NodeLockView
from tandem.v1 import lock_pb2

_LOCK_STATES = {
    LockState.FALSE: lock_pb2.LOCK_STATE_FALSE,
    LockState.PENDING: lock_pb2.LOCK_STATE_PENDING,
    LockState.LOCKED: lock_pb2.LOCK_STATE_LOCKED,
    LockState.LOCKED_STRICT: lock_pb2.LOCK_STATE_LOCKED_STRICT,
}


def lock(view: NodeLockView) -> lock_pb2.NodeLock:
    return lock_pb2.NodeLock(
        slurm_node=view.slurm_node,
        kube_node=view.kube_node,
        state=_LOCK_STATES[view.state],
        job_ids=view.job_ids,
    )
