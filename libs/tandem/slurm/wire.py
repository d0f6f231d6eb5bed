"""Jobs and nodes between the model (tandem.slurm.models) and the protos (tandem.v1.slurm): the
syncer writes them on its stream, the scheduler reads them back; both convert here and nowhere else,
and read the stream's two message shapes (batched, and one change a message) here."""

from __future__ import annotations

from collections.abc import Sequence

from tandem.slurm.models import HetComponent, Job, JobStatus, Node
from tandem.v1 import slurm_pb2, syncer_pb2

_GONE = "GONE"
_NODE_STATES = ("IDLE", "ALLOCATED", "MIXED", "DOWN", "UNKNOWN", "FUTURE")


def job_to_proto(status: JobStatus) -> slurm_pb2.SlurmJob:
    j = status.job
    return slurm_pb2.SlurmJob(
        job_id=j.job_id,
        name=j.name,
        state=_job_state(_GONE if status.gone else j.state),
        state_reason=j.state_reason,
        nodes=list(j.nodes),
        partition=j.partition,
        comment=j.comment,
        admin_comment=j.admin_comment,
        script_started=status.started,
        terminating=status.terminating,
        user_id=j.user_id,
        group_id=j.group_id,
        excluded_nodes=list(j.excluded_nodes),
        priority=j.priority,
        expected_start=j.expected_start,
        node_count=j.node_count,
        components=[
            slurm_pb2.HetComponent(job_id=c.job_id, node_count=c.node_count, nodes=list(c.nodes))
            for c in j.components
        ],
        queue_position=status.queue_position,
        queue_length=status.queue_length,
        tres_per_node=j.tres_per_node,
        gres_detail=list(j.gres_detail),
        features=j.features,
    )


def job_from_proto(msg: slurm_pb2.SlurmJob) -> JobStatus:
    state = slurm_pb2.JobState.Name(msg.state).removeprefix("JOB_STATE_")
    gone = state == _GONE
    job = Job(
        job_id=msg.job_id,
        name=msg.name,
        state="UNKNOWN" if gone or state == "UNSPECIFIED" else state,
        state_reason=msg.state_reason,
        nodes=tuple(msg.nodes),
        partition=msg.partition,
        comment=msg.comment,
        admin_comment=msg.admin_comment,
        user_id=msg.user_id,
        group_id=msg.group_id,
        excluded_nodes=tuple(msg.excluded_nodes),
        priority=msg.priority,
        expected_start=msg.expected_start,
        node_count=msg.node_count,
        components=tuple(HetComponent(c.job_id, c.node_count, tuple(c.nodes)) for c in msg.components),
        tres_per_node=msg.tres_per_node,
        gres_detail=tuple(msg.gres_detail),
        features=msg.features,
    )
    return JobStatus(
        job,
        started=msg.script_started,
        terminating=msg.terminating,
        gone=gone,
        queue_position=msg.queue_position,
        queue_length=msg.queue_length,
    )


def node_to_proto(node: Node, kube_node: str) -> slurm_pb2.SlurmNode:
    return slurm_pb2.SlurmNode(
        name=node.name,
        state=f"NODE_STATE_{node.state if node.state in _NODE_STATES else 'UNKNOWN'}",
        flags=list(node.flags),
        reason=node.reason,
        kube_node=kube_node,
    )


def node_from_proto(msg: slurm_pb2.SlurmNode) -> tuple[Node, str]:
    """The node and the Kubernetes Node hosting its slurmd Pod ("" when unknown)."""
    state = slurm_pb2.NodeState.Name(msg.state).removeprefix("NODE_STATE_")
    return Node(name=msg.name, state=state, flags=tuple(msg.flags), reason=msg.reason), msg.kube_node


def _job_state(state: str) -> str:
    name = f"JOB_STATE_{state}"
    return name if name in slurm_pb2.JobState.DESCRIPTOR.values_by_name else "JOB_STATE_UNSPECIFIED"


def changes_of(msg: syncer_pb2.WatchSlurmResponse) -> Sequence[syncer_pb2.SlurmChange]:
    """A WatchSlurm message's changes, in either shape: a syncer older than batching ignores the
    request's `batched` and sends one change a message in the deprecated fields."""
    if msg.changes:
        return msg.changes
    if msg.HasField("job"):
        return (syncer_pb2.SlurmChange(job=msg.job, trace_context=msg.trace_context),)
    if msg.HasField("node"):
        return (syncer_pb2.SlurmChange(node=msg.node, trace_context=msg.trace_context),)
    return ()


def unbatched(change: syncer_pb2.SlurmChange) -> syncer_pb2.WatchSlurmResponse:
    """A change as a message of its own, for a client that did not ask for `batched`."""
    if change.HasField("job"):
        return syncer_pb2.WatchSlurmResponse(job=change.job, trace_context=change.trace_context)
    return syncer_pb2.WatchSlurmResponse(node=change.node, trace_context=change.trace_context)
