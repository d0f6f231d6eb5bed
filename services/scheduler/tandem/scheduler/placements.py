"""Where a Pod stands (the scheduler's gRPC API, proto/tandem/v1/scheduler.proto), from the same
observation and decision a reconcile acts on: nothing is written."""

from __future__ import annotations

from dataclasses import replace

from tandem.kube import JSON, object_key
from tandem.scheduler import elastic, groups, growth, podstate
from tandem.scheduler.actions import Action, Bind, Cancel, Delete, Nominate, Observed, Reject, Wait
from tandem.scheduler.controller import Controller
from tandem.scheduler.podapi import condition
from tandem.slurm.wire import job_to_proto
from tandem.v1 import scheduler_pb2


def placement(controller: Controller, pod: JSON) -> scheduler_pb2.Placement:
    # A member of a gang stands where its group does.
    in_gang = groups.group_key(pod) is not None and controller.observer.in_gang(pod)
    key = controller.caches.key_of(pod) if in_gang else object_key(pod)
    observed, action = controller.decision(groups.target(key))
    return placement_of(observed, action, pod)


def placement_of(observed: Observed, action: Action, pod: JSON) -> scheduler_pb2.Placement:
    """A member's placement in its group's observation: an elastic gang's extra member stands
    where its own job does (none yet: pending), not the core's."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if _is_extra(observed, pod):
        observed = replace(observed, job=observed.extras.get(str(meta["uid"])))
    job = observed.job
    cond = condition(pod, "PodScheduled") or {}
    return scheduler_pb2.Placement(
        pod_namespace=meta["namespace"],
        pod_name=meta["name"],
        pod_uid=meta["uid"],
        job_id=job.job_id if job is not None else (observed.recorded.get(str(meta["uid"])) or 0),
        job_state=job_to_proto(job).state if job is not None else "JOB_STATE_UNSPECIFIED",
        slurm_node=job.job.nodes[0] if job is not None and job.job.nodes else "",
        kube_node=spec.get("nodeName", ""),
        state=f"PLACEMENT_STATE_{placement_state(observed, action, pod)}",
        reason=str(cond.get("message", "")) if cond.get("status") == "False" else "",
    )


def _is_extra(o: Observed, pod: JSON) -> bool:
    """A member of an elastic gang beyond its core (tandem.scheduler.elastic.roles)."""
    group = o.group
    if group is None or group.alone:
        return False
    if podstate.uid(pod) in o.extras:
        return True
    live = tuple(sorted((m for m in o.members if podstate.is_live(m)), key=groups.rank))
    if len(live) <= group.min_count:
        return False
    _, extras = elastic.roles(group, live, o.job, o.extras)
    return any(podstate.uid(m) == podstate.uid(pod) for m in extras)


def placement_state(o: Observed, action: Action, pod: JSON | None = None) -> str:
    """Where a member stands (scheduler.proto's PlacementState, without the prefix), read off the
    same decision the reconciler acts on. `pod`: which member (the only one when not given)."""
    if pod is None:
        pod = o.members[0] if o.members else {}
    job = o.job
    if job is not None and o.group is not None and growth.outgrown_before_it_ran(o.group, job):
        job = None  # cancelled to be replaced: its members wait for the new job
    uid = podstate.uid(pod)
    mine = _touches(action, uid)
    if (isinstance(action, Reject) and mine) or (pod and podstate.refused(pod)):
        return "INVALID"
    if (
        (isinstance(action, Cancel) and not action.pods)
        or (isinstance(action, Delete) and mine)
        or (pod.get("metadata") or {}).get("deletionTimestamp")
        or (job is not None and (job.terminating or job.ended))
    ):
        return "TERMINATING"
    if podstate.bound(pod):
        return "BOUND"
    if isinstance(action, Wait) or (isinstance(action, Bind) and mine) or (job is not None and job.started):
        return "STARTED"
    return "PENDING"


def _touches(action: Action, uid: str) -> bool:
    if isinstance(action, Bind | Nominate):
        return any(podstate.uid(p.pod) == uid for p in action.placements)
    pods = getattr(action, "pods", None) or getattr(action, "members", None) or ()
    return any(podstate.uid(p) == uid for p in pods)
