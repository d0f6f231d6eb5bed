"""Where a Pod stands (the scheduler's gRPC API, proto/tandem/v1/scheduler.proto), from the same
observation and decision a reconcile acts on: nothing is written."""

from __future__ import annotations

from tandem.kube import JSON, object_key
from tandem.scheduler import decide as d
from tandem.scheduler import groups
from tandem.scheduler.controller import Controller
from tandem.scheduler.podapi import condition
from tandem.slurm.wire import job_to_proto
from tandem.v1 import scheduler_pb2


def placement(controller: Controller, pod: JSON) -> scheduler_pb2.Placement:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    # A member of a gang stands where its group does.
    in_gang = groups.group_key(pod) is not None and controller.observer.in_gang(pod)
    observed, action = controller.decision(controller.caches.key_of(pod) if in_gang else object_key(pod))
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
        state=f"PLACEMENT_STATE_{d.placement_state(observed, action, pod)}",
        reason=str(cond.get("message", "")) if cond.get("status") == "False" else "",
    )
