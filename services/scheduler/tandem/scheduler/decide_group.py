"""What the scheduler should do for one group of Pods placed as one Slurm job (gang scheduling).

Pure, like tandem.scheduler.decide: the group, its member Pods (informer cache), its job (the
syncer's stream) and the Slurm node -> Node mapping in; one action out. Members are never placed
one by one: the job asks Slurm for one node per member and the members are bound only when the
job runs on all of them (every prolog passed, the script started). A crash at any line of an action
leaves a state this table maps to the rest of the work (tests/unit/test_decide_group.py):

    job live, group gone (every member gone, or its PodGroup deleted) -> cancel the job
    no live member                                 -> nothing
    job stopped/ended/requeued, members carry it   -> delete those members
    a member refused, the job live, none bound     -> cancel the job (refused after submit)
    a member refused (invalid, cannot fit)         -> nothing, until the members are recreated
    a member invalid, some member bound            -> a Warning Event on each bound member;
                                                      never evicted by a policy change
    a member invalid, or members disagree          -> reject every member
    no job, fewer than minCount members            -> each member: how many are missing
    no job, more members than Slurm has nodes      -> refuse the group: one Warning Event
    no job, fewer nodes fit every member than members -> Unschedulable on each member
    no job                                         -> submit the group's job (nodes that would not
                                                      take some member excluded)
    members without the job id                     -> record it on them
    job running, script started                    -> bind each unbound member to a free node
    job pending                                    -> Slurm's reason on every member (and the PodGroup)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem.kube import JSON, pod_finished
from tandem.scheduler import decide as d
from tandem.scheduler import groups, validation
from tandem.scheduler.eligibility import Eligibility
from tandem.scheduler.policy import BUILTIN, Policy
from tandem.slurm import queue
from tandem.slurm.models import JobStatus

REASON_WAITING_FOR_MEMBERS = "WaitingForGroupMembers"
REASON_WAITING_FOR_GROUP = "WaitingForPodGroup"
REASON_GROUP_FULL = "GroupAllocationFull"


@dataclass(frozen=True)
class ObservedGroup:
    key: str
    # None: the Pods naming this key are placed one by one (their PodGroup's policy is basic).
    group: groups.Group | None
    # Every Pod in the cache that names the group, in any state.
    members: tuple[JSON, ...] = ()
    # The group's job: its live one if any, else the newest.
    job: JobStatus | None = None
    # The job this process submitted for the group and the stream has not shown yet.
    submitted_job_id: int | None = None
    # Live jobs of the group besides the one its members recorded (a submit retried after its
    # answer was lost).
    duplicates: tuple[int, ...] = ()
    cancel_sent: frozenset[int] = frozenset()
    # Slurm node -> Kubernetes Node, as the syncer publishes it, for the job's nodes.
    hosts: Mapping[str, str] = field(default_factory=dict)
    # How many Slurm nodes there are (the syncer publishes each); 0 when not known yet.
    slurm_nodes: int = 0
    kill_wait: float = 0.0
    # Member uid -> which Slurm nodes' Nodes would take it, judged while observing (None: no Node
    # is watched, or the group is past needing it).
    fits: Mapping[str, Eligibility] | None = None
    # --reject-static-cpu, as for a Pod alone (tandem.scheduler.decide.Observed).
    reject_static_cpu: bool = False
    policy: Policy = BUILTIN


@dataclass(frozen=True)
class RejectMembers:
    pods: tuple[JSON, ...]
    message: str
    problems: tuple[validation.Problem, ...]


@dataclass(frozen=True)
class WarnMembers:
    """A Warning Event on each of these members and nothing else."""

    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class RefuseGroup:
    """The group can never be placed as it is: one Warning Event, no job, no retry."""

    pods: tuple[JSON, ...]
    message: str


@dataclass(frozen=True)
class SubmitGroup:
    # In rank order; one node each.
    members: tuple[JSON, ...]
    validations: tuple[validation.Validation, ...]
    # Slurm nodes whose Nodes would not take some member.
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordMembers:
    pods: tuple[JSON, ...]
    job_id: int


@dataclass(frozen=True)
class Placement:
    pod: JSON
    slurm_node: str
    kube_node: str


@dataclass(frozen=True)
class BindMembers:
    job: JobStatus
    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class PendMembers:
    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class DeleteMembers:
    pods: tuple[JSON, ...]
    event_type: str
    event_reason: str
    message: str


GroupAction = (
    d.Nothing
    | d.Wait
    | d.Cancel
    | RejectMembers
    | WarnMembers
    | RefuseGroup
    | SubmitGroup
    | RecordMembers
    | BindMembers
    | PendMembers
    | DeleteMembers
)


def _live(pod: JSON) -> bool:
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not pod_finished(pod)


def decide_group(o: ObservedGroup) -> GroupAction:
    group, job = o.group, o.job
    live = tuple(sorted((m for m in o.members if _live(m)), key=groups.rank))
    job_live = job is not None and not job.ended and job.job_id not in o.cancel_sent
    if job_live and job is not None:
        if not live:
            return d.Cancel((job.job_id,), "every member of the group is gone")
        if group is not None and group.podgroup is None and group.waiting_for and groups.podgroup_key(o.key):
            return d.Cancel((job.job_id,), "its PodGroup was deleted")
    extra = tuple(j for j in o.duplicates if j not in o.cancel_sent)
    if extra:
        return d.Cancel(extra, "a second job for the group (a submit retried after its answer was lost)")
    if not live or group is None:
        return d.Nothing()
    if job is not None:
        carrying = tuple(m for m in live if d.recorded_job_id(m) == job.job_id)
        why = _stopped(job, carrying)
        if carrying and why:
            return DeleteMembers(
                carrying, "Normal", "SlurmJobEnded", f"Slurm job {job.job_id} {why}; deleting the Pod"
            )
        if job.ended:
            job = None  # over, and none of the live members was part of it: a new job
    if any(d.refused(m) for m in live):
        # Never to be bound: its job would only hold nodes (unless part of it runs already).
        if job is not None:
            live_job = job.job_id if job_live and not job.terminating else None
        else:
            live_job = o.submitted_job_id
        if live_job is not None and live_job not in o.cancel_sent and not any(_bound(m) for m in live):
            return d.Cancel((live_job,), "a member was refused before the group was bound")
        return d.Nothing()
    if group.waiting_for:
        return PendMembers(live, REASON_WAITING_FOR_GROUP, f"waiting for {group.waiting_for}")
    results = tuple(validation.validate(m, o.kill_wait, o.reject_static_cpu, o.policy) for m in live)
    disagree = validation.disagreements(list(live))
    if disagree or not all(r.ok for r in results):
        problems = [p for r in results for p in r.errors]
        message = "; ".join(
            [
                *(
                    f"{m['metadata']['name']}: {r.message()}"
                    for m, r in zip(live, results, strict=True)
                    if not r.ok
                ),
                *(f"invalid for Slurm: {p}" for p in disagree),
            ]
        )
        bound = tuple(m for m in live if _bound(m))
        if bound:
            # Placed already: told, never evicted (tandem.scheduler.decide.would_be_refused).
            return WarnMembers(
                bound,
                d.REASON_WOULD_BE_REFUSED,
                f"{group.title} would now be refused ({message}); its bound members keep running: "
                "a bound Pod is never evicted by a policy change",
            )
        return RejectMembers(
            live, f"{group.title} cannot be one Slurm job: {message}", (*problems, *disagree)
        )
    job_id = job.job_id if job is not None else o.submitted_job_id or _recorded_by_all(live)
    if job_id is None:
        missing = group.min_count - len(live)
        if missing > 0:
            return PendMembers(
                live,
                REASON_WAITING_FOR_MEMBERS,
                f"{group.title} needs {group.min_count} members before Slurm places it; "
                f"{missing} still missing",
            )
        if o.slurm_nodes and group.min_count > o.slurm_nodes:
            return RefuseGroup(
                live,
                f"{group.title} needs {group.min_count} nodes, one per member, and Slurm has "
                f"{o.slurm_nodes}: it can never be placed",
            )
        members, valid = live[: group.min_count], results[: group.min_count]
        if o.fits is None:
            return SubmitGroup(members, valid)
        fits = [f for m in members if (f := o.fits.get(str(m["metadata"]["uid"]))) is not None]
        if not fits:
            return SubmitGroup(members, valid)
        excluded = tuple(sorted({s for f in fits for s in f.excluded}))
        total = fits[0].total
        if total and total - len(excluded) < group.min_count:
            worst = min(fits, key=lambda f: f.available)
            return PendMembers(
                members,
                d.REASON_UNSCHEDULABLE,
                f"{group.title} needs {group.min_count} nodes, one per member, and "
                f"{total - len(excluded)}/{total} would take every member; {worst.message()}",
            )
        return SubmitGroup(members, valid, excluded)
    unrecorded = tuple(m for m in live if d.recorded_job_id(m) != job_id)
    if unrecorded:
        return RecordMembers(unrecorded, job_id)
    if job is None:
        return d.Nothing()  # submitted; the syncer's stream brings the job
    if job.running and job.started and job.job.nodes:
        return _bind(o, job, live)
    if job.pending and job.job.state_reason not in ("", "None"):
        return PendMembers(live, d.REASON_PENDING, queue.pending_message(job))
    return d.Nothing()


def _bound(pod: JSON) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _stopped(job: JobStatus, carrying: tuple[JSON, ...]) -> str:
    """Why the members that carry this job must go ("" when they need not)."""
    if job.terminating:
        return "was stopped (scancel, time limit or preemption)"
    if job.ended:
        return f"ended ({job.state_name})"
    if job.pending and any((m.get("spec") or {}).get("nodeName") for m in carrying):
        return "was requeued"
    return ""


def _recorded_by_all(live: tuple[JSON, ...]) -> int | None:
    """The job id the members carry (a previous life submitted and recorded it)."""
    ids = {job_id for m in live if (job_id := d.recorded_job_id(m)) is not None}
    return max(ids) if ids else None


def _bind(o: ObservedGroup, job: JobStatus, live: tuple[JSON, ...]) -> GroupAction:
    if o.group is not None and len(job.job.nodes) < o.group.min_count:
        # Told of the start before the whole allocation was read: binding now would place
        # only part of the group.
        return d.Wait(f"Slurm job {job.job_id}'s {o.group.min_count} nodes are not all known yet")
    hosts: dict[str, str] = {}
    for slurm_node in job.job.nodes:
        kube_node = o.hosts.get(slurm_node)
        if kube_node is None:
            return d.Wait(f"no Node known to host Slurm node {slurm_node} yet")
        hosts[slurm_node] = kube_node
    taken = {
        str((m.get("spec") or {}).get("nodeName")) for m in live if (m.get("spec") or {}).get("nodeName")
    }
    free = [s for s in job.job.nodes if hosts[s] not in taken]
    unbound = [m for m in live if not (m.get("spec") or {}).get("nodeName")]
    if not unbound:
        return d.Nothing()
    if not free:
        return PendMembers(
            tuple(unbound),
            REASON_GROUP_FULL,
            f"each of Slurm job {job.job_id}'s {len(job.job.nodes)} nodes already runs a member of the group",
        )
    return BindMembers(job, tuple(Placement(m, s, hosts[s]) for m, s in zip(unbound, free, strict=False)))
