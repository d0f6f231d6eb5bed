"""What this scheduler wrote that its caches do not show yet (tandem.assume): one store, one
AssumeCache per kind of write, and one rule per event for forgetting. A write is assumed as it is
made (tandem.scheduler.act) and forgotten only here, when an event shows it: a reconcile's
observation (`reconciled`), a Pod's change (`pod_changed`), a job's change on the stream
(`job_changed`), a cancel sent (`cancel_sent`). Slurm writes carry no resourceVersion: each is
forgotten when the job stream shows it. Readers (the observation, the watches' predicates) only
read it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tandem import keys
from tandem.assume import AssumeCache
from tandem.kube import JSON
from tandem.slurm.models import JobStatus


@dataclass
class Assumed:
    # Pod uid (or group key) -> the job this process submitted for it, until the stream shows the
    # job or the Pod carries its id.
    submitted: AssumeCache[int] = field(default_factory=AssumeCache)
    # Pod uid -> the job id this process wrote on it, until the informer shows that write.
    recorded: AssumeCache[int] = field(default_factory=AssumeCache)
    # Job id -> cancel sent: its script is shutting down; once is enough until the job ends.
    cancelled: AssumeCache[bool] = field(default_factory=AssumeCache)
    # Pod uid -> the Node this process bound it to, until the informer shows spec.nodeName: a
    # reconcile in between would bind it again (a 409 and a retry: a tenth of the bindings in a
    # burst, issue 22).
    bound: AssumeCache[str] = field(default_factory=AssumeCache)
    # Pod uid -> the claim this process made for its nvidia.com/gpu, until the claim informer shows
    # one (a reconcile in between would make a second).
    made_claims: AssumeCache[JSON] = field(default_factory=AssumeCache)
    # Job id -> the nodes this process last told Slurm to exclude (Slurm's own report wins).
    excludes: AssumeCache[frozenset[str]] = field(default_factory=AssumeCache)
    # Job id -> the constraint this process last set on it, until the job stream shows it.
    constraints: AssumeCache[str] = field(default_factory=AssumeCache)
    # Job id -> the nodes this process last asked Slurm to shrink the running job to, until the
    # job stream shows it holding just those.
    shrunk: AssumeCache[frozenset[str]] = field(default_factory=AssumeCache)
    # Pod uid (or "podgroup/" + uid) -> (reason, message) of the condition this process last
    # wrote, until the informer shows it: a reconcile in that window must not write (and announce)
    # the same condition again (tandem.scheduler.podapi).
    conditions: AssumeCache[tuple[str, str]] = field(default_factory=AssumeCache)

    # -- the events that forget ------------------------------------------------------------------

    def reconciled(
        self,
        owner: str,
        members: Iterable[JSON],
        jobs: Iterable[JobStatus],
        claim_shown: Callable[[JSON], bool],
    ) -> None:
        """What a reconcile's caches show now: a bind, a claim made, a job id a member carries (a
        write the API answered without a resourceVersion is seen only so), a submit or the
        excluded nodes the stream shows. `owner`: whose submit is remembered (observe.owner)."""
        carried = set()
        for pod in members:
            uid = str(pod["metadata"]["uid"])
            if (pod.get("spec") or {}).get("nodeName"):
                self.bound.forget(uid)
            if claim_shown(pod):
                self.made_claims.forget(uid)
            annotated = keys.recorded_job_id(pod)
            if annotated is None:
                continue
            carried.add(annotated)
            if self.recorded.get(uid, _version(pod)) == annotated:
                self.recorded.forget(uid)
        jobs = list(jobs)
        submitted = self.submitted.get(owner)
        if submitted is not None and (submitted in carried or any(j.job_id == submitted for j in jobs)):
            self.submitted.forget(owner)
        for job in jobs:
            excluded = frozenset(job.job.excluded_nodes)
            if excluded and self.excludes.get(str(job.job_id)) == excluded:
                self.excludes.forget(str(job.job_id))
            if self.constraints.get(str(job.job_id)) == job.job.features:
                self.constraints.forget(str(job.job_id))
            shrunk = self.shrunk.get(str(job.job_id))
            if shrunk is not None and (job.ended or frozenset(job.job.nodes) == shrunk):
                self.shrunk.forget(str(job.job_id))

    def pod_changed(self, old: JSON | None, new: JSON | None) -> None:
        """The informer shows a Pod: the job id or the bind this process wrote, once the Pod shows
        it (an update that showed nothing else brought no reconcile to forget it)."""
        if old is None or new is None:
            return
        uid = str(new["metadata"]["uid"])
        recorded = self.recorded.get(uid)
        if recorded is not None and keys.recorded_job_id(new) == recorded:
            self.recorded.forget(uid)
        node = (new.get("spec") or {}).get("nodeName")
        bound = self.bound.get(uid)
        if bound is not None and node == bound:
            self.bound.forget(uid)
        if node:
            self.conditions.forget(uid)  # bound: the condition written while it waited is over

    def job_changed(self, job: JobStatus) -> None:
        """The stream shows a job: a cancel sent is done once it ended."""
        if job.ended:
            self.cancelled.forget(str(job.job_id))

    def cancel_sent(self, key: str, placed_alone: bool, deleted_pods: Iterable[str] = ()) -> None:
        """Cancels sent for a key: the group's submit is over; a Pod alone deleted before its
        annotation was seen leaves no submit or record behind (`deleted_pods`: the uids its jobs
        name)."""
        if not placed_alone:
            self.submitted.forget(key)
        for uid in deleted_pods:
            self.submitted.forget(uid)
            self.recorded.forget(uid)


def _version(obj: JSON) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")
