"""The decision for a gang as a table: one row per line of tandem.scheduler.decide's table, crash
rows included (a previous life that died between two writes of a group's action). The same decide
places a Pod alone as a group of one: every row of tests/unit/scheduler/test_decide.py runs through it too,
and the rows marked (issue 19) are the single-Pod checks groups lacked before."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, placeholder, reasons
from tandem.scheduler import actions, groups, placements, policy
from tandem.scheduler import decide as d
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.models import Job, JobStatus
from tests.unit.scheduler import test_decide as single

SCHEDULER = "tandem-test"
KEY = "default/pg:train"
PODGROUP = {
    "apiVersion": f"{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSIONS[0]}",
    "kind": keys.PODGROUP_KIND,
    "metadata": {"namespace": "default", "name": "train", "uid": "pg-uid"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
}
GROUP = groups.resolve(groups.target(KEY), [], {"default/train": PODGROUP}.get)
HOSTS = {"cpu-001": "node-001", "cpu-002": "node-002", "cpu-003": "node-003"}
NODES = ("cpu-001", "cpu-002", "cpu-003")


def no_object(_: str) -> None:
    return None


def member(
    index: int,
    job_id: int | None = None,
    node: str = "",
    deleting: bool = False,
    phase: str = "Pending",
    refused: str = "",
    annotations: dict[str, str] | None = None,
    cpu: str = "1",
    uid: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "namespace": "default",
        "name": f"train-{index}",
        "uid": uid or f"uid-{index}",
        "annotations": {keys.JOB_COMPLETION_INDEX_ANNOTATION: str(index), **(annotations or {})},
    }
    if job_id is not None:
        meta["annotations"][keys.JOB_ID_ANNOTATION] = str(job_id)
    if deleting:
        meta["deletionTimestamp"] = "2026-11-22T00:00:00Z"
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "schedulingGroup": {"podGroupName": "train"},
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase}
    if refused:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": refused, "message": "no"}
        ]
    return {"metadata": meta, "spec": spec, "status": status}


def job(
    state: str = "RUNNING",
    started: bool = False,
    terminating: bool = False,
    reason: str = "",
    node_count: int = 3,
    job_id: int = 7,
) -> JobStatus:
    """The group's job as Slurm reports it: asking for (or holding) one node per member of the
    minCount it was submitted for (node_count; 0 while only a push made it known)."""
    assert GROUP is not None
    nodes = NODES[:node_count] if node_count else NODES
    return JobStatus(
        Job(
            job_id=job_id,
            name=placeholder.job_name(GROUP.ref, SCHEDULER),
            admin_comment=placeholder.job_name(GROUP.ref, SCHEDULER),
            state=state,
            state_reason=reason,
            nodes=nodes if state != "PENDING" else (),
            partition="batch",
            node_count=node_count,
        ),
        started=started,
        terminating=terminating,
    )


# The lab's: Pods without user-id run as tandem-pods.
POLICY = policy.parse("default: {defaultUser: 1001}")


def seen(members: list[dict[str, Any]], j: JobStatus | None = None, **kw: Any) -> actions.Observed:
    """The group's snapshot, as the controller observes it (the job ids its members carry)."""
    return actions.Observed(
        KEY,
        kw.pop("group", GROUP),
        tuple(members),
        job=j,
        jobs=(j,) if j is not None else (),
        recorded={
            m["metadata"]["uid"]: job_id for m in members if (job_id := keys.recorded_job_id(m)) is not None
        },
        hosts=HOSTS,
        slurm_nodes=kw.pop("slurm_nodes", 8),
        kill_wait=30,
        policy=kw.pop("policy", POLICY),
        **kw,
    )


def three(**kw: Any) -> list[dict[str, Any]]:
    return [member(i, **kw) for i in range(3)]


def min_count(n: int) -> groups.Group | None:
    """The group once its PodGroup's gang.minCount was changed to n (mutable since Kubernetes 1.37)."""
    podgroup = {**PODGROUP, "spec": {"schedulingPolicy": {"gang": {"minCount": n}}}}
    return groups.resolve(groups.target(KEY), [], {"default/train": podgroup}.get)


def never_ran(node_count: int = 3) -> JobStatus:
    """The group's job cancelled while pending: it never held a node."""
    return JobStatus(replace(job(state="CANCELLED", node_count=node_count).job, nodes=()))


def grown(bound: int = 0, **kw: Any) -> list[dict[str, Any]]:
    """Five members carrying job 7 (submitted for three), the first `bound` running on its nodes."""
    return [member(i, 7, f"node-00{i + 1}" if i < bound else "", **kw) for i in range(5)]


def test_a_podgroup_is_read_with_its_gang_policy_and_a_basic_one_is_no_group() -> None:
    assert GROUP is not None and GROUP.min_count == 3 and GROUP.ref.uid == "pg-uid"
    assert GROUP.title == "PodGroup default/train"
    basic = {**PODGROUP, "spec": {"schedulingPolicy": {"basic": {}}}}
    assert groups.resolve(groups.target(KEY), [], {"default/train": basic}.get) is None
    missing = groups.resolve(groups.target(KEY), [], no_object)
    assert missing is not None and "does not exist" in missing.waiting_for


def test_an_lws_group_is_its_leader_and_workers_with_the_size_lws_gave_them() -> None:
    pods = [
        {
            "metadata": {
                "namespace": "ns",
                "name": f"serve-1{'-' + str(w) if w else ''}",
                "labels": {
                    keys.LWS_NAME_LABEL: "serve",
                    keys.LWS_GROUP_INDEX_LABEL: "1",
                    keys.LWS_WORKER_INDEX_LABEL: str(w),
                    keys.LWS_GROUP_KEY_LABEL: "abc123",
                },
                "annotations": {keys.LWS_SIZE_ANNOTATION: "2"},
            }
        }
        for w in (1, 0)
    ]
    assert groups.group_key(pods[0]) == "ns/lws:serve:1"
    group = groups.resolve(groups.target("ns/lws:serve:1"), pods, no_object)
    assert group is not None and group.min_count == 2 and group.ref.uid == "abc123"
    assert [p["metadata"]["name"] for p in sorted(pods, key=groups.rank)] == ["serve-1", "serve-1-1"]


ROWS: list[tuple[str, actions.Observed, type]] = [
    ("job live, every member gone", seen([], job()), actions.Cancel),
    ("job live, members all deleting", seen(three(job_id=7, deleting=True), job()), actions.Cancel),
    (
        "job live, PodGroup deleted",
        seen(three(job_id=7), job(), group=groups.resolve(groups.target(KEY), [], no_object)),
        actions.Cancel,
    ),
    ("cancel already sent", seen([], job(), cancel_sent=frozenset({7})), actions.Nothing),
    ("no member at all", seen([]), actions.Nothing),
    ("basic policy: members go one by one", seen(three(), group=None), actions.Nothing),
    (
        "job stopped while bound",
        seen(three(job_id=7, node="node-001"), job(terminating=True)),
        actions.Delete,
    ),
    ("job ended before binding", seen(three(job_id=7), job(state="CANCELLED")), actions.Delete),
    ("job requeued after binding", seen([member(0, 7, "node-001")], job(state="PENDING")), actions.Delete),
    (
        "a member refused earlier",
        seen([member(0, refused=reasons.REASON_INVALID), member(1)]),
        actions.Nothing,
    ),
    (
        "a member refused after the group's job was submitted: the job is cancelled",
        seen(
            [member(0, 7, refused=reasons.REASON_INVALID), member(1, 7), member(2, 7)], job(state="PENDING")
        ),
        actions.Cancel,
    ),
    (
        "refused right after this life submitted, the stream not there yet: cancelled",
        seen([member(0, refused=reasons.REASON_INVALID), member(1), member(2)], submitted_job_id=7),
        actions.Cancel,
    ),
    (
        "a member refused, the group's job cancel sent",
        seen([member(0, 7, refused=reasons.REASON_INVALID), member(1, 7)], job(), cancel_sent=frozenset({7})),
        actions.Nothing,
    ),
    (
        "a member refused, but part of the group is bound: never evicted",
        seen([member(0, 7, "node-001"), member(1, 7, refused=reasons.REASON_INVALID)], job(started=True)),
        actions.Nothing,
    ),
    (
        "bound members the policy would now refuse: told, never evicted",
        seen(
            [member(i, 7, f"node-00{i + 1}") for i in range(3)],
            job(started=True),
            policy=policy.BUILTIN,
        ),
        actions.Warn,
    ),
    (
        "PodGroup not seen yet",
        seen(three(), group=groups.resolve(groups.target(KEY), [], no_object)),
        actions.Pend,
    ),
    ("a member invalid", seen([member(0), member(1, cpu="lots"), member(2)]), actions.Reject),
    (
        "members disagree on the partition",
        seen([member(0, annotations={keys.PARTITION: "a"}), member(1), member(2)]),
        actions.Reject,
    ),
    ("two of three members", seen(three()[:2]), actions.Pend),
    ("more members than Slurm nodes", seen(three(), slurm_nodes=2), actions.Refuse),
    ("all members, no job", seen(three()), actions.Submit),
    ("crash after submit, before any record", seen(three(), job(state="PENDING")), actions.Record),
    ("crash after one record", seen([member(0, 7), member(1), member(2)], job()), actions.Record),
    ("submitted, stream not there yet", seen(three(job_id=7)), actions.Nothing),
    (
        "a group submit retried after its answer was lost: the second job is cancelled",
        seen(three(job_id=7), job(state="PENDING", reason="Priority"), duplicates=(9,)),
        actions.Cancel,
    ),
    (
        "the second job's cancel sent: on with the recorded one",
        seen(
            three(job_id=7),
            job(state="PENDING", reason="Priority"),
            duplicates=(9,),
            cancel_sent=frozenset({9}),
        ),
        actions.Pend,
    ),
    ("submitted in this life, none recorded", seen(three(), submitted_job_id=7), actions.Record),
    (
        "job pending with a reason",
        seen(three(job_id=7), job(state="PENDING", reason="Resources")),
        actions.Pend,
    ),
    (
        "job allocated, prologs running: the Nodes nominated (issue 19)",
        seen(three(job_id=7), job()),
        actions.Nominate,
    ),
    ("job running, script started", seen(three(job_id=7), job(started=True)), actions.Bind),
    (
        "crash after binding one member",
        seen([member(0, 7, "node-001"), member(1, 7), member(2, 7)], job(started=True)),
        actions.Bind,
    ),
    (
        "all bound",
        seen([member(i, 7, f"node-00{i + 1}") for i in range(3)], job(started=True)),
        actions.Nothing,
    ),
    # minCount changed after the job was submitted (issue 21).
    (
        "minCount grew while the job was pending: the job is cancelled, each member told",
        seen(grown(), job(state="PENDING", reason="Resources"), group=min_count(5)),
        actions.Cancel,
    ),
    (
        "minCount grew before the new members exist: the job is cancelled all the same",
        seen(three(job_id=7), job(state="PENDING", reason="Resources"), group=min_count(5)),
        actions.Cancel,
    ),
    (
        "the outgrown job's cancel sent: nothing until it ended",
        seen(grown(), job(state="PENDING"), group=min_count(5), cancel_sent=frozenset({7})),
        actions.Nothing,
    ),
    (
        "the outgrown job ended, never run: one new job of minCount, the members kept",
        seen(grown(), never_ran(), group=min_count(5)),
        actions.Submit,
    ),
    (
        "the outgrown job ended, fewer members than minCount: they wait for the rest, kept",
        seen(three(job_id=7), never_ran(), group=min_count(5)),
        actions.Pend,
    ),
    (
        "crash after the new job's submit, before any record: recorded",
        seen(grown(), job(state="PENDING", node_count=5, job_id=8), group=min_count(5)),
        actions.Record,
    ),
    (
        "minCount grew while the job runs: the others get linked jobs, the job is never cancelled",
        seen(grown(bound=3), job(started=True), group=min_count(5)),
        actions.SubmitExtras,
    ),
    (
        "minCount grew while the prologs run: the Nodes are nominated for the first members",
        seen(grown(), job(), group=min_count(5)),
        actions.Nominate,
    ),
    (
        "minCount grew past the job Slurm started: its nodes' members bound, never a Wait",
        seen(grown(), job(started=True), group=min_count(5)),
        actions.Bind,
    ),
    (
        "minCount grew, the job's node count not known yet: wait for its nodes, as before",
        seen(grown(), job(started=True, node_count=0), group=min_count(5)),
        actions.Wait,
    ),
    (
        "minCount shrank below what runs: nothing cancelled, nothing deleted",
        seen([member(i, 7, f"node-00{i + 1}") for i in range(3)], job(started=True), group=min_count(2)),
        actions.Nothing,
    ),
]


@pytest.mark.parametrize(("why", "observed", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_each_line_of_the_group_table(why: str, observed: actions.Observed, expected: type) -> None:
    assert isinstance(d.decide(observed), expected), why


def test_a_refused_groups_job_is_cancelled_once_and_a_bound_group_is_only_told() -> None:
    refused = [member(0, 7, refused=reasons.REASON_INVALID), member(1, 7), member(2, 7)]
    assert d.decide(seen(refused, job(state="PENDING"))) == actions.Cancel(
        (7,), actions.CancelCause.REFUSED, "a member was refused before the group was bound"
    )
    bound = [member(i, 7, f"node-00{i + 1}") for i in range(3)]
    told = d.decide(seen(bound, job(started=True), policy=policy.BUILTIN))
    assert isinstance(told, actions.Warn) and told.reason == reasons.REASON_WOULD_BE_REFUSED
    assert [p["metadata"]["name"] for p in told.pods] == ["train-0", "train-1", "train-2"]
    assert "user-id: not set" in told.message and "never evicted by a policy change" in told.message


def test_missing_members_are_counted_on_each_member() -> None:
    action = d.decide(seen(three()[:2]))
    assert isinstance(action, actions.Pend) and len(action.pods) == 2
    assert "1 still missing" in action.message and action.reason == reasons.REASON_WAITING_FOR_MEMBERS


def test_members_bind_all_at_once_to_distinct_nodes_the_first_on_the_batch_host() -> None:
    action = d.decide(seen([member(2, 7), member(0, 7), member(1, 7)], job(started=True)))
    assert isinstance(action, actions.Bind)
    assert [(p.pod["metadata"]["name"], p.slurm_node, p.kube_node) for p in action.placements] == [
        ("train-0", "cpu-001", "node-001"),
        ("train-1", "cpu-002", "node-002"),
        ("train-2", "cpu-003", "node-003"),
    ]


def test_a_replacement_takes_the_node_its_predecessor_left() -> None:
    members = [
        member(0, 7, "node-001"),
        member(1, 7, "node-002", phase="Failed"),  # left: its node is free again
        member(2, 7, "node-003"),
        member(1, 7, uid="uid-1b"),  # the Job controller's replacement
    ]
    action = d.decide(seen(members, job(started=True)))
    assert isinstance(action, actions.Bind)
    assert [(p.pod["metadata"]["uid"], p.kube_node) for p in action.placements] == [("uid-1b", "node-002")]


def test_a_replacement_is_bound_only_once_it_carries_the_job() -> None:
    members = [member(0, 7, "node-001"), member(2, 7, "node-003"), member(1, uid="uid-1b")]
    action = d.decide(seen(members, job(started=True)))
    assert isinstance(action, actions.Record) and [p["metadata"]["uid"] for p in action.pods] == ["uid-1b"]


def test_no_bind_before_every_node_of_the_job_is_known() -> None:
    action = d.decide(
        actions.Observed(
            KEY,
            GROUP,
            tuple(three(job_id=7)),
            job=job(started=True),
            recorded={f"uid-{i}": 7 for i in range(3)},
            hosts={},
            kill_wait=30,
            policy=POLICY,
        )
    )
    assert isinstance(action, actions.Wait)


def test_no_bind_while_the_job_is_known_on_fewer_nodes_than_members() -> None:
    partial = JobStatus(replace(job(started=True).job, nodes=("cpu-001",)), started=True)
    assert isinstance(d.decide(seen(three(job_id=7), partial)), actions.Wait)


def test_a_group_is_submitted_with_its_minimum_in_rank_order() -> None:
    members = [member(3), member(1), member(0), member(2)]
    action = d.decide(seen(members))
    assert isinstance(action, actions.Submit)
    assert [p["metadata"]["name"] for p in action.members] == ["train-0", "train-1", "train-2"]


def test_disagreement_is_named_on_every_member() -> None:
    action = d.decide(seen([member(0, annotations={keys.PARTITION: "a"}), member(1), member(2)]))
    assert isinstance(action, actions.Reject) and len(action.pods) == 3
    assert f"metadata.annotations[{keys.PARTITION}]: must be the same on every member" in action.message
    assert 'train-0="a"' in action.message and "train-1=(unset)" in action.message


def _guaranteed(pod: dict[str, Any]) -> dict[str, Any]:
    """Requests equal limits in whole CPUs: a kubelet with the static CPU manager pins them."""
    resources = pod["spec"]["containers"][0]["resources"]
    resources["limits"] = dict(resources["requests"])
    return pod


def test_reject_static_cpu_refuses_a_member_as_it_refuses_a_pod_alone() -> None:
    """Before: the group path validated without --reject-static-cpu, so a gang member the kubelet
    would pin CPUs for was submitted while the same Pod alone was refused (issue 19)."""
    members = [_guaranteed(m) for m in three()]
    action = d.decide(seen(members, reject_static_cpu=True))
    assert isinstance(action, actions.Reject), action
    assert "--reject-static-cpu" in action.message
    key = "default/train-0"
    alone = d.decide(
        actions.Observed(
            key,
            groups.alone(groups.target(key), members[0]),
            (members[0],),
            kill_wait=30,
            reject_static_cpu=True,
            policy=POLICY,
        )
    )
    assert isinstance(alone, actions.Reject)
    # Without the flag: submitted, each member's validation carrying the warning to post.
    submit = d.decide(seen(members))
    assert isinstance(submit, actions.Submit)
    assert all(v.static_cpu for v in submit.validations)


def _gang_of_one(observed: actions.Observed) -> actions.Observed:
    """A single-Pod row's snapshot with its Pod as the only member of a gang (minCount 1)."""
    podgroup = {**PODGROUP, "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}}
    return replace(
        observed, key=KEY, group=groups.resolve(groups.target(KEY), [], {"default/train": podgroup}.get)
    )


def _pods_of(action: actions.Action) -> tuple[Any, ...]:
    if isinstance(action, actions.Bind | actions.Nominate):
        return tuple((p.pod, p.slurm_node, p.kube_node) for p in action.placements)
    return tuple(getattr(action, "pods", None) or getattr(action, "members", None) or ())


# Where a gang differs from a Pod alone, by design: a Pod alone's jobs are all its own (found by
# its uid), a group's outlive members that were replaced; so a Pod alone that tolerates the lock
# has its binding record its job, and a member has the job recorded on it first.
BY_DESIGN = {
    (
        "crashed after submit, before recording, and the job ended since: recorded (then deleted)"
    ): actions.Submit,
    "tolerates the lock, submitted: nothing written before the bind": actions.Record,
    "tolerates the lock, prolog running: its Node nominated, nothing recorded": actions.Record,
    "tolerates the lock, script started: bind (the binding records the job)": actions.Record,
    "tolerates the lock, job just pending: nothing written, looked at again": actions.Record,
    "tolerates the lock, job ended before the bind: deleted": actions.Submit,
}
SAME = [r for r in single.ROWS if r[0] not in BY_DESIGN]


@pytest.mark.parametrize("observed", [r[1] for r in SAME], ids=[f"alone: {r[0]}" for r in SAME])
def test_every_single_pod_row_holds_for_a_gang_of_one(observed: actions.Observed) -> None:
    """Every check of a Pod alone applies to a gang member (issue 19: before, gangs ignored
    --reject-static-cpu, never nominated, never followed the fit once pending): the same action
    on the same Pods and jobs, in the group's words."""
    alone, member = d.decide(observed), d.decide(_gang_of_one(observed))
    assert type(member) is type(alone)
    assert _pods_of(member) == _pods_of(alone)
    assert getattr(member, "job_ids", None) == getattr(alone, "job_ids", None)
    assert getattr(member, "job_id", None) == getattr(alone, "job_id", None)
    assert getattr(member, "reason", None) == getattr(alone, "reason", None)
    assert getattr(member, "event", None) == getattr(alone, "event", None)


def _fits(*unfit: str, total: int = 3) -> dict[str, Eligibility]:
    from collections import Counter

    reasons = Counter({"node(s) were unschedulable": len(unfit)}) if unfit else Counter()
    return {f"uid-{i}": Eligibility(total, unfit, reasons) for i in range(3)}


def test_members_whose_job_ended_before_binding_hear_what_a_pod_alone_hears() -> None:
    """Before: a Normal Event in the words of a bound Pod ("Slurm job 7 ended (CANCELLED);
    deleting the Pod") for members that never ran (issue 19)."""
    members = three(job_id=7)
    assert d.decide(seen(members, job(state="CANCELLED"))) == actions.Delete(
        tuple(members),
        "Warning",
        "SlurmJobEnded",
        "placeholder job 7 ended (CANCELLED) before the Pod was bound",
    )


def test_a_refused_members_cancelled_job_does_not_delete_the_refused_member() -> None:
    """Before: once the cancel made the job stop, every member carrying it was deleted, the
    refused one with its reason; a Pod alone stays refused (issue 19)."""
    members = [member(0, 7, refused=reasons.REASON_INVALID), member(1, 7), member(2, 7)]
    assert d.decide(seen(members, job(state="PENDING", terminating=True))) == actions.Nothing()
    ended = d.decide(seen(members, job(state="CANCELLED")))
    assert isinstance(ended, actions.Delete) and [p["metadata"]["name"] for p in ended.pods] == [
        "train-1",
        "train-2",
    ]


def test_a_pending_group_job_follows_the_fit_as_a_pod_alones_does() -> None:
    """Before: a group's job kept the excluded nodes of its submit forever (issue 19)."""
    pending = job(state="PENDING", reason="Resources")
    # Four Slurm nodes, three would take every member: room for the group.
    assert d.decide(seen(three(job_id=7), pending, fits=_fits("cpu-003", total=4))) == actions.Exclude(
        7, "cpu-003"
    )
    same = d.decide(
        seen(three(job_id=7), pending, fits=_fits("cpu-003", total=4), job_excludes=frozenset({"cpu-003"}))
    )
    assert isinstance(same, actions.Pend) and same.reason == reasons.REASON_PENDING


def test_a_group_no_nodes_would_take_gets_kube_schedulers_event_on_each_member() -> None:
    """Before: the members' condition said Unschedulable but no FailedScheduling Event was
    posted, unlike for a Pod alone (issue 19)."""
    action = d.decide(seen(three(), fits=_fits("cpu-002", "cpu-003")))
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_UNSCHEDULABLE
    assert action.event == "FailedScheduling" and len(action.pods) == 3
    assert "needs 3 nodes, one per member, and 1/3 would take every member" in action.message


def test_a_bound_member_whose_job_runs_elsewhere_now_is_deleted() -> None:
    """Before: only a Pod alone was checked against where its job runs (issue 19)."""
    members = [member(0, 7, "node-001"), member(1, 7, "node-009"), member(2, 7, "node-003")]
    action = d.decide(seen(members, job(started=True)))
    assert isinstance(action, actions.Delete) and [p["metadata"]["name"] for p in action.pods] == ["train-1"]
    assert "now runs on cpu-001, cpu-002, cpu-003, not on this Pod's Node" in action.message


def test_a_group_is_nominated_while_its_prologs_run_and_cleared_if_requeued() -> None:
    """Before: only a Pod alone had status.nominatedNodeName set (issue 19)."""
    members = three(job_id=7)
    action = d.decide(seen(members, job()))
    assert action == actions.Nominate(
        tuple(actions.Placement(m, f"cpu-00{i + 1}", f"node-00{i + 1}") for i, m in enumerate(members))
    )
    for i, m in enumerate(members):
        m["status"]["nominatedNodeName"] = f"node-00{i + 1}"
    assert d.decide(seen(members, job())) == actions.Nothing()
    cleared = d.decide(seen(members, job(state="PENDING", reason="Priority")))
    assert cleared == actions.Nominate(tuple(actions.Placement(m, "", "") for m in members))


@pytest.mark.parametrize(("why", "expected"), BY_DESIGN.items())
def test_the_lines_where_a_gang_differs_by_design(why: str, expected: type) -> None:
    (observed,) = [r[1] for r in single.ROWS if r[0] == why]
    assert isinstance(d.decide(_gang_of_one(observed)), expected)


def test_a_pending_job_minCount_grew_past_is_cancelled_and_replaced_by_one_of_minCount() -> None:
    """Before: the job kept asking for the old number of nodes, and once it ran the members waited
    forever on "Slurm job 7's 5 nodes are not all known yet" (issue 21)."""
    members = grown()
    cancel = d.decide(seen(members, job(state="PENDING", reason="Resources"), group=min_count(5)))
    assert cancel == actions.Cancel(
        (7,),
        actions.CancelCause.OUTGROWN,
        "minCount grew to 5, past the 3 nodes the pending job asks for",
        tuple(members),
        "SlurmJobCancelled",
        "PodGroup default/train's minCount grew to 5 while Slurm job 7 (3 nodes) was pending: "
        "cancelling it to place the group as one job of 5",
    )
    observed = seen(members, job(state="PENDING"), group=min_count(5), cancel_sent=frozenset({7}))
    assert placements.placement_state(observed, cancel) == "PENDING"  # not terminating: a new job follows
    ended = seen(members, never_ran(), group=min_count(5))
    submit = d.decide(ended)
    assert isinstance(submit, actions.Submit)
    assert [p["metadata"]["name"] for p in submit.members] == [f"train-{i}" for i in range(5)]
    assert placements.placement_state(ended, submit) == "PENDING"


def test_a_job_cancelled_before_it_ran_for_another_reason_still_ends_its_members() -> None:
    """Only a job minCount outgrew is replaced: one Slurm ended as it was asked still deletes."""
    action = d.decide(seen(three(job_id=7), never_ran()))
    assert isinstance(action, actions.Delete) and action.event_reason == "SlurmJobEnded"


def test_a_running_job_minCount_grew_past_keeps_running_and_its_new_members_get_linked_jobs() -> None:
    """Before: "Slurm job 7's 5 nodes are not all known yet", forever (issue 21); then a wait for
    ever (GroupAllocationFull). Slurm cannot grow a job: each member beyond its nodes gets a job of
    its own, linked to the core, off its nodes, at its priority (issue 53), one at a time."""
    members = grown(bound=3)
    action = d.decide(seen(members, job(started=True), group=min_count(5)))
    assert isinstance(action, actions.SubmitExtras) and action.of_core
    assert [m["metadata"]["name"] for m in action.members] == ["train-3"]
    assert action.core_job_id == 7 and action.taken == NODES


def test_members_past_an_allocated_jobs_nodes_are_told_they_follow_once_it_runs() -> None:
    members = grown()
    nominate = d.decide(seen(members, job(), group=min_count(5)))
    assert isinstance(nominate, actions.Nominate)
    for i in range(3):
        members[i]["status"]["nominatedNodeName"] = f"node-00{i + 1}"
    told = d.decide(seen(members, job(), group=min_count(5)))
    assert isinstance(told, actions.Pend) and told.reason == reasons.REASON_GROUP_FULL
    assert [p["metadata"]["name"] for p in told.pods] == ["train-3", "train-4"]
    assert told.message == (
        "PodGroup default/train's minCount grew to 5 after Slurm job 7 was given 3 nodes: a Slurm job"
        " cannot grow, so once it runs, each member beyond its nodes gets a Slurm job of its own,"
        " linked to it (in its domain, at its priority)"
    )


def test_a_bind_waits_for_the_nodes_the_job_holds_not_for_minCount() -> None:
    """The allocation is read against the job's own node count: before, against minCount, so a
    job of 3 for a group grown to 5 never bound (issue 21). While Slurm has not said it (a job
    only a push made known), against minCount, as before."""
    partial = JobStatus(replace(job(started=True).job, nodes=("cpu-001",)), started=True)
    assert d.decide(seen(three(job_id=7), partial, group=min_count(5))) == actions.Wait(
        "Slurm job 7's 3 nodes are not all known yet"
    )
    unknown = JobStatus(replace(partial.job, node_count=0), started=True)
    assert d.decide(seen(three(job_id=7), unknown)) == actions.Wait(
        "Slurm job 7's 3 nodes are not all known yet"
    )
    bind = d.decide(seen(grown(), job(started=True), group=min_count(5)))
    assert isinstance(bind, actions.Bind) and len(bind.placements) == 3


def test_a_group_whose_minCount_shrank_below_what_runs_keeps_running() -> None:
    bound = [member(i, 7, f"node-00{i + 1}") for i in range(3)]
    assert d.decide(seen(bound, job(started=True), group=min_count(1))) == actions.Nothing()
    # A fourth member (the group grew back) is an extra: a job of its own, off the core's nodes
    # (tests/unit/scheduler/test_elastic.py). Before: it waited for ever (GroupAllocationFull).
    extra = d.decide(seen([*bound, member(3, 7)], job(started=True), group=min_count(2)))
    assert isinstance(extra, actions.SubmitExtras) and extra.taken == NODES


def test_a_group_preempted_whole_by_kube_scheduler_cancels_its_job_and_its_podgroup_says_why() -> None:
    """Workload-aware preemption (disruptionMode All) takes every member at once: the group's one
    Slurm job is cancelled and the PodGroup, which outlives its Pods, carries the Event."""
    preempted = three(job_id=7, node="node-001", deleting=True)
    for pod in preempted:
        pod["status"]["conditions"] = [
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        ]
    action = d.decide(seen(preempted, job(started=True)))
    assert isinstance(action, actions.Cancel) and action.job_ids == (7,)
    assert action.subject is PODGROUP and action.event_reason == "SlurmJobCancelled"
    why = "kube-scheduler preempted every member of the group (workload-aware preemption)"
    assert action.message == f"Slurm job 7 cancelled: {why}"
    # Deleted by someone else: the same cancel, said plainly.
    plain = d.decide(seen(three(job_id=7, node="node-001", deleting=True), job(started=True)))
    assert (
        isinstance(plain, actions.Cancel)
        and plain.message == "Slurm job 7 cancelled: every member of the group is gone"
    )


# Kueue's topology-aware scheduling (TAS) names each Pod's Node in its nodeSelector: the members of
# one gang are pinned apart, each to a Node of its own, before Tandem sees them.
FOUR = ("cpu-001", "cpu-002", "cpu-003", "cpu-004")


def pinned(index: int, host: str, job_id: int | None = None) -> dict[str, Any]:
    pod = member(index, job_id)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": host}
    return pod


def _only(*takes: str) -> Eligibility:
    """A member that would take only these of the four Slurm nodes."""
    from collections import Counter

    excluded = tuple(s for s in FOUR if s not in takes)
    return Eligibility(
        len(FOUR),
        excluded,
        Counter({"node(s) didn't match Pod's node affinity/selector": len(excluded)}),
        nodes=FOUR,
    )


def test_members_tas_pinned_each_to_its_node_are_one_job_on_exactly_those_nodes() -> None:
    """Before: the job excluded every node some member would not take, which for members pinned
    apart is every node: the gang waited Unschedulable for ever."""
    members = [pinned(0, "node-003"), pinned(1, "node-001"), pinned(2, "node-002")]
    fits = {"uid-0": _only("cpu-003"), "uid-1": _only("cpu-001"), "uid-2": _only("cpu-002")}
    action = d.decide(seen(members, fits=fits))
    assert isinstance(action, actions.Submit) and action.excluded == ("cpu-004",)


def test_a_pending_job_of_pinned_members_keeps_its_nodes() -> None:
    members = [pinned(0, "node-003", 7), pinned(1, "node-001", 7), pinned(2, "node-002", 7)]
    fits = {"uid-0": _only("cpu-003"), "uid-1": _only("cpu-001"), "uid-2": _only("cpu-002")}
    pending = job(state="PENDING", reason="Resources")
    action = d.decide(seen(members, pending, fits=fits, job_excludes=frozenset({"cpu-004"})))
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_PENDING


def test_members_pinned_to_one_node_wait_unschedulable() -> None:
    """TAS put two Pods on one Node; a gang's job has one node per member."""
    members = [pinned(0, "node-001"), pinned(1, "node-001"), pinned(2, "node-002")]
    fits = {"uid-0": _only("cpu-001"), "uid-1": _only("cpu-001"), "uid-2": _only("cpu-002")}
    action = d.decide(seen(members, fits=fits))
    assert isinstance(action, actions.Pend) and action.reason == reasons.REASON_UNSCHEDULABLE
    assert "leave no node of its own for each (two members pinned to one Node" in action.message


def test_pinned_members_are_each_bound_to_the_node_they_were_pinned_to() -> None:
    """Before: bound in rank order on the job's nodes, whatever their nodeSelector said."""
    members = [pinned(0, "node-003", 7), pinned(1, "node-001", 7), pinned(2, "node-002", 7)]
    labels = {h: {"kubernetes.io/hostname": h} for h in HOSTS.values()}
    action = d.decide(seen(members, job(started=True), node_labels=labels))
    assert isinstance(action, actions.Bind)
    assert sorted((p.pod["metadata"]["name"], p.kube_node) for p in action.placements) == [
        ("train-0", "node-003"),
        ("train-1", "node-001"),
        ("train-2", "node-002"),
    ]
