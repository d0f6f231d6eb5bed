"""What the scheduler should do for one group of Pods placed as one Slurm job, decided from what it
observes and nothing else. A Pod alone is a group of one (tandem.scheduler.groups.alone): every
check and Event below applies to a Pod alone and to each member of a gang the same way.

`decide` is pure: a snapshot of plain values in (the members from the informer cache, the group's
job from the syncer's stream, the job ids this process wrote that the caches do not show yet, the
Slurm node -> Node mapping, which Nodes would take each member once decide asks with Judge); one
action out. Members are never placed one by one: the job asks Slurm for one node per member and
the members are bound only when the job runs on all of them (every prolog passed, the script
started). The controller carries the action out; a crash at any line of that leaves the world in a
state `decide` maps to the remaining step (tests/unit/scheduler/test_decide.py has one row per line, crash
rows included, and runs a Pod alone's rows as a group of one):

    no live member (deleted, deleting, finished)  -> cancel every live job of the group (an Event on
                                                     its PodGroup, naming a preemption by
                                                     kube-scheduler when that is why)
    job live, its PodGroup deleted                -> cancel the job
    a live job of an earlier Pod of a Pod alone's -> cancel it (a StatefulSet's Pod deleted and made
      name                                           again: the earlier one is gone)
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
                                                     nodes, too: the group keeps running); an
                                                     elastic gang's PodGroup says how many of how
                                                     many asked run
    job running, its workload (a Job) asking for  -> shrink the job in place to the nodes its
      no more members than live, a node no member    members hold (tandem.scheduler.elastic)
      holds any more
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
    members without the job id                    -> record it on them (but a Pod alone that
                                                     tolerates the lock: its binding records it,
                                                     or, its job pending 2 s, a write then)
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
    job running, minCount grew past its nodes     -> a PodGroup's members beyond its nodes each get a
                                                     job of its own linked to it, at its priority
                                                     (tandem.scheduler.elastic); an LWS or het
                                                     group's wait (GroupAllocationFull), saying so:
                                                     a running job cannot grow, never cancelled
                                                     for it
    more members than minCount (elastic)          -> the first minCount are the core, which every
                                                     line here places; each other member gets a job
                                                     of its own once the core runs whole, and goes
                                                     when the core stops (tandem.scheduler.elastic)
    job allocated, prologs running                -> nominate the Nodes (status.nominatedNodeName),
                                                     once allocated for NOMINATE_AFTER_SECONDS (most
                                                     scripts start sooner: the bind says it all);
                                                     once nominated, minCount grown past the job's
                                                     nodes: the others told as above
    job pending, a member nominated               -> clear the nomination (requeued before its start)
    job pending, the fit changed                  -> update the job's excluded nodes (never a
                                                     node it requires)
    job pending, one domain asked, the domains    -> update the job's constraint to the domains
      that can hold it changed (labels, fit)         that can hold it now (not a het job's; none
                                                     with room: left as it is)
    job pending, too few Nodes would take them    -> Unschedulable
      or a node it requires would not
    job pending                                   -> Slurm's reason on every member (and the PodGroup),
                                                     once pending for PENDING_AFTER_SECONDS (until
                                                     then: look again then)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tandem import reasons
from tandem.kube import JSON
from tandem.scheduler import (
    admission,
    binding,
    elastic,
    groups,
    growth,
    podstate,
    validation,
)
from tandem.scheduler.actions import (
    NO_GPUS,
    NOT_JUDGED,
    Action,
    Bind,
    Cancel,
    CancelCause,
    Constrain,
    Delete,
    Exclude,
    Judge,
    Later,
    Nominate,
    Nothing,
    Observed,
    Pend,
    Placement,
    Record,
    Wait,
)
from tandem.slurm import queue
from tandem.slurm.hostlist import compress
from tandem.slurm.models import JobStatus

# How long a job pends, or holds its nodes with its prologs running, before its members say so:
# most placeholders pass both in well under a second, and a status write that a person would never
# see costs the API server, and every watcher of Pods, one request and one event per Pod (issue 22).
# A job pending longer is waiting on something a person may want to read (Resources, Priority).
PENDING_AFTER_SECONDS = 2.0
NOMINATE_AFTER_SECONDS = 1.0


def decide(o: Observed) -> Action:
    group, job = o.group, o.job
    live = tuple(sorted((m for m in o.members if podstate.is_live(m)), key=groups.rank))
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
            gone,
            cause,
            why,
            (),
            reasons.EVENT_JOB_CANCELLED,
            f"Slurm job {jobs} cancelled: {why}",
            group.podgroup,
        )
    job_live = job is not None and not job.ended and job.job_id not in o.cancel_sent
    if job_live and job is not None and group is not None and not alone and _podgroup_deleted(group):
        return Cancel((job.job_id,), CancelCause.PODGROUP_DELETED, "its PodGroup was deleted")
    earlier = tuple(j for j in o.earlier_jobs if j not in o.cancel_sent)
    if earlier:
        return Cancel(
            earlier, CancelCause.EARLIER_POD, "its Pod is gone (a new Pod of the same name replaced it)"
        )
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
    # An elastic gang's members beyond its core each run as a job of their own (tandem.scheduler.
    # elastic); everything below but the extras' own lines is about the core.
    core: tuple[JSON, ...] = live
    extras: tuple[JSON, ...] = ()
    # Also a running core with more members than nodes (minCount raised while it ran: Slurm
    # cannot grow a job, so the members beyond go on linked jobs of their own).
    beyond = job is not None and job.running and job.started and 0 < job.job.node_count < len(live)
    if o.extras or len(live) > group.min_count or beyond:
        core, extras = elastic.roles(group, live, job, o.extras)
        settled = elastic.settle(o, group, job, live)
        if settled is not None:
            return settled
    if o.asked is not None:
        shrunk = elastic.shrink(o, group, job, core, live)
        if shrunk is not None:
            return shrunk
    replaced: int | None = None
    if job is not None:
        carrying = tuple(
            m for m in core if podstate.carries(m, o.recorded.get(podstate.uid(m)), job.job_id, alone)
        )
        # Cancelled before it ran because minCount grew past it: a new job follows (not a Pod alone's).
        outgrown = job.ended and not alone and growth.outgrown_before_it_ran(group, job)
        stopped = _stopped_under(o.hosts, outgrown, job, carrying)
        if stopped is not None:
            return stopped
        if job.ended and not alone and (not carrying or outgrown):
            # Over, and no live member was part of it (they were replaced), or cancelled before it
            # ran because minCount grew past it: a new job. A Pod alone's jobs are all its own
            # (found by its uid): it records this one, then goes.
            replaced, job = job.job_id, None
    if any(podstate.refused(m) for m in core):
        # Never to be bound: its job would only hold nodes (the policy changed after the submit,
        # or a crash came between the refusal and this cancel), unless part of it runs already.
        if job is not None:
            unwanted = None if job.ended or job.terminating else job.job_id
        else:
            unwanted = o.submitted_job_id
        if (
            unwanted is not None
            and unwanted not in o.cancel_sent
            and not any(podstate.bound(m) for m in core)
        ):
            if alone:
                return Cancel((unwanted,), CancelCause.REFUSED, "the Pod was refused before it was bound")
            return Cancel((unwanted,), CancelCause.REFUSED, "a member was refused before the group was bound")
        return Nothing()
    unbound = tuple(m for m in live if not podstate.bound(m))
    if group.waiting_for:
        if not unbound:
            return Nothing()
        return Pend(unbound, reasons.REASON_WAITING_FOR_GROUP, f"waiting for {group.waiting_for}")
    results = tuple(
        o.validations.get(podstate.uid(m))
        or validation.validate(m, o.kill_wait, o.reject_static_cpu, o.policy, o.kill_wait_source)
        for m in live
    )
    invalid = admission.invalid(group, live, results) or admission.unclaimable(o, group, live)
    if invalid is not None:
        return invalid
    if not unbound:
        if job is not None and not alone and elastic.core_whole(job, core):
            return elastic.tally(o, group, job, core, extras) or Nothing()
        return Nothing()
    job_id = (
        job.job_id if job is not None else o.submitted_job_id or _recorded_by_all(o.recorded, core, replaced)
    )
    if job_id is None:
        waiting = [w for m in live for w in o.gpu.gpus.get(podstate.uid(m), NO_GPUS).waiting]
        if waiting:
            return Wait(f"waiting for {', '.join(waiting)}")
        return admission.new_job(
            o,
            group,
            live,
            tuple(admission.with_claimed_gpus(o.gpu.gpus, m, r) for m, r in zip(live, results, strict=True)),
        )
    if (
        job is not None
        and job.pending
        and growth.outgrown(group, job)
        and not any(podstate.bound(m) for m in live)
    ):
        if job.job_id in o.cancel_sent:
            return Nothing()  # its end brings the new job
        return _cancel_outgrown(group, job, live)
    # A Pod alone that records its job at its bind does so while the job may still start at once;
    # one whose job pends PENDING_AFTER_SECONDS gets it written beside the condition saying why.
    at_bind = alone and not (job is not None and job.pending and o.job_phase_age >= PENDING_AFTER_SECONDS)
    unrecorded = tuple(
        m for m in core if not podstate.carries(m, o.recorded.get(podstate.uid(m)), job_id, at_bind)
    )
    if unrecorded:
        # A previous life submitted, or recording failed, or a crash came in between.
        return Record(unrecorded, job_id)
    if job is None:
        return Nothing()  # submitted; the syncer's stream brings the job
    if job.terminating:
        return Nothing()  # being stopped: its end deletes the members
    if job.running and job.started and job.job.nodes:
        if extras and elastic.core_whole(job, core):
            validated = {podstate.uid(m): r for m, r in zip(live, results, strict=True)}
            grown = elastic.grow(o, group, job, core, extras, validated)
            return grown or elastic.tally(o, group, job, core, extras) or Nothing()
        placed = binding.bind(o, group, job, core)
        if extras and isinstance(placed, Bind):
            return dataclasses.replace(placed, extras=frozenset(podstate.uid(m) for m in extras))
        return placed
    if job.running and job.job.nodes:
        return _nominate(o, group, job, core)
    if job.pending:
        return _pending(o, group, job, tuple(m for m in core if not podstate.bound(m)), unbound, results[0])
    return Nothing()


def _podgroup_deleted(group: groups.Group) -> bool:
    if group.target.composite is not None:
        return group.ref.uid == "" and bool(group.waiting_for)
    return group.podgroup is None and bool(group.waiting_for) and group.target.podgroup is not None


def _gone(o: Observed) -> tuple[CancelCause, str]:
    if o.group is not None and not o.group.alone:
        if o.members and all(podstate.preempted(m) for m in o.members):
            why = "kube-scheduler preempted every member of the group (workload-aware preemption)"
            return CancelCause.MEMBERS_GONE, why
        return CancelCause.MEMBERS_GONE, "every member of the group is gone"
    if not o.members:
        return CancelCause.POD_DELETED, "Pod deleted"
    if (o.members[0].get("metadata") or {}).get("deletionTimestamp"):
        return CancelCause.MEMBERS_GONE, "Pod is being deleted"
    return CancelCause.MEMBERS_GONE, "Pod finished"


def _stopped_under(
    hosts: Mapping[str, str], outgrown: bool, job: JobStatus, carrying: tuple[JSON, ...]
) -> Delete | None:
    """The members that must go because their job stopped: a bound one lives exactly as long as
    its job, on its job's nodes; one not bound yet goes once its job ended (but for a job cancelled
    before it ran because the group outgrew it: `outgrown`)."""
    bound = [m for m in carrying if podstate.bound(m)]
    why = ""
    if job.terminating:
        why = "was stopped (scancel, time limit or preemption)"
    elif job.ended:
        why = f"ended ({job.state_name})"
    elif job.pending:
        why = "was requeued"
    if bound and why:
        preempted = job.job.state == "PREEMPTED"
        why = "was preempted" if preempted else why
        return Delete(
            tuple(bound),
            "Normal",
            "SlurmJobEnded",
            f"Slurm job {job.job_id} {why}; deleting the Pod",
            preempted,
        )
    if job.running and job.started and job.job.nodes:
        on = [hosts.get(s) for s in job.job.nodes]
        moved = tuple(m for m in bound if None not in on and (m.get("spec") or {}).get("nodeName") not in on)
        if moved:
            return Delete(
                moved,
                "Normal",
                "SlurmJobEnded",
                f"Slurm job {job.job_id} now runs on {', '.join(job.job.nodes)}, not on this Pod's Node; "
                "deleting the Pod",
            )
    unbound = tuple(m for m in carrying if not podstate.bound(m) and not podstate.refused(m))
    if unbound and job.ended and not outgrown:
        return Delete(
            unbound,
            "Warning",
            "SlurmJobEnded",
            f"placeholder job {job.job_id} ended ({job.state_name}) before the Pod was bound",
        )
    return None


def _recorded_by_all(
    recorded: Mapping[str, int], live: tuple[JSON, ...], replaced: int | None = None
) -> int | None:
    """The job id the members carry (a previous life submitted and recorded it), but the one a new
    job replaces."""
    ids = {
        job_id for m in live if (job_id := recorded.get(podstate.uid(m))) is not None and job_id != replaced
    }
    return max(ids) if ids else None


def _cancel_outgrown(group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Cancel:
    """A pending job asks for too few nodes now: cancelled, so the group becomes one job of minCount
    (Slurm cannot change a pending job's node count for Tandem: its nodes, tasks and resources per
    node are all the submit's)."""
    wanted, asked = group.min_count, job.job.node_count
    return Cancel(
        (job.job_id,),
        CancelCause.OUTGROWN,
        f"{growth.size_name(group)} grew to {wanted}, past the {asked} nodes the pending job asks for",
        live,
        reasons.EVENT_JOB_OUTGROWN,
        f"{group.title}'s {growth.size_name(group)} grew to {wanted} while Slurm job {job.job_id} ({asked} "
        f"nodes) was pending: cancelling it to place the group as one job of {wanted}",
    )


def _nominate(o: Observed, group: groups.Group, job: JobStatus, live: tuple[JSON, ...]) -> Action:
    """Allocated, the prologs running: where each member will run, as kube-scheduler nominates."""
    placements = binding.assign(o, group, job, live)
    if isinstance(placements, str):
        return Nothing()  # the bind waits for it; a nomination is only a hint
    changed = tuple(p for p in placements if podstate.nominated(p.pod) != p.kube_node)
    if changed and o.job_phase_age < NOMINATE_AFTER_SECONDS:
        wait = NOMINATE_AFTER_SECONDS - o.job_phase_age
        return Later(wait, "the prologs may pass before a nomination shows")
    if changed:
        return Nominate(changed)
    placed = {podstate.uid(p.pod) for p in placements}
    left = tuple(m for m in live if not podstate.bound(m) and podstate.uid(m) not in placed)
    if left and growth.outgrown(group, job):
        return Pend(left, reasons.REASON_GROUP_FULL, growth.outgrown_message(group, job))
    return Nothing()


def _pending(
    o: Observed,
    group: groups.Group,
    job: JobStatus,
    core: tuple[JSON, ...],
    unbound: tuple[JSON, ...],
    result: validation.Validation,
) -> Action:
    """`core`: the members the job is for, not bound (an elastic gang's extras wait for it to run:
    `unbound` is every member not bound)."""
    nominated = tuple(Placement(m, "", "") for m in unbound if podstate.nominated(m))
    if nominated:
        return Nominate(nominated)  # back to pending (requeued before its script started)
    if o.fits is NOT_JUDGED:
        return Judge()
    fits = admission.member_fits(o.fits, core)
    if fits:
        unfit = admission.job_unfit(group.min_count, bool(group.components), fits)
        # Slurm refuses a job that both requires and excludes a node: a required node that stopped
        # fitting stays allowed, and the Pod is told why it waits.
        wanted = admission.excluded_nodes(result, unfit) - admission.required_nodes(result)
        if wanted != (o.job_excludes if o.job_excludes is not None else frozenset(job.job.excluded_nodes)):
            return Exclude(job.job_id, compress(sorted(wanted)), tuple(c.job_id for c in job.job.components))
        # A rack labelled, relabelled or emptied while the gang waits reaches its job (issue 53).
        constraint = admission.pending_constraint(o, group, result, frozenset(unfit))
        held = o.job_constraint if o.job_constraint is not None else job.job.features
        if constraint is not None and constraint != held:
            return Constrain(job.job_id, constraint)
        named = None if group.alone else group.title
        unschedulable = admission.unschedulable_pend(
            named, group.min_count, core, fits, unfit
        ) or admission.required_unfit(core, result, fits, unfit)
        if unschedulable is not None:
            return unschedulable
    if job.job.state_reason in ("", "None"):
        return Nothing()  # not yet looked at: the next change tells
    if o.job_phase_age < PENDING_AFTER_SECONDS:
        wait = PENDING_AFTER_SECONDS - o.job_phase_age
        return Later(wait, "Slurm may start the job before its reason shows")
    return Pend(unbound, reasons.REASON_PENDING, queue.pending_message(job))
