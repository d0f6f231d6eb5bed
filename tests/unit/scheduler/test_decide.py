"""The scheduler's decision for a Pod alone as a table: one row per line of the reconcile table in
tandem.scheduler.decide, crash rows included (a previous life that died between two writes). Each
row is a group of one (groups.alone) through the one decide that places gangs too
(tests/unit/scheduler/test_decide_group.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import fields, is_dataclass, replace
from typing import Any

import pytest

from tandem import keys, placeholder, reasons
from tandem.scheduler import actions, groups, placements, policy
from tandem.scheduler import decide as d
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.models import Job, JobStatus

SCHEDULER = "tandem-test"
REF = placeholder.PodRef("default", "trainer", "uid-1")
HOSTS = {"cpu-001": "node-001", "cpu-002": "node-002"}
# The lab's: Pods without user-id run as tandem-pods.
POLICY = policy.parse("default: {defaultUser: 1001}")


def pod(
    job_id: int | None = None,
    node: str = "",
    deleting: bool = False,
    phase: str = "Pending",
    condition: tuple[str, str] | None = None,
    requests: dict[str, str] | None = None,
    tolerates_lock: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": REF.namespace, "name": REF.name, "uid": REF.uid, "annotations": {}}
    if job_id is not None:
        meta["annotations"][keys.JOB_ID_ANNOTATION] = str(job_id)
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {
                "name": "c",
                "resources": {
                    "requests": requests if requests is not None else {"cpu": "1", "memory": "1Gi"}
                },
            }
        ],
    }
    if node:
        spec["nodeName"] = node
    if tolerates_lock:  # as the chart's admission policy creates it
        spec["tolerations"] = [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}]
    status: dict[str, Any] = {"phase": phase}
    if condition:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": condition[0], "message": condition[1]}
        ]
    return {"metadata": meta, "spec": spec, "status": status}


def job(
    state: str = "RUNNING",
    node: str = "cpu-001",
    started: bool = False,
    terminating: bool = False,
    gone: bool = False,
    reason: str = "",
    job_id: int = 7,
) -> JobStatus:
    return JobStatus(
        Job(
            job_id=job_id,
            name=placeholder.job_name(REF, SCHEDULER),
            admin_comment=placeholder.job_name(REF, SCHEDULER),
            state=state,
            state_reason=reason,
            nodes=(node,) if node and state != "PENDING" else (),
            partition="cpu",
        ),
        started=started,
        terminating=terminating,
        gone=gone,
    )


def seen(p: dict[str, Any] | None, j: JobStatus | None = None, **kw: Any) -> actions.Observed:
    """The snapshot of the Pod alone, as the controller observes it: a group of one."""
    recorded = kw.pop("recorded", keys.recorded_job_id(p) if p is not None else None)
    fit: Eligibility | None = kw.pop("fit", None)
    fits = kw.pop("fits", {REF.uid: fit} if fit is not None else None)
    return actions.Observed(
        REF.key,
        groups.alone(groups.target(REF.key), p),
        (p,) if p is not None else (),
        job=j,
        jobs=kw.pop("jobs_of_key", (j,) if j is not None else ()),
        recorded={REF.uid: recorded} if recorded is not None else {},
        hosts=HOSTS,
        fits=fits,
        kill_wait=30,
        policy=kw.pop("policy", POLICY),
        **kw,
    )


# Stands for the row's Pod in an expected action (each row builds its own).
THE_POD: tuple[dict[str, Any], ...] = ({"the": "Pod"},)


def _the_pod_in(expected: Any, observed: actions.Observed) -> Any:
    """The expected action with THE_POD replaced by the row's Pod."""
    if not is_dataclass(expected) or isinstance(expected, type):
        return expected
    changes: dict[str, Any] = {}
    for f in fields(expected):
        value = getattr(expected, f.name)
        if value == THE_POD:
            changes[f.name] = observed.members
        elif f.name == "placements":
            changes[f.name] = tuple(
                replace(p, pod=observed.members[0]) if p.pod == THE_POD[0] else p for p in value
            )
    return replace(expected, **changes)


NOMINATED = actions.Nominate((actions.Placement(THE_POD[0], "cpu-001", "node-001"),))
REFUSED = (reasons.REASON_INVALID, "invalid for Slurm: sunk.coreweave.com/user-id: 0 is not allowed")

ROWS: list[tuple[str, actions.Observed, Any]] = [
    # Pod gone from the cache
    (
        "gone Pod: its live job is cancelled",
        seen(None, jobs_of_key=(job(),)),
        actions.Cancel((7,), actions.CancelCause.POD_DELETED, "Pod deleted"),
    ),
    (
        "gone Pod: a job already cancelled is not cancelled again",
        seen(None, jobs_of_key=(job(),), cancel_sent=frozenset({7})),
        actions.Nothing(),
    ),
    ("gone Pod: an ended job is left alone", seen(None, jobs_of_key=(job("COMPLETED"),)), actions.Nothing()),
    ("gone Pod: no job, nothing to do", seen(None), actions.Nothing()),
    (
        "gone Pod, replaced twice: every live job of the name",
        seen(None, jobs_of_key=(job(job_id=7), job(job_id=8), job("CANCELLED", job_id=6))),
        actions.Cancel((7, 8), actions.CancelCause.POD_DELETED, "Pod deleted"),
    ),
    (
        "a new Pod of the name (a StatefulSet's): the earlier Pod's live job is cancelled",
        seen(pod(), earlier_jobs=(6,)),
        actions.Cancel(
            (6,), actions.CancelCause.EARLIER_POD, "its Pod is gone (a new Pod of the same name replaced it)"
        ),
    ),
    (
        "a new Pod of the name, the earlier Pod's job cancelled already: its own is submitted",
        seen(pod(), earlier_jobs=(6,), cancel_sent=frozenset({6})),
        "Submit",
    ),
    # Pod deleting or finished
    (
        "deleting Pod: its job is cancelled",
        seen(pod(7, deleting=True), job()),
        actions.Cancel((7,), actions.CancelCause.MEMBERS_GONE, "Pod is being deleted"),
    ),
    (
        "finished Pod: its job is cancelled",
        seen(pod(7, node="node-001", phase="Succeeded"), job(started=True)),
        actions.Cancel((7,), actions.CancelCause.MEMBERS_GONE, "Pod finished"),
    ),
    (
        "deleting Pod, cancel already sent",
        seen(pod(7, deleting=True), job(), cancel_sent=frozenset({7})),
        actions.Nothing(),
    ),
    ("deleting Pod without a job", seen(pod(deleting=True)), actions.Nothing()),
    ("deleting Pod whose job ended", seen(pod(7, deleting=True), job("CANCELLED")), actions.Nothing()),
    # Bound
    ("bound Pod on its job's Node", seen(pod(7, node="node-001"), job(started=True)), actions.Nothing()),
    (
        "bound Pod whose job was stopped",
        seen(pod(7, node="node-001"), job(started=True, terminating=True)),
        actions.Delete(
            THE_POD,
            "Normal",
            "SlurmJobEnded",
            "Slurm job 7 was stopped (scancel, time limit or preemption); deleting the Pod",
        ),
    ),
    (
        "bound Pod whose job ended",
        seen(pod(7, node="node-001"), job("TIMEOUT", started=True)),
        actions.Delete(THE_POD, "Normal", "SlurmJobEnded", "Slurm job 7 ended (TIMEOUT); deleting the Pod"),
    ),
    (
        "bound Pod whose job Slurm forgot",
        seen(pod(7, node="node-001"), job(gone=True)),
        actions.Delete(THE_POD, "Normal", "SlurmJobEnded", "Slurm job 7 ended (GONE); deleting the Pod"),
    ),
    (
        "bound Pod whose job was requeued",
        seen(pod(7, node="node-001"), job("PENDING")),
        actions.Delete(THE_POD, "Normal", "SlurmJobEnded", "Slurm job 7 was requeued; deleting the Pod"),
    ),
    (
        "bound Pod whose job runs on another Node",
        seen(pod(7, node="node-001"), job(node="cpu-002", started=True)),
        actions.Delete(
            THE_POD,
            "Normal",
            "SlurmJobEnded",
            "Slurm job 7 now runs on cpu-002, not on this Pod's Node; deleting the Pod",
        ),
    ),
    (
        "bound Pod, job's node not mapped yet: no verdict",
        seen(pod(7, node="node-001"), job(node="cpu-009", started=True)),
        actions.Nothing(),
    ),
    ("bound Pod, job not in the stream", seen(pod(7, node="node-001")), actions.Nothing()),
    (
        "bound Pod the policy would now refuse: told, never evicted",
        seen(pod(7, node="node-001"), job(started=True), policy=policy.BUILTIN),
        actions.Warn(
            THE_POD,
            reasons.REASON_WOULD_BE_REFUSED,
            "this Pod would now be refused (invalid for Slurm: sunk.coreweave.com/user-id: not set, and "
            "namespace default has no default user: set the annotation, or a defaultUser for the "
            "namespace in the tenant policy); it keeps running: a bound Pod is never evicted by a "
            "policy change",
        ),
    ),
    # Refused earlier
    (
        "refused Pod stays refused",
        seen(pod(condition=(reasons.REASON_INVALID, "invalid for Slurm: x"))),
        actions.Nothing(),
    ),
    (
        "Pod Slurm refused stays refused",
        seen(pod(condition=(reasons.REASON_SUBMIT_FAILED, "no"))),
        actions.Nothing(),
    ),
    # Refused after its job was submitted, before it was bound: the job would only hold nodes
    (
        "refused, its job pending: cancelled",
        seen(pod(7, condition=REFUSED), job("PENDING", reason="Priority")),
        actions.Cancel((7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"),
    ),
    (
        "refused, its job allocated (prolog running): cancelled",
        seen(pod(7, condition=REFUSED), job()),
        actions.Cancel((7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"),
    ),
    (
        "refused, its job's script started: cancelled",
        seen(pod(7, condition=REFUSED), job(started=True)),
        actions.Cancel((7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"),
    ),
    (
        "refused right after this life submitted, the stream not there yet: cancelled",
        seen(pod(condition=REFUSED), submitted_job_id=7),
        actions.Cancel((7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"),
    ),
    (
        "refused, its job's cancel already sent",
        seen(pod(7, condition=REFUSED), job("PENDING"), cancel_sent=frozenset({7})),
        actions.Nothing(),
    ),
    ("refused, its job stopping", seen(pod(7, condition=REFUSED), job(terminating=True)), actions.Nothing()),
    ("refused, its job ended", seen(pod(7, condition=REFUSED), job("CANCELLED")), actions.Nothing()),
    # Not yet submitted
    ("valid Pod without a job: submit", seen(pod()), "Submit"),
    (
        "Pod whose Slurm was down: submit again",
        seen(pod(condition=(reasons.REASON_SLURM_UNAVAILABLE, "retrying"))),
        "Submit",
    ),
    ("invalid Pod: reject", seen(pod(requests={})), "Reject"),
    # Crash rows
    (
        "crashed after submit, before recording (this life)",
        seen(pod(), submitted_job_id=7),
        actions.Record(THE_POD, 7),
    ),
    ("crashed after submit, before recording (earlier life)", seen(pod(), job()), actions.Record(THE_POD, 7)),
    (
        "crashed after submit, before recording, and the job ended since: recorded (then deleted)",
        seen(pod(), job("FAILED")),
        actions.Record(THE_POD, 7),
    ),
    ("recorded, the stream has not shown the job yet", seen(pod(7)), actions.Nothing()),
    # A Pod that tolerates the lock already: no write before its bind, which records the job id
    (
        "tolerates the lock, submitted: nothing written before the bind",
        seen(pod(tolerates_lock=True), submitted_job_id=7),
        actions.Nothing(),
    ),
    (
        "tolerates the lock, prolog running: its Node nominated, nothing recorded",
        seen(pod(tolerates_lock=True), job()),
        NOMINATED,
    ),
    (
        "tolerates the lock, script started: bind (the binding records the job)",
        seen(pod(tolerates_lock=True), job(started=True)),
        actions.Bind(job(started=True), (actions.Placement(THE_POD[0], "cpu-001", "node-001"),)),
    ),
    (
        "tolerates the lock, job just pending: nothing written, looked at again",
        seen(pod(tolerates_lock=True), job("PENDING", reason="Resources"), job_phase_age=0.5),
        actions.Later(1.5, "Slurm may start the job before its reason shows"),
    ),
    (
        "tolerates the lock, job pending for a while: its id recorded for whoever reads the Pod",
        seen(pod(tolerates_lock=True), job("PENDING", reason="Resources")),
        actions.Record(THE_POD, 7),
    ),
    (
        "tolerates the lock, job ended before the bind: deleted",
        seen(pod(tolerates_lock=True), job("FAILED")),
        actions.Delete(
            THE_POD, "Warning", "SlurmJobEnded", "placeholder job 7 ended (FAILED) before the Pod was bound"
        ),
    ),
    (
        "tolerates the lock, recorded another job: that one is its own",
        seen(pod(9, tolerates_lock=True), job(started=True)),
        actions.Record(THE_POD, 7),
    ),
    (
        "a submit retried after its answer was lost: the second job is cancelled",
        seen(pod(7), job("PENDING", reason="Priority"), duplicates=(9,)),
        actions.Cancel(
            (9,),
            actions.CancelCause.DUPLICATE,
            "a second job for the Pod (a submit retried after its answer was lost)",
        ),
    ),
    (
        "the second job's cancel already sent: on with the recorded one",
        seen(pod(7), job("PENDING", reason="Priority"), duplicates=(9,), cancel_sent=frozenset({9})),
        actions.Pend(THE_POD, reasons.REASON_PENDING, "Slurm job 7 in partition cpu is pending: Priority"),
    ),
    (
        "recorded by this life, informer copy still without it",
        seen(pod(), job("PENDING", reason="Priority"), recorded=7),
        actions.Pend(THE_POD, reasons.REASON_PENDING, "Slurm job 7 in partition cpu is pending: Priority"),
    ),
    # Waiting for Slurm
    (
        "pending job: Slurm's reason",
        seen(pod(7), job("PENDING", reason="Resources")),
        actions.Pend(THE_POD, reasons.REASON_PENDING, "Slurm job 7 in partition cpu is pending: Resources"),
    ),
    (
        "pending job in the queue: its place and expected start",
        seen(
            pod(7),
            replace(
                job("PENDING", reason="Priority"),
                queue_position=3,
                queue_length=9,
                job=replace(job("PENDING", reason="Priority").job, expected_start=1795430530),
            ),
        ),
        actions.Pend(
            THE_POD,
            reasons.REASON_PENDING,
            "Slurm job 7 in partition cpu is pending: Priority; position 3 of 9; "
            "expected to start at 2026-11-23T10:42Z",
        ),
    ),
    ("pending job not yet looked at", seen(pod(7), job("PENDING")), actions.Nothing()),
    ("pending job, reason None", seen(pod(7), job("PENDING", reason="None")), actions.Nothing()),
    ("allocated job, prolog running: its Node nominated", seen(pod(7), job()), NOMINATED),
    # Running
    (
        "script started: bind",
        seen(pod(7), job(started=True)),
        actions.Bind(job(started=True), (actions.Placement(THE_POD[0], "cpu-001", "node-001"),)),
    ),
    (
        "script started, Node unknown: wait",
        seen(pod(7), job(node="cpu-009", started=True)),
        actions.Wait("no Node known to host Slurm node cpu-009 yet"),
    ),
    (
        "job ended before the Pod was bound",
        seen(pod(7), job("FAILED")),
        actions.Delete(
            THE_POD, "Warning", "SlurmJobEnded", "placeholder job 7 ended (FAILED) before the Pod was bound"
        ),
    ),
    (
        "job gone before the Pod was bound",
        seen(pod(7), job(gone=True)),
        actions.Delete(
            THE_POD, "Warning", "SlurmJobEnded", "placeholder job 7 ended (GONE) before the Pod was bound"
        ),
    ),
]


@pytest.mark.parametrize(("observed", "expected"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_decide(observed: actions.Observed, expected: Any) -> None:
    action = d.decide(observed)
    if isinstance(expected, str):
        assert type(action).__name__ == expected
    else:
        assert action == _the_pod_in(expected, observed)


def test_a_pod_refused_after_its_job_was_submitted_gets_its_job_cancelled() -> None:
    # The policy changes while the job is pending: rejected, then (the condition written) its job
    # cancelled, once.
    pending = job("PENDING", reason="Priority")
    assert isinstance(d.decide(seen(pod(7), pending)), actions.Pend)
    rejected = d.decide(seen(pod(7), pending, policy=policy.BUILTIN))
    assert isinstance(rejected, actions.Reject)
    refused = pod(7, condition=(reasons.REASON_INVALID, rejected.message))
    assert d.decide(seen(refused, pending)) == actions.Cancel(
        (7,), actions.CancelCause.REFUSED, "the Pod was refused before it was bound"
    )
    assert d.decide(seen(refused, pending, cancel_sent=frozenset({7}))) == actions.Nothing()


def test_a_bound_pod_is_never_deleted_by_a_policy_change() -> None:
    bound = seen(pod(7, node="node-001"), job(started=True), policy=policy.BUILTIN)
    action = d.decide(bound)
    assert isinstance(action, actions.Warn)
    assert placements.placement_state(bound, action) == "BOUND"
    assert d.decide(replace(bound, policy=POLICY)) == actions.Nothing()


def test_the_reject_carries_what_a_person_reads() -> None:
    action = d.decide(seen(pod(requests={"cpu": "1"})))
    assert isinstance(action, actions.Reject)
    assert "requests.memory: must be set" in action.message


def test_the_submit_carries_the_requests_validation_parsed() -> None:
    action = d.decide(seen(pod(requests={"cpu": "1500m", "memory": "2Gi"})))
    assert isinstance(action, actions.Submit)
    assert [v.requests for v in action.validations] == [{"cpu": 1500, "memory": 2 * 2**30}]


PLACEMENTS = [
    ("pending", seen(pod(7), job("PENDING", reason="Resources")), "PENDING"),
    ("started", seen(pod(7), job(started=True)), "STARTED"),
    ("bound", seen(pod(7, node="node-001"), job(started=True)), "BOUND"),
    ("invalid", seen(pod(requests={})), "INVALID"),
    ("refused", seen(pod(condition=(reasons.REASON_INVALID, "x"))), "INVALID"),
    ("deleting", seen(pod(7, deleting=True), job()), "TERMINATING"),
    ("job stopped", seen(pod(7, node="node-001"), job(started=True, terminating=True)), "TERMINATING"),
]


@pytest.mark.parametrize(
    ("observed", "expected"), [r[1:] for r in PLACEMENTS], ids=[r[0] for r in PLACEMENTS]
)
def test_placement_derives_from_the_decision(observed: actions.Observed, expected: str) -> None:
    assert placements.placement_state(observed, d.decide(observed)) == expected


def _fit(*excluded: str, total: int = 2) -> Any:
    from collections import Counter

    from tandem.scheduler.eligibility import Eligibility

    reasons = Counter({"node(s) were unschedulable": len(excluded)}) if excluded else Counter()
    return Eligibility(total, tuple(excluded), reasons)


def test_no_node_fits_no_job_and_kube_schedulers_words() -> None:
    observed = seen(pod(), fit=_fit("cpu-001", "cpu-002"))
    assert d.decide(observed) == actions.Pend(
        observed.members,
        reasons.REASON_UNSCHEDULABLE,
        "0/2 nodes are available: 2 node(s) were unschedulable.",
        event="FailedScheduling",
    )


def test_the_job_excludes_the_nodes_that_do_not_fit() -> None:
    action = d.decide(seen(pod(), fit=_fit("cpu-002")))
    assert isinstance(action, actions.Submit) and action.excluded == ("cpu-002",)


def test_a_pending_job_follows_the_fit_with_the_annotations_nodes_kept() -> None:
    p = pod(7)
    p["metadata"]["annotations"][keys.EXCLUDED_NODES] = "cpu-009"
    action = d.decide(seen(p, job(state="PENDING", reason="Resources"), fit=_fit("cpu-002")))
    assert action == actions.Exclude(7, "cpu-[002,009]")
    same = d.decide(
        seen(
            p,
            job(state="PENDING", reason="Resources"),
            fit=_fit("cpu-002"),
            job_excludes=frozenset({"cpu-002", "cpu-009"}),
        )
    )
    assert isinstance(same, actions.Pend) and same.reason == reasons.REASON_PENDING


def test_a_required_node_that_does_not_fit_waits_unschedulable_not_refused() -> None:
    """Slurm refuses a job that requires a node it also excludes ("Invalid node name specified"):
    the Pod waits, as one pinned to a Node that does not fit waits in kube-scheduler."""
    p = pod()
    p["metadata"]["annotations"][keys.REQUIRED_NODES] = "cpu-002"
    observed = seen(p, fit=_fit("cpu-002"))
    assert d.decide(observed) == actions.Pend(
        observed.members,
        reasons.REASON_UNSCHEDULABLE,
        f"required node(s) cpu-002 ({keys.REQUIRED_NODES}) would not take the Pod;"
        " 1/2 nodes are available: 1 node(s) were unschedulable.",
        event="FailedScheduling",
    )
    fits_again = d.decide(seen(p, fit=_fit("cpu-001")))
    assert isinstance(fits_again, actions.Submit) and fits_again.excluded == ("cpu-001",)


def test_a_pending_job_never_excludes_a_node_it_requires() -> None:
    p = pod(7)
    p["metadata"]["annotations"][keys.REQUIRED_NODES] = "cpu-002"
    pending = job(state="PENDING", reason="Resources")
    unfit = _fit("cpu-001", "cpu-002", total=3)
    assert d.decide(seen(p, pending, fit=unfit)) == actions.Exclude(7, "cpu-001")
    kept = d.decide(seen(p, pending, fit=unfit, job_excludes=frozenset({"cpu-001"})))
    assert isinstance(kept, actions.Pend) and kept.reason == reasons.REASON_UNSCHEDULABLE
    assert "required node(s) cpu-002" in kept.message


@pytest.mark.parametrize(
    ("observed", "judges"),
    [
        (seen(pod(), fits=actions.NOT_JUDGED), True),  # a submit excludes the Nodes that would not take it
        (seen(pod(7), job(state="PENDING", reason="Resources"), fits=actions.NOT_JUDGED), True),
        (seen(pod(7), job(state="RUNNING", started=True), fits=actions.NOT_JUDGED), False),  # binds
        (seen(pod(7), job(state="RUNNING"), fits=actions.NOT_JUDGED), False),  # nominates
        (seen(pod(), job(state="PENDING"), recorded=None, fits=actions.NOT_JUDGED), False),  # records
        (seen(pod(7, node="node-001"), job(state="RUNNING", started=True), fits=actions.NOT_JUDGED), False),
    ],
    ids=["no job", "job pending", "job started", "job allocated", "unrecorded", "bound"],
)
def test_only_decisions_that_read_the_fits_ask_for_them(observed: actions.Observed, judges: bool) -> None:
    """Judging every Node is the dearest part of a reconcile: asked for only where it is read."""
    assert isinstance(d.decide(observed), actions.Judge) == judges
    judged = dataclasses.replace(observed, fits={REF.uid: _fit("cpu-002")})
    assert not isinstance(d.decide(judged), actions.Judge)


def test_an_allocated_job_nominates_its_node_and_a_requeue_clears_it() -> None:
    allocated = seen(pod(7), job(state="RUNNING"))
    assert d.decide(allocated) == _the_pod_in(NOMINATED, allocated)
    nominated = pod(7)
    nominated["status"]["nominatedNodeName"] = "node-001"
    assert d.decide(seen(nominated, job(state="RUNNING"))) == actions.Nothing()
    requeued = seen(nominated, job(state="PENDING", reason="Resources"))
    assert d.decide(requeued) == actions.Nominate((actions.Placement(nominated, "", ""),))


def test_a_passing_state_is_written_only_once_it_lasts() -> None:
    """Most placeholders pend and pass their prologs in well under a second; a condition or a
    nomination written for that moment is an API request and a watch event per Pod that nobody
    reads (issue 22). Before: both were written at once, whatever the job's age."""
    pending = seen(pod(7), job("PENDING", reason="Resources"), job_phase_age=0.5)
    assert d.decide(pending) == actions.Later(
        d.PENDING_AFTER_SECONDS - 0.5, "Slurm may start the job before its reason shows"
    )
    lasting = replace(pending, job_phase_age=d.PENDING_AFTER_SECONDS)
    assert isinstance(d.decide(lasting), actions.Pend)
    allocated = seen(pod(7), job(state="RUNNING"), job_phase_age=0.25)
    later = d.decide(allocated)
    assert isinstance(later, actions.Later) and later.after == d.NOMINATE_AFTER_SECONDS - 0.25
    assert d.decide(replace(allocated, job_phase_age=d.NOMINATE_AFTER_SECONDS)) == _the_pod_in(
        NOMINATED, allocated
    )
    started = seen(pod(7), job(state="RUNNING", started=True), job_phase_age=0.0)
    assert isinstance(d.decide(started), actions.Bind), "a start binds at once, however young"


def test_a_nomination_is_cleared_at_once_when_the_job_is_requeued() -> None:
    nominated = pod(7)
    nominated["status"]["nominatedNodeName"] = "node-001"
    requeued = seen(nominated, job(state="PENDING", reason="Resources"), job_phase_age=0.0)
    assert d.decide(requeued) == actions.Nominate((actions.Placement(nominated, "", ""),))
