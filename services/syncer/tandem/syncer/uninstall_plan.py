"""What `helm uninstall`'s cleanup (tandem.syncer.uninstall) acts on, decided from plain values:
which Slurm jobs it cancels, which Pods it deletes, which jobs it still waits for, what it removes
from each Node and slurmd Pod, and which drains it resumes.

The same trust rules as the services: a job is a placeholder by its AdminComment, never by its name;
a slurmd Pod by its namespace and label; a drain is Tandem's only if Slurm records the syncer's own
user as the one who set it, with a reason Tandem writes. Pure; tables in
tests/unit/syncer/test_uninstall_plan.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tandem import keys, placeholder, slurmd
from tandem.kube import JSON, pod_finished
from tandem.slurm.models import FINISHED_STATES, Job
from tandem.syncer.facts import NodeFacts
from tandem.syncer.nodesync import CAUSE_PREFIXES, CONDITION, cause, drained_by_us, killwait_pod_left


def placeholder_jobs(jobs: Iterable[Job], scheduler: str) -> list[Job]:
    """The jobs this release's scheduler submitted, finished or not: placeholders by their
    AdminComment (only Slurm's administrators write it) that name this scheduler. Never a job by its
    name (any Slurm user may name one `tandem:<scheduler>/...`), never another scheduler's."""
    if not scheduler:
        return []
    return [
        j for j in jobs if placeholder.pod_of(j) is not None and placeholder.scheduler_of_job(j) == scheduler
    ]


def to_cancel(jobs: Iterable[Job]) -> list[Job]:
    """Those that may still run: nothing is left to cancel of a finished job."""
    return [j for j in jobs if not j.finished]


def placeholder_pods(pods: Iterable[JSON], jobs: Iterable[Job], scheduler: str) -> list[JSON]:
    """The Pods these placeholder jobs stand for that still run or wait: a Pod's own job finds it by
    its uid, a group's job its members by the job id recorded on them, in the group's namespace.
    Only Pods that name this scheduler count (a tenant can write any job id on its own Pods, never
    make another scheduler's Pod ours); finished Pods and Pods already being deleted are left as
    they are."""
    singles: set[tuple[str, str, str]] = set()
    groups: set[tuple[str, int]] = set()
    for job in jobs:
        ref = placeholder.pod_of(job)
        if ref is None:
            continue
        if ref.is_group:
            groups.add((ref.namespace, job.job_id))
        else:
            singles.add((ref.namespace, ref.name, ref.uid))
    chosen = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("spec") or {}).get("schedulerName") != scheduler:
            continue
        if pod_finished(pod) or meta.get("deletionTimestamp"):
            continue
        namespace = str(meta.get("namespace") or "")
        own = (namespace, str(meta.get("name") or ""), str(meta.get("uid") or "")) in singles
        member = (namespace, keys.recorded_job_id(pod) or 0) in groups
        if own or member:
            chosen.append(pod)
    return chosen


def not_ended(job_ids: Iterable[int], states: Mapping[int, tuple[str, tuple[str, ...]]]) -> list[int]:
    """The jobs Slurm is not done with: listed in a state that is not a finished one, or finished
    but still COMPLETING (its epilog, which releases the node's lock, has not run to its end). A job
    Slurm no longer lists has ended."""
    left = []
    for job_id in job_ids:
        if job_id not in states:
            continue
        state, flags = states[job_id]
        if state not in FINISHED_STATES or "COMPLETING" in flags:
            left.append(job_id)
    return left


@dataclass(frozen=True)
class NodeLeftovers:
    """What Tandem wrote on one Node that is still there."""

    name: str
    lock_taint: bool = False
    annotations: tuple[str, ...] = ()
    cordon_condition: bool = False

    @property
    def any(self) -> bool:
        return self.lock_taint or bool(self.annotations) or self.cordon_condition


def node_leftovers(node: JSON) -> NodeLeftovers:
    """The lock taint (by its key, whatever its value and effect, as the syncer removes it), the
    annotations of keys.NODE_ANNOTATIONS (nothing else under the prefix: other tools write there
    too), and the SlurmCordon condition."""
    meta = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    annotations = meta.get("annotations") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return NodeLeftovers(
        name=str(meta.get("name") or ""),
        lock_taint=any(t.get("key") == keys.LOCK_KEY for t in taints),
        annotations=tuple(sorted(k for k in annotations if k in keys.NODE_ANNOTATIONS)),
        cordon_condition=any(c.get("type") == CONDITION for c in conditions),
    )


def taints_without_lock(taints: Iterable[JSON]) -> list[JSON]:
    """A Node's taints with the lock taint gone and every other one as it was, in its order."""
    return [t for t in taints if t.get("key") != keys.LOCK_KEY]


def locked_slurmd_pods(pods: Iterable[JSON], slurmd_namespace: str) -> list[str]:
    """The slurmd Pods (tandem.slurmd's rules: namespace and label) that carry the lock annotation,
    whatever its value: a fresh install finds none (absent reads as `false`), so it is removed
    rather than set to `false`."""
    names = []
    for name, pod in slurmd.hosting(pods, slurmd_namespace).items():
        if keys.LOCK_KEY in ((pod.get("metadata") or {}).get("annotations") or {}):
            names.append(name)
    return sorted(names)


@dataclass(frozen=True)
class DrainVerdict:
    resume: bool
    why: str


def drain_verdict(f: NodeFacts) -> DrainVerdict | None:
    """Whether to resume a drained Slurm node as Tandem goes; None when it is not drained.

    Only Tandem's own drains (tandem.syncer.nodesync.drained_by_us: the syncer's user set the
    reason, and it is one Tandem writes); an administrator's, or Slurm's own ("Prolog error"), stay
    whatever their words. Of Tandem's, each is resumed once what it guarded against is gone, by the
    syncer's own rules:
      - a Kubernetes cause (`k8s: Node ... is cordoned`, `k8s: Node ... has GpuUnhealthy: ...`):
        once the cause has cleared; while the Node is still cordoned, NotReady, gone or has a
        health condition (--health-conditions, the syncer's list) it stays drained, for an
        administrator to resume when the machine is back (Tandem no longer will);
      - KillWait (`k8s: pod ... still running at KillWait`): once that Pod is gone;
      - a lock that timed out (`k8s: job N could not lock ...`): always, since no prolog takes
        Tandem's lock after it is gone.
    """
    slurm = f.slurm
    if slurm is None or not slurm.drained:
        return None
    reason = slurm.reason
    if not drained_by_us(f):
        who = slurm.reason_set_by or "an unknown user"
        return DrainVerdict(False, f"not Tandem's drain (set by {who}): left for its owner")
    named = keys.killwait_drain_of(reason)
    if named is not None:
        if killwait_pod_left(f):
            return DrainVerdict(True, f"Pod {named[0]}/{named[1]} no longer runs there")
        return DrainVerdict(
            False, f"Pod {named[0]}/{named[1]} still runs there: resume it once the Pod is gone"
        )
    if keys.is_lock_timeout_drain(reason):
        return DrainVerdict(True, "no lock is taken once Tandem is gone")
    if reason.startswith(CAUSE_PREFIXES):
        holds = cause(f)
        if holds:
            return DrainVerdict(False, f"{holds.removeprefix('k8s: ')}: resume it once that is fixed")
        return DrainVerdict(True, "its Kubernetes cause has cleared")
    return DrainVerdict(False, "a reason Tandem does not write: left for whoever wrote it")
