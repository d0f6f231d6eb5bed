"""The scheduler's reconciler: one Pod at a time, level-triggered.

Read the Pod (informer cache) and its job (syncer stream), compute what is missing, do it, and be
safe to run again after a crash at any line:

    invalid Pod                 -> one Warning Event, PodScheduled=False, never a job
    valid, no job               -> submit the placeholder job, record its id on the Pod
    job pending                 -> Slurm's reason in the PodScheduled condition
    job running, script started -> bind to the Node hosting the job's Slurm node
    Pod deleted / finished      -> cancel the job
    job ended before the Pod    -> delete the Pod
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tandem import keys, placeholder, tracing
from tandem.events import EventRecorder
from tandem.kube import JSON, KubeClient, KubeError, pod_path
from tandem.metrics import REGISTRY
from tandem.scheduler import jobspec, validation
from tandem.scheduler.jobs import JobTracker, is_finished, state_name
from tandem.scheduler.podapi import PodApi, condition
from tandem.slurm.dialects import UnsupportedBySlurm
from tandem.slurm.rest import SlurmApiError, SlurmRestClient
from tandem.v1 import scheduler_pb2, slurm_pb2
from tandem.workqueue import WorkQueue

log = logging.getLogger(__name__)

PODS_VALIDATED = REGISTRY.counter(
    "tandem_pods_validated_total",
    "Pods checked before a job is made, by result and failing field",
    ["result", "reason"],
)
JOBS_SUBMITTED = REGISTRY.counter("tandem_jobs_submitted_total", "placeholder job submissions", ["result"])
SUBMIT_SECONDS = REGISTRY.histogram("tandem_submit_seconds", "time to submit a placeholder job")
BIND_SECONDS = REGISTRY.histogram("tandem_bind_seconds", "time from the job's script start to the Pod bound")
CREATE_TO_BOUND_SECONDS = REGISTRY.histogram(
    "tandem_pod_create_to_bound_seconds",
    "time from Pod creation to binding",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)

REASON_INVALID = "ValidationFailed"
REASON_PENDING = "SlurmJobPending"
REASON_SUBMIT_FAILED = "SlurmSubmitFailed"
# Slurm did not answer: retried, unlike the two reasons above.
REASON_SLURM_UNAVAILABLE = "SlurmUnavailable"
TERMINAL_PHASES = ("Succeeded", "Failed")
# slurmrestd unreachable or overloaded: worth another try. Anything else is Slurm's answer.
TRANSIENT_HTTP = (0, 502, 503, 504)


class Controller:
    def __init__(
        self,
        kube: KubeClient,
        slurm: SlurmRestClient,
        jobs: JobTracker,
        events: EventRecorder,
        queue: WorkQueue,
        pods: Any,
        placeholder_cfg: jobspec.PlaceholderConfig,
        kill_wait: float,
        slurmd_namespace: str,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.jobs = jobs
        self.events = events
        self.queue = queue
        self.pods = pods  # the Pod informer
        self.api = PodApi(kube)
        self.placeholder_cfg = placeholder_cfg
        self.kill_wait = kill_wait
        self.slurmd_namespace = slurmd_namespace
        # Jobs this process submitted, by Pod uid: the source of truth until the stream shows them.
        self._submitted: dict[str, int] = {}
        self._submitted_lock = threading.Lock()
        self._kube_nodes: dict[str, str] = {}
        # Jobs already cancelled: their scripts are shutting down; once is enough.
        self._cancelled: set[int] = set()
        self._background = ThreadPoolExecutor(max_workers=4, thread_name_prefix="events")

    # -- entry points ------------------------------------------------------------------------

    def on_pod(self, key: str, old: JSON | None, new: JSON | None) -> None:
        self.queue.add(key)

    def on_job(self, pod: placeholder.PodRef, job: Any) -> None:
        # A Pod to bind or to stop goes ahead of pending-reason updates.
        self.queue.add(pod.key, urgent=bool(job.script_started or job.terminating or is_finished(job)))

    def reconcile(self, key: str) -> None:
        try:
            self._reconcile(key)
        except (KubeError, SlurmApiError) as e:
            log.warning("reconcile failed; retrying", extra={"pod": key, "error": str(e)})
            self.queue.add_after(key, 1.0)
        except Exception:
            log.exception("reconcile crashed; retrying", extra={"pod": key})
            self.queue.add_after(key, 5.0)

    # -- the reconciler --------------------------------------------------------------------------

    def _reconcile(self, key: str) -> None:
        if not (self.pods.synced and self.jobs.synced):
            # Before both first lists arrive, "not in the cache" does not mean "gone": a restarted
            # scheduler would cancel the job of a Pod it has not listed yet.
            self.queue.add_after(key, 0.5)
            return
        pod = self.pods.get(key)
        if pod is None:
            self._cancel_orphans(key)
            return
        meta, spec = pod["metadata"], pod.get("spec") or {}
        job = self._job_of(pod)
        if meta.get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self._cancel(
                job, key, "Pod is being deleted" if meta.get("deletionTimestamp") else "Pod finished"
            )
            return
        if spec.get("nodeName"):
            self._watch_bound(pod, job)
            return
        if _marked_invalid(pod):
            return  # no retry until the Pod is recreated
        result = validation.validate(pod, self.kill_wait)
        for warning in result.warnings:
            self._event(pod, "Warning", "UnknownAnnotation", warning)
        if not result.ok:
            for problem in result.errors:
                PODS_VALIDATED.inc(result="invalid", reason=problem.reason)
            message = result.message()
            self.api.set_unscheduled(pod, REASON_INVALID, message)
            self._event(pod, "Warning", "FailedValidation", message)
            log.info("pod rejected", extra={"pod": key, "reason": message})
            return
        job_id = job.job_id if job is not None else self._recorded_job_id(pod)
        if job_id is None:
            self._submit(pod)
            return
        if meta.get("annotations", {}).get(keys.JOB_ID_ANNOTATION) != str(job_id):
            self.api.record_job(pod, job_id)  # a previous life submitted but crashed before this
        if job is None:
            return  # submitted; the syncer's stream brings the job
        if is_finished(job):
            self._event(
                pod,
                "Warning",
                "SlurmJobEnded",
                f"placeholder job {job.job_id} ended ({state_name(job)}) before the Pod was bound",
            )
            self.api.delete(pod)
            return
        if job.state == slurm_pb2.JOB_STATE_RUNNING and job.script_started and job.nodes:
            self._bind(pod, job)
            return
        if job.state != slurm_pb2.JOB_STATE_PENDING or job.state_reason in ("", "None"):
            return  # allocated (prolog running) or not yet looked at: the next change will tell
        where = f" in partition {job.partition}" if job.partition else ""
        self.api.set_unscheduled(
            pod, REASON_PENDING, f"Slurm job {job.job_id}{where} is pending: {job.state_reason}"
        )

    # -- steps -------------------------------------------------------------------------------

    def _job_of(self, pod: JSON) -> Any | None:
        uid = pod["metadata"]["uid"]
        candidates = self.jobs.for_pod(uid)
        live = [j for j in candidates if not is_finished(j)]
        if live:
            return live[-1]
        recorded = self._recorded_job_id(pod)
        for j in candidates:
            if j.job_id == recorded:
                return j
        return candidates[-1] if candidates else None

    def _recorded_job_id(self, pod: JSON) -> int | None:
        uid = pod["metadata"]["uid"]
        raw = (pod["metadata"].get("annotations") or {}).get(keys.JOB_ID_ANNOTATION, "")
        recorded = int(raw) if raw.isdigit() else None
        with self._submitted_lock:
            submitted = self._submitted.get(uid)
            if submitted is not None and submitted == recorded:
                # The cached Pod carries it now; a scheduler that runs for months must not keep
                # every job id it ever submitted.
                del self._submitted[uid]
        return submitted if submitted is not None else recorded

    def _submit(self, pod: JSON) -> None:
        key = _key(pod)
        with tracing.span("submit placeholder job", attributes={"k8s.pod": key}) as span:
            PODS_VALIDATED.inc(result="valid", reason="")
            spec = jobspec.build_job_spec(pod, self.placeholder_cfg)
            spec = jobspec.with_trace_context(spec, tracing.current_traceparent())
            submit_started = time.monotonic()
            try:
                # Root submits on the Pod user's behalf (as SUNK does over RPC): uid, gid and
                # priority all apply.
                job_id = self.slurm.submit_job(spec)
            except SlurmApiError as e:
                JOBS_SUBMITTED.inc(result="error" if e.status in TRANSIENT_HTTP else "refused")
                if e.status in TRANSIENT_HTTP:
                    log.warning("submit failed; retrying", extra={"pod": key, "error": str(e)})
                    self.queue.add_after(key, 2.0)
                    message = f"cannot submit the placeholder job, retrying: {e}"
                    if self.api.set_unscheduled(pod, REASON_SLURM_UNAVAILABLE, message):
                        self._event(pod, "Warning", REASON_SLURM_UNAVAILABLE, message)
                    return
                self._refuse(pod, f"Slurm refused the placeholder job: {e}")
                return
            except UnsupportedBySlurm as e:
                JOBS_SUBMITTED.inc(result="refused")
                self._refuse(pod, f"Slurm cannot run this Pod: {e}")
                return
            JOBS_SUBMITTED.inc(result="ok")
            span.set_attribute("slurm.job_id", job_id)
            SUBMIT_SECONDS.observe(time.monotonic() - submit_started)
            with self._submitted_lock:
                self._submitted[pod["metadata"]["uid"]] = job_id
            self.jobs.announce(job_id, spec.name)
            log.info(
                "placeholder job submitted",
                extra={"pod": key, "job": job_id, "uid": spec.user_id, "gid": spec.group_id},
            )
            self.api.record_job(pod, job_id)
            where = f" to partition {spec.partition}" if spec.partition else ""
            self._event(pod, "Normal", "SlurmJobSubmitted", f"placeholder job {job_id} submitted{where}")

    def _refuse(self, pod: JSON, message: str) -> None:
        """Slurm said no to this Pod as it is: like a validation error, it is not retried."""
        self.api.set_unscheduled(pod, REASON_SUBMIT_FAILED, message)
        self._event(pod, "Warning", "FailedScheduling", message)

    def _bind(self, pod: JSON, job: Any) -> None:
        slurm_node = job.nodes[0]
        kube_node = self._kube_node(slurm_node, fresh=True)
        picked_up = time.monotonic()
        with tracing.span(
            "bind pod",
            parent=self.jobs.trace_context.get(job.job_id),
            attributes={"k8s.pod": _key(pod), "k8s.node": kube_node, "slurm.job_id": job.job_id},
        ):
            self.api.bind(pod, kube_node)
        started = self.jobs.started_at.get(job.job_id, picked_up)
        BIND_SECONDS.observe(time.monotonic() - started)
        created = _created_at(pod)
        if created is not None:
            CREATE_TO_BOUND_SECONDS.observe(max(0.0, time.time() - created))
        log.info(
            "pod bound",
            extra={
                "pod": _key(pod),
                "job": job.job_id,
                "node": slurm_node,
                "kube_node": kube_node,
                "queued_ms": round((picked_up - started) * 1000, 1),
                "bind_ms": round((time.monotonic() - picked_up) * 1000, 1),
            },
        )
        self._event(
            pod,
            "Normal",
            "Scheduled",
            f"Successfully assigned {_key(pod)} to {kube_node} (Slurm job {job.job_id} on {slurm_node})",
        )

    def _watch_bound(self, pod: JSON, job: Any | None) -> None:
        """A bound Pod lives exactly as long as its job, on its job's node."""
        if job is None:
            return
        why = ""
        if job.terminating:
            why = "was stopped (scancel, time limit or preemption)"
        elif is_finished(job):
            why = f"ended ({state_name(job)})"
        elif job.state == slurm_pb2.JOB_STATE_PENDING:
            why = "was requeued"
        elif (
            job.nodes
            and job.state == slurm_pb2.JOB_STATE_RUNNING
            and job.script_started
            and self._kube_node(job.nodes[0]) != pod["spec"]["nodeName"]
            and self._kube_node(job.nodes[0], fresh=True) != pod["spec"]["nodeName"]
        ):
            why = f"now runs on {job.nodes[0]}, not on this Pod's Node"
        if why:
            self._event(pod, "Normal", "SlurmJobEnded", f"Slurm job {job.job_id} {why}; deleting the Pod")
            self.api.delete(pod)

    def _cancel(self, job: Any | None, key: str, why: str) -> None:
        if job is None:
            return
        if is_finished(job):
            self._cancelled.discard(job.job_id)  # nothing more to remember about it
            return
        if job.job_id in self._cancelled:
            return
        log.info("cancelling job", extra={"pod": key, "job": job.job_id, "why": why})
        self.slurm.cancel_job(job.job_id)
        self._cancelled.add(job.job_id)

    def _cancel_orphans(self, key: str) -> None:
        """The Pod is gone: no job of a Pod by this name may outlive it."""
        for job in self.jobs.for_pod_key(key):
            ref = placeholder.parse_job_name(job.name)
            if ref is not None:
                with self._submitted_lock:
                    self._submitted.pop(ref.uid, None)  # deleted before its annotation was seen
            self._cancel(job, key, "Pod deleted")

    def _kube_node(self, slurm_node: str, fresh: bool = False) -> str:
        """The Node that hosts this Slurm node's slurmd Pod. A slurmd Pod can move (a NodeSet
        replaces a broken Node), so a bind, and any decision to delete, reads it afresh."""
        node = None if fresh else self._kube_nodes.get(slurm_node)
        if node is None:
            slurmd = self.kube.get(pod_path(self.slurmd_namespace, slurm_node))
            node = str(slurmd["spec"]["nodeName"])
            self._kube_nodes[slurm_node] = node
        return node

    def _event(self, pod: JSON, type_: str, reason: str, message: str) -> None:
        self._background.submit(self.events.record, pod, type_, reason, message)

    # -- placements (gRPC) ---------------------------------------------------------------------

    def placement(self, pod: JSON) -> Any:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        job = self._job_of(pod)
        cond = condition(pod, "PodScheduled") or {}
        state = scheduler_pb2.PLACEMENT_STATE_PENDING
        if cond.get("reason") == REASON_INVALID:
            state = scheduler_pb2.PLACEMENT_STATE_INVALID
        elif meta.get("deletionTimestamp") or (job is not None and (job.terminating or is_finished(job))):
            state = scheduler_pb2.PLACEMENT_STATE_TERMINATING
        elif spec.get("nodeName"):
            state = scheduler_pb2.PLACEMENT_STATE_BOUND
        elif job is not None and job.script_started:
            state = scheduler_pb2.PLACEMENT_STATE_STARTED
        slurm_node = job.nodes[0] if job is not None and job.nodes else ""
        return scheduler_pb2.Placement(
            pod_namespace=meta["namespace"],
            pod_name=meta["name"],
            pod_uid=meta["uid"],
            job_id=job.job_id if job is not None else (self._recorded_job_id(pod) or 0),
            job_state=job.state if job is not None else slurm_pb2.JOB_STATE_UNSPECIFIED,
            slurm_node=slurm_node,
            kube_node=spec.get("nodeName", ""),
            state=state,
            reason=str(cond.get("message", "")) if cond.get("status") == "False" else "",
        )


def _created_at(pod: JSON) -> float | None:
    text = pod["metadata"].get("creationTimestamp")
    if not text:
        return None
    return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _marked_invalid(pod: JSON) -> bool:
    c = condition(pod, "PodScheduled")
    return (
        c is not None
        and c.get("status") == "False"
        and c.get("reason") in (REASON_INVALID, REASON_SUBMIT_FAILED)
    )


def _key(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
