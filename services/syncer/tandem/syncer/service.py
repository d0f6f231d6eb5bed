"""The syncer's gRPC API (proto/tandem/v1/syncer.proto)."""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Iterator
from typing import Any

import grpc

from tandem import placeholder
from tandem.kube import KubeClient, KubeError, pod_path
from tandem.slurm.rest import SlurmApiError, SlurmRestClient
from tandem.syncer import convert
from tandem.syncer.locks import LockError, LockTimeout, NodeLocker
from tandem.syncer.mirror import JobStatus, SlurmMirror
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger(__name__)


class SyncerServicer(syncer_pb2_grpc.SyncerServiceServicer):  # type: ignore[misc]
    def __init__(
        self,
        mirror: SlurmMirror,
        locker: NodeLocker,
        slurm: SlurmRestClient,
        kube: KubeClient,
        terminating_timeout: float,
    ) -> None:
        self.mirror = mirror
        self.locker = locker
        self.slurm = slurm
        self.kube = kube
        self.terminating_timeout = terminating_timeout
        # False on a standby replica: it answers UNAVAILABLE until it leads.
        self.active = False

    def AcquireNodeLock(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.slurm_node and request.job_id, "slurm_node and job_id are required")
        strict = request.strict or self._is_placeholder(request.job_id)
        try:
            view = self.locker.acquire(request.slurm_node, request.job_id, strict)
        except LockTimeout as e:
            self._drain_blocked(request.slurm_node, request.job_id, e)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except LockError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except KubeError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"Kubernetes API: {e}")
        return syncer_pb2.AcquireNodeLockResponse(lock=convert.lock(view))

    def _drain_blocked(self, slurm_node: str, job_id: int, e: LockTimeout) -> None:
        """The prolog fails and Slurm drains the node as "Prolog error"; drained first with the
        Pods' names (and their PodDisruptionBudgets), the reason says what to fix. Slurm keeps
        the first reason."""
        blockers = ", ".join(str(b) for b in e.blockers)
        reason = f"k8s: job {job_id} could not lock {e.kube_node}: {blockers} did not leave"
        try:
            self.slurm.drain_node(slurm_node, reason)
        except SlurmApiError as err:
            log.warning(
                "cannot drain a node whose lock timed out", extra={"node": slurm_node, "error": str(err)}
            )
        else:
            log.warning(
                "node drained: lock timed out", extra={"node": slurm_node, "job": job_id, "reason": reason}
            )

    def ReleaseNodeLock(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.slurm_node and request.job_id, "slurm_node and job_id are required")
        try:
            view = self.locker.release(request.slurm_node, request.job_id)
        except LockError as e:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except KubeError as e:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"Kubernetes API: {e}")
        return syncer_pb2.ReleaseNodeLockResponse(lock=convert.lock(view))

    def GetNodeLock(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.slurm_node, "slurm_node is required")
        try:
            view = self.locker.get(request.slurm_node)
        except LockError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        return syncer_pb2.GetNodeLockResponse(lock=convert.lock(view))

    def ListNodeLocks(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        return syncer_pb2.ListNodeLocksResponse(locks=[convert.lock(v) for v in self.locker.list()])

    def JobStarted(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.job_id, "job_id is required")
        status = self.mirror.job_started(request.job_id, request.slurm_node)
        return syncer_pb2.JobStartedResponse(job=convert.job(status) if status else None)

    def JobTerminating(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.job_id, "job_id is required")
        status = self.mirror.job_terminating(request.job_id, request.slurm_node)
        pod = placeholder.parse_job_name(status.job.name) if status else None
        if pod is None:
            return syncer_pb2.JobTerminatingResponse(pod_gone=True)
        deadline = time.monotonic() + min(self.terminating_timeout, _remaining(context))
        while time.monotonic() < deadline:
            if self._pod_gone(pod):
                return syncer_pb2.JobTerminatingResponse(pod_gone=True)
            time.sleep(0.2)
        return syncer_pb2.JobTerminatingResponse(pod_gone=self._pod_gone(pod))

    def WatchSlurm(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._require_active(context)
        if request.fresh:
            try:
                self.mirror.poll_once()
            except SlurmApiError as e:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot read Slurm for a fresh snapshot: {e}")
        snapshot, sub = self.mirror.subscribe()
        context.add_callback(sub.close)
        try:
            for change in snapshot:
                yield _change(change)
            yield syncer_pb2.WatchSlurmResponse(snapshot_done=True)
            while context.is_active():
                try:
                    item = sub.queue.get(timeout=1.0)
                except queue.Empty:
                    continue
                if item is None:
                    return
                change, caused_by = item
                yield _change(change, caused_by)
        finally:
            sub.close()

    def DrainNode(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(context, request.slurm_node and request.reason, "slurm_node and reason are required")
        try:
            self.slurm.drain_node(request.slurm_node, request.reason)
        except SlurmApiError as e:
            code = grpc.StatusCode.UNAVAILABLE if e.status in (0, 502, 503, 504) else grpc.StatusCode.INTERNAL
            context.abort(code, f"cannot drain {request.slurm_node}: slurmrestd said {e}")
        return syncer_pb2.DrainNodeResponse()

    def PlaceholderSubmitted(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._require_active(context)
        _require(
            context,
            request.job_id and placeholder.parse_job_name(request.job_name),
            "job_id and a placeholder job_name are required",
        )
        self.mirror.job_submitted(request.job_id, request.job_name)
        return syncer_pb2.PlaceholderSubmittedResponse()

    def _require_active(self, context: grpc.ServicerContext) -> None:
        if not self.active:
            context.abort(grpc.StatusCode.UNAVAILABLE, "this syncer is a standby; the leader serves")

    def _is_placeholder(self, job_id: int) -> bool:
        status = self.mirror.job(job_id)
        if status is None or not status.job.name:
            try:
                status = self.mirror.refresh_job(job_id)
            except SlurmApiError as e:
                log.warning("cannot look up job for its lock", extra={"job": job_id, "error": str(e)})
        return status is not None and placeholder.parse_job_name(status.job.name) is not None

    def _pod_gone(self, pod: placeholder.PodRef) -> bool:
        """Deleted, replaced by another Pod of that name, or finished (no container runs)."""
        try:
            current = self.kube.get(pod_path(pod.namespace, pod.name))
        except KubeError as e:
            return e.not_found
        if current["metadata"]["uid"] != pod.uid:
            return True
        return (current.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _change(change: JobStatus | Any, caused_by: dict[str, str] | None = None) -> Any:
    if isinstance(change, JobStatus):
        return syncer_pb2.WatchSlurmResponse(job=convert.job(change), trace_context=caused_by)
    return syncer_pb2.WatchSlurmResponse(node=convert.node(change), trace_context=caused_by)


def _require(context: grpc.ServicerContext, ok: object, message: str) -> None:
    if not ok:
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)


def _remaining(context: grpc.ServicerContext) -> float:
    left = context.time_remaining()
    return float(left) if left is not None else 3600.0
