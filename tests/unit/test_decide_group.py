"""The group decision as a table: one row per line of tandem.scheduler.decide_group's table,
crash rows included (a previous life that died between two writes of a group's action)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.scheduler import decide as d
from tandem.scheduler import decide_group as dg
from tandem.scheduler import groups, policy
from tandem.slurm.models import Job, JobStatus

SCHEDULER = "tandem-test"
KEY = "default/pg:train"
PODGROUP = {
    "apiVersion": keys.PODGROUP_API,
    "kind": keys.PODGROUP_KIND,
    "metadata": {"namespace": "default", "name": "train", "uid": "pg-uid"},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
}
GROUP = groups.resolve(KEY, [], {"default/train": PODGROUP}.get)
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
    state: str = "RUNNING", started: bool = False, terminating: bool = False, reason: str = ""
) -> JobStatus:
    assert GROUP is not None
    return JobStatus(
        Job(
            job_id=7,
            name=placeholder.job_name(GROUP.ref, SCHEDULER),
            admin_comment=placeholder.job_name(GROUP.ref, SCHEDULER),
            state=state,
            state_reason=reason,
            nodes=NODES if state != "PENDING" else (),
            partition="batch",
        ),
        started=started,
        terminating=terminating,
    )


# The lab's: Pods without user-id run as tandem-pods.
POLICY = policy.parse("default: {defaultUser: 1001}")


def seen(members: list[dict[str, Any]], j: JobStatus | None = None, **kw: Any) -> dg.ObservedGroup:
    return dg.ObservedGroup(
        KEY,
        kw.pop("group", GROUP),
        tuple(members),
        job=j,
        hosts=HOSTS,
        slurm_nodes=kw.pop("slurm_nodes", 8),
        kill_wait=30,
        policy=kw.pop("policy", POLICY),
        **kw,
    )


def three(**kw: Any) -> list[dict[str, Any]]:
    return [member(i, **kw) for i in range(3)]


def test_a_podgroup_is_read_with_its_gang_policy_and_a_basic_one_is_no_group() -> None:
    assert GROUP is not None and GROUP.min_count == 3 and GROUP.ref.uid == "pg-uid"
    assert GROUP.title == "PodGroup default/train"
    basic = {**PODGROUP, "spec": {"schedulingPolicy": {"basic": {}}}}
    assert groups.resolve(KEY, [], {"default/train": basic}.get) is None
    missing = groups.resolve(KEY, [], no_object)
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
    group = groups.resolve("ns/lws:serve:1", pods, no_object)
    assert group is not None and group.min_count == 2 and group.ref.uid == "abc123"
    assert [p["metadata"]["name"] for p in sorted(pods, key=groups.rank)] == ["serve-1", "serve-1-1"]


ROWS: list[tuple[str, dg.ObservedGroup, type]] = [
    ("job live, every member gone", seen([], job()), d.Cancel),
    ("job live, members all deleting", seen(three(job_id=7, deleting=True), job()), d.Cancel),
    (
        "job live, PodGroup deleted",
        seen(three(job_id=7), job(), group=groups.resolve(KEY, [], no_object)),
        d.Cancel,
    ),
    ("cancel already sent", seen([], job(), cancel_sent=frozenset({7})), d.Nothing),
    ("no member at all", seen([]), d.Nothing),
    ("basic policy: members go one by one", seen(three(), group=None), d.Nothing),
    (
        "job stopped while bound",
        seen(three(job_id=7, node="node-001"), job(terminating=True)),
        dg.DeleteMembers,
    ),
    ("job ended before binding", seen(three(job_id=7), job(state="CANCELLED")), dg.DeleteMembers),
    ("job requeued after binding", seen([member(0, 7, "node-001")], job(state="PENDING")), dg.DeleteMembers),
    ("a member refused earlier", seen([member(0, refused=d.REASON_INVALID), member(1)]), d.Nothing),
    (
        "a member refused after the group's job was submitted: the job is cancelled",
        seen([member(0, 7, refused=d.REASON_INVALID), member(1, 7), member(2, 7)], job(state="PENDING")),
        d.Cancel,
    ),
    (
        "refused right after this life submitted, the stream not there yet: cancelled",
        seen([member(0, refused=d.REASON_INVALID), member(1), member(2)], submitted_job_id=7),
        d.Cancel,
    ),
    (
        "a member refused, the group's job cancel sent",
        seen([member(0, 7, refused=d.REASON_INVALID), member(1, 7)], job(), cancel_sent=frozenset({7})),
        d.Nothing,
    ),
    (
        "a member refused, but part of the group is bound: never evicted",
        seen([member(0, 7, "node-001"), member(1, 7, refused=d.REASON_INVALID)], job(started=True)),
        d.Nothing,
    ),
    (
        "bound members the policy would now refuse: told, never evicted",
        seen(
            [member(i, 7, f"node-00{i + 1}") for i in range(3)],
            job(started=True),
            policy=policy.BUILTIN,
        ),
        dg.WarnMembers,
    ),
    ("PodGroup not seen yet", seen(three(), group=groups.resolve(KEY, [], no_object)), dg.PendMembers),
    ("a member invalid", seen([member(0), member(1, cpu="lots"), member(2)]), dg.RejectMembers),
    (
        "members disagree on the partition",
        seen([member(0, annotations={keys.PARTITION: "a"}), member(1), member(2)]),
        dg.RejectMembers,
    ),
    ("two of three members", seen(three()[:2]), dg.PendMembers),
    ("more members than Slurm nodes", seen(three(), slurm_nodes=2), dg.RefuseGroup),
    ("all members, no job", seen(three()), dg.SubmitGroup),
    ("crash after submit, before any record", seen(three(), job(state="PENDING")), dg.RecordMembers),
    ("crash after one record", seen([member(0, 7), member(1), member(2)], job()), dg.RecordMembers),
    ("submitted, stream not there yet", seen(three(job_id=7)), d.Nothing),
    (
        "a group submit retried after its answer was lost: the second job is cancelled",
        seen(three(job_id=7), job(state="PENDING", reason="Priority"), duplicates=(9,)),
        d.Cancel,
    ),
    (
        "the second job's cancel sent: on with the recorded one",
        seen(
            three(job_id=7),
            job(state="PENDING", reason="Priority"),
            duplicates=(9,),
            cancel_sent=frozenset({9}),
        ),
        dg.PendMembers,
    ),
    ("submitted in this life, none recorded", seen(three(), submitted_job_id=7), dg.RecordMembers),
    (
        "job pending with a reason",
        seen(three(job_id=7), job(state="PENDING", reason="Resources")),
        dg.PendMembers,
    ),
    ("job allocated, prologs running", seen(three(job_id=7), job()), d.Nothing),
    ("job running, script started", seen(three(job_id=7), job(started=True)), dg.BindMembers),
    (
        "crash after binding one member",
        seen([member(0, 7, "node-001"), member(1, 7), member(2, 7)], job(started=True)),
        dg.BindMembers,
    ),
    ("all bound", seen([member(i, 7, f"node-00{i + 1}") for i in range(3)], job(started=True)), d.Nothing),
]


@pytest.mark.parametrize(("why", "observed", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_each_line_of_the_group_table(why: str, observed: dg.ObservedGroup, expected: type) -> None:
    assert isinstance(dg.decide_group(observed), expected), why


def test_a_refused_groups_job_is_cancelled_once_and_a_bound_group_is_only_told() -> None:
    refused = [member(0, 7, refused=d.REASON_INVALID), member(1, 7), member(2, 7)]
    assert dg.decide_group(seen(refused, job(state="PENDING"))) == d.Cancel(
        (7,), "a member was refused before the group was bound"
    )
    bound = [member(i, 7, f"node-00{i + 1}") for i in range(3)]
    told = dg.decide_group(seen(bound, job(started=True), policy=policy.BUILTIN))
    assert isinstance(told, dg.WarnMembers) and told.reason == d.REASON_WOULD_BE_REFUSED
    assert [p["metadata"]["name"] for p in told.pods] == ["train-0", "train-1", "train-2"]
    assert "user-id: not set" in told.message and "never evicted by a policy change" in told.message


def test_missing_members_are_counted_on_each_member() -> None:
    action = dg.decide_group(seen(three()[:2]))
    assert isinstance(action, dg.PendMembers) and len(action.pods) == 2
    assert "1 still missing" in action.message and action.reason == dg.REASON_WAITING_FOR_MEMBERS


def test_members_bind_all_at_once_to_distinct_nodes_the_first_on_the_batch_host() -> None:
    action = dg.decide_group(seen([member(2, 7), member(0, 7), member(1, 7)], job(started=True)))
    assert isinstance(action, dg.BindMembers)
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
    action = dg.decide_group(seen(members, job(started=True)))
    assert isinstance(action, dg.BindMembers)
    assert [(p.pod["metadata"]["uid"], p.kube_node) for p in action.placements] == [("uid-1b", "node-002")]


def test_a_replacement_is_bound_only_once_it_carries_the_job() -> None:
    members = [member(0, 7, "node-001"), member(2, 7, "node-003"), member(1, uid="uid-1b")]
    action = dg.decide_group(seen(members, job(started=True)))
    assert isinstance(action, dg.RecordMembers) and [p["metadata"]["uid"] for p in action.pods] == ["uid-1b"]


def test_an_extra_member_waits_when_every_node_of_the_job_is_taken() -> None:
    members = [*[member(i, 7, f"node-00{i + 1}") for i in range(3)], member(3, 7)]
    action = dg.decide_group(seen(members, job(started=True)))
    assert isinstance(action, dg.PendMembers) and action.reason == dg.REASON_GROUP_FULL


def test_no_bind_before_every_node_of_the_job_is_known() -> None:
    action = dg.decide_group(
        dg.ObservedGroup(
            KEY,
            GROUP,
            tuple(three(job_id=7)),
            job=job(started=True),
            hosts={},
            kill_wait=30,
            policy=POLICY,
        )
    )
    assert isinstance(action, d.Wait)


def test_no_bind_while_the_job_is_known_on_fewer_nodes_than_members() -> None:
    partial = JobStatus(replace(job(started=True).job, nodes=("cpu-001",)), started=True)
    assert isinstance(dg.decide_group(seen(three(job_id=7), partial)), d.Wait)


def test_a_group_is_submitted_with_its_minimum_in_rank_order() -> None:
    members = [member(3), member(1), member(0), member(2)]
    action = dg.decide_group(seen(members))
    assert isinstance(action, dg.SubmitGroup)
    assert [p["metadata"]["name"] for p in action.members] == ["train-0", "train-1", "train-2"]


def test_disagreement_is_named_on_every_member() -> None:
    action = dg.decide_group(seen([member(0, annotations={keys.PARTITION: "a"}), member(1), member(2)]))
    assert isinstance(action, dg.RejectMembers) and len(action.pods) == 3
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
    action = dg.decide_group(seen(members, reject_static_cpu=True))
    assert isinstance(action, dg.RejectMembers), action
    assert "--reject-static-cpu" in action.message
    alone = d.decide(
        d.Observed("default/train-0", members[0], kill_wait=30, reject_static_cpu=True, policy=POLICY)
    )
    assert isinstance(alone, d.Reject)
    # Without the flag: submitted, each member's validation carrying the warning to post.
    submit = dg.decide_group(seen(members))
    assert isinstance(submit, dg.SubmitGroup)
    assert all(v.static_cpu for v in submit.validations)
