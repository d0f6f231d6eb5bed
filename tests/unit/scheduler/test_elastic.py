"""An elastic gang (issue 53): a core job of minCount members, placed as every gang is, and one job
per member beyond it, each linked to the core and started only while the core runs whole. The
decision as a table (tandem.scheduler.elastic through decide), then the act."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest

from tandem import keys, placeholder, reasons
from tandem.scheduler import actions, elastic, placements
from tandem.scheduler import decide as d
from tandem.scheduler.act import act
from tandem.scheduler.observe import split_jobs
from tandem.slurm.models import Job, JobStatus
from tandem.v1 import scheduler_pb2
from tests.unit.scheduler.scheduler_world import FakeObjects, make_gang, make_member, report
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
    # Nothing more to submit: only the PodGroup's tally is written.
    tally = actions.Tally("elastic: 2 of 4 members run: the core on Slurm job 7 (2 nodes)")
    assert d.decide(elastic_seen(members, core_job(), pending)) == tally
    submitted = replace(
        elastic_seen([*core_bound(), member(2), waits], core_job()), extra_submitted={"uid-2": 20}
    )
    assert d.decide(submitted) == tally
    running = extra_job("uid-2", 20, "cpu-004", started=False)
    action = d.decide(elastic_seen(members, core_job(), running))
    assert isinstance(action, actions.SubmitExtras) and action.taken == ("cpu-001", "cpu-002", "cpu-004")


def test_an_extra_whose_job_was_submitted_is_not_submitted_again() -> None:
    observed = replace(elastic_seen([*core_bound(), member(2)], core_job()), extra_submitted={"uid-2": 20})
    assert isinstance(d.decide(observed), actions.Tally)  # the PodGroup's count, no second submit


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


# --- a core shrunk in place: its workload asks for fewer members -------------------------------


def test_a_core_whose_workload_asks_for_fewer_members_is_shrunk_to_the_nodes_they_hold() -> None:
    """Parallelism 4 -> 1 took member 1 (its extras went first): once it is gone, job 7 keeps
    cpu-001, where member 0 runs, and Slurm releases cpu-002."""
    action = d.decide(elastic_seen([member(0, 7, "node-001")], core_job(), asked=1))
    assert action == actions.Shrink(7, ("cpu-001",), ("cpu-002",), 1, (member(0, 7, "node-001"),))


def test_the_node_running_the_cores_script_stays_even_when_its_member_left() -> None:
    """Slurm refuses to release a job's batch host ('Invalid node name specified', measured on the
    lab): a core of three whose member on cpu-001 (the script's node) and on cpu-003 left keeps
    cpu-001 with cpu-002 and releases cpu-003 only."""
    three = JobStatus(
        replace(core_job().job, nodes=("cpu-001", "cpu-002", "cpu-003"), node_count=3), started=True
    )
    left = member(1, 7, "node-002")
    action = d.decide(elastic_seen([left], three, asked=1, group=min_count(3)))
    assert action == actions.Shrink(7, ("cpu-001", "cpu-002"), ("cpu-003",), 1, (left,), "cpu-001")
    # Only the script's node free: nothing Slurm would take back.
    two = d.decide(elastic_seen([member(1, 7, "node-002")], core_job(), asked=1))
    assert not isinstance(two, actions.Shrink)


def test_a_core_every_member_of_which_left_keeps_its_batch_host_and_its_extras_run_on() -> None:
    """A Job whose completions stay fixed scales down by readiness, not index: parallelism 4 -> 1
    may take both core members and keep an extra. The extra runs on; the core releases cpu-002
    and holds its batch host alone (Slurm cannot release it), for the group's next member."""
    mine = extra_job("uid-2", 20, "cpu-004")
    only_extra = [member(2, 20, "node-004")]
    action = d.decide(elastic_seen(only_extra, core_job(), mine, asked=1))
    assert action == actions.Shrink(7, ("cpu-001",), ("cpu-002",), 1, (), "cpu-001")
    # Shrunk: the extra keeps its job, and the PodGroup says the core holds a node for nobody.
    shrunk = JobStatus(replace(core_job().job, nodes=("cpu-001",), node_count=1), started=True)
    assert d.decide(elastic_seen(only_extra, shrunk, mine, asked=1)) == actions.Tally(
        "elastic: 1 of 1 members run: the core on Slurm job 7 (1 node, no member left on it) and 1"
        " extra member on a Slurm job of its own"
    )
    # Scaled up again: the new member is the core's, given its job and bound to the node it kept.
    new = member(0, uid="uid-0b")
    assert d.decide(elastic_seen([*only_extra, new], shrunk, mine, asked=2)) == actions.Record((new,), 7)
    again = d.decide(elastic_seen([*only_extra, member(0, 7, uid="uid-0b")], shrunk, mine, asked=2))
    assert isinstance(again, actions.Bind) and not again.extra
    assert [(p.pod["metadata"]["uid"], p.slurm_node) for p in again.placements] == [("uid-0b", "cpu-001")]


def test_no_node_is_released_while_the_node_mapping_is_unknown() -> None:
    """The syncer's Slurm node -> Node mapping not there yet (a restart): no member seems to hold
    any node, yet every one may; nothing is released."""
    unmapped = replace(elastic_seen([member(0, 7, "node-001")], core_job(), asked=1), hosts={})
    assert not isinstance(d.decide(unmapped), actions.Shrink)
    partly = replace(unmapped, hosts={"cpu-001": "node-001"})
    assert not isinstance(d.decide(partly), actions.Shrink)


def test_a_core_member_still_going_keeps_its_node() -> None:
    """A Pod being deleted still runs on its node: the node is released only once it is gone."""
    going = [member(0, 7, "node-001"), member(1, 7, "node-002", deleting=True)]
    assert not isinstance(d.decide(elastic_seen(going, core_job(), asked=1)), actions.Shrink)


@pytest.mark.parametrize(
    ("why", "members", "asked"),
    [
        ("its workload replaces the member (asks for 2)", [member(0, 7, "node-001")], 2),
        ("the replacement is there, not bound yet", [member(0, 7, "node-001"), member(1, uid="uid-1b")], 2),
        ("no Job says how many it asks for", [member(0, 7, "node-001")], None),
    ],
)
def test_a_core_member_replaced_keeps_its_node_for_the_replacement(
    why: str, members: list[dict[str, Any]], asked: int | None
) -> None:
    action = d.decide(elastic_seen(members, core_job(), asked=asked))
    assert not isinstance(action, actions.Shrink), why


def test_a_shrink_asked_is_not_asked_again_until_the_job_shows_it() -> None:
    asked = elastic_seen(
        [member(0, 7, "node-001")], core_job(), asked=1, job_shrunk_to=frozenset({"cpu-001"})
    )
    assert d.decide(asked) == actions.Nothing()


def test_a_core_not_running_is_not_shrunk() -> None:
    allocated = core_job(started=False)
    assert not isinstance(
        d.decide(elastic_seen([member(0, 7, "node-001")], allocated, asked=1)), actions.Shrink
    )


def test_a_shrunk_core_holds_just_its_nodes_and_a_new_member_is_an_extra() -> None:
    """Parallelism 1 -> 3 after the shrink: the core is its one node; the new members get jobs of
    their own, never a wait for a node the core no longer has."""
    shrunk = JobStatus(replace(core_job().job, nodes=("cpu-001",), node_count=1), started=True)
    live = (member(0, 7, "node-001"), member(1), member(2))
    core, extras = elastic.roles(CORE, live, shrunk, {})  # type: ignore[arg-type]
    assert [m["metadata"]["name"] for m in core] == ["train-0"]
    assert [m["metadata"]["name"] for m in extras] == ["train-1", "train-2"]
    action = d.decide(elastic_seen(list(live), shrunk))
    assert isinstance(action, actions.SubmitExtras) and action.taken == ("cpu-001",)


def test_the_shrink_asks_slurm_once_and_the_podgroup_says_what_was_released() -> None:
    remaining = make_member(0, "9")
    remaining["spec"]["nodeName"] = "node-001"
    remaining["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": True, "uid": "job-uid"}
    ]
    controller, slurm, _ = make_gang(remaining)
    controller.caches.kube_jobs = FakeObjects(
        {"default/train": {"metadata": {"name": "train"}, "spec": {"parallelism": 1, "completions": 4}}}
    )
    _core_runs(controller)
    controller.reconcile("default/pg:train")
    slurm.shrink_job.assert_called_once_with(9, ("cpu-001",))
    controller.hands.announce.flush()
    record: mock.Mock = controller.writers.events.record  # type: ignore[assignment]
    events = [(c.args[0].get("kind"), c.args[2], c.args[3]) for c in record.call_args_list]
    assert [e[:2] for e in events] == [(keys.PODGROUP_KIND, reasons.EVENT_JOB_SHRUNK)]
    assert events[0][2] == (
        "Slurm job 9 shrunk in place to cpu-001: its workload asks for 1 member; cpu-002 released"
        " (their members left)"
    )
    controller.reconcile("default/pg:train")  # the stream has not shown the new node list yet
    slurm.shrink_job.assert_called_once()


# --- the PodGroup says how many members run of how many asked ---------------------------------


def said(message: str) -> Any:
    """The test's PodGroup, its PodGroupScheduled condition saying `message`."""
    assert CORE is not None and CORE.podgroup is not None
    podgroup = {
        **CORE.podgroup,
        "status": {
            "conditions": [
                {"type": keys.PODGROUP_SCHEDULED, "status": "True", "reason": "Scheduled", "message": message}
            ]
        },
    }
    return replace(CORE, podgroup=podgroup)


def test_the_podgroup_counts_the_members_that_run_against_what_its_workload_asks() -> None:
    mine, theirs = extra_job("uid-2", 20, "cpu-004"), extra_job("uid-3", 21, "cpu-005")
    members = [*core_bound(), member(2, 20, "node-004"), member(3, 21, "node-005")]
    four = (
        "elastic: 4 of 6 members run: the core on Slurm job 7 (2 nodes) and 2 extra members, each on"
        " a Slurm job of its own"
    )
    assert d.decide(elastic_seen(members, core_job(), mine, theirs, asked=6)) == actions.Tally(four)
    # Said already: nothing to write.
    assert (
        d.decide(elastic_seen(members, core_job(), mine, theirs, asked=6, group=said(four)))
        == actions.Nothing()
    )


def test_a_core_left_alone_after_its_extras_is_counted_again_and_a_plain_gang_never() -> None:
    shrunk = JobStatus(replace(core_job().job, nodes=("cpu-001",), node_count=1), started=True)
    old = said("elastic: 6 of 6 members run: the core on Slurm job 7 (2 nodes) and 4 extra members")
    action = d.decide(elastic_seen([member(0, 7, "node-001")], shrunk, asked=1, group=old))
    assert action == actions.Tally("elastic: 1 of 1 members run: the core on Slurm job 7 (1 node)")
    # A gang that never had extras keeps the condition its bind wrote.
    plain = said("all members bound to the nodes of Slurm job 7")
    assert d.decide(elastic_seen(core_bound(), core_job(), asked=2, group=plain)) == actions.Nothing()


def test_a_member_within_a_mincount_raised_while_the_core_ran_gets_a_linked_job_at_the_cores_priority() -> (
    None
):
    """minCount 2 -> 3 on a running core of 2: Slurm cannot grow job 9, so the third member's job is
    linked to it and off its nodes like an extra's, but never below the core (it is the core's)."""
    members = [make_member(i, "9" if i < 2 else "") for i in range(3)]
    for m, node in zip(members[:2], ("node-001", "node-002"), strict=True):
        m["spec"]["nodeName"] = node
    controller, slurm, _ = make_gang(*members, min_count=3)
    _core_runs(controller)
    slurm.submit_job.return_value = 21
    controller.reconcile("default/pg:train")
    spec = slurm.submit_job.call_args.args[0]
    assert spec.name == f"tandem:{SCHEDULER}/default/pg:train/pg-uid+x.uid-2"
    assert spec.nodes == 1 and spec.excluded_nodes == "cpu-[001-002]"
    assert not spec.nice and spec.priority is None
