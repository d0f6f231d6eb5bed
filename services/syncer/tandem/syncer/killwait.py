"""What a placeholder's end at KillWait leaves behind, decided from the caches alone.

A placeholder job ends (scancel, time limit, preemption) and its script tells Tandem; Tandem waits
for the job's Pods to go. Whatever still runs just before KillWait keeps its Slurm node drained, so
Slurm gives that node to no other job while the Pod is on it (the node sync resumes the drain once
the Pod is gone). These functions are pure: the job, its Pods and the Slurm node -> Node mapping
in; the Pods to wait for and the nodes to drain out (tests/unit/test_killwait.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tandem import keys, placeholder
from tandem.kube import JSON, pod_finished
from tandem.slurm.models import JobStatus

# Slurm node -> the Node hosting it ("" when unknown).
HostOf = Callable[[str], str]


def job_pods(
    status: JobStatus,
    ref: placeholder.PodRef,
    pods_of_job: Iterable[JSON],
    pod_by_uid: JSON | None,
    host: HostOf,
) -> list[JSON]:
    """The job's Pods that still run: its Pod (by uid: a Pod of that name now may be another), or
    every member of a group's job (the Pods that carry its id)."""
    if ref.is_group:
        return [p for p in pods_of_job if not pod_finished(p)]
    if pod_by_uid is None or pod_finished(pod_by_uid) or not runs_on(pod_by_uid, status, host):
        return []
    return [pod_by_uid]


def runs_on(pod: JSON, status: JobStatus, host: HostOf) -> bool:
    """Whether the Pod is this job's: a submit retried after its answer was lost leaves a second
    job of the same Pod, which the scheduler cancels; the Pod, recorded on the other job or bound
    to another job's Node, is not in this one's way."""
    recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.JOB_ID_ANNOTATION)
    if recorded and recorded != str(status.job_id):
        return False
    node = (pod.get("spec") or {}).get("nodeName")
    hosts = {host(n) for n in status.job.nodes}
    return not (node and status.job.nodes and node not in hosts)


def drain_targets(status: JobStatus, script_node: str, pods: list[JSON], host: HostOf) -> dict[str, JSON]:
    """Slurm node -> the Pod that keeps it drained: each of the job's nodes whose Node one of its
    Pods still runs on; a Pod not bound (yet) keeps the node its script ran on."""
    on_node = {str(p["spec"]["nodeName"]): p for p in pods if (p.get("spec") or {}).get("nodeName")}
    targets: dict[str, JSON] = {}
    for node in status.job.nodes or (script_node,):
        pod = on_node.get(host(node))
        if pod is not None:
            targets[node] = pod
    if not targets and pods and script_node:
        targets[script_node] = pods[0]
    return targets


def drain_reason(pod: JSON, job_id: int) -> str:
    meta = pod.get("metadata") or {}
    return keys.killwait_drain_reason(str(meta.get("namespace")), str(meta.get("name")), job_id)


def drained_event(job_id: int, slurm_node: str, reason: str) -> str:
    """The Warning on the Pod that keeps a node drained."""
    return (
        f"Slurm job {job_id} ended but this Pod is still running on {slurm_node} at KillWait; "
        f"the Slurm node is drained ({reason}) so no other job gets it until this Pod is gone; "
        "Tandem then resumes it"
    )
