"""The syncer's gRPC API (proto/tandem/v1/syncer.proto), served by grpc.aio (tandem.serving).

The calls that wait (a prolog's lock, an epilog's unlock, a placeholder's end or its drain) and the WatchSlurm
stream are coroutines: while they wait they hold no thread, however many prologs wait at once
(issue 40). What such a call does besides waiting runs in steps on the server's thread pool
(tandem.syncer.steps), as does every other call, a plain method.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

import grpc

from tandem import budget, placeholder
from tandem.nodetoken import TokenReviewer
from tandem.slurm.models import STARTED_MARKER, Job
from tandem.slurm.names import valid_node_name
from tandem.slurm.rest import SlurmApiError
from tandem.slurm.wire import job_to_proto
from tandem.syncer import convert
from tandem.syncer.broker import Batch
from tandem.syncer.callers import Callers
from tandem.syncer.calls import CallContext, abort, require, time_left, waiting_call
from tandem.syncer.cluster import ClusterView
from tandem.syncer.lockcalls import LockFailed, NodeLocks
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.steps import Steps, WaitAsync
from tandem.syncer.stream import stream_messages
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger(__name__)
# Node names arrive from the gateway (and any caller with a certificate); one that is a hostlist,
# `ALL` or a path would reach slurmrestd's URLs and Slurm's drains as more than one node.
ONE_NODE_AND_JOB = "slurm_node (one Slurm node's name) and job_id are required"
ONE_NODE = "slurm_node must be one Slurm node's name"
STANDBY = "this syncer is a standby; the leader serves"


# What JobTerminating keeps of its deadline to drain the nodes its Pods still run on: its
# KillWait deadline (drain_at) is this much before the call's.
DRAIN_ALLOWANCE_SECONDS = 1.5

# A batch of more changes than this is made into messages off the event loop (a poll that saw
# thousands of jobs change); a smaller one, most of them, on it.
CONVERT_ON_LOOP = 64


class SlurmWriter(Protocol):
    """What the syncer's API changes in Slurm itself (tandem.slurm.rest.SlurmRestClient is one):
    a job's started marker, the call's own record (every node write is the node pass's)."""

    def update_job(self, job_id: int, **fields: str) -> None: ...


class SyncerServicer(syncer_pb2_grpc.SyncerServiceServicer):
    def __init__(
        self,
        mirror: SlurmMirror,
        locks: NodeLocks,
        slurm: SlurmWriter,
        cluster: ClusterView,
        terminating_timeout: float,
        job_keys: Callable[[], list[bytes]] = list,
        node_tokens: TokenReviewer | None = None,
        accept_unbound_tokens: bool = False,
    ) -> None:
        self.callers = Callers(mirror, cluster, job_keys, node_tokens, accept_unbound_tokens)
        self.mirror = mirror
        self.locks = locks
        self.slurm = slurm
        self.cluster = cluster
        self.wait_async: WaitAsync = cluster.waiters.wait_async  # what `waiting_call`s wait with
        self.terminating_timeout = terminating_timeout
        # False on a standby replica: it answers UNAVAILABLE until it leads.
        self.active = False

    @waiting_call
    def AcquireNodeLock(
        self, request: syncer_pb2.AcquireNodeLockRequest, context: CallContext
    ) -> Steps[syncer_pb2.AcquireNodeLockResponse]:
        self._require_active(context)
        require(context, valid_node_name(request.slurm_node) and request.job_id, ONE_NODE_AND_JOB)
        self.callers.node(context, request.slurm_node, request.node_token)
        strict = request.strict or self._is_placeholder(request.job_id)
        # The caller's deadline bounds the wait (tandem.budget): a margin is kept to drain the
        # node and answer.
        timeout = budget.lock_wait(context.time_remaining(), cap=self.locks.cap)
        try:
            view = yield from self.locks.acquire_steps(request.slurm_node, request.job_id, strict, timeout)
        except LockFailed as e:  # a timeout too: the node was drained with the Pods' names
            code = grpc.StatusCode.UNAVAILABLE if e.unavailable else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(e))
        return syncer_pb2.AcquireNodeLockResponse(lock=convert.lock(view))

    @waiting_call
    def ReleaseNodeLock(
        self, request: syncer_pb2.ReleaseNodeLockRequest, context: CallContext
    ) -> Steps[syncer_pb2.ReleaseNodeLockResponse]:
        self._require_active(context)
        require(context, valid_node_name(request.slurm_node) and request.job_id, ONE_NODE_AND_JOB)
        self.callers.node(context, request.slurm_node, request.node_token)
        try:
            view = yield from self.locks.release_steps(
                request.slurm_node, request.job_id, timeout=time_left(context) - 1.0
            )
        except LockFailed as e:
            code = grpc.StatusCode.UNAVAILABLE if e.unavailable else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(e))
        return syncer_pb2.ReleaseNodeLockResponse(lock=convert.lock(view))

    def GetNodeLock(
        self, request: syncer_pb2.GetNodeLockRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.GetNodeLockResponse:
        self._require_active(context)
        require(context, valid_node_name(request.slurm_node), "slurm_node must name one Slurm node")
        try:
            view = self.locks.get(request.slurm_node)
        except LookupError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return syncer_pb2.GetNodeLockResponse(lock=convert.lock(view))

    def ListNodeLocks(
        self, request: syncer_pb2.ListNodeLocksRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.ListNodeLocksResponse:
        self._require_active(context)
        return syncer_pb2.ListNodeLocksResponse(locks=[convert.lock(v) for v in self.locks.list()])

    def JobStarted(
        self, request: syncer_pb2.JobStartedRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.JobStartedResponse:
        self._require_active(context)
        with self.mirror.broker.batch():  # the job as the check read it and the push: one message
            verified = self.callers.placeholder(
                context, request.job_id, request.placeholder, request.slurm_node, request.job_token
            )
            status = self.mirror.job_started(request.job_id, request.slurm_node)
        return syncer_pb2.JobStartedResponse(
            job=job_to_proto(status) if status else None, marked=self._mark_started(verified.job)
        )

    def _mark_started(self, job: Job) -> bool:
        """Append the started marker to the job's Extra field, as read just now from Slurm; whether
        it is there. Once the Pod may bind (the push above), not before: the marker is what a
        restarted syncer reads, the push what binds. Here rather than in the script: its
        `scontrol update` was ~5 ms of CPU a Pod (libslurm, munge), a REST call costs less, and
        the call was checked against the job's own credential."""
        if job.script_started:
            return True
        try:
            self.slurm.update_job(job.job_id, extra=job.extra + STARTED_MARKER)
        except SlurmApiError as e:
            log.warning(
                "cannot mark the job started; its script will", extra={"job": job.job_id, "error": str(e)}
            )
            return False
        return True

    @waiting_call
    def JobTerminating(
        self, request: syncer_pb2.JobTerminatingRequest, context: CallContext
    ) -> Steps[syncer_pb2.JobTerminatingResponse]:
        self._require_active(context)
        # As in JobStarted. A batch is its thread's (SlurmMirror.batch): it is sent within this step,
        # before the wait below, after which the steps may go on on another of the pool's threads.
        with self.mirror.broker.batch():
            verified = self.callers.placeholder(
                context, request.job_id, request.placeholder, request.slurm_node, request.job_token
            )
            status = self.mirror.job_terminating(request.job_id, request.slurm_node)
        self.locks.job_read(verified)
        ref = placeholder.pod_of(status.job) if status else None
        if status is None or ref is None:
            return syncer_pb2.JobTerminatingResponse(pod_gone=True)

        # The node sync drains, at drain_at (just before KillWait), each node where a Pod of the
        # job still runs; the call waits for the Pods to go or for those drains, on the caches.
        remaining = time_left(context)
        drain_in = min(self.terminating_timeout, remaining - DRAIN_ALLOWANCE_SECONDS)
        pod_gone, drained = yield from self.locks.killwait_steps(
            status, ref, request.slurm_node, drain_in, timeout=remaining - 0.5
        )
        return syncer_pb2.JobTerminatingResponse(pod_gone=pod_gone, drained_slurm_nodes=drained)

    async def WatchSlurm(
        self, request: syncer_pb2.WatchSlurmRequest, context: Any
    ) -> AsyncGenerator[syncer_pb2.WatchSlurmResponse, None]:
        """A stream for hours: it waits for changes on the event loop, holding no thread, and ends
        (unsubscribed) as soon as its caller goes away (the coroutine is cancelled)."""
        if not self.active:
            await context.abort(grpc.StatusCode.UNAVAILABLE, STANDBY)
        if request.fresh:
            try:
                await asyncio.to_thread(self.mirror.poll_once)
            except SlurmApiError as e:
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE, f"cannot read Slurm for a fresh snapshot: {e}"
                )
        snapshot, sub = self.mirror.broker.subscribe(request.scheduler_name)
        try:
            # Thousands of jobs: made into messages off the loop, which serves every other call.
            snapshot_batch: Batch = [(c, {}) for c in snapshot]
            for message in await asyncio.to_thread(
                stream_messages, snapshot_batch, self.cluster, request.batched, snapshot_done=True
            ):
                yield message
            while (batch := await sub.take()) is not None:
                if len(batch) > CONVERT_ON_LOOP:
                    messages = await asyncio.to_thread(stream_messages, batch, self.cluster, request.batched)
                else:
                    messages = stream_messages(batch, self.cluster, request.batched)
                for message in messages:
                    yield message
            if sub.overflowed:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"fell more than {sub.backlog} changes behind; reconnect for a fresh snapshot",
                )
        finally:
            sub.close()

    @waiting_call
    def DrainNode(
        self, request: syncer_pb2.DrainNodeRequest, context: CallContext
    ) -> Steps[syncer_pb2.DrainNodeResponse]:
        self._require_active(context)
        require(context, valid_node_name(request.slurm_node), ONE_NODE)
        # Only a placeholder's drain of its own node at KillWait, with words the syncer writes.
        status = self.callers.placeholder(
            context, request.job_id, request.placeholder, request.slurm_node, request.job_token
        )
        ref = placeholder.pod_of(status.job)
        assert ref is not None  # verified
        # Slurm's word, read just now, not the script's: a running job's token drains nothing.
        if not status.job.finished and "COMPLETING" not in status.job.flags:
            abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"not draining {request.slurm_node}: Slurm job {status.job_id} has not ended "
                f"({status.state_name}); a placeholder drains its node only at KillWait",
            )
        try:
            drained = yield from self.locks.drain_steps(
                status, ref, request.slurm_node, timeout=time_left(context) - 0.5
            )
        except LockFailed as e:
            abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot drain {request.slurm_node}: {e}")
        return syncer_pb2.DrainNodeResponse(drained=drained)

    def PlaceholderSubmitted(
        self, request: syncer_pb2.PlaceholderSubmittedRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.PlaceholderSubmittedResponse:
        self._require_active(context)
        require(
            context,
            request.job_id and placeholder.parse_job_name(request.job_name),
            "job_id and a placeholder job_name are required",
        )
        self.mirror.job_submitted(request.job_id, request.job_name)
        return syncer_pb2.PlaceholderSubmittedResponse()

    def _require_active(self, context: CallContext) -> None:
        if not self.active:
            context.abort(grpc.StatusCode.UNAVAILABLE, STANDBY)

    def _is_placeholder(self, job_id: int) -> bool:
        status = self.mirror.state.job(job_id)
        if status is None or not status.job.name:
            try:
                status = self.mirror.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot look up job for its lock", extra={"job": job_id, "error": str(e)})
        return status is not None and placeholder.pod_of(status.job) is not None
