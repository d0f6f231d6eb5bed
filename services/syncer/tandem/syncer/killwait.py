"""What a placeholder's end at KillWait leaves behind, decided from the caches alone.

A placeholder job ends (scancel, time limit, preemption) and its script tells Tandem
(JobTerminating), which records a deadline in the hold store (`holds.KillWait`, `drain_at` just
before Slurm's KillWait) and waits for the job's Pods to go. Whatever still runs at `drain_at` keeps
its Slurm node drained, so Slurm gives that node to no other job while the Pod is on it (the node
sync resumes the drain once the Pod is gone). The drain is the node's pass's (`decide`), one drain
path with the others. These functions are pure: the job, its Pods and the Slurm node -> Node
mapping in; the Pods to wait for, the nodes to drain and when, out (tests/unit/syncer/test_killwait.py).

A new leader's store is empty: it drains nothing for a call the old leader was answering. That
call fails, and the placeholder's script (services/hooks/.../placeholder.sh), given no answer,
drains its own node itself (DrainNode, or scontrol as a last resort).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tandem import keys, placeholder
from tandem.kube import JSON, pod_finished
from tandem.slurm.models import JobStatus

# How soon a pass that could not make a due KillWait drain (a lock's drain went first, or the
# Slurm node is not read yet) looks again.
DRAIN_AGAIN_SECONDS = 1.0

# Slurm node -> the Node hosting it ("" when unknown).
HostOf = Callable[[str], str]


def job_pods(
    status: JobStatus,
    ref: placeholder.PodRef,
    pods_of_job: Iterable[JSON],
    pod_by_uid: JSON | None,
    host: HostOf,
    script_node: str = "",
) -> list[JSON]:
    """The job's Pods that occupy one of its nodes: its Pod (by uid: a Pod of that name now may be
    another), or every member of a group's job (the Pods of the group's namespace that carry its
    id: any tenant can write a job id on a Pod of its own namespace, and would keep another's
    node drained), bound to the Node of one of the job's Slurm nodes and not finished. A Pod never
    bound runs nothing on any node: it neither keeps the job waiting nor drains a node (a claim
    Slurm's GPUs could not be mapped to, a job Tandem cancelled before the bind)."""
    if ref.is_group:
        candidates = [p for p in pods_of_job if (p.get("metadata") or {}).get("namespace") == ref.namespace]
    else:
        candidates = [] if pod_by_uid is None else [pod_by_uid]
    return [p for p in candidates if occupies(p, status, host, script_node)]


def occupies(pod: JSON, status: JobStatus, host: HostOf, script_node: str = "") -> bool:
    """Whether the Pod runs on a Node of this job's Slurm nodes (the script's node when Slurm lists
    none): bound there, not finished, and not recorded on another job (a submit retried after its
    answer was lost leaves a second job of the same Pod, which the scheduler cancels)."""
    if pod_finished(pod):
        return False
    recorded = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.JOB_ID_ANNOTATION)
    if recorded and recorded != str(status.job_id):
        return False
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        return False
    return node in {host(n) for n in status.job.nodes or (script_node,) if n} - {""}


def drain_targets(status: JobStatus, script_node: str, pods: list[JSON], host: HostOf) -> dict[str, JSON]:
    """Slurm node -> the Pod that keeps it drained: each of the job's nodes (the script's when
    Slurm lists none) whose Node one of its Pods is bound to and still runs on. Only such a Pod
    drains: one never bound, or bound elsewhere, names no node of this job."""
    on_node = {str(p["spec"]["nodeName"]): p for p in pods if occupies(p, status, host, script_node)}
    targets: dict[str, JSON] = {}
    for node in status.job.nodes or (script_node,):
        pod = on_node.get(host(node)) if node else None
        if pod is not None:
            targets[node] = pod
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


@dataclass(frozen=True)
class NodeKillWait:
    """A KillWait deadline as one Slurm node's pass sees it: `pod`, the job's Pod that keeps this
    node (drain_targets names it; None: none does); `gone`: the job has no Pod left anywhere."""

    job_id: int
    drain_at: float
    pod: JSON | None = None
    gone: bool = False

    @property
    def reason(self) -> str:
        return drain_reason(self.pod, self.job_id) if self.pod is not None else ""


@dataclass(frozen=True)
class KillWaitPlan:
    """`drain`: the job whose drain this pass makes (its reason the plan's drain); `settle`: (job
    id, drained) for the deadlines this pass settles with no drain of its own (found drained so, or
    no Pod keeps the node); `after`: seconds until a deadline falls due (0: another drain waits)."""

    drain: NodeKillWait | None = None
    settle: tuple[tuple[int, bool], ...] = ()
    after: float | None = None


def decide(
    killwaits: Iterable[NodeKillWait],
    drained_reason: str | None,
    now: float,
    may_drain: bool = True,
    others_drain: bool = False,
) -> KillWaitPlan:
    """The node's KillWait deadlines at `now`. `drained_reason`: the reason the Slurm node is
    drained with (None: not drained); one so drained is not drained again. `may_drain`: False when
    this pass drains for a lock that timed out (it goes first; the KillWait drain waits a pass).
    `others_drain`: the drain is not Tandem's (an administrator's, a health check's, Slurm's own):
    the node is out of service already, and its reason is not Tandem's to overwrite, since Tandem
    would then own the drain and resume it when the Pod goes."""
    drain: NodeKillWait | None = None
    settle: list[tuple[int, bool]] = []
    waits: list[float] = []
    for k in killwaits:
        if k.pod is None and (k.gone or now >= k.drain_at):
            settle.append((k.job_id, False))
        elif now < k.drain_at:
            waits.append(k.drain_at - now)
        elif drained_reason == k.reason or (drained_reason is not None and others_drain):
            settle.append((k.job_id, True))
        elif may_drain and drain is None:
            drain = k
        else:  # one drain a pass: the next pass makes this one (soon, if this one cannot drain)
            waits.append(0.0 if may_drain else DRAIN_AGAIN_SECONDS)
    return KillWaitPlan(drain, tuple(settle), min(waits) if waits else None)
