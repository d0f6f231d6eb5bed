"""Elastic gangs (issue 53): a homogeneous group with more live members than its minCount (a Job
whose parallelism is above its PodGroup's minCount, a PodGroup whose minCount was lowered) runs as
a core job of minCount members, placed as every gang is (all or nothing), and one Slurm job per
member beyond it, an extra, linked to the core by its name (tandem.placeholder.extra_ref). Pure,
like tandem.scheduler.decide, which asks this module about a group's extras:

    an extra's job live, its member gone         -> cancel it (the workload scaled down)
    an extra's job live, the core not running    -> cancel it: no extra runs while its core does
      with its script started                       not (pending, requeued, stopping, ended)
    a bound extra, its job stopped or requeued   -> delete it, as any member whose job stopped
    an extra not bound, its job ended            -> delete it (its workload makes another)
    the core running, its workload asking for    -> shrink the core job in place to the nodes
      no more members than live, a node of it       its members still hold (`shrink`) and its
      held by no member (the member is gone)        batch host: Slurm releases the others
    the core running whole (every core member    -> for the extras, in this order: record each
      bound)                                        one's job id on it; bind one whose job runs
                                                    with its script started to that job's node;
                                                    submit a job for the next without one, once
                                                    every extra's job holds its node; say why
                                                    one whose job pends waits

An extra's job is the core's for everything Slurm checks (user, account, partition, QOS, the
Pods' own constraints and exclusions), one node, never a node of the core or of another extra,
in the domain the core landed in when the group asks for one, and Slurm takes it back first: it
runs with a nice (--extra-member-nice), so a preemptor needing nodes finds extras below the core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from tandem import keys, reasons
from tandem.kube import JSON, pod_finished
from tandem.scheduler import binding, domains, groups, podstate, validation
from tandem.scheduler.actions import (
    Action,
    Bind,
    Cancel,
    CancelCause,
    Delete,
    Observed,
    Pend,
    Record,
    Shrink,
    SubmitExtras,
    Tally,
)
from tandem.slurm import queue
from tandem.slurm.models import JobStatus


def roles(
    group: groups.Group, live: tuple[JSON, ...], job: JobStatus | None, extras: Mapping[str, JobStatus]
) -> tuple[tuple[JSON, ...], tuple[JSON, ...]]:
    """The core's members and the extras, each in rank order. A member with a job of its own is an
    extra; of the others, those bound (on the core's nodes) first, then by rank, fill the core up to
    minCount, or to the core job's node count when minCount shrank below it; a running core holds
    just its job's nodes (shrunk, or minCount raised while it ran: the members beyond are extras)."""
    if not group.elastic:
        return live, ()
    size = group.min_count
    if job is not None and job.holds_nodes and job.job.node_count:
        size = job.job.node_count
    elif job is not None and not job.ended:
        size = max(size, job.job.node_count)
    others = sorted((m for m in live if podstate.uid(m) not in extras), key=lambda m: not podstate.bound(m))
    core = others[:size]
    in_core = {podstate.uid(m) for m in core}
    return tuple(m for m in live if podstate.uid(m) in in_core), tuple(
        m for m in live if podstate.uid(m) not in in_core
    )


def core_whole(job: JobStatus | None, core: tuple[JSON, ...]) -> bool:
    """The core runs with its script started and every core member bound: extras may run. A core
    no member is left in (scaled down past it, its batch host kept) is whole too: the extras that
    ran beside it run on."""
    return _core_runs(job) and all(podstate.bound(m) for m in core)


def _core_runs(job: JobStatus | None) -> bool:
    return job is not None and job.running and job.started and not job.terminating


def settle(o: Observed, group: groups.Group, job: JobStatus | None, live: tuple[JSON, ...]) -> Action | None:
    """What must go first: extras' jobs nothing may run (member gone, core not running), and extras
    whose own job stopped."""
    if not o.extras:
        return None
    running = _core_runs(job)
    live_uids = {podstate.uid(m) for m in live}
    orphaned = tuple(
        j.job_id
        for uid, j in sorted(o.extras.items())
        if not j.ended and j.job_id not in o.cancel_sent and (uid not in live_uids or not running)
    )
    if orphaned:
        why = (
            "its extra member is gone"
            if running
            else f"the core job of {group.title} is not running, and no extra member runs without it"
        )
        return Cancel(orphaned, CancelCause.EXTRA, why)
    for m in live:
        j = o.extras.get(podstate.uid(m))
        if j is None:
            continue
        if podstate.bound(m) and (j.terminating or j.ended or j.pending):
            preempted = j.job.state == "PREEMPTED"
            stopped = (
                "was preempted (Slurm takes extras back before the core)"
                if preempted
                else "was requeued"
                if j.pending
                else f"ended ({j.state_name})"
                if j.ended
                else "was stopped"
            )
            return Delete(
                (m,),
                "Normal",
                "SlurmJobEnded",
                f"Slurm job {j.job_id}, an extra member of {group.title}, {stopped}; deleting the Pod",
                preempted,
            )
        if not podstate.bound(m) and j.ended:
            return Delete(
                (m,),
                "Warning",
                "SlurmJobEnded",
                f"placeholder job {j.job_id} of an extra member of {group.title} ended ({j.state_name})"
                " before the Pod was bound",
            )
    return None


def shrink(
    o: Observed, group: groups.Group, job: JobStatus | None, core: tuple[JSON, ...], live: tuple[JSON, ...]
) -> Action | None:
    """A running core whose workload asks for no more members than are live, with nodes no member
    holds any more (their members are gone, not merely going: a Pod being deleted still runs on
    its node): shrunk in place to the nodes its members hold. A member the workload will replace
    (it asks for more than are live), or has replaced (a core member not bound yet), keeps its
    node for the replacement."""
    if o.asked is None or len(live) < o.asked or not _core_runs(job) or job is None:
        return None
    if not all(podstate.bound(m) for m in core):
        return None
    if not group.elastic or job.job_id in o.cancel_sent:
        return None
    on_node = {node for m in o.members if podstate.bound(m) and not pod_finished(m) and (node := _node_of(m))}
    nodes = job.job.nodes
    if any(s not in o.hosts for s in nodes):
        return None  # which Node a node is not known (yet): a member may run on any of them
    held = tuple(s for s in nodes if o.hosts.get(s) in on_node)
    # Slurm never releases the node running the job's batch script (its first: `Invalid node name
    # specified`), so it stays even when its member is the one that left; a member the workload
    # adds later takes it. So too when every core member left and only extras run (a Job whose
    # completions stay fixed scales down by readiness, not index, and may take the core first):
    # the extras run on, the core holds its batch host alone for the group's next member.
    script = nodes[0]
    keep = held if script in held else (script, *held)
    if len(keep) == len(nodes):
        return None  # every node still held
    if o.job_shrunk_to == frozenset(keep):
        return None  # asked; the stream shows the job's new nodes next
    released = tuple(s for s in nodes if s not in keep)
    return Shrink(job.job_id, keep, released, o.asked, core, "" if script in held else script)


# How an elastic gang's tally begins: a condition that says one is kept up to date after the last
# extra leaves too.
_TALLY = "elastic: "


def tally(
    o: Observed, group: groups.Group, job: JobStatus, core: tuple[JSON, ...], extras: tuple[JSON, ...]
) -> Action | None:
    """The core runs whole and nothing else is to do: the PodGroup's condition says how many
    members run of how many its workload asks for, once the group has had extras (None when it
    says so already)."""
    said = _condition_message(group.podgroup)
    if not extras and not said.startswith(_TALLY):
        return None
    bound_extras = sum(1 for m in extras if podstate.bound(m))
    running = len(core) + bound_extras
    asked = o.asked if o.asked is not None else len(core) + len(extras)
    held = max(len(core), job.job.node_count)
    nodes = "1 node" if held == 1 else f"{held} nodes"
    if not core:
        nodes += ", no member left on it"
    message = f"{_TALLY}{running} of {asked} members run: the core on Slurm job {job.job_id} ({nodes})"
    if bound_extras == 1:
        message += " and 1 extra member on a Slurm job of its own"
    elif bound_extras:
        message += f" and {bound_extras} extra members, each on a Slurm job of its own"
    return None if message == said else Tally(message)


def _condition_message(podgroup: JSON | None) -> str:
    for c in ((podgroup or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == keys.PODGROUP_SCHEDULED:
            return str(c.get("message") or "")
    return ""


def _node_of(pod: JSON) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def grow(
    o: Observed,
    group: groups.Group,
    job: JobStatus,
    core: tuple[JSON, ...],
    extras: tuple[JSON, ...],
    results: Mapping[str, validation.Validation],
) -> Action | None:
    """The core runs whole: each extra's next step (None: nothing for any)."""
    waiting = tuple(m for m in extras if not podstate.bound(m) and not podstate.refused(m))
    for m in waiting:
        j = o.extras.get(podstate.uid(m))
        if j is not None and not j.ended and o.recorded.get(podstate.uid(m)) != j.job_id:
            return Record((m,), j.job_id)
    for m in waiting:
        j = o.extras.get(podstate.uid(m))
        if j is not None and j.running and j.started and j.job.nodes:
            placed = binding.bind(o, group, j, (m,))
            return dataclasses.replace(placed, extra=True) if isinstance(placed, Bind) else placed
    new = tuple(
        m for m in waiting if podstate.uid(m) not in o.extras and podstate.uid(m) not in o.extra_submitted
    )
    # One at a time, each once the one before holds its node: a node per member, as in the core
    # (two submitted together could land on one node neither excluded).
    unplaced = bool(o.extra_submitted) or any(not j.ended and not j.job.nodes for j in o.extras.values())
    if new and not unplaced:
        validated = (results[podstate.uid(new[0])],)
        ask = domains.asked(group, validated[0].job_annotations)
        # Within minCount (raised while the core ran): a member of the core on a linked job.
        rank = extras.index(new[0])
        return SubmitExtras(
            new[:1],
            validated,
            job.job_id,
            tuple(sorted(_taken(job, o.extras.values()))),
            domains.core_domain(o.topology, ask, job.job.nodes),
            of_core=len(core) + rank < group.min_count,
        )
    if new and unplaced:
        # Told once (the condition shows it after): the extras pending in Slurm say their reasons.
        turn = (
            f"an extra member of {group.title} (its core, Slurm job {job.job_id}, runs): its own Slurm"
            " job is submitted once the extra member before it holds its node (one at a time, one"
            " node each)"
        )
        untold = tuple(m for m in new if not podstate.says(m, reasons.REASON_EXTRA_QUEUED, turn))
        if untold:
            return Pend(untold, reasons.REASON_EXTRA_QUEUED, turn, group=False)
    pending = [
        (m, j)
        for m in waiting
        if (j := o.extras.get(podstate.uid(m))) is not None
        and j.pending
        and j.job.state_reason not in ("", "None")
    ]
    if pending:
        m, j = pending[0]
        return Pend(
            tuple(p for p, _ in pending),
            reasons.REASON_PENDING,
            f"an extra member of {group.title} (its core, Slurm job {job.job_id}, runs): "
            + queue.pending_message(j),
            group=False,
        )
    return None


def _taken(core: JobStatus, extras: Iterable[JobStatus]) -> set[str]:
    """The nodes an extra may not take: the core's, the other extras' (one member per node)."""
    taken = set(core.job.nodes)
    for j in extras:
        if j.holds_nodes:
            taken.update(j.job.nodes)
    return taken
