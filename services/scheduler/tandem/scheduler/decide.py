"""What the scheduler should do for one Pod, decided from what it observes and nothing else.

`decide` is pure: the Pod (informer cache), its job (the syncer's stream), the job id this process
submitted or recorded, and the Slurm node -> Node mapping in; one action out. The controller
carries the action out; a crash at any line of that leaves the world in a state `decide` maps to
the remaining step (the table in tests/unit/test_decide.py has one row per line, crash rows
included):

    Pod gone                          -> cancel every live job of its name
    Pod deleting or finished          -> cancel its job
    a live job besides the recorded   -> cancel it (a submit retried after a lost answer)
    bound, job stopped/ended/moved    -> delete the Pod
    bound, would now be refused       -> a Warning Event; never evicted by a policy change
    refused, its job still live       -> cancel the job (refused after submit, before bound)
    invalid (condition says so)       -> nothing, until the Pod is recreated
    invalid                           -> reject: PodScheduled=False, one Warning Event
    valid, no job, no node fits       -> Unschedulable (kube-scheduler's message), one Event
    valid, no job                     -> submit the placeholder job, the nodes that do not fit
                                         excluded (and record its id)
    job id not on the Pod             -> record it
    job ended before the Pod ran      -> delete the Pod
    job running, script started       -> bind to the Node hosting the job's Slurm node
    job allocated, prologs running    -> nominate the Node (status.nominatedNodeName)
    job pending, the fit changed      -> update the job's excluded nodes
    job pending, no node fits         -> Unschedulable
    job pending                       -> Slurm's reason in PodScheduled
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tandem import keys
from tandem.kube import JSON, pod_finished
from tandem.scheduler import validation
from tandem.scheduler.eligibility import Eligibility
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
# A group with more members than Slurm has nodes (tandem.scheduler.decide_group).
REASON_CANNOT_FIT = "GroupCannotFit"
# Set by this scheduler when it refused a Pod: no retry until the Pod is recreated.
REFUSED_REASONS = (REASON_INVALID, REASON_SUBMIT_FAILED, REASON_CANNOT_FIT)
# A Warning Event on a bound Pod the policy (or validation) would now refuse: it keeps running.
REASON_WOULD_BE_REFUSED = "WouldNowBeRefused"


@dataclass(frozen=True)
class Observed:
    key: str
    # None once the Pod is gone from the cache (deleted).
    pod: JSON | None
    # The Pod's job: its live one if any, else the one it recorded, else the newest.
    job: JobStatus | None = None
    # The job id on the Pod (its annotation, or what this process wrote a moment ago).
    recorded_job_id: int | None = None
    # The job this process submitted for the Pod and the stream has not shown yet.
    submitted_job_id: int | None = None
    # When the Pod is gone: every job its name still has.
    jobs_of_key: tuple[JobStatus, ...] = ()
    # Live jobs of the Pod besides the one it recorded: a submit retried after its answer was
    # lost (Slurm had taken the first).
    duplicates: tuple[int, ...] = ()
    # Jobs this process already asked Slurm to cancel (their scripts are shutting down).
    cancel_sent: frozenset[int] = frozenset()
    # Slurm node -> Kubernetes Node, as the syncer publishes it, for the job's nodes.
    hosts: Mapping[str, str] = field(default_factory=dict)
    kill_wait: float = 0.0
    # Which Slurm nodes' Nodes would take the Pod, judged on its requests while observing (None: no
    # Node is watched, or the Pod is past needing it).
    fit: Eligibility | None = None
    # The nodes the job excludes now: as Slurm reports them, else as this process last set them.
    job_excludes: frozenset[str] | None = None
    # --reject-static-cpu: a Pod the kubelet would pin CPUs for is refused, not only warned about.
    reject_static_cpu: bool = False
    # What the Pod's namespace may ask of Slurm (tandem.scheduler.policy).
    policy: Policy = BUILTIN


@dataclass(frozen=True)
class Nothing:
    pass


@dataclass(frozen=True)
class Reject:
    validation: validation.Validation


@dataclass(frozen=True)
class Submit:
    validation: validation.Validation
    # Slurm nodes whose Nodes would not take the Pod.
    excluded: tuple[str, ...] = ()


@dataclass(frozen=True)
class Nominate:
    """status.nominatedNodeName: the Node Slurm allocated while its prolog runs ("" to clear)."""

    kube_node: str


@dataclass(frozen=True)
class Exclude:
    """Set a pending job's excluded nodes (a hostlist): the Nodes that would take the Pod changed."""

    job_id: int
    hostlist: str


@dataclass(frozen=True)
class Record:
    job_id: int


@dataclass(frozen=True)
class Bind:
    job: JobStatus
    slurm_node: str
    kube_node: str


@dataclass(frozen=True)
class SetPending:
    reason: str
    message: str
    # A Warning Event with this reason when the condition changes ("" for none).
    event: str = ""


@dataclass(frozen=True)
class Cancel:
    job_ids: tuple[int, ...]
    why: str


@dataclass(frozen=True)
class Delete:
    """Delete the Pod; the Event says why."""

    event_type: str
    event_reason: str
    message: str


@dataclass(frozen=True)
class Warn:
    """A Warning Event on the Pod and nothing else (the recorder posts each distinct one once)."""

    reason: str
    message: str


@dataclass(frozen=True)
class Wait:
    """Nothing can be done yet and no change will announce when: look again after a backoff."""

    why: str


Action = (
    Nothing
    | Reject
    | Submit
    | Record
    | Bind
    | SetPending
    | Cancel
    | Delete
    | Wait
    | Warn
    | Exclude
    | Nominate
)


def decide(o: Observed) -> Action:
    pod = o.pod
    if pod is None:
        live = tuple(j.job_id for j in o.jobs_of_key if not j.ended and j.job_id not in o.cancel_sent)
        return Cancel(live, "Pod deleted") if live else Nothing()
    meta, spec = pod["metadata"], pod.get("spec") or {}
    job = o.job
    if meta.get("deletionTimestamp") or pod_finished(pod):
        if job is None or job.ended or job.job_id in o.cancel_sent:
            return Nothing()
        return Cancel(
            (job.job_id,), "Pod is being deleted" if meta.get("deletionTimestamp") else "Pod finished"
        )
    extra = tuple(j for j in o.duplicates if j not in o.cancel_sent)
    if extra:
        return Cancel(extra, "a second job for the Pod (a submit retried after its answer was lost)")
    if spec.get("nodeName"):
        return _bound(o, str(spec["nodeName"]), job)
    if refused(pod):
        # Never to be bound: a job it still has would only hold nodes (the policy changed after
        # the submit, or a crash came between the refusal and this cancel).
        if job is not None:
            unwanted = None if job.ended or job.terminating else job.job_id
        else:
            unwanted = o.submitted_job_id
        if unwanted is not None and unwanted not in o.cancel_sent:
            return Cancel((unwanted,), "the Pod was refused before it was bound")
        return Nothing()
    result = validation.validate(pod, o.kill_wait, o.reject_static_cpu, o.policy)
    if not result.ok:
        return Reject(result)
    job_id = job.job_id if job is not None else o.submitted_job_id or o.recorded_job_id
    if job_id is None:
        fit = o.fit
        if fit is not None and fit.total and not fit.available:
            return SetPending(REASON_UNSCHEDULABLE, fit.message(), event="FailedScheduling")
        return Submit(result, fit.excluded if fit is not None else ())
    if o.recorded_job_id != job_id:
        return Record(job_id)  # a previous life submitted, or recording failed, or a crash between
    if job is None:
        return Nothing()  # submitted; the syncer's stream brings the job
    if job.ended:
        return Delete(
            "Warning",
            "SlurmJobEnded",
            f"placeholder job {job.job_id} ended ({job.state_name}) before the Pod was bound",
        )
    if job.running and job.started and job.job.nodes:
        slurm_node = job.job.nodes[0]
        kube_node = o.hosts.get(slurm_node)
        if kube_node is None:
            return Wait(f"no Node known to host Slurm node {slurm_node} yet")
        return Bind(job, slurm_node, kube_node)
    nominated = str((pod.get("status") or {}).get("nominatedNodeName") or "")
    if job.running and job.job.nodes:
        allocated = o.hosts.get(job.job.nodes[0], "")
        return Nominate(allocated) if allocated and allocated != nominated else Nothing()
    if job.pending and nominated:
        return Nominate("")  # back to pending (requeued before its script started)
    fit = o.fit if job.pending else None
    if fit is not None:
        wanted = excluded_nodes(result, fit.excluded)
        if wanted != (o.job_excludes if o.job_excludes is not None else frozenset(job.job.excluded_nodes)):
            return Exclude(job.job_id, compress(sorted(wanted)))
        if fit.total and not fit.available:
            return SetPending(REASON_UNSCHEDULABLE, fit.message(), event="FailedScheduling")
    if not job.pending or job.job.state_reason in ("", "None"):
        return Nothing()  # allocated (prolog running) or not yet looked at: the next change tells
    return SetPending(REASON_PENDING, queue.pending_message(job))


def _bound(o: Observed, node: str, job: JobStatus | None) -> Action:
    """A bound Pod lives exactly as long as its job, on its job's node."""
    if job is None:
        return Nothing()
    why = ""
    if job.terminating:
        why = "was stopped (scancel, time limit or preemption)"
    elif job.ended:
        why = f"ended ({job.state_name})"
    elif job.pending:
        why = "was requeued"
    elif job.running and job.started and job.job.nodes:
        hosted_on = o.hosts.get(job.job.nodes[0])
        if hosted_on is not None and hosted_on != node:
            why = f"now runs on {job.job.nodes[0]}, not on this Pod's Node"
    if why:
        return Delete("Normal", "SlurmJobEnded", f"Slurm job {job.job_id} {why}; deleting the Pod")
    assert o.pod is not None  # bound: there is a Pod
    return would_be_refused(o.pod, o)


def would_be_refused(pod: JSON, o: Observed) -> Action:
    """A bound Pod is judged again (a policy change, an edited annotation) but only told: evicting
    running work because a rule changed would be worse than the rule being late."""
    result = validation.validate(pod, o.kill_wait, o.reject_static_cpu, o.policy)
    if result.ok:
        return Nothing()
    return Warn(REASON_WOULD_BE_REFUSED, would_be_refused_message(result))


def would_be_refused_message(result: validation.Validation) -> str:
    return (
        f"this Pod would now be refused ({result.message()}); it keeps running: "
        "a bound Pod is never evicted by a policy change"
    )


def excluded_nodes(result: validation.Validation, unfit: tuple[str, ...]) -> frozenset[str]:
    """What the job must exclude: the nodes that do not fit and the ones the Pod's annotation names."""
    named = result.job_annotations.get(keys.EXCLUDED_NODES, "")
    return frozenset(unfit) | frozenset(expand(named) if named else ())


def refused(pod: JSON) -> bool:
    """This scheduler refused the Pod (invalid, or Slurm said no): it stays so until recreated."""
    c = condition(pod, "PodScheduled")
    return c is not None and c.get("status") == "False" and c.get("reason") in REFUSED_REASONS


def recorded_job_id(pod: JSON) -> int | None:
    return keys.recorded_job_id(pod)


def placement_state(o: Observed, action: Action) -> str:
    """Where the Pod stands (scheduler.proto's PlacementState, without the prefix), read off the
    same decision the reconciler acts on."""
    pod = o.pod or {}
    job = o.job
    if isinstance(action, Reject) or (pod and refused(pod)):
        return "INVALID"
    if (
        isinstance(action, Cancel | Delete)
        or (pod.get("metadata") or {}).get("deletionTimestamp")
        or (job is not None and (job.terminating or job.ended))
    ):
        return "TERMINATING"
    if (pod.get("spec") or {}).get("nodeName"):
        return "BOUND"
    if isinstance(action, Bind | Wait) or (job is not None and job.started):
        return "STARTED"
    return "PENDING"
