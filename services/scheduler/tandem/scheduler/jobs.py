"""The scheduler's view of Slurm, kept current by the syncer's WatchSlurm stream: this
scheduler's placeholder jobs, and which Kubernetes Node hosts each Slurm node (the syncer owns that
mapping and publishes it; the scheduler binds from it). Each message is a batch (what one poll of
Slurm or one call changed): applied under one hold of the lock, then told to the controller."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

import grpc

from tandem import placeholder
from tandem.slurm.models import JobStatus, Node
from tandem.slurm.wire import changes_of, job_from_proto, node_from_proto
from tandem.v1 import syncer_pb2

log = logging.getLogger(__name__)

# How long a tombstone (a job Slurm no longer knows) is kept, so "gone" is not mistaken for
# "submitted, not seen yet" by a reconcile that runs late.
TOMBSTONE_SECONDS = 600.0


class SyncerClient(Protocol):
    """The part of the syncer's gRPC stub the tracker uses."""

    def WatchSlurm(
        self, request: syncer_pb2.WatchSlurmRequest, wait_for_ready: bool
    ) -> Iterator[syncer_pb2.WatchSlurmResponse]: ...

    def PlaceholderSubmitted(
        self, request: syncer_pb2.PlaceholderSubmittedRequest, timeout: float
    ) -> syncer_pb2.PlaceholderSubmittedResponse: ...


class JobTracker:
    def __init__(
        self,
        scheduler_name: str,
        syncer: SyncerClient,
        on_change: Callable[[placeholder.PodRef, JobStatus], None] = lambda pod, job: None,
        on_node_moved: Callable[[str], None] | None = None,
    ) -> None:
        self.scheduler_name = scheduler_name
        self.syncer = syncer
        self.on_change = on_change
        self.on_node_moved = on_node_moved
        self._jobs: dict[int, JobStatus] = {}
        self._by_uid: defaultdict[str, set[int]] = defaultdict(set)
        # By namespace/name, any uid: what a deleted Pod's key still finds.
        self._by_key: defaultdict[str, set[int]] = defaultdict(set)
        # By Slurm node: the jobs a moved slurmd concerns.
        self._by_node: defaultdict[str, set[int]] = defaultdict(set)
        # Slurm node -> the Kubernetes Node hosting its slurmd Pod, as the syncer publishes it.
        self._kube_nodes: dict[str, str] = {}
        self._kube_nodes_view: Mapping[str, str] | None = None
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._gone_at: dict[int, float] = {}
        # When the stream told us each job's script started (to measure our own share of latency).
        self.started_at: dict[int, float] = {}
        # When the stream first showed each job in its current phase (tandem.scheduler.jobs.phase).
        self._phase_since: dict[int, float] = {}
        # The trace context of the call that told the syncer a job's script started (the bind's
        # parent span).
        self.trace_context: dict[int, dict[str, str]] = {}
        self.connected = False
        # Why the stream is down ("" while it flows): what readiness quotes.
        self.trouble = ""

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, job_id: int) -> JobStatus | None:
        with self._lock:
            return self._jobs.get(job_id)

    def for_pod(self, uid: str) -> list[JobStatus]:
        with self._lock:
            return [self._jobs[j] for j in sorted(self._by_uid.get(uid, ())) if j in self._jobs]

    def for_pod_key(self, key: str) -> list[JobStatus]:
        """The jobs of every Pod that had this namespace/name (a deleted Pod has no uid to ask by)."""
        with self._lock:
            return [self._jobs[j] for j in sorted(self._by_key.get(key, ())) if j in self._jobs]

    def on_node(self, slurm_node: str) -> list[JobStatus]:
        """The jobs not ended that hold this Slurm node."""
        with self._lock:
            found = (self._jobs.get(j) for j in sorted(self._by_node.get(slurm_node, ())))
            return [s for s in found if s is not None and not s.ended]

    def kube_node(self, slurm_node: str) -> str | None:
        with self._lock:
            return self._kube_nodes.get(slurm_node) or None

    def kube_nodes(self) -> Mapping[str, str]:
        """Every published Slurm node -> the Node hosting it ("" none yet): read-only, copied once
        per change of the mapping and shared until the next (a fit reads it once per Pod)."""
        with self._lock:
            if self._kube_nodes_view is None:
                self._kube_nodes_view = MappingProxyType(dict(self._kube_nodes))
            return self._kube_nodes_view

    def in_phase_for(self, job_id: int) -> float:
        """Seconds since the stream first showed the job in its current phase (pending,
        allocated with its prologs running, ...); infinite for a job it has not shown."""
        with self._lock:
            since = self._phase_since.get(job_id)
        return float("inf") if since is None else max(0.0, time.monotonic() - since)

    def slurm_node_count(self) -> int:
        """How many Slurm nodes the syncer has published (0 before its snapshot)."""
        with self._lock:
            return len(self._kube_nodes)

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
                # scheduler finds the jobs its previous life submitted. Only this scheduler's jobs.
                in_snapshot: set[int] | None = set()
                request = syncer_pb2.WatchSlurmRequest(
                    fresh=True, scheduler_name=self.scheduler_name, batched=True
                )
                for msg in self.syncer.WatchSlurm(request, wait_for_ready=True):
                    self.connected = True
                    self.trouble = ""
                    backoff = 0.5
                    changes = changes_of(msg)
                    if in_snapshot is not None:
                        in_snapshot.update(c.job.job_id for c in changes if c.HasField("job"))
                    self._apply_changes(changes)
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
                details = e.details() if hasattr(e, "details") else ""  # an RpcError that is no Call
                self.trouble = f"{e.code().name}: {details}" if details else e.code().name
                log.warning("syncer stream broken; reconnecting", extra={"error": str(e.code())})
            stop.wait(backoff)  # a stop ends the wait: a shutdown never sits out a backoff
            backoff = min(backoff * 2, 5.0)

    def _apply_changes(self, changes: Sequence[syncer_pb2.SlurmChange]) -> None:
        jobs = [(job_from_proto(c.job), dict(c.trace_context)) for c in changes if c.HasField("job")]
        nodes = [node_from_proto(c.node) for c in changes if c.HasField("node")]
        self._apply_batch(jobs, nodes)

    def _apply_batch(
        self,
        jobs: Sequence[tuple[JobStatus, dict[str, str]]],
        nodes: Sequence[tuple[Node, str]] = (),
    ) -> None:
        """A batch of changes: every one recorded under one hold of the lock, then each changed
        job and each moved node told, outside it (the callbacks take the controller's locks, and
        find the whole batch recorded)."""
        if not jobs and not nodes:
            return
        with self._lock:
            changed = [c for status, trace in jobs if (c := self._record(status, trace)) is not None]
            moved = [node.name for node, kube_node in nodes if self._record_node(node, kube_node)]
            if any(status.gone for status, _ in jobs):
                self._prune_gone()
        for pod, status in changed:
            self.on_change(pod, status)
        if self.on_node_moved is not None:
            for name in moved:
                self.on_node_moved(name)

    def _record_node(self, node: Node, kube_node: str) -> bool:
        """Whether a Pod waiting to bind on the node should look again. Lock held."""
        before = self._kube_nodes.get(node.name)
        if before != kube_node:
            self._kube_nodes[node.name] = kube_node
            self._kube_nodes_view = None
        # Moved, or known at last: a Pod waiting to bind there looks again now (in the first
        # snapshot every node is new, and the runner looks at every Pod once it starts anyway).
        known_at_last = before is None and bool(kube_node) and self._synced.is_set()
        moved = before is not None and before != kube_node
        return moved or known_at_last

    def _record(
        self, status: JobStatus, trace_context: dict[str, str]
    ) -> tuple[placeholder.PodRef, JobStatus] | None:
        """Record a job; its Pod and the job as recorded, to tell the controller (None: not a Pod's
        job of this scheduler). Lock held."""
        job = status.job
        if (job.name or job.admin_comment) and placeholder.scheduler_of_job(job) != self.scheduler_name:
            return None  # another scheduler's job, or no placeholder at all (whatever its name)
        pod = placeholder.pod_of(job)
        old = self._jobs.get(job.job_id)
        if old is None and job.refused_at_submit:
            # Taken for the Pod's job, it "ended before the Pod was bound" and the Pod was deleted
            # for a refusal the scheduler retries (a CI run, 2026-12-04).
            return None
        if pod is None and old is not None:
            # A pushed start may carry no name; keep the one we know.
            pod = placeholder.pod_of(old.job)
            if pod is not None:
                status = replace(
                    status, job=replace(job, name=old.job.name, admin_comment=old.job.admin_comment)
                )
        if old is None or phase(old) != phase(status):
            self._phase_since[job.job_id] = time.monotonic()
        if status.started and (old is None or not old.started):
            self.started_at[job.job_id] = time.monotonic()
            if trace_context:
                self.trace_context[job.job_id] = trace_context
        self._index_nodes(job.job_id, old.job.nodes if old is not None else (), status.job.nodes)
        self._jobs[job.job_id] = status
        if status.gone:
            self._gone_at[job.job_id] = time.monotonic()
        if pod is None:
            return None
        self._by_uid[pod.uid].add(job.job_id)
        self._by_key[pod.key].add(job.job_id)
        return pod, status

    def _index_nodes(self, job_id: int, before: Sequence[str], now: Sequence[str]) -> None:
        """The job filed under the Slurm nodes it holds now. Lock held."""
        for node in set(before) - set(now):
            self._unfile(self._by_node, node, job_id)
        for node in now:
            self._by_node[node].add(job_id)

    @staticmethod
    def _unfile(index: defaultdict[str, set[int]], key: str, job_id: int) -> None:
        index[key].discard(job_id)
        if not index[key]:
            del index[key]

    def _forget_missing(self, in_snapshot: set[int]) -> None:
        """After a reconnect: a job we knew that the fresh snapshot lacks ended while the stream
        was down (and Slurm already purged it); without a tombstone its Pod would stay forever."""
        with self._lock:
            missing = [s for job_id, s in self._jobs.items() if job_id not in in_snapshot and not s.gone]
        for status in missing:
            log.info("job vanished while the syncer stream was down", extra={"job": status.job_id})
        self._apply_batch([(replace(status, gone=True), {}) for status in missing])

    def _prune_gone(self) -> None:
        cutoff = time.monotonic() - TOMBSTONE_SECONDS
        for job_id, at in list(self._gone_at.items()):
            if at < cutoff:
                del self._gone_at[job_id]
                self.started_at.pop(job_id, None)
                self._phase_since.pop(job_id, None)
                self.trace_context.pop(job_id, None)
                status = self._jobs.pop(job_id, None)
                for node in status.job.nodes if status is not None else ():
                    self._unfile(self._by_node, node, job_id)
                pod = placeholder.pod_of(status.job) if status is not None else None
                if pod is not None:
                    self._unfile(self._by_uid, pod.uid, job_id)
                    self._unfile(self._by_key, pod.key, job_id)


def phase(status: JobStatus) -> str:
    """Which step of a placeholder's life the job is at, as the Pod would show it: how long a job
    has been so decides when a passing state is worth a write (tandem.scheduler.decide)."""
    if status.ended:
        return "ended"
    if status.pending:
        return "pending"
    if status.running and not status.started:
        return "allocated"
    return "started" if status.started else status.state_name.lower()
