"""An elastic gang (issue 53): a core job of minCount members, placed as every gang is, and one job
per member beyond it, each linked to the core and started only while the core runs whole. The
decision as a table (tandem.scheduler.elastic through decide), then the act."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tandem import keys, placeholder, reasons
from tandem.scheduler import actions, elastic, placements
from tandem.scheduler import decide as d
from tandem.scheduler.act import act
from tandem.scheduler.observe import split_jobs
from tandem.slurm.models import Job, JobStatus
from tandem.v1 import scheduler_pb2
from tests.unit.scheduler.scheduler_world import make_gang, make_member, report
from tests.unit.scheduler.test_decide_group import GROUP, SCHEDULER, job, member, min_count, seen

CORE = min_count(2)  # a PodGroup of minCount 2 whose Job runs 4 (parallelism 4)
HOSTS = {f"cpu-00{i}": f"node-00{i}" for i in range(1, 6)}


def core_job(state: str = "RUNNING", started: bool = True, **kw: Any) -> JobStatus:
    return job(state=state, started=started, node_count=2, **kw)


def extra_job(
    uid: str, job_id: int, node: str, state: str = "RUNNING", started: bool = True, **kw: Any
) -> JobStatus:
    assert GROUP is not None
    name = placeholder.job_name(placeholder.extra_ref(GROUP.ref, uid), SCHEDULER)
    return JobStatus(
        Job(
            job_id=job_id,
            name=name,
            admin_comment=name,
            state=state,
            nodes=(node,) if state != "PENDING" else (),
            node_count=1,
            state_reason=kw.pop("reason", ""),
        ),
        started=started,
        **kw,
    )


def core_bound() -> list[dict[str, Any]]:
    return [member(0, 7, "node-001"), member(1, 7, "node-002")]


def elastic_seen(
    members: list[dict[str, Any]], core: JobStatus | None, *extras: JobStatus, **kw: Any
) -> actions.Observed:
    """The group's snapshot with its extras' jobs, as the observer splits them."""
    jobs = [j for j in (core, *extras) if j is not None]
    _, by_member = split_jobs(jobs)
    observed = seen(members, core, group=kw.pop("group", CORE), **kw)
    return replace(
        observed,
        jobs=tuple(jobs),
        extras={uid: js[-1] for uid, js in by_member.items()},
        hosts=HOSTS,
    )


def test_a_linked_jobs_name_names_its_group_and_its_member() -> None:
    assert GROUP is not None
    ref = placeholder.extra_ref(GROUP.ref, "uid-3")
    name = placeholder.job_name(ref, SCHEDULER)
    assert name == f"tandem:{SCHEDULER}/default/pg:train/pg-uid+x.uid-3"
    parsed = placeholder.parse_job_name(name)
    assert parsed is not None and parsed.key == GROUP.key and placeholder.extra_member(parsed) == "uid-3"
    # The group's own job, and a Pod alone's, are no extra's.
    assert placeholder.extra_member(GROUP.ref) is None
    assert placeholder.extra_member(placeholder.PodRef("default", "web", "uid+x.1")) is None
    # Nor an LWS group's, whose uid slot is a label's value a Pod's author could write.
    assert placeholder.extra_member(placeholder.PodRef("default", "lws:w:0", "key+x.uid-3")) is None


def test_the_core_is_submitted_for_the_first_mincount_members_and_the_others_wait() -> None:
    members = [member(i) for i in range(4)]
    action = d.decide(elastic_seen(members, None))
    assert isinstance(action, actions.Submit)
    assert [m["metadata"]["name"] for m in action.members] == ["train-0", "train-1"]


def test_the_core_is_bound_before_any_extra_is_submitted() -> None:
    members = [member(0, 7), member(1, 7), member(2), member(3)]
    action = d.decide(elastic_seen(members, core_job()))
    assert isinstance(action, actions.Bind) and not action.extra
    assert [p.pod["metadata"]["name"] for p in action.placements] == ["train-0", "train-1"]
    assert action.extras == {"uid-2", "uid-3"}  # the group is scheduled without them


def test_extras_are_not_given_the_cores_job_id() -> None:
    members = [member(0), member(1), member(2)]
    action = d.decide(elastic_seen(members, core_job()))
    assert isinstance(action, actions.Record)
    assert [m["metadata"]["name"] for m in action.pods] == ["train-0", "train-1"] and action.job_id == 7


def test_once_the_core_runs_whole_each_extra_gets_a_job_off_the_cores_nodes() -> None:
    action = d.decide(elastic_seen([*core_bound(), member(2), member(3)], core_job()))
    assert isinstance(action, actions.SubmitExtras)
    assert [m["metadata"]["name"] for m in action.members] == ["train-2"]  # one at a time
    assert action.core_job_id == 7 and action.taken == ("cpu-001", "cpu-002")


def test_the_next_extra_waits_until_the_one_before_holds_its_node() -> None:
    """Two submitted together could share a node neither excluded. The one waiting its turn says
    so once (before: no PodScheduled condition at all, issue 53's notes)."""
    pending = extra_job("uid-2", 20, "", state="PENDING", started=False)
    members = [*core_bound(), member(2, 20), member(3)]
    told = d.decide(elastic_seen(members, core_job(), pending))
    assert isinstance(told, actions.Pend) and not told.group
    assert [m["metadata"]["name"] for m in told.pods] == ["train-3"]
    assert told.reason == reasons.REASON_EXTRA_QUEUED
    assert told.message == (
        "an extra member of PodGroup default/train (its core, Slurm job 7, runs): its own Slurm job is"
        " submitted once the extra member before it holds its node (one at a time, one node each)"
    )
    waits = member(3)
    waits["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": told.reason, "message": told.message}
    ]
    members[-1] = waits
    assert d.decide(elastic_seen(members, core_job(), pending)) == actions.Nothing()
    submitted = replace(
        elastic_seen([*core_bound(), member(2), waits], core_job()), extra_submitted={"uid-2": 20}
    )
    assert d.decide(submitted) == actions.Nothing()
    running = extra_job("uid-2", 20, "cpu-004", started=False)
    action = d.decide(elastic_seen(members, core_job(), running))
    assert isinstance(action, actions.SubmitExtras) and action.taken == ("cpu-001", "cpu-002", "cpu-004")


def test_an_extra_whose_job_was_submitted_is_not_submitted_again() -> None:
    observed = replace(elastic_seen([*core_bound(), member(2)], core_job()), extra_submitted={"uid-2": 20})
    assert d.decide(observed) == actions.Nothing()


def test_an_extra_is_recorded_then_bound_to_its_own_jobs_node() -> None:
    mine = extra_job("uid-2", 20, "cpu-004")
    record = d.decide(elastic_seen([*core_bound(), member(2)], core_job(), mine))
    assert isinstance(record, actions.Record) and record.job_id == 20
    assert [m["metadata"]["name"] for m in record.pods] == ["train-2"]
    bind = d.decide(elastic_seen([*core_bound(), member(2, 20)], core_job(), mine))
    assert isinstance(bind, actions.Bind) and bind.extra and bind.job.job_id == 20
    assert [(p.pod["metadata"]["name"], p.kube_node) for p in bind.placements] == [("train-2", "node-004")]


def test_an_extra_stands_where_its_own_job_does_in_the_placement_view() -> None:
    """`kubectl tandem get` and the scheduler's Placement API: an extra's job, node and state are
    its own job's, not the core's (before: the core's job 7 for every member)."""
    members = [*core_bound(), member(2, 20, "node-004"), member(3)]
    observed = elastic_seen(members, core_job(), extra_job("uid-2", 20, "cpu-004"))
    action = d.decide(observed)
    extra, waiting, core = (
        placements.placement_of(observed, action, m) for m in (members[2], members[3], members[0])
    )
    assert (extra.job_id, extra.slurm_node, extra.state) == (
        20,
        "cpu-004",
        scheduler_pb2.PLACEMENT_STATE_BOUND,
    )
    assert (core.job_id, core.state) == (7, scheduler_pb2.PLACEMENT_STATE_BOUND)
    assert waiting.state == scheduler_pb2.PLACEMENT_STATE_PENDING and waiting.kube_node == ""


def test_a_pending_extra_says_why_and_leaves_its_groups_condition_to_the_core() -> None:
    mine = extra_job("uid-2", 20, "", state="PENDING", started=False, reason="Resources")
    action = d.decide(elastic_seen([*core_bound(), member(2, 20)], core_job(), mine))
    assert isinstance(action, actions.Pend) and not action.group
    assert action.reason == reasons.REASON_PENDING
    assert action.message.startswith(
        "an extra member of PodGroup default/train (its core, Slurm job 7, runs): "
    )


def test_the_second_extras_job_is_kept_off_the_first_extras_node() -> None:
    first = extra_job("uid-2", 20, "cpu-004")
    action = d.decide(elastic_seen([*core_bound(), member(2, 20, "node-004"), member(3)], core_job(), first))
    assert isinstance(action, actions.SubmitExtras)
    assert action.taken == ("cpu-001", "cpu-002", "cpu-004")


@pytest.mark.parametrize(
    ("why", "core"),
    [
        ("requeued", core_job(state="PENDING", started=False)),
        ("stopping", core_job(terminating=True)),
        ("ended", core_job(state="CANCELLED")),
    ],
)
def test_no_extra_runs_while_its_core_does_not(why: str, core: JobStatus) -> None:
    mine = extra_job("uid-2", 20, "cpu-004")
    action = d.decide(elastic_seen([*core_bound(), member(2, 20, "node-004")], core, mine))
    assert isinstance(action, actions.Cancel), why
    assert action.job_ids == (20,) and action.cause is actions.CancelCause.EXTRA


def test_an_extra_scaled_away_has_its_job_cancelled() -> None:
    mine = extra_job("uid-2", 20, "cpu-004")
    gone = member(2, 20, "node-004", deleting=True)
    action = d.decide(elastic_seen([*core_bound(), gone], core_job(), mine))
    assert action == actions.Cancel((20,), actions.CancelCause.EXTRA, "its extra member is gone")
    # Once the cancel is sent, nothing more (the Pod's own deletion goes on).
    sent = replace(elastic_seen([*core_bound(), gone], core_job(), mine), cancel_sent=frozenset({20}))
    assert d.decide(sent) == actions.Nothing()


def test_a_bound_extra_whose_job_slurm_took_back_is_deleted_and_the_core_runs_on() -> None:
    preempted = extra_job("uid-2", 20, "cpu-004", terminating=True)
    action = d.decide(elastic_seen([*core_bound(), member(2, 20, "node-004")], core_job(), preempted))
    assert isinstance(action, actions.Delete) and action.event_type == "Normal"
    assert [m["metadata"]["name"] for m in action.pods] == ["train-2"]
    assert "an extra member of PodGroup default/train, was stopped" in action.message


def test_an_extra_whose_job_ended_before_its_bind_is_deleted() -> None:
    over = extra_job("uid-2", 20, "cpu-004", state="CANCELLED")
    action = d.decide(elastic_seen([*core_bound(), member(2, 20)], core_job(), over))
    assert isinstance(action, actions.Delete) and action.event_type == "Warning"


def test_every_job_of_the_group_goes_when_no_member_is_left() -> None:
    mine = extra_job("uid-2", 20, "cpu-004")
    members = [member(i, 7 if i < 2 else 20, deleting=True) for i in range(3)]
    action = d.decide(elastic_seen(members, core_job(), mine))
    assert isinstance(action, actions.Cancel) and set(action.job_ids) == {7, 20}


def test_a_member_with_its_own_job_stays_an_extra_when_a_core_member_leaves() -> None:
    """The core's free node goes to a replacement, never to an extra that runs elsewhere."""
    mine = extra_job("uid-2", 20, "cpu-004")
    live = [member(0, 7, "node-001"), member(2, 20, "node-004"), member(1, uid="uid-1b")]
    core, extras = elastic.roles(CORE, tuple(live), core_job(), {"uid-2": mine})  # type: ignore[arg-type]
    assert [m["metadata"]["uid"] for m in core] == ["uid-0", "uid-1b"]
    assert [m["metadata"]["uid"] for m in extras] == ["uid-2"]


def test_a_group_whose_minCount_shrank_below_its_job_keeps_every_node_in_its_core() -> None:
    live = tuple(member(i, 7, f"node-00{i + 1}") for i in range(3))
    core, extras = elastic.roles(min_count(1), live, job(started=True), {})  # type: ignore[arg-type]
    assert len(core) == 3 and extras == ()


def _core_runs(controller: Any) -> placeholder.PodRef:
    """The stream shows the gang's core, job 9, running on cpu-001 and cpu-002; its reference."""
    core = placeholder.PodRef("default", "pg:train", "pg-uid")
    name = placeholder.job_name(core, SCHEDULER)
    started = Job(job_id=9, name=name, admin_comment=name, state="RUNNING", nodes=("cpu-001", "cpu-002"))
    report(controller.jobs, JobStatus(replace(started, node_count=2), started=True))
    return core


def test_an_extras_job_is_the_cores_on_one_node_below_it_and_recorded_on_the_extra() -> None:
    members = [make_member(i, "9" if i < 2 else "") for i in range(3)]
    for m, node in zip(members[:2], ("node-001", "node-002"), strict=True):
        m["spec"]["nodeName"] = node
    controller, slurm, kube = make_gang(*members)
    core = _core_runs(controller)
    slurm.submit_job.return_value = 21
    controller.reconcile("default/pg:train")
    spec = slurm.submit_job.call_args.args[0]
    assert spec.name == f"tandem:{SCHEDULER}/default/pg:train/pg-uid+x.uid-2"
    assert spec.nodes == 1 and spec.nice == 1000 and spec.priority is None
    assert spec.excluded_nodes == "cpu-[001-002]" and spec.user_id == 1001
    recorded = [c.args[0] for c in kube.merge_patch.call_args_list]
    assert recorded == ["/api/v1/namespaces/default/pods/train-2"]
    # The next look (the stream has not shown job 21 yet) submits nothing more.
    controller.reconcile("default/pg:train")
    slurm.submit_job.assert_called_once()
    # Job 21 runs: the extra is bound to its node, and the key is looked at again at once (a bound
    # Pod's changes bring no reconcile, and the next extra may go now).
    extra = placeholder.job_name(placeholder.extra_ref(core, "uid-2"), SCHEDULER)
    report(
        controller.jobs,
        JobStatus(
            Job(
                job_id=21, name=extra, admin_comment=extra, state="RUNNING", nodes=("cpu-003",), node_count=1
            ),
            started=True,
        ),
    )
    controller.jobs._kube_nodes["cpu-003"] = "node-003"
    members[2]["metadata"]["annotations"][keys.JOB_ID_ANNOTATION] = "21"
    assert controller.reconcile("default/pg:train") == 0.0
    bindings = [c.args for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert [(path.split("/")[-2], body["target"]["name"]) for path, body in bindings] == [
        ("train-2", "node-003")
    ]


def test_the_podgroup_is_scheduled_once_its_core_is_bound_and_says_extras_follow() -> None:
    controller, _, kube = make_gang(*(make_member(i, "9" if i < 2 else "") for i in range(3)))
    _core_runs(controller)
    controller.reconcile("default/pg:train")
    bindings = [c.args[0].split("/")[-2] for c in kube.post.call_args_list if c.args[0].endswith("/binding")]
    assert bindings == ["train-0", "train-1"]
    conditions = [
        c.args[1]["status"]["conditions"][0]
        for c in kube.strategic_patch.call_args_list
        if "podgroups" in c.args[0]
    ]
    assert conditions and conditions[-1]["status"] == "True"
    assert conditions[-1]["message"] == (
        "the core's members bound to the nodes of Slurm job 9; 1 extra member beyond minCount gets"
        " a Slurm job of its own"
    )


def test_an_extra_slurm_preempted_is_told_so_before_it_is_deleted() -> None:
    preempted = extra_job("uid-2", 20, "cpu-004", state="PREEMPTED", terminating=True)
    action = d.decide(elastic_seen([*core_bound(), member(2, 20, "node-004")], core_job(), preempted))
    assert isinstance(action, actions.Delete) and action.preempted
    assert "was preempted (Slurm takes extras back before the core)" in action.message
    # A core preempted whole: its members are told the same.
    core = d.decide(elastic_seen(core_bound(), core_job(state="PREEMPTED", terminating=True)))
    assert isinstance(core, actions.Delete) and core.preempted and "Slurm job 7 was preempted" in core.message
    # Cancelled, or out of time: no DisruptionTarget (it is no one else's doing).
    cancelled = d.decide(elastic_seen(core_bound(), core_job(state="CANCELLED")))
    assert isinstance(cancelled, actions.Delete) and not cancelled.preempted


def test_the_disruption_is_written_before_the_delete() -> None:
    controller, _, kube = make_gang(make_member(0, "9"))
    pod = make_member(0, "9")
    calls: list[str] = []

    def said(verb: str) -> Any:
        def call(path: str, body: Any = None) -> dict[str, Any]:
            calls.append(f"{verb} {path}")
            return {}

        return call

    kube.strategic_patch.side_effect = said("patch")
    kube.delete.side_effect = said("delete")
    observed = actions.Observed("default/pg:train", CORE, (pod,))
    deleting = actions.Delete((pod,), "Normal", "SlurmJobEnded", "Slurm job 9 was preempted", preempted=True)
    act(controller.hands, controller.settings.placeholder, observed, deleting)
    assert calls == [
        "patch /api/v1/namespaces/default/pods/train-0/status",
        "delete /api/v1/namespaces/default/pods/train-0",
    ]
    condition = kube.strategic_patch.call_args.args[1]["status"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionBySlurm")
