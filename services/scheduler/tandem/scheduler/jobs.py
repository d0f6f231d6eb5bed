"""The scheduler's view of Slurm jobs, kept current by the syncer's WatchSlurm stream."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import grpc

from tandem import placeholder
from tandem.v1 import slurm_pb2, syncer_pb2, syncer_pb2_grpc

log = logging.getLogger(__name__)

FINISHED = frozenset(
    {
        slurm_pb2.JOB_STATE_COMPLETED,
        slurm_pb2.JOB_STATE_CANCELLED,
        slurm_pb2.JOB_STATE_FAILED,
        slurm_pb2.JOB_STATE_TIMEOUT,
        slurm_pb2.JOB_STATE_NODE_FAIL,
        slurm_pb2.JOB_STATE_PREEMPTED,
        slurm_pb2.JOB_STATE_BOOT_FAIL,
        slurm_pb2.JOB_STATE_DEADLINE,
        slurm_pb2.JOB_STATE_OUT_OF_MEMORY,
        slurm_pb2.JOB_STATE_GONE,
    }
)


def is_finished(job: Any) -> bool:
    return job.state in FINISHED


def state_name(job: Any) -> str:
    return str(slurm_pb2.JobState.Name(job.state)).removeprefix("JOB_STATE_")


class JobTracker:
    def __init__(
        self,
        scheduler_name: str,
        syncer: syncer_pb2_grpc.SyncerServiceStub,
        on_change: Callable[[placeholder.PodRef, Any], None],
    ) -> None:
        self.scheduler_name = scheduler_name
        self.syncer = syncer
        self.on_change = on_change
        self._jobs: dict[int, Any] = {}
        self._by_uid: defaultdict[str, set[int]] = defaultdict(set)
        # By namespace/name, any uid: what a deleted Pod's key still finds.
        self._by_key: defaultdict[str, set[int]] = defaultdict(set)
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._gone_at: dict[int, float] = {}
        # When the stream told us each job's script started (to measure our own share of latency).
        self.started_at: dict[int, float] = {}
        # The trace context of the call that told the syncer a job's script started (the bind's
        # parent span).
        self.trace_context: dict[int, dict[str, str]] = {}
        self.connected = False

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, job_id: int) -> Any | None:
        with self._lock:
            return self._jobs.get(job_id)

    def for_pod(self, uid: str) -> list[Any]:
        with self._lock:
            return [self._jobs[j] for j in sorted(self._by_uid.get(uid, ())) if j in self._jobs]

    def for_pod_key(self, key: str) -> list[Any]:
        """The jobs of every Pod that had this namespace/name (a deleted Pod has no uid to ask by)."""
        with self._lock:
            return [self._jobs[j] for j in sorted(self._by_key.get(key, ())) if j in self._jobs]

    def announce(self, job_id: int, name: str) -> None:
        """Tell the syncer about a job we just submitted (best effort: it can also ask Slurm)."""
        try:
            self.syncer.PlaceholderSubmitted(
                syncer_pb2.PlaceholderSubmittedRequest(job_id=job_id, job_name=name), timeout=2
            )
        except grpc.RpcError as e:
            log.warning("could not announce job to the syncer", extra={"job": job_id, "error": str(e.code())})

    def run(self, stop: threading.Event) -> None:
        backoff = 0.5
        while not stop.is_set():
            try:
                # A fresh snapshot: every job submitted before this call is in it, so a restarted
                # scheduler finds the jobs its previous life submitted.
                in_snapshot: set[int] | None = set()
                for msg in self.syncer.WatchSlurm(
                    syncer_pb2.WatchSlurmRequest(fresh=True), wait_for_ready=True
                ):
                    self.connected = True
                    backoff = 0.5
                    if msg.HasField("job"):
                        if in_snapshot is not None:
                            in_snapshot.add(msg.job.job_id)
                        self._apply(msg.job, dict(msg.trace_context))
                    if msg.snapshot_done:
                        if in_snapshot is not None:
                            self._forget_missing(in_snapshot)
                            in_snapshot = None
                        self._synced.set()
                        log.info("slurm snapshot received", extra={"jobs": len(self._jobs)})
                    if stop.is_set():
                        return
            except grpc.RpcError as e:
                self.connected = False
                log.warning("syncer stream broken; reconnecting", extra={"error": str(e.code())})
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _apply(self, job: Any, trace_context: dict[str, str] | None = None) -> None:
        if job.name and placeholder.scheduler_of(job.name) != self.scheduler_name:
            return  # another scheduler's job, or no placeholder at all
        pod = placeholder.parse_job_name(job.name)
        with self._lock:
            old = self._jobs.get(job.job_id)
            if pod is None and old is not None:
                # A pushed start may carry no name; keep the one we know.
                pod = placeholder.parse_job_name(old.name)
                if pod is not None:
                    job.name = old.name
            if job.script_started and (old is None or not old.script_started):
                self.started_at[job.job_id] = time.monotonic()
                if trace_context:
                    self.trace_context[job.job_id] = trace_context
            self._jobs[job.job_id] = job
            if pod is not None:
                self._by_uid[pod.uid].add(job.job_id)
                self._by_key[pod.key].add(job.job_id)
            if job.state == slurm_pb2.JOB_STATE_GONE:
                # A tombstone, so "gone" is not mistaken for "submitted, not seen yet".
                self._gone_at[job.job_id] = time.monotonic()
                self._prune_gone()
        if pod is not None:
            self.on_change(pod, job)

    def _forget_missing(self, in_snapshot: set[int]) -> None:
        """After a reconnect: a job we knew that the fresh snapshot lacks ended while the stream
        was down (and Slurm already purged it); without a tombstone its Pod would stay forever."""
        with self._lock:
            missing = [
                job
                for job_id, job in self._jobs.items()
                if job_id not in in_snapshot and job.state != slurm_pb2.JOB_STATE_GONE
            ]
        for job in missing:
            gone = slurm_pb2.SlurmJob()
            gone.CopyFrom(job)
            gone.state = slurm_pb2.JOB_STATE_GONE
            log.info("job vanished while the syncer stream was down", extra={"job": job.job_id})
            self._apply(gone)

    def _prune_gone(self, keep_seconds: float = 600.0) -> None:
        cutoff = time.monotonic() - keep_seconds
        for job_id, at in list(self._gone_at.items()):
            if at < cutoff:
                del self._gone_at[job_id]
                self.started_at.pop(job_id, None)
                self.trace_context.pop(job_id, None)
                job = self._jobs.pop(job_id, None)
                pod = placeholder.parse_job_name(job.name) if job is not None else None
                if pod is not None:
                    for index, key in ((self._by_uid, pod.uid), (self._by_key, pod.key)):
                        index[key].discard(job_id)
                        if not index[key]:
                            del index[key]
