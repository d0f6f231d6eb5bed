"""WatchSlurm's messages: a batch of Slurm's changes (tandem.syncer.broker) as one message, or a
few when it is larger than MESSAGE_BYTES; each Slurm node with the Node hosting it."""

from __future__ import annotations

from collections.abc import Iterator

from tandem.slurm.models import JobStatus, Node
from tandem.slurm.wire import job_to_proto, node_to_proto, unbatched
from tandem.syncer.broker import Batch
from tandem.syncer.cluster import ClusterView
from tandem.v1 import syncer_pb2

# At most this much of changes in one WatchSlurm message; a larger batch (a snapshot of thousands of
# jobs) is split. gRPC clients refuse a message over 4 MiB unless told otherwise.
MESSAGE_BYTES = 1 << 20
# What a change adds to a message besides itself: its field's tag and length.
CHANGE_FRAMING_BYTES = 6


def stream_messages(
    batch: Batch, cluster: ClusterView, batched: bool, snapshot_done: bool = False
) -> list[syncer_pb2.WatchSlurmResponse]:
    """A batch as messages: one (a few when it is larger than MESSAGE_BYTES), the last marked
    `snapshot_done` for the snapshot; to a client that did not ask for batches, one a change.
    Made whole, on whichever thread calls (the stream sends them from the event loop)."""
    changes = [_change(change, caused_by, cluster) for change, caused_by in batch]
    if not batched:
        messages = [unbatched(change) for change in changes]
        if snapshot_done:
            messages.append(syncer_pb2.WatchSlurmResponse(snapshot_done=True))
        return messages
    chunks = list(_chunks(changes, MESSAGE_BYTES))
    if snapshot_done and not chunks:
        chunks = [[]]  # an empty snapshot still ends
    return [
        syncer_pb2.WatchSlurmResponse(changes=chunk, snapshot_done=snapshot_done and i == len(chunks) - 1)
        for i, chunk in enumerate(chunks)
    ]


def _change(
    change: JobStatus | Node, caused_by: dict[str, str], cluster: ClusterView
) -> syncer_pb2.SlurmChange:
    if isinstance(change, JobStatus):
        return syncer_pb2.SlurmChange(job=job_to_proto(change), trace_context=caused_by)
    kube_node = cluster.kube_node_of(change.name)
    return syncer_pb2.SlurmChange(node=node_to_proto(change, kube_node), trace_context=caused_by)


def _chunks(changes: list[syncer_pb2.SlurmChange], limit: int) -> Iterator[list[syncer_pb2.SlurmChange]]:
    """`changes` in order, in runs of at most `limit` bytes on the wire (a larger change alone)."""
    chunk: list[syncer_pb2.SlurmChange] = []
    size = 0
    for change in changes:
        n = change.ByteSize() + CHANGE_FRAMING_BYTES
        if chunk and size + n > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(change)
        size += n
    if chunk:
        yield chunk
