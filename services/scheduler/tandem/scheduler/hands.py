"""What the scheduler's steps act through (tandem.scheduler.act): the writers (Slurm, Pods,
ResourceClaims), the Events and PodGroup status a person reads, and the memory of this process's
writes its caches do not show yet (tandem.scheduler.assumed), each write assumed as it is made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from tandem.assume import version_of
from tandem.events import EventRecorder
from tandem.kube import JSON, KubeClient
from tandem.scheduler.announce import Announcer
from tandem.scheduler.assumed import Assumed
from tandem.scheduler.claimwrites import ClaimApi
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.podapi import PodApi
from tandem.slurm.hostlist import expand
from tandem.slurm.models import JobSpec


class JobSubmitter(Protocol):
    """What the scheduler asks of Slurm (tandem.slurm.rest.SlurmRestClient is one)."""

    def submit_job(self, spec: JobSpec) -> int: ...

    def cancel_job(self, job_id: int, signal: str | None = None) -> None: ...

    def set_excluded_nodes(self, job_id: int, hostlist: str) -> None: ...

    def set_constraints(self, job_id: int, constraints: str) -> None: ...

    def shrink_job(self, job_id: int, keep: tuple[str, ...]) -> None: ...


@dataclass(frozen=True)
class Writers:
    """What a reconcile acts through: Slurm, the Pod and ResourceClaim writes, the Events."""

    slurm: JobSubmitter
    pods: PodApi
    claims: ClaimApi
    events: EventRecorder

    @classmethod
    def of(cls, kube: KubeClient, slurm: JobSubmitter, events: EventRecorder) -> Writers:
        return cls(slurm, PodApi(kube), ClaimApi(kube), events)


@dataclass(frozen=True)
class Hands:
    writers: Writers
    assumed: Assumed
    jobs: JobTracker
    announce: Announcer

    def record(self, pod: JSON, job_id: int) -> None:
        """The job's id on the Pod (its annotation), remembered until the informer shows it."""
        answer = self.writers.pods.record_job(pod, job_id)
        self.assumed.recorded.assume(str(pod["metadata"]["uid"]), job_id, version_of(answer))

    def remember_excludes(self, job_id: int, hostlist: str) -> None:
        self.assumed.excludes.assume(str(job_id), frozenset(expand(hostlist) if hostlist else ()))
