"""The syncer's gRPC API (proto/tandem/v1/syncer.proto), served by grpc.aio (tandem.aioserving).

The calls that wait (a prolog's lock, an epilog's unlock, a placeholder's end) and the WatchSlurm
stream are coroutines: while they wait they hold no thread, however many prologs wait at once
(issue 40). What such a call does besides waiting runs in steps on the server's thread pool
(tandem.syncer.steps), as does every other call, a plain method.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, NoReturn, Protocol, TypeVar

import grpc

from tandem import budget, jobtoken, keys, placeholder
from tandem.nodetoken import ReviewUnavailable, TokenReviewer
from tandem.slurm.models import STARTED_MARKER, Job, JobStatus, Node
from tandem.slurm.names import valid_node_name
from tandem.slurm.rest import SlurmApiError
from tandem.slurm.wire import job_to_proto, node_to_proto, unbatched
from tandem.syncer import convert
from tandem.syncer.cluster import ClusterView
from tandem.syncer.lockcalls import LockFailed, NodeLocks
from tandem.syncer.mirror import Batch, SlurmMirror
from tandem.syncer.steps import Steps, run_async
from tandem.transient import unreachable
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger(__name__)
# Node names arrive from the gateway (and any caller with a certificate); one that is a hostlist,
# `ALL` or a path would reach slurmrestd's URLs and Slurm's drains as more than one node.
ONE_NODE_AND_JOB = "slurm_node (one Slurm node's name) and job_id are required"
ONE_NODE = "slurm_node must be one Slurm node's name"
A_PLACEHOLDERS_CALL = (
    "job_id and placeholder (the reference whose credential the caller presented) are required"
)
STANDBY = "this syncer is a standby; the leader serves"


# What JobTerminating keeps of its deadline to drain the nodes its Pods still run on: its
# KillWait deadline (drain_at) is this much before the call's.
DRAIN_ALLOWANCE_SECONDS = 1.5

# At most this much of changes in one WatchSlurm message; a larger batch (a snapshot of thousands of
# jobs) is split. gRPC clients refuse a message over 4 MiB unless told otherwise.
MESSAGE_BYTES = 1 << 20
# What a change adds to a message besides itself: its field's tag and length.
CHANGE_FRAMING_BYTES = 6
# A batch of more changes than this is made into messages off the event loop (a poll that saw
# thousands of jobs change); a smaller one, most of them, on it.
CONVERT_ON_LOOP = 64

T = TypeVar("T")


class CallContext(Protocol):
    """What a call's checks read of its gRPC context, on whichever thread they run."""

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn: ...

    def time_remaining(self) -> float | None: ...


class Refused(Exception):
    """A call refused in a step on a worker thread: its coroutine ends it with this status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class StepContext:
    """The call's context as its steps see it on a worker thread. grpc.aio's `abort` is a coroutine
    that a thread cannot await (called, it would do nothing): here it raises `Refused`."""

    def __init__(self, context: Any) -> None:
        self._context = context

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Refused(code, details)

    def time_remaining(self) -> float | None:
        left = self._context.time_remaining()
        return float(left) if left is not None else None


class SlurmWriter(Protocol):
    """What the syncer's API changes in Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def drain_node(self, node: str, reason: str) -> None: ...

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
        # Tokens of version 1, bound to no job (tandem.jobtoken): only while an upgrade from a
        # Tandem that made them still has such jobs running.
        self.accept_unbound_tokens = accept_unbound_tokens
        # The job key ring (tandem.jobtoken): a placeholder's credential is checked here only (the
        # gateway screens its form and holds no key), so taking the gateway mints no token.
        self.job_keys = job_keys
        # A node's credential (tandem.nodetoken) is reviewed here, not taken from the gateway's
        # word: the gateway cannot check its signature. None refuses every lock and unlock.
        self.node_tokens = node_tokens
        self.mirror = mirror
        self.locks = locks
        self.slurm = slurm
        self.cluster = cluster
        self.terminating_timeout = terminating_timeout
        # False on a standby replica: it answers UNAVAILABLE until it leads.
        self.active = False

    async def AcquireNodeLock(
        self, request: syncer_pb2.AcquireNodeLockRequest, context: Any
    ) -> syncer_pb2.AcquireNodeLockResponse:
        return await self._waiting(self._acquire(request, StepContext(context)), context)

    def _acquire(
        self, request: syncer_pb2.AcquireNodeLockRequest, context: CallContext
    ) -> Steps[syncer_pb2.AcquireNodeLockResponse]:
        self._require_active(context)
        _require(context, valid_node_name(request.slurm_node) and request.job_id, ONE_NODE_AND_JOB)
        self._verified_node(context, request.slurm_node, request.node_token)
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

    async def ReleaseNodeLock(
        self, request: syncer_pb2.ReleaseNodeLockRequest, context: Any
    ) -> syncer_pb2.ReleaseNodeLockResponse:
        return await self._waiting(self._release(request, StepContext(context)), context)

    def _release(
        self, request: syncer_pb2.ReleaseNodeLockRequest, context: CallContext
    ) -> Steps[syncer_pb2.ReleaseNodeLockResponse]:
        self._require_active(context)
        _require(context, valid_node_name(request.slurm_node) and request.job_id, ONE_NODE_AND_JOB)
        self._verified_node(context, request.slurm_node, request.node_token)
        try:
            view = yield from self.locks.release_steps(
                request.slurm_node, request.job_id, timeout=_remaining(context) - 1.0
            )
        except LockFailed as e:
            code = grpc.StatusCode.UNAVAILABLE if e.unavailable else grpc.StatusCode.FAILED_PRECONDITION
            context.abort(code, str(e))
        return syncer_pb2.ReleaseNodeLockResponse(lock=convert.lock(view))

    async def _waiting(self, steps: Steps[T], context: Any) -> T:
        """Run a waiting call's steps (tandem.syncer.steps); a refusal in one ends the call so."""
        try:
            return await run_async(steps, self.cluster.wait_async)
        except Refused as e:
            await context.abort(e.code, e.details)
            raise AssertionError("context.abort returned") from e

    def GetNodeLock(
        self, request: syncer_pb2.GetNodeLockRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.GetNodeLockResponse:
        self._require_active(context)
        _require(context, valid_node_name(request.slurm_node), "slurm_node must name one Slurm node")
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
        with self.mirror.batch():  # the job as the check read it and the push: one message
            verified = self._verified_placeholder(
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

    async def JobTerminating(
        self, request: syncer_pb2.JobTerminatingRequest, context: Any
    ) -> syncer_pb2.JobTerminatingResponse:
        return await self._waiting(self._terminating(request, StepContext(context)), context)

    def _terminating(
        self, request: syncer_pb2.JobTerminatingRequest, context: CallContext
    ) -> Steps[syncer_pb2.JobTerminatingResponse]:
        self._require_active(context)
        # As in JobStarted. A batch is its thread's (SlurmMirror.batch): it is sent within this step,
        # before the wait below, after which the steps may go on on another of the pool's threads.
        with self.mirror.batch():
            self._verified_placeholder(
                context, request.job_id, request.placeholder, request.slurm_node, request.job_token
            )
            status = self.mirror.job_terminating(request.job_id, request.slurm_node)
        ref = placeholder.pod_of(status.job) if status else None
        if status is None or ref is None:
            return syncer_pb2.JobTerminatingResponse(pod_gone=True)

        # The node sync drains, at drain_at (just before KillWait), each node where a Pod of the
        # job still runs; the call waits for the Pods to go or for those drains, on the caches.
        remaining = _remaining(context)
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
        snapshot, sub = self.mirror.subscribe(request.scheduler_name)
        try:
            # Thousands of jobs: made into messages off the loop, which serves every other call.
            snapshot_batch: Batch = [(c, {}) for c in snapshot]
            for message in await asyncio.to_thread(
                self._messages, snapshot_batch, request.batched, snapshot_done=True
            ):
                yield message
            while (batch := await sub.take_async()) is not None:
                if len(batch) > CONVERT_ON_LOOP:
                    messages = await asyncio.to_thread(self._messages, batch, request.batched)
                else:
                    messages = self._messages(batch, request.batched)
                for message in messages:
                    yield message
            if sub.overflowed:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"fell more than {sub.backlog} changes behind; reconnect for a fresh snapshot",
                )
        finally:
            sub.close()

    def _messages(
        self, batch: Batch, batched: bool, snapshot_done: bool = False
    ) -> list[syncer_pb2.WatchSlurmResponse]:
        """A batch as messages: one (a few when it is larger than MESSAGE_BYTES), the last marked
        `snapshot_done` for the snapshot; to a client that did not ask for batches, one a change.
        Made whole, on whichever thread calls (the stream sends them from the event loop)."""
        changes = [self._change(change, caused_by) for change, caused_by in batch]
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

    def DrainNode(
        self, request: syncer_pb2.DrainNodeRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.DrainNodeResponse:
        self._require_active(context)
        _require(context, valid_node_name(request.slurm_node), ONE_NODE)
        # Only a placeholder's drain of its own node at KillWait, with words the syncer writes.
        status = self._verified_placeholder(
            context, request.job_id, request.placeholder, request.slurm_node, request.job_token
        )
        ref = placeholder.pod_of(status.job)
        assert ref is not None  # verified
        # Slurm's word, read just now, not the script's: a running job's token drains nothing.
        if not status.job.finished and "COMPLETING" not in status.job.flags:
            _abort(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"not draining {request.slurm_node}: Slurm job {status.job_id} has not ended "
                f"({status.state_name}); a placeholder drains its node only at KillWait",
            )
        if self.locks.drained_by_others(request.slurm_node):
            log.info(
                "not draining: the node is drained by someone else, whose reason stays",
                extra={"job": status.job_id, "slurm_node": request.slurm_node},
            )
            return syncer_pb2.DrainNodeResponse(drained=True)
        # The same rule as the node sync's KillWait drain: only a Pod that runs on this node keeps it.
        if not self.locks.occupied(status, ref, request.slurm_node):
            log.info(
                "not draining: no Pod of the job runs on the node",
                extra={"job": status.job_id, "slurm_node": request.slurm_node},
            )
            return syncer_pb2.DrainNodeResponse(drained=False)
        reason = keys.killwait_drain_reason(ref.namespace, ref.name, status.job_id)
        try:
            self.slurm.drain_node(request.slurm_node, reason)
        except SlurmApiError as e:
            code = grpc.StatusCode.UNAVAILABLE if unreachable(e.status) else grpc.StatusCode.INTERNAL
            context.abort(code, f"cannot drain {request.slurm_node}: slurmrestd said {e}")
        return syncer_pb2.DrainNodeResponse(drained=True)

    def PlaceholderSubmitted(
        self, request: syncer_pb2.PlaceholderSubmittedRequest, context: grpc.ServicerContext
    ) -> syncer_pb2.PlaceholderSubmittedResponse:
        self._require_active(context)
        _require(
            context,
            request.job_id and placeholder.parse_job_name(request.job_name),
            "job_id and a placeholder job_name are required",
        )
        self.mirror.job_submitted(request.job_id, request.job_name)
        return syncer_pb2.PlaceholderSubmittedResponse()

    def _verified_placeholder(
        self, context: CallContext, job_id: int, reference: str, slurm_node: str, job_token: str
    ) -> JobStatus:
        """The job as Slurm has it now, if it is the placeholder whose credential the caller
        presented, that credential is the job's own (under the job key, bound to the binding in
        its AdminComment), the job has not ended, and it is allocated the node the caller speaks
        for; otherwise the call is refused. A push is a hint: what it claims is read again from
        slurmrestd, never taken on its word."""
        _require(context, job_id and placeholder.parse_job_name(reference), A_PLACEHOLDERS_CALL)
        # The token's own mac first, under the ring (the gateway holds no key: it screens the
        # form only): a forgery costs no read of Slurm.
        if not jobtoken.verifies(self.job_keys(), reference, job_token):
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the credential presented is not one of placeholder {reference}: no job key made it",
            )
        if not jobtoken.binding_of(job_token) and not self.accept_unbound_tokens:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                "an unbound job token (of a job submitted before credentials were bound to their job)"
                " is refused unless the syncer runs with --accept-unbound-job-tokens",
            )
        try:
            status = self.mirror.refresh_job(job_id)
        except SlurmApiError as e:
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot read job {job_id} from Slurm: {e}")
        if status is None or placeholder.reference_of(status.job.admin_comment) != reference:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} is not the placeholder {reference}: "
                "a placeholder's credential speaks for its own job only",
            )
        if placeholder.is_revoked(status.job.admin_comment):
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id}'s credential was revoked (its AdminComment says token-revoked)",
            )
        if jobtoken.binding_of(job_token) != placeholder.binding_of(status.job.admin_comment):
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the credential presented is not Slurm job {job_id}'s own: a job's token speaks for"
                " the one job it was made for (the binding in its AdminComment), not a later job of"
                " the same placeholder, and not once revoked",
            )
        if status.ended and "COMPLETING" not in status.job.flags:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} has ended ({status.state_name}): its credential ended with it",
            )
        if slurm_node and status.job.nodes and slurm_node not in status.job.nodes:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"Slurm job {job_id} is not allocated {slurm_node}: "
                "a placeholder speaks for its own nodes only",
            )
        return status

    def _verified_node(self, context: CallContext, slurm_node: str, node_token: str) -> None:
        """Refuses the call unless `node_token` is the credential of `slurm_node` itself: a token
        the API server vouches for (TokenReview, audience tandem-hooks), bound to the slurmd Pod
        this syncer sees for that node now (same uid: a deleted Pod's token is refused at once)."""
        if self.node_tokens is None or not node_token:
            _abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"a lock or unlock of {slurm_node} needs that node's own credential: the token of its"
                f" slurmd Pod for the audience {keys.HOOKS_TOKEN_AUDIENCE}",
            )
        try:
            bound = self.node_tokens.bound_pod(node_token)
        except ReviewUnavailable as e:
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"cannot review the node credential: {e}")
        if bound is None:
            _abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "the node credential was refused by the API server's TokenReview (expired, its Pod"
                f" gone, or not for the audience {keys.HOOKS_TOKEN_AUDIENCE})",
            )
        ours = bound.namespace == self.cluster.slurmd_namespace
        pod = self.cluster.slurmd_pod(bound.name) if ours else None
        if pod is None or (pod.get("metadata") or {}).get("uid") != bound.uid:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the node credential is bound to Pod {bound.namespace}/{bound.name}, which is not a"
                f" slurmd Pod of namespace {self.cluster.slurmd_namespace} now: it speaks for no Slurm node",
            )
        if bound.name != slurm_node:
            _abort(
                context,
                grpc.StatusCode.PERMISSION_DENIED,
                f"the node credential speaks for Slurm node {bound.name} (its slurmd Pod), not"
                f" {slurm_node}: a node locks and unlocks itself only",
            )

    def _require_active(self, context: CallContext) -> None:
        if not self.active:
            context.abort(grpc.StatusCode.UNAVAILABLE, STANDBY)

    def _is_placeholder(self, job_id: int) -> bool:
        status = self.mirror.job(job_id)
        if status is None or not status.job.name:
            try:
                status = self.mirror.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot look up job for its lock", extra={"job": job_id, "error": str(e)})
        return status is not None and placeholder.pod_of(status.job) is not None

    def _change(self, change: JobStatus | Node, caused_by: dict[str, str]) -> syncer_pb2.SlurmChange:
        if isinstance(change, JobStatus):
            return syncer_pb2.SlurmChange(job=job_to_proto(change), trace_context=caused_by)
        kube_node = self.cluster.kube_node_of(change.name)
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


def _abort(context: CallContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("context.abort returned")  # it raises; this says so to the type checker


def _require(context: CallContext, ok: object, message: str) -> None:
    if not ok:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


def _remaining(context: CallContext) -> float:
    left = context.time_remaining()
    return float(left) if left is not None else 3600.0
