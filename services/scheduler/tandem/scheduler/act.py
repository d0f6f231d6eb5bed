"""Carrying out one decision (tandem.scheduler.decide's Action) through the writers: each kind of
action is one small step. Nothing here decides; a step that fails raises for the runner's backoff
(tandem.runner), and what was written before it is remembered (tandem.scheduler.assumed) so the
retry does not write it twice."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tandem import placeholder, reasons, tracing
from tandem.kube import JSON, object_key, parse_rfc3339
from tandem.metrics import REGISTRY
from tandem.runner import NotYet, Requeue
from tandem.scheduler import actions, groups, jobspec
from tandem.scheduler.gpuclaims import ClaimWrite
from tandem.scheduler.hands import Hands
from tandem.scheduler.submitting import PODS_VALIDATED, submit, submit_extras
from tandem.scheduler.validation import Problem
from tandem.slurm.models import JobStatus

log = logging.getLogger(__name__)

BIND_SECONDS = REGISTRY.histogram("tandem_bind_seconds", "time from the job's script start to the Pod bound")
CREATE_TO_BOUND_SECONDS = REGISTRY.histogram(
    "tandem_pod_create_to_bound_seconds",
    "time from Pod creation to binding",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)


def act(
    h: Hands,
    cfg: jobspec.PlaceholderConfig,
    o: actions.Observed,
    action: actions.Action,
    all_bound: Callable[[str], None] = lambda key: None,
) -> Requeue:
    """`all_bound`: told a key whose members this action left all bound."""
    match action:
        case actions.Nothing():
            return None
        case actions.Wait(why=why):
            raise NotYet(why)
        case actions.Later(after=after):
            return after
        case actions.Cancel():
            cancel(h, o.key, o.group, action)
            return None
    group = o.group
    assert group is not None  # every other action is about Pods that are there
    match action:
        case actions.Reject(pods=pods, message=message, problems=problems):
            reject(h, group, pods, message, problems)
        case actions.Warn(pods=pods, reason=reason, message=message):
            for pod in pods:
                h.announce.event(pod, "Warning", reason, message)
        case actions.Refuse(pods=pods, reason=reason, message=message):
            h.announce.refuse(group, pods, reason, message)
        case actions.Submit():
            submit(h, cfg, group, action, o.kill_wait)
        case actions.SubmitExtras():
            submit_extras(h, cfg, group, action, o.kill_wait)
        case actions.Record(pods=pods, job_id=job_id):
            for pod in pods:
                h.record(pod, job_id)
            # The informer's copy of this write brings no reconcile (own write shown), and the
            # next step may need none (a member joining a gang whose job runs: its bind).
            return 0.0
        case actions.Pend(pods=pods, reason=reason, message=message, event=event, group=of_group):
            h.announce.pend(group, pods, reason, message, event, of_group)
        case actions.Nominate(placements=placements):
            for placement in placements:
                h.writers.pods.nominate(placement.pod, placement.kube_node)
        case actions.Exclude():
            exclude(h, o.key, action)
        case actions.Constrain():
            constrain(h, o.key, action)
        case actions.Shrink():
            shrink(h, o.key, group, action)
        case actions.Tally(message=message):
            h.announce.group_status(group, True, "Scheduled", message)
        case actions.MakeClaims():
            make_claims(h, action)
        case actions.Bind():
            bind_all(h, o, group, action, all_bound)
            if action.extra:
                # A bound Pod's changes bring no reconcile: the next extra waits for this look.
                return 0.0
        case actions.Delete(pods=pods, event_type=type_, event_reason=reason, message=message):
            for pod in pods:
                h.announce.event(pod, type_, reason, message)
                if action.preempted:
                    h.writers.pods.set_disrupted(pod, reasons.PREEMPTED_BY_SLURM, message)
                h.writers.pods.delete(pod)
    return None


def reject(
    h: Hands, group: groups.Group, pods: tuple[JSON, ...], message: str, problems: tuple[Problem, ...]
) -> None:
    for pod in pods:
        h.writers.pods.set_unscheduled(pod, reasons.REASON_INVALID, message)
        h.announce.event(pod, "Warning", "FailedValidation", message)
        log.info("pod rejected", extra={"pod": object_key(pod), "reason": message})
    for problem in problems:
        PODS_VALIDATED.inc(result="invalid", reason=problem.reason)
    h.announce.group_status(group, False, "Unschedulable", message, event=("Warning", "FailedValidation"))


def exclude(h: Hands, key: str, action: actions.Exclude) -> None:
    # A het job's components each keep their own list (Slurm sets the one asked).
    for each in action.component_ids or (action.job_id,):
        h.writers.slurm.set_excluded_nodes(each, action.hostlist)
    h.remember_excludes(action.job_id, action.hostlist)
    log.info("excluded nodes updated", extra={"pod": key, "job": action.job_id, "excluded": action.hostlist})


def constrain(h: Hands, key: str, action: actions.Constrain) -> None:
    h.writers.slurm.set_constraints(action.job_id, action.constraints)
    h.assumed.constraints.assume(str(action.job_id), action.constraints)
    log.info(
        "job constraint updated", extra={"pod": key, "job": action.job_id, "constraints": action.constraints}
    )


def shrink(h: Hands, key: str, group: groups.Group, action: actions.Shrink) -> None:
    h.writers.slurm.shrink_job(action.job_id, action.keep)
    h.assumed.shrunk.assume(str(action.job_id), frozenset(action.keep))
    released = ", ".join(action.released)
    log.info("core job shrunk", extra={"pod": key, "job": action.job_id, "released": released})
    members = "1 member" if action.asked == 1 else f"{action.asked} members"
    h.announce.group_event(
        group,
        action.members,
        "Normal",
        reasons.EVENT_JOB_SHRUNK,
        f"Slurm job {action.job_id} shrunk in place to {', '.join(action.keep)}: its workload asks for"
        f" {members}; {released} released (their members left)"
        + (
            f"; {action.script_node} stays, though its member left: it runs the job's batch script,"
            " which Slurm cannot release (a member the workload adds takes it)"
            if action.script_node
            else ""
        ),
    )


def make_claims(h: Hands, action: actions.MakeClaims) -> None:
    """The claims made for Pods asking nvidia.com/gpu; a stale one dropped first (a later pass makes
    its replacement once the informer shows it gone)."""
    for claim, why in action.stale:
        h.writers.claims.drop(claim, why)
    if not action.stale:
        for pod, manifest in action.new:
            made = h.writers.claims.make(pod, manifest)
            h.assumed.made_claims.assume(str(pod["metadata"]["uid"]), made)


def bind_all(
    h: Hands, o: actions.Observed, group: groups.Group, action: actions.Bind, all_bound: Callable[[str], None]
) -> None:
    job = action.job
    for placement in action.placements:
        uid = str(placement.pod["metadata"]["uid"])
        writes = action.claims.get(uid, ())
        h.writers.claims.allocate(placement.pod, writes)
        if uid in action.pod_statuses:
            h.writers.pods.extended_claim_status(placement.pod, action.pod_statuses[uid])
        bind(h, placement.pod, job, placement.slurm_node, placement.kube_node, writes)
    if action.extra:
        return  # the group's condition is its core's
    bound = {str(p.pod["metadata"]["uid"]) for p in action.placements}
    unbound = [
        m
        for m in o.members
        if str(m["metadata"]["uid"]) not in bound | action.extras
        and not (m.get("spec") or {}).get("nodeName")
    ]
    if unbound:
        return
    all_bound(o.key)
    where = f", {action.landed}" if action.landed else ""
    extras = len(action.extras)
    follow = (
        f"{extras} extra members beyond minCount get Slurm jobs of their own"
        if extras > 1
        else "1 extra member beyond minCount gets a Slurm job of its own"
    )
    who = (
        f"the core's members bound to the nodes of Slurm job {job.job_id}{where}; {follow}"
        if extras
        else f"all members bound to the nodes of Slurm job {job.job_id}{where}"
    )
    h.announce.group_status(
        group,
        True,
        "Scheduled",
        who,
        # Only where a person asked for a domain: the Event says which one.
        ("Normal", "Scheduled") if action.landed else None,
    )


def bind(
    h: Hands, pod: JSON, job: JobStatus, slurm_node: str, kube_node: str, writes: tuple[ClaimWrite, ...] = ()
) -> None:
    job_id = job.job_id
    picked_up = time.monotonic()
    with tracing.span(
        "bind pod",
        parent=h.jobs.trace_context.get(job_id),
        attributes={"k8s.pod": object_key(pod), "k8s.node": kube_node, "slurm.job_id": job_id},
    ):
        h.writers.pods.bind(pod, kube_node, job_id)
    h.assumed.bound.assume(str(pod["metadata"]["uid"]), kube_node)
    started = h.jobs.started_at.get(job_id, picked_up)
    BIND_SECONDS.observe(time.monotonic() - started)
    created = parse_rfc3339(pod["metadata"].get("creationTimestamp"))
    if created is not None:
        CREATE_TO_BOUND_SECONDS.observe(max(0.0, time.time() - created.timestamp()))
    log.info(
        "pod bound",
        extra={
            "pod": object_key(pod),
            "job": job_id,
            "node": slurm_node,
            "kube_node": kube_node,
            "queued_ms": round((picked_up - started) * 1000, 1),
            "bind_ms": round((time.monotonic() - picked_up) * 1000, 1),
        },
    )
    devices = [f"{w.name}: {', '.join(w.devices)}" for w in writes]
    claimed = f"; claims allocated the GPUs Slurm chose ({'; '.join(devices)})" if devices else ""
    h.announce.event(
        pod,
        "Normal",
        "Scheduled",
        f"Successfully assigned {object_key(pod)} to {kube_node}"
        f" (Slurm job {job_id} on {slurm_node}{claimed})",
    )


def cancel(h: Hands, key: str, group: groups.Group | None, action: actions.Cancel) -> None:
    for job_id in action.job_ids:
        log.info("cancelling job", extra={"pod": key, "job": job_id, "why": action.why})
        h.writers.slurm.cancel_job(job_id)
        h.assumed.cancelled.assume(str(job_id), True)
    alone = group is not None and group.alone  # None: a group's Pods placed one by one
    deleted: tuple[str, ...] = ()
    if alone and action.cause is actions.CancelCause.POD_DELETED:
        deleted = tuple(ref.uid for job in h.jobs.for_pod_key(key) if (ref := placeholder.pod_of(job.job)))
    if action.cause is not actions.CancelCause.EXTRA:  # an extra's cancel leaves the core's submit be
        h.assumed.cancel_sent(key, alone, deleted)
    for target in (*action.pods, *((action.subject,) if action.subject is not None else ())):
        h.announce.event(target, "Normal", action.event_reason, action.message)
