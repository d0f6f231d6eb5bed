"""What the scheduler should do for one group of Pods placed as one Slurm job, decided from what it
observes and nothing else. A Pod alone is a group of one (tandem.scheduler.groups.alone): every
check and Event below applies to a Pod alone and to each member of a gang the same way.

`decide` is pure: a snapshot of plain values in (the members from the informer cache, the group's
job from the syncer's stream, the job ids this process wrote that the caches do not show yet, the
Slurm node -> Node mapping, which Nodes would take each member once decide asks with Judge); one
action out. Members are never placed one by one: the job asks Slurm for one node per member and
the members are bound only when the job runs on all of them (every prolog passed, the script
started). The controller carries the action out; a crash at any line of that leaves the world in a
state `decide` maps to the remaining step (tests/unit/test_decide.py has one row per line, crash
rows included, and runs a Pod alone's rows as a group of one):

    no live member (deleted, deleting, finished)  -> cancel every live job of the group (an Event on
                                                     its PodGroup, naming a preemption by
                                                     kube-scheduler when that is why)
    job live, its PodGroup deleted                -> cancel the job
    a live job besides the recorded one           -> cancel it (a submit retried after a lost answer)
    bound member, job stopped/ended/requeued/moved -> delete it
    member not bound yet, job ended               -> delete it (but for a job cancelled before it
                                                     ran because minCount grew past it: a new job)
    a member refused, the job live, none bound    -> cancel the job (refused after the submit)
    a member refused (invalid, Slurm said no)     -> nothing, until the members are recreated
    the PodGroup not there                        -> each member: what it waits for
    a member invalid (members disagree), some bound -> a Warning Event on each bound member;
                                                     never evicted by a policy change
    a member invalid, or members disagree         -> reject every member: one Warning Event each
    every member bound                            -> nothing (minCount shrank below the job's
                                                     nodes, too: the group keeps running)
    no job, fewer than minCount members           -> each member: how many are missing
    no job, more members than Slurm has nodes     -> refuse the group: one Warning Event
    no job, too few Nodes would take the members  -> Unschedulable (kube-scheduler's words), an Event;
      or a node it requires would not                (Slurm would refuse the job outright)
    no job, one domain asked (a topology key) and -> Unschedulable naming the key and the largest
      none has room, or the key is not a level       domain; brackets in its own constraint: refused
                                                     (tandem.scheduler.domains)
    no job                                        -> submit the job, the nodes whose Nodes would not
                                                     take some member excluded (and record its id);
                                                     members pinned apart (Kueue's TAS: each Pod's
                                                     Node in its nodeSelector), every node but one
                                                     matched to each member excluded,
                                                     each component in one domain when asked;
                                                     a group of components (CompositePodGroup, LWS
                                                     leader unlike its workers): a het job, each
                                                     component's first minCount members, each
                                                     component sized for its own
    job pending, minCount grew past its nodes     -> cancel it, a Normal Event on each member; once
                                                     it ended, the lines above submit a new job when
                                                     minCount members are there
    members without the job id                    -> record it on them
    job stopping                                  -> nothing: its end deletes the members
    job running, script started                   -> bind each unbound member to a free node (of
                                                     a het job: of its own component) its
                                                     nodeSelector and node affinity accept
                                                     after its GPU claims are allocated the
                                                     devices Slurm chose; a member asking
                                                     nvidia.com/gpu of a Node that serves it
                                                     through DRA first gets a claim made (a stale
                                                     one deleted), then the same, then its status
                                                     names the claim
    job running, every node taken                 -> the others wait (GroupAllocationFull); when
                                                     minCount grew past the job's nodes, saying so:
                                                     a running job cannot grow, never cancelled for it
    job allocated, prologs running                -> nominate the Nodes (status.nominatedNodeName),
                                                     once allocated for NOMINATE_AFTER_SECONDS (most
                                                     scripts start sooner: the bind says it all);
                                                     once nominated, minCount grown past the job's
                                                     nodes: the others told as above
    job pending, a member nominated               -> clear the nomination (requeued before its start)
    job pending, the fit changed                  -> update the job's excluded nodes (never a
                                                     node it requires)
    job pending, too few Nodes would take them    -> Unschedulable
      or a node it requires would not
    job pending                                   -> Slurm's reason on every member (and the PodGroup),
                                                     once pending for PENDING_AFTER_SECONDS (until
                                                     then: look again then)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tandem import keys, topology
from tandem.dra.claims import PodGpus
from tandem.dra.slices import NodeDevices
from tandem.kube import JSON, pod_finished
from tandem.scheduler import domains, gpuclaims, groups, matching, podmemo, validation
from tandem.scheduler.eligibility import Eligibility, affinity_matches, shape_of
from tandem.scheduler.gpuclaims import ClaimWrite
from tandem.scheduler.podapi import condition
from tandem.scheduler.policy import BUILTIN, Policy
from tandem.slurm import queue
from tandem.slurm.hostlist import compress, expand
from tandem.slurm.models import JobStatus

REASON_INVALID = "ValidationFailed"
REASON_PENDING = "SlurmJobPending"
REASON_SUBMIT_FAILED = "SlurmSubmitFailed"
# Slurm did not answer: retried, unlike the two refusals above.
REASON_SLURM_UNAVAILABLE = "SlurmUnavailable"
# No Slurm node's Node would take the Pod (kube-scheduler's reason): retried when Nodes change.
REASON_UNSCHEDULABLE = "Unschedulable"
# A group with more members than Slurm has nodes.
REASON_CANNOT_FIT = "GroupCannotFit"
# The GPUs Slurm gave the job cannot be given to the Pod's ResourceClaims (tandem.dra).
REASON_GPU_MISMATCH = "GpuAllocationMismatch"
# Set by this scheduler when it refused a Pod: no retry until the Pod is recreated.
REFUSED_REASONS = (REASON_INVALID, REASON_SUBMIT_FAILED, REASON_CANNOT_FIT, REASON_GPU_MISMATCH)
# A Warning Event on a bound Pod the policy (or validation) would now refuse: it keeps running.
REASON_WOULD_BE_REFUSED = "WouldNowBeRefused"
REASON_WAITING_FOR_MEMBERS = "WaitingForGroupMembers"
REASON_WAITING_FOR_GROUP = "WaitingForPodGroup"
REASON_GROUP_FULL = "GroupAllocationFull"
# The Normal Event on each member whose group's pending job is cancelled because minCount grew
# past the nodes it asks for (a new job follows).
EVENT_JOB_OUTGROWN = "SlurmJobCancelled"
# The Normal Event on a group's PodGroup when its job is cancelled because no member is left
# (deleted, or preempted as a whole by kube-scheduler).
EVENT_JOB_CANCELLED = "SlurmJobCancelled"


# How long a job pends, or holds its nodes with its prologs running, before its members say so:
# most placeholders pass both in well under a second, and a status write that a person would never
# see costs the API server, and every watcher of Pods, one request and one event per Pod (issue 22).
# A job pending longer is waiting on something a person may want to read (Resources, Priority).
PENDING_AFTER_SECONDS = 2.0
NOMINATE_AFTER_SECONDS = 1.0


class NotJudged(enum.Enum):
    NOT_JUDGED = "not judged"


NOT_JUDGED = NotJudged.NOT_JUDGED
NO_GPUS = PodGpus()


@dataclass(frozen=True)
class Observed:
    key: str
    # What the key names: a group, or a Pod alone (a group of one); None when the Pods naming this
    # group key are placed one by one (their PodGroup's policy is basic).
    group: groups.Group | None
    # Every Pod in the cache that belongs to it, in any state (a Pod alone: itself, none once gone).
    members: tuple[JSON, ...] = ()
    # Its job: the live one its members recorded, else any live one, else the newest.
    job: JobStatus | None = None
    # Every job it has (a Pod alone: of its uid; once gone, of its name).
    jobs: tuple[JobStatus, ...] = ()
    # Member uid -> the job id it carries: what this process wrote a moment ago, else its annotation.
    recorded: Mapping[str, int] = field(default_factory=dict)
    # The job this process submitted and the stream has not shown yet.
    submitted_job_id: int | None = None
    # Live jobs besides the one the members recorded: a submit retried after its answer was lost
    # (Slurm had taken the first).
    duplicates: tuple[int, ...] = ()
    # Jobs this process already asked Slurm to cancel (their scripts are shutting down).
    cancel_sent: frozenset[int] = frozenset()
    # Slurm node -> Kubernetes Node, as the syncer publishes it, for the job's nodes.
    hosts: Mapping[str, str] = field(default_factory=dict)
    # Those Nodes' labels, which members' nodeSelectors are matched against at the bind (a Node
    # missing: any member would take it).
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # How many Slurm nodes there are (the syncer publishes each); 0 when not known yet.
    slurm_nodes: int = 0
    # Member uid -> which Slurm nodes' Nodes would take it (None: no Node is watched; a member is
    # missing once it no longer needs it); NOT_JUDGED until decide asks for it with Judge, since
    # judging every Node costs more than the rest of a reconcile and most decisions never read it.
    fits: Mapping[str, Eligibility] | NotJudged | None = None
    # The nodes the job excludes now: as Slurm reports them, else as this process last set them.
    job_excludes: frozenset[str] | None = None
    # Slurm's KillWait now (it may change: tandem.scheduler.killwait_source) and where it came
    # from, which a refusal for a grace period cites.
    kill_wait: float = 0.0
    kill_wait_source: str = "--slurm-kill-wait"
    # --reject-static-cpu: a Pod the kubelet would pin CPUs for is refused, not only warned about.
    reject_static_cpu: bool = False
    # Seconds since the job was first seen in its current phase (pending, allocated with its
    # prologs running: tandem.scheduler.jobs.phase); infinite when not known.
    job_phase_age: float = float("inf")
    # What the members' namespace may ask of Slurm (tandem.scheduler.policy).
    policy: Policy = BUILTIN
    # Member uid -> what its ResourceClaims ask Slurm for (tandem.dra.claims); absent for a
    # member that claims nothing.
    gpus: Mapping[str, PodGpus] = field(default_factory=dict)
    # What a claim's allocation is written from before the bind: the claims the members name, by
    # name; the job's Nodes' devices (Kubernetes Node -> its GPUs, or why its ResourceSlices cannot
    # be read); each DeviceClass's spec.config.
    claims: Mapping[str, JSON] = field(default_factory=dict)
    devices: Mapping[str, NodeDevices | str] = field(default_factory=dict)
    class_config: Mapping[str, tuple[JSON, ...]] = field(default_factory=dict)
    # nvidia.com/gpu through DRA (tandem.dra.extended): the DeviceClass that maps it ("" none), the
    # job's Nodes that serve it so (no device plugin offers it), and the claim made for a member
    # (member uid -> the claim).
    extended_class: str = ""
    dra_served: frozenset[str] = frozenset()
    extended_claims: Mapping[str, JSON] = field(default_factory=dict)
    # Slurm's topology as tandem-syncer publishes it, or why there is none (tandem.scheduler.domains).
    topology: topology.Topology | str = "the scheduler reads no topology (--topology-configmap)"


@dataclass(frozen=True)
class Placement:
    """A member and the node it goes to (a nomination: "" clears it)."""

    pod: JSON
    slurm_node: str
    kube_node: str


@dataclass(frozen=True)
class Nothing:
    pass


@dataclass(frozen=True)
class Judge:
    """Deciding needs to know which Nodes would take the members: observe them with the fits
    judged, then decide again."""


@dataclass(frozen=True)
class Wait:
    """Nothing can be done yet and no change will announce when: look again after a backoff."""

    why: str


@dataclass(frozen=True)
class Later:
    """Nothing to write yet: a passing state becomes worth a write after `after` seconds, unless a
    change (the job starting) comes first."""

    after: float
    why: str


class CancelCause(enum.Enum):
    """Why jobs are cancelled, as the act reads it (`why` is the sentence the log and Events say)."""

    MEMBERS_GONE = enum.auto()  # every member of a group, or a Pod alone, finished or going
    POD_DELETED = enum.auto()  # a Pod alone deleted: its jobs are found by its name, not its uid
    PODGROUP_DELETED = enum.auto()
    DUPLICATE = enum.auto()  # a second job, from a submit retried after its answer was lost
    REFUSED = enum.auto()  # a member refused before it was bound
    OUTGROWN = enum.auto()  # a pending job asking for fewer nodes than the group's size now


@dataclass(frozen=True)
class Cancel:
    job_ids: tuple[int, ...]
    cause: CancelCause
    why: str
    # A Normal Event with this reason and message on each of these members (none for a cancel
    # nobody needs telling of: the members are gone, or their deletion says it).
    pods: tuple[JSON, ...] = ()
    event_reason: str = ""
    message: str = ""
    # The group's PodGroup (or CompositePodGroup), to carry that Event when no member is left.
    subject: JSON | None = None


@dataclass(frozen=True)
class Reject:
    """PodScheduled=False and a FailedValidation Event on each member; never retried."""

    pods: tuple[JSON, ...]
    message: str
    problems: tuple[validation.Problem, ...]


@dataclass(frozen=True)
class Warn:
    """A Warning Event on each of these members and nothing else (each distinct one posted once)."""

    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class Refuse:
    """It can never be placed as it is: PodScheduled=False on each member, one Warning Event."""

    pods: tuple[JSON, ...]
    reason: str
    message: str


@dataclass(frozen=True)
class Submit:
    # In rank order; one node each.
    members: tuple[JSON, ...]
    # Each member's, as decide validated it: the job is built from these.
    validations: tuple[validation.Validation, ...]
    # Slurm nodes whose Nodes would not take some member.
    excluded: tuple[str, ...] = ()
    # A heterogeneous job: how many of the members (in order) each component holds; empty: one
    # homogeneous job.
    components: tuple[int, ...] = ()
    # The one-domain constraint of each component (of the job, when homogeneous), "" for none;
    # empty: no topology asked (tandem.scheduler.domains).
    domains: tuple[str, ...] = ()


@dataclass(frozen=True)
class Record:
    pods: tuple[JSON, ...]
    job_id: int


@dataclass(frozen=True)
class Pend:
    """PodScheduled=False with this reason on each member (and the PodGroup's condition)."""

    pods: tuple[JSON, ...]
    reason: str
    message: str
    # A Warning Event with this reason on each member whose condition changes ("" for none).
    event: str = ""


@dataclass(frozen=True)
class Nominate:
    """status.nominatedNodeName: the Node Slurm allocated while the prologs run ("" to clear)."""

    placements: tuple[Placement, ...]


@dataclass(frozen=True)
class Exclude:
    """Set a pending job's excluded nodes (a hostlist): the Nodes that would take the members changed."""

    job_id: int
    hostlist: str
    # A heterogeneous job's components, each set alike; empty: the job alone.
    component_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Bind:
    job: JobStatus
    placements: tuple[Placement, ...]
    # Member uid -> its claims' allocations, written before its bind (the devices Slurm chose).
    claims: Mapping[str, tuple[ClaimWrite, ...]] = field(default_factory=dict)
    # Member uid -> its status.extendedResourceClaimStatus, written after the claims, before the bind.
    pod_statuses: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    # Where the job's nodes are, for the group that asked for one domain ("" for none).
    landed: str = ""


@dataclass(frozen=True)
class MakeClaims:
    """Before the bind: create the claims members' nvidia.com/gpu needs on their Nodes (member,
    manifest), and first delete the stale ones made for them before (claim, why)."""

    new: tuple[tuple[JSON, dict[str, Any]], ...] = ()
    stale: tuple[tuple[JSON, str], ...] = ()


@dataclass(frozen=True)
class Delete:
    """Delete these members; the Event says why."""

    pods: tuple[JSON, ...]
    event_type: str
    event_reason: str
    message: str


Action = (
    Nothing
    | Judge
    | Wait
    | Later
    | Cancel
    | Reject
    | Warn
    | Refuse
    | Submit
    | Record
    | Pend
    | Nominate
    | Exclude
    | Bind
    | MakeClaims
    | Delete
)


def decide(o: Observed) -> Action:
    group, job = o.group, o.job
    live = tuple(sorted((m for m in o.members if is_live(m)), key=groups.rank))
    alone = group is None or group.alone
    if not live:
        gone = tuple(j.job_id for j in o.jobs if not j.ended and j.job_id not in o.cancel_sent)
        if not gone:
            return Nothing()
        cause, why = _gone(o)
        if group is None or group.podgroup is None:
            return Cancel(gone, cause, why)
        # The group's object outlives its Pods: it tells what became of its job.
        jobs = ", ".join(map(str, gone))
        return Cancel(
            gone, cause, why, (), EVENT_JOB_CANCELLED, f"Slurm job {jobs} cancelled: {why}", group.podgroup
        )
    job_live = job is not None and not job.ended and job.job_id not in o.cancel_sent
    if job_live and job is not None and group is not None and _podgroup_deleted(o.key, group):
        return Cancel((job.job_id,), CancelCause.PODGROUP_DELETED, "its PodGroup was deleted")
    extra = tuple(j for j in o.duplicates if j not in o.cancel_sent)
    if extra:
        whose = "the Pod" if alone else "the group"
        return Cancel(
            extra,
            CancelCause.DUPLICATE,
            f"a second job for {whose} (a submit retried after its answer was lost)",
        )
    if group is None:
        return Nothing()
    replaced: int | None = None
    if job is not None:
        carrying = tuple(m for m in live if o.recorded.get(_uid(m)) == job.job_id)
        stopped = _stopped_under(o, job, carrying)
        if stopped is not None:
            return stopped
        if job.ended and not alone and (not carrying or _outgrown_before_it_ran(group, job)):
            # Over, and no live member was part of it (they were replaced), or cancelled before it
            # ran because minCount grew past it: a new job. A Pod alone's jobs are all its own
            # (found by its uid): it records this one, then goes.
            replaced, job = job.job_id, None
    if any(refused(m) for m in live):
        # Never to be bound: its job would only hold nodes (the policy changed after the submit,
        # or a crash came between the refusal and this cancel), unless part of it runs already.
        if job is not None:
            unwanted = None if job.ended or job.terminating else job.job_id
        else:
            unwanted = o.submitted_job_id
        if unwanted is not None and unwanted not in o.cancel_sent and not any(_bound(m) for m in live):
            if alone:
                return Cancel((unwanted,), CancelCause.REFUSED, "the Pod was refused before it was bound")
            return Cancel((unwanted,), CancelCause.REFUSED, "a member was refused before the group was bound")
        return Nothing()
    unbound = tuple(m for m in live if not _bound(m))
    if group.waiting_for:
        if not unbound:
            return Nothing()
        return Pend(unbound, REASON_WAITING_FOR_GROUP, f"waiting for {group.waiting_for}")
    results = tuple(
        podmemo.validate(m, o.kill_wait, o.reject_static_cpu, o.policy, o.kill_wait_source) for m in live
    )
    invalid = _invalid(group, live, results) or _unclaimable(o, group, live)
    if invalid is not None:
        return invalid
    if not unbound:
        return Nothing()
    job_id = job.job_id if job is not None else o.submitted_job_id or _recorded_by_all(o, live, replaced)
    if job_id is None:
        waiting = [w for m in live for w in o.gpus.get(_uid(m), NO_GPUS).waiting]
        if waiting:
            return Wait(f"waiting for {', '.join(waiting)}")
        return _new_job(
            o, group, live, tuple(_with_claimed_gpus(o, m, r) for m, r in zip(live, results, strict=True))
        )
    if job is not None and job.pending and _outgrown(group, job) and not any(_bound(m) for m in live):
        if job.job_id in o.cancel_sent:
            return Nothing()  # its end brings the new job
        return _cancel_outgrown(group, job, live)
    unrecorded = tuple(m for m in live if o.recorded.get(_uid(m)) != job_id)
    if unrecorded:
        # A previous life submitted, or recording failed, or a crash came in between.
        return Record(unrecorded, job_id)
    if job is None:
        return Nothing()  # submitted; the syncer's stream brings the job
    if job.terminating:
        return Nothing()  # being stopped: its end deletes the members
    if job.running and job.started and job.job.nodes:
        return _bind(o, group, job, live)
    if job.running and job.job.nodes:
        return _nominate(o, group, job, live)
    if job.pending:
        return _pending(o, group, job, unbound, results[0])
    return Nothing()


def _podgroup_deleted(key: str, group: groups.Group) -> bool:
    if groups.composite_key(key) is not None:
        return group.ref.uid == "" and bool(group.waiting_for)
    return group.podgroup is None and bool(group.waiting_for) and groups.podgroup_key(key) is not None


def _preempted(pod: JSON) -> bool:
    """kube-scheduler evicted it to make room for a higher priority (its DisruptionTarget says so)."""
    c = condition(pod, "DisruptionTarget") or {}
    return c.get("status") == "True" and c.get("reason") == "PreemptionByScheduler"


def is_live(pod: JSON) -> bool:
    """Neither being deleted nor finished: a member its group's job is for."""
    return not (pod.get("metadata") or {}).get("deletionTimestamp") and not pod_finished(pod)


def _bound(pod: JSON) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _uid(pod: JSON) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def _gone(o: Observed) -> tuple[CancelCause, str]:
    if o.group is not None and not o.group.alone:
        if o.members and all(_preempted(m) for m in o.members):
            why = "kube-scheduler preempted every member of the group (workload-aware preemption)"
            return CancelCause.MEMBERS_GONE, why
        return CancelCause.MEMBERS_GONE, "every member of the group is gone"
    if not o.members:
        return CancelCause.POD_DELETED, "Pod deleted"
    if (o.members[0].get("metadata") or {}).get("deletionTimestamp"):
        return CancelCause.MEMBERS_GONE, "Pod is being deleted"
    return CancelCause.MEMBERS_GONE, "Pod finished"


def _stopped_under(o: Observed, job: JobStatus, carrying: tuple[JSON, ...]) -> Delete | None:
    """The members that must go because their job stopped: a bound one lives exactly as long as
    its job, on its job's nodes; one not bound yet goes once its job ended."""
    bound = [m for m in carrying if _bound(m)]
    why = ""
    if job.terminating:
        why = "was stopped (scancel, time limit or preemption)"
    elif job.ended:
        why = f"ended ({job.state_name})"
    elif job.pending:
        why = "was requeued"
    if bound and why:
        return Delete(
            tuple(bound), "Normal", "SlurmJobEnded", f"Slurm job {job.job_id} {why}; deleting the Pod"
        )
    if job.running and job.started and job.job.nodes:
        hosts = [o.hosts.get(s) for s in job.job.nodes]
        moved = tuple(
            m for m in bound if None not in hosts and (m.get("spec") or {}).get("nodeName") not in hosts
        )
        if moved:
            return Delete(
                moved,
                "Normal",
                "SlurmJobEnded",
                f"Slurm job {job.job_id} now runs on {', '.join(job.job.nodes)}, not on this Pod's Node; "
                "deleting the Pod",
            )
    unbound = tuple(m for m in carrying if not _bound(m) and not refused(m))
    if unbound and job.ended and not (o.group is not None and _outgrown_before_it_ran(o.group, job)):
        return Delete(
            unbound,
            "Warning",
            "SlurmJobEnded",
            f"placeholder job {job.job_id} ended ({job.state_name}) before the Pod was bound",
        )
    return None


def _invalid(
    group: groups.Group, live: tuple[JSON, ...], results: tuple[validation.Validation, ...]
) -> Action | None:
    """Reject members that cannot be a job; a bound member is only told: evicting running work
    because a rule changed would be worse than the rule being late."""
    disagree = () if group.alone else validation.disagreements(list(live))
    if not disagree and all(r.ok for r in results):
        return None
    problems = (*(p for r in results for p in r.errors), *disagree)
    if group.alone:
        message = results[0].message()
    else:
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
        return Warn(bound, REASON_WOULD_BE_REFUSED, would_be_refused_message(group, message))
    if not group.alone:
        message = f"{group.title} cannot be one Slurm job: {message}"
    return Reject(live, message, problems)


def _unclaimable(o: Observed, group: groups.Group, live: tuple[JSON, ...]) -> Action | None:
    """Reject members whose GPU claims Slurm cannot allocate as asked (tandem.dra.claims says
    which field); a bound member only hears of it, as for any rule."""
    refused = [(m, o.gpus[_uid(m)]) for m in live if _uid(m) in o.gpus and o.gpus[_uid(m)].refusals]
    if not refused:
        return None
    problems = tuple(validation.Problem(r.where, r.reason) for _, g in refused for r in g.refusals)
    if group.alone:
        message = "GPU claims not allocatable by Slurm: " + refused[0][1].message()
    else:
        message = "; ".join(f"{m['metadata']['name']}: {g.message()}" for m, g in refused)
        message = f"{group.title} cannot be one Slurm job: GPU claims not allocatable by Slurm: {message}"
    bound = tuple(m for m in live if _bound(m))
    if bound:
        return Warn(bound, REASON_WOULD_BE_REFUSED, would_be_refused_message(group, message))
    return Reject(live, message, problems)


def _with_claimed_gpus(o: Observed, pod: JSON, result: validation.Validation) -> validation.Validation:
    """The job asks Slurm for the GPUs the member's claims ask for, as GRES of their type."""
    gpus = o.gpus.get(_uid(pod))
    if gpus is None or not gpus.requests:
        return result
    return replace(
        result, requests={**result.requests, keys.GPU_RESOURCE: gpus.count}, gpu_type=gpus.gres_type
    )


def would_be_refused_message(group: groups.Group, message: str) -> str:
    if group.alone:
        return (
            f"this Pod would now be refused ({message}); it keeps running: "
            "a bound Pod is never evicted by a policy change"
        )
    return (
        f"{group.title} would now be refused ({message}); its bound members keep running: "
        "a bound Pod is never evicted by a policy change"
    )


def _new_job(
    o: Observed, group: groups.Group, live: tuple[JSON, ...], results: tuple[validation.Validation, ...]
) -> Action:
    missing = _missing(group, live)
    if missing:
        return Pend(
            live,
            REASON_WAITING_FOR_MEMBERS,
            f"{group.title} needs {group.min_count} members before Slurm places it; {missing} still missing",
        )
    if o.slurm_nodes and group.min_count > o.slurm_nodes:
        return Refuse(
            live,
            REASON_CANNOT_FIT,
            f"{group.title} needs {group.min_count} nodes, one per member, and Slurm has "
            f"{o.slurm_nodes}: it can never be placed",
        )
    chosen = _chosen(group, live)
    members = tuple(live[i] for i in chosen)
    valid = tuple(results[i] for i in chosen)
    if o.fits is NOT_JUDGED:
        return Judge()
    fits = _fits(o, members)
    unfit = _job_unfit(group, fits)
    unschedulable = _unschedulable(group, members, fits, unfit) or _required_unfit(
        members, valid[0], fits, unfit
    )
    if unschedulable is not None:
        return unschedulable
    typed = _typed_whole_gpus(o, group, members, valid, fits)
    if isinstance(typed, Pend):
        return typed
    one_domain = _one_domain(o, group, members, valid[0], frozenset(unfit))
    if not isinstance(one_domain, tuple):
        return one_domain
    counts = tuple(c.min_count for c in group.components)
    return Submit(members, typed, unfit, counts, one_domain)


def _one_domain(
    o: Observed,
    group: groups.Group,
    members: tuple[JSON, ...],
    valid: validation.Validation,
    unfit: frozenset[str],
) -> tuple[str, ...] | Pend | Refuse:
    """The Slurm constraint keeping each component (the job) in one domain, when the group asks."""
    ask = domains.asked(group, valid.job_annotations)
    if not ask:
        return ()
    who = "the Pod" if group.alone else group.title
    user = valid.job_annotations.get(keys.CONSTRAINTS, "")
    if "[" in user:
        return Refuse(
            members,
            REASON_INVALID,
            f"{who} asks for one domain of {ask.shown}, which Slurm is given as a matching OR of"
            f" domains ([a|b]); its {keys.CONSTRAINTS} {user!r} has one of its own, and Slurm takes"
            " one per job: drop its brackets or the topology ask",
        )
    if isinstance(o.topology, str):
        return Pend(
            members,
            REASON_UNSCHEDULABLE,
            f"{who} asks for one domain of {ask.shown}, and Slurm's topology is not known: {o.topology}",
            event="FailedScheduling",
        )
    found = domains.constraints(o.topology, group, ask, unfit, user)
    if isinstance(found, str):
        return Pend(members, REASON_UNSCHEDULABLE, f"{who} {found}", event="FailedScheduling")
    return found


def _typed_whole_gpus(
    o: Observed,
    group: groups.Group,
    members: tuple[JSON, ...],
    valid: tuple[validation.Validation, ...],
    fits: list[Eligibility],
) -> tuple[validation.Validation, ...] | Pend:
    """Members whose claims ask whole GPUs of no product ask Slurm for the one whole-GPU type the
    Nodes that would take them publish. Untyped, `gpu:2` may be given as MIG slices on a node of
    both (its slices are `gpu` GRES too), which no whole-GPU claim can hold. Several types: one
    Slurm job names one, so the member waits (a product selector or a nodeSelector settles it)."""
    needing = [i for i, m in enumerate(members) if o.gpus.get(_uid(m), NO_GPUS).needs_whole_type]
    judged = [f.whole_gpu_types for f in fits if f.whole_gpu_types is not None]
    if not needing or not judged:
        return valid
    types = sorted(frozenset().union(*judged))
    if len(types) == 1:
        return tuple(replace(v, gpu_type=types[0]) if i in needing else v for i, v in enumerate(valid))
    who = "the Pod's" if group.alone else f"{group.title}'s"
    if not types:
        message = (
            f"{who} ResourceClaims ask for whole GPUs (DeviceClass gpu.nvidia.com), and no Node that"
            " would take it publishes any"
        )
    else:
        message = (
            f"{who} ResourceClaims ask for whole GPUs of any product, and the Nodes that would take it"
            f" have whole GPUs of Slurm types {', '.join(types)}; one Slurm job asks for one type: select"
            ' device.attributes["gpu.nvidia.com"].productName in the claim, or narrow the Nodes with a'
            " nodeSelector"
        )
    return Pend(members, REASON_UNSCHEDULABLE, message, event="FailedScheduling")


def _missing(group: groups.Group, live: tuple[JSON, ...]) -> str:
    """How many members the group still lacks before it can be one job ("" for none): a het job
    names what each component lacks."""
    if not group.components:
        missing = group.min_count - len(live)
        return str(missing) if missing > 0 else ""
    lacking = []
    for index, component in enumerate(group.components):
        have = sum(1 for m in live if group.component_of(m) == index)
        if have < component.min_count:
            lacking.append(f"{component.min_count - have} of {component.name}")
    return ", ".join(lacking)


def _chosen(group: groups.Group, live: tuple[JSON, ...]) -> list[int]:
    """Which live members (their indexes, in rank order) the job is made for: the first minCount,
    or each component's first, component by component."""
    if not group.components:
        return list(range(min(group.min_count, len(live))))
    chosen = []
    for index, component in enumerate(group.components):
        mine = [i for i, m in enumerate(live) if group.component_of(m) == index]
        chosen.extend(mine[: component.min_count])
    return chosen


def _fits(o: Observed, members: tuple[JSON, ...]) -> list[Eligibility]:
    if o.fits is None or o.fits is NOT_JUDGED:
        return []
    return [f for m in members if (f := o.fits.get(_uid(m))) is not None]


def _job_unfit(group: groups.Group, fits: list[Eligibility]) -> tuple[str, ...]:
    """The Slurm nodes the job must not be given: every node some member would not take, so that
    Slurm chooses among the ones every member would. Members pinned apart, each to Nodes of its
    own (Kueue's TAS writes each Pod's Node into its nodeSelector), leave fewer such nodes than
    members: then the job may have only the nodes matched one to each member (`fits` in rank
    order), which Slurm takes whole or waits for; the bind matches the members to them again."""
    every = tuple(sorted({s for f in fits for s in f.excluded}))
    total = fits[0].total if fits else 0
    plain = not total or total - len(every) >= group.min_count
    if plain or group.components or len(fits) < group.min_count or not fits[0].nodes:
        return every
    takes = []
    for fit in fits[: group.min_count]:
        out = set(fit.excluded)
        takes.append([s for s in fit.nodes if s not in out])
    matched = matching.distinct(takes)
    if None in matched:
        return every  # no node of its own for each member: Unschedulable says so
    keep = set(matched)
    return tuple(sorted(s for s in fits[0].nodes if s not in keep))


def _unschedulable(
    group: groups.Group, members: tuple[JSON, ...], fits: list[Eligibility], unfit: tuple[str, ...]
) -> Pend | None:
    """Fewer Slurm nodes whose Nodes would take every member than members: kube-scheduler's reason."""
    total = fits[0].total if fits else 0
    if not total or total - len(unfit) >= group.min_count:
        return None
    if group.alone:
        message = fits[0].message()
    else:
        worst = min(fits, key=lambda f: f.available)
        message = (
            f"{group.title} needs {group.min_count} nodes, one per member, and "
            f"{total - len(unfit)}/{total} would take every member; {worst.message()}"
        )
        if len({f.excluded for f in fits}) > 1 and all(f.available for f in fits):
            # Each would take some node, not one of its own each: pinned apart (_job_unfit) badly.
            message = (
                f"{group.title} needs {group.min_count} nodes, one per member, and the nodes its members"
                " would take leave no node of its own for each (two members pinned to one Node, as"
                f" Kueue's TAS may pin them, cannot share it); {worst.message()}"
            )
    return Pend(members, REASON_UNSCHEDULABLE, message, event="FailedScheduling")


def _recorded_by_all(o: Observed, live: tuple[JSON, ...], replaced: int | None = None) -> int | None:
    """The job id the members carry (a previous life submitted and recorded it), but the one a new
    job replaces."""
    ids = {job_id for m in live if (job_id := o.recorded.get(_uid(m))) is not None and job_id != replaced}
    return max(ids) if ids else None


def _outgrown(group: groups.Group, job: JobStatus) -> bool:
    """The group's minCount grew past the nodes its job asks for (or holds), as Slurm says them;
    for a het job, some component's past the nodes of its own."""
    if group.alone:
        return False
    if job.job.components and len(job.job.components) == len(group.components):
        return any(
            0 < c.node_count < g.min_count for c, g in zip(job.job.components, group.components, strict=True)
        )
    return 0 < job.job.node_count < group.min_count


def _outgrown_before_it_ran(group: groups.Group, job: JobStatus) -> bool:
    """Ended without ever running, on fewer nodes than minCount asks now: the job decide cancels
    when minCount grows while it is pending. Its members wait for the new job, not deleted."""
    return job.ended and not job.started and not job.job.nodes and _outgrown(group, job)


def _size_name(group: groups.Group) -> str:
    return "minCount" if group.podgroup is not None else "size"


def _cancel_outgrown(group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Cancel:
    """A pending job asks for too few nodes now: cancelled, so the group becomes one job of minCount
    (Slurm cannot change a pending job's node count for Tandem: its nodes, tasks and resources per
    node are all the submit's)."""
    wanted, asked = group.min_count, job.job.node_count
    return Cancel(
        (job.job_id,),
        CancelCause.OUTGROWN,
        f"{_size_name(group)} grew to {wanted}, past the {asked} nodes the pending job asks for",
        live,
        EVENT_JOB_OUTGROWN,
        f"{group.title}'s {_size_name(group)} grew to {wanted} while Slurm job {job.job_id} ({asked} "
        f"nodes) was pending: cancelling it to place the group as one job of {wanted}",
    )


def _outgrown_message(group: groups.Group, job: JobStatus) -> str:
    """Why members past a running job's nodes wait, when minCount grew after it started."""
    size, wanted, held = _size_name(group), group.min_count, job.job.node_count
    return (
        f"{group.title}'s {size} grew to {wanted} after Slurm job {job.job_id} started on {held} nodes: "
        "a running Slurm job cannot grow, so the members on its nodes keep running and this one waits "
        f"for one of them to free; set {size} back to {held}, or recreate the group to place all {wanted} "
        "as one job"
    )


def _assign(
    o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]
) -> tuple[Placement, ...] | str:
    """Each unbound member's node, in rank order on the job's nodes no member runs on yet; or why
    no assignment can be made yet."""
    # The nodes the job holds, as Slurm counts them; while not known, as many as minCount asks.
    wanted = job.job.node_count or group.min_count
    if len(job.job.nodes) < wanted or any(len(c.nodes) < c.node_count for c in job.job.components):
        # Told of the allocation before all of it was read: binding now would place only part
        # of the group.
        return f"Slurm job {job.job_id}'s {wanted} nodes are not all known yet"
    hosts: dict[str, str] = {}
    for slurm_node in job.job.nodes:
        kube_node = o.hosts.get(slurm_node)
        if kube_node is None:
            return f"no Node known to host Slurm node {slurm_node} yet"
        hosts[slurm_node] = kube_node
    if not job.job.components:
        return _placed_on(live, job.job.nodes, hosts, o.node_labels)
    # A het job: each member on a node of its own component, sized for its kind.
    placements: list[Placement] = []
    for index, component in enumerate(job.job.components):
        mine = tuple(m for m in live if group.component_of(m) == index)
        placements.extend(_placed_on(mine, component.nodes, hosts, o.node_labels))
    return tuple(placements)


def _placed_on(
    members: tuple[JSON, ...],
    nodes: tuple[str, ...],
    hosts: Mapping[str, str],
    labels: Mapping[str, Mapping[str, str]],
) -> tuple[Placement, ...]:
    """The unbound members, each on one of these nodes no member runs on yet whose Node its
    nodeSelector and required node affinity accept: in order when each would take any (the first
    on the batch host), else matched so that each gets one it takes (members Kueue's TAS pinned
    each to its Node). A member no free Node accepts now (relabelled since the submit) takes one
    left over, in order, as before."""
    taken = {str((m.get("spec") or {}).get("nodeName")) for m in members if _bound(m)}
    free = [s for s in nodes if hosts[s] not in taken]
    unbound = [m for m in members if not _bound(m)]
    by_shape: dict[str, list[str]] = {}  # one template's members are judged once
    takes = []
    for m in unbound:
        shape = shape_of(m)
        if shape not in by_shape:
            by_shape[shape] = [s for s in free if _accepts(m, hosts[s], labels)]
        takes.append(by_shape[shape])
    chosen = matching.distinct(takes)
    matched = set(chosen)
    left = iter([s for s in free if s not in matched])
    placed = [s if s is not None else next(left, None) for s in chosen]
    return tuple(Placement(m, s, hosts[s]) for m, s in zip(unbound, placed, strict=True) if s is not None)


def _accepts(pod: JSON, kube_node: str, labels: Mapping[str, Mapping[str, str]]) -> bool:
    known = labels.get(kube_node)
    return known is None or affinity_matches(pod, known, kube_node)


def _bind(o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Action:
    placements = _assign(o, group, job, live)
    if isinstance(placements, str):
        return Wait(placements)
    if not placements:
        unbound = tuple(m for m in live if not _bound(m))
        if _outgrown(group, job):
            return Pend(unbound, REASON_GROUP_FULL, _outgrown_message(group, job))
        return Pend(
            unbound,
            REASON_GROUP_FULL,
            f"each of Slurm job {job.job_id}'s {len(job.job.nodes)} nodes already runs a member of the group",
        )
    writes: dict[str, tuple[ClaimWrite, ...]] = {}
    statuses: dict[str, dict[str, Any]] = {}
    new: list[tuple[JSON, dict[str, Any]]] = []
    stale: list[tuple[JSON, str]] = []
    for p in placements:
        match _gpu_writes(o, job, p):
            case None:
                continue
            case gpuclaims.NotSeen(why=why):
                return Wait(why)
            case gpuclaims.Mismatch(why=why):
                what = (
                    "the Pod's ResourceClaims" if _uid(p.pod) in o.gpus else f"the Pod's {keys.GPU_RESOURCE}"
                )
                return Refuse(
                    live,
                    REASON_GPU_MISMATCH,
                    f"the GPUs Slurm gave job {job.job_id} cannot be given to {what}: {why}",
                )
            case gpuclaims.NewClaim(manifest=manifest):
                new.append((p.pod, manifest))
            case gpuclaims.StaleClaim(claim=claim, why=why):
                stale.append((claim, why))
            case gpuclaims.ExtendedWrite(writes=claim_writes, pod_status=pod_status):
                writes[_uid(p.pod)] = claim_writes
                if pod_status is not None:
                    statuses[_uid(p.pod)] = pod_status
            case tuple() as claim_writes:
                writes[_uid(p.pod)] = claim_writes
    if new or stale:
        return MakeClaims(tuple(new), tuple(stale))
    ask = domains.asked(group, validation.pod_annotations(live[0]))
    return Bind(job, placements, writes, statuses, domains.landed(o.topology, ask, job.job.nodes))


def _gpu_writes(
    o: Observed, job: JobStatus, p: Placement
) -> (
    tuple[ClaimWrite, ...]
    | gpuclaims.ExtendedWrite
    | gpuclaims.NewClaim
    | gpuclaims.StaleClaim
    | gpuclaims.NotSeen
    | gpuclaims.Mismatch
    | None
):
    """What gives the member the GPUs Slurm chose before its bind: its claims' allocations, or the
    claim its nvidia.com/gpu needs on a Node serving it through DRA; None when it needs neither."""
    gpus = o.gpus.get(_uid(p.pod))
    devices = o.devices.get(p.kube_node)
    if gpus is not None and gpus.requests:
        return gpuclaims.claim_writes(p.pod, gpus, job.job, p.slurm_node, devices, o.claims, o.class_config)
    if _gpus_by_dra(o, p):
        return gpuclaims.extended_writes(
            p.pod,
            job.job,
            p.slurm_node,
            devices,
            o.extended_class,
            o.extended_claims.get(_uid(p.pod)),
            o.class_config.get(o.extended_class, ()),
        )
    return None


def _gpus_by_dra(o: Observed, p: Placement) -> bool:
    """The member asks nvidia.com/gpu and its Node serves it through DRA."""
    if not o.extended_class or p.kube_node not in o.dra_served:
        return False
    try:
        return podmemo.requests(p.pod).get(keys.GPU_RESOURCE, 0) > 0
    except ValueError:
        return False


def _nominated(pod: JSON) -> str:
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def _nominate(o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Action:
    """Allocated, the prologs running: where each member will run, as kube-scheduler nominates."""
    placements = _assign(o, group, job, live)
    if isinstance(placements, str):
        return Nothing()  # the bind waits for it; a nomination is only a hint
    changed = tuple(p for p in placements if _nominated(p.pod) != p.kube_node)
    if changed and o.job_phase_age < NOMINATE_AFTER_SECONDS:
        wait = NOMINATE_AFTER_SECONDS - o.job_phase_age
        return Later(wait, "the prologs may pass before a nomination shows")
    if changed:
        return Nominate(changed)
    placed = {_uid(p.pod) for p in placements}
    left = tuple(m for m in live if not _bound(m) and _uid(m) not in placed)
    if left and _outgrown(group, job):
        return Pend(left, REASON_GROUP_FULL, _outgrown_message(group, job))
    return Nothing()


def _pending(
    o: Observed, group: groups.Group, job: JobStatus, unbound: tuple[JSON, ...], result: validation.Validation
) -> Action:
    nominated = tuple(Placement(m, "", "") for m in unbound if _nominated(m))
    if nominated:
        return Nominate(nominated)  # back to pending (requeued before its script started)
    if o.fits is NOT_JUDGED:
        return Judge()
    fits = _fits(o, unbound)
    if fits:
        unfit = _job_unfit(group, fits)
        # Slurm refuses a job that both requires and excludes a node: a required node that stopped
        # fitting stays allowed, and the Pod is told why it waits.
        wanted = excluded_nodes(result, unfit) - required_nodes(result)
        if wanted != (o.job_excludes if o.job_excludes is not None else frozenset(job.job.excluded_nodes)):
            return Exclude(job.job_id, compress(sorted(wanted)), tuple(c.job_id for c in job.job.components))
        unschedulable = _unschedulable(group, unbound, fits, unfit) or _required_unfit(
            unbound, result, fits, unfit
        )
        if unschedulable is not None:
            return unschedulable
    if job.job.state_reason in ("", "None"):
        return Nothing()  # not yet looked at: the next change tells
    if o.job_phase_age < PENDING_AFTER_SECONDS:
        wait = PENDING_AFTER_SECONDS - o.job_phase_age
        return Later(wait, "Slurm may start the job before its reason shows")
    return Pend(unbound, REASON_PENDING, queue.pending_message(job))


def required_nodes(result: validation.Validation) -> frozenset[str]:
    named = result.job_annotations.get(keys.REQUIRED_NODES, "")
    return frozenset(expand(named) if named else ())


def _required_unfit(
    members: tuple[JSON, ...], result: validation.Validation, fits: list[Eligibility], unfit: tuple[str, ...]
) -> Pend | None:
    """The annotation requires nodes whose Nodes would not take the Pod: it waits for them, as
    kube-scheduler's Pod pinned to a Node that does not fit (Slurm would refuse the job outright)."""
    missing = sorted(required_nodes(result) & set(unfit))
    if not missing:
        return None
    why = fits[0].message() if fits else ""
    message = f"required node(s) {compress(missing)} ({keys.REQUIRED_NODES}) would not take the Pod"
    return Pend(
        members, REASON_UNSCHEDULABLE, f"{message}; {why}" if why else message, event="FailedScheduling"
    )


def excluded_nodes(result: validation.Validation, unfit: tuple[str, ...]) -> frozenset[str]:
    """What the job must exclude: the nodes that do not fit and the ones the annotation names."""
    named = result.job_annotations.get(keys.EXCLUDED_NODES, "")
    return frozenset(unfit) | frozenset(expand(named) if named else ())


def refused(pod: JSON) -> bool:
    """This scheduler refused the Pod (invalid, or Slurm said no): it stays so until recreated."""
    c = condition(pod, "PodScheduled")
    return c is not None and c.get("status") == "False" and c.get("reason") in REFUSED_REASONS


def recorded_job_id(pod: JSON) -> int | None:
    return keys.recorded_job_id(pod)


def placement_state(o: Observed, action: Action, pod: JSON | None = None) -> str:
    """Where a member stands (scheduler.proto's PlacementState, without the prefix), read off the
    same decision the reconciler acts on. `pod`: which member (the only one when not given)."""
    if pod is None:
        pod = o.members[0] if o.members else {}
    job = o.job
    if job is not None and o.group is not None and _outgrown_before_it_ran(o.group, job):
        job = None  # cancelled to be replaced: its members wait for the new job
    uid = _uid(pod)
    mine = _touches(action, uid)
    if (isinstance(action, Reject) and mine) or (pod and refused(pod)):
        return "INVALID"
    if (
        (isinstance(action, Cancel) and not action.pods)
        or (isinstance(action, Delete) and mine)
        or (pod.get("metadata") or {}).get("deletionTimestamp")
        or (job is not None and (job.terminating or job.ended))
    ):
        return "TERMINATING"
    if _bound(pod):
        return "BOUND"
    if isinstance(action, Wait) or (isinstance(action, Bind) and mine) or (job is not None and job.started):
        return "STARTED"
    return "PENDING"


def _touches(action: Action, uid: str) -> bool:
    if isinstance(action, Bind | Nominate):
        return any(_uid(p.pod) == uid for p in action.placements)
    pods = getattr(action, "pods", None) or getattr(action, "members", None) or ()
    return any(_uid(p) == uid for p in pods)
