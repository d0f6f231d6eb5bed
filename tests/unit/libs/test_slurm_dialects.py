"""slurmrestd JSON <-> Tandem's Job, Node and JobSpec, for data-parser v0.0.40-45 (Slurm 23.11-26.05)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tandem.slurm.dialects import SUPPORTED_VERSIONS, Dialect, UnsupportedBySlurm
from tandem.slurm.models import FINISHED_STATES, Job, JobSpec, Node

# --- JSON as slurmrestd prints it ----------------------------------------------------------------


def _num(n: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": n}


# GET /slurm/v0.0.40/jobs, one element of "jobs" (Slurm 23.11).
V40_JOB: dict[str, Any] = {
    "account": "research",
    "batch_flag": True,
    "comment": "",
    "cpus": _num(4),
    "current_working_directory": "/tmp",
    "extra": "tandem: started",
    "flags": ["EXACT_CPU_COUNT_REQUESTED", "JOB_WAS_RUNNING"],
    "group_id": 1002,
    "job_id": 12,
    "job_state": ["RUNNING"],
    "memory_per_node": _num(1024),
    "name": "placeholder",
    "node_count": _num(2),
    "nodes": "gpu-[000-001]",
    "partition": "gpu",
    "priority": _num(100),
    "shared": [],
    "state_description": "",
    "state_reason": "None",
    "time_limit": _num(60),
    "user_id": 1001,
    "user_name": "alice",
}

V40_NODE: dict[str, Any] = {
    "architecture": "x86_64",
    "cpus": 64,
    "name": "gpu-000",
    "reason": "k8s: drained by tandem",
    "state": ["IDLE", "DRAIN"],
}


# GET /slurm/{version}/job/1 as the lab's Slurm printed it (the fields Tandem reads, and `shared`),
# for a job submitted by Tandem's client with exclusive=user, user 1001 and group 1002.
RECORDED_JOBS: dict[str, dict[str, Any]] = {
    # Slurm 24.11.5
    "v0.0.42": {
        "comment": "A Kubernetes job",
        "extra": "traceparent=00-x",
        "flags": ["EXACT_TASK_COUNT_REQUESTED", "JOB_WAS_RUNNING", "EXACT_MEMORY_REQUESTED"],
        "group_id": 1002,
        "job_id": 1,
        "job_state": ["RUNNING"],
        "name": "probe",
        "nodes": "gpu-000",
        "partition": "high",
        "priority": _num(4242),
        "shared": ["user"],
        "state_reason": "None",
        "user_id": 1001,
    },
    # Slurm 26.05.5: a job no longer reports how it shares (`shared` is always empty).
    "v0.0.45": {
        "comment": "A Kubernetes job",
        "extra": "traceparent=00-x",
        "flags": ["EXACT_TASK_COUNT_REQUESTED", "JOB_WAS_RUNNING", "EXACT_MEMORY_REQUESTED"],
        "group_id": 1002,
        "job_id": 1,
        "job_state": ["RUNNING"],
        "name": "probe",
        "nodes": "gpu-000",
        "partition": "high",
        "priority": _num(4242),
        "shared": [],
        "state_reason": "None",
        "user_id": 1001,
    },
}


def _with(raw: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    out.update(changes)
    return out


# --- versions ----------------------------------------------------------------------------------


def test_every_version_of_slurm_24_11_and_26_05_is_spoken_newest_first() -> None:
    assert SUPPORTED_VERSIONS == ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40")
    assert {Dialect(v).version for v in SUPPORTED_VERSIONS} == set(SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", ["v0.0.38", "v0.0.39", "v0.0.46", "0.0.40", "auto", ""])
def test_an_unknown_version_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="unsupported slurmrestd data-parser version"):
        Dialect(version)


# --- parsing -----------------------------------------------------------------------------


def test_job_fields() -> None:
    job = Dialect().parse_job(V40_JOB)
    assert job == Job(
        job_id=12,
        name="placeholder",
        state="RUNNING",
        state_reason="",
        nodes=("gpu-000", "gpu-001"),
        partition="gpu",
        comment="",
        extra="tandem: started",
        user_id=1001,
        group_id=1002,
        flags=("EXACT_CPU_COUNT_REQUESTED", "JOB_WAS_RUNNING"),
        priority=100,
        node_count=2,
    )
    assert not job.finished
    assert job.script_started


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42", "v0.0.45"])
def test_a_jobs_constraint_is_read_from_its_features(version: str) -> None:
    """As the lab's Slurm 24.11 printed a pending job's --constraint (v0.0.42): `features`, a string."""
    raw = {**V40_JOB, "features": "[l0-node-cpu-001-qjrkq|l0-node-cpu-003-hsguu]"}
    assert Dialect(version).parse_job(raw).features == "[l0-node-cpu-001-qjrkq|l0-node-cpu-003-hsguu]"
    assert Dialect(version).parse_job({**V40_JOB, "features": None}).features == ""


@pytest.mark.parametrize("version", sorted(RECORDED_JOBS))
def test_a_job_as_the_lab_slurm_printed_it(version: str) -> None:
    assert Dialect(version).parse_job(RECORDED_JOBS[version]) == Job(
        job_id=1,
        name="probe",
        state="RUNNING",
        nodes=("gpu-000",),
        partition="high",
        comment="A Kubernetes job",
        extra="traceparent=00-x",
        user_id=1001,
        group_id=1002,
        flags=("EXACT_TASK_COUNT_REQUESTED", "JOB_WAS_RUNNING", "EXACT_MEMORY_REQUESTED"),
        priority=4242,
    )


@pytest.mark.parametrize(
    ("state", "start", "expected"),
    [
        ("PENDING", {"set": True, "infinite": False, "number": 1795430530}, 1795430530),
        ("PENDING", {"set": True, "infinite": False, "number": 0}, 0),  # no estimate yet
        ("RUNNING", {"set": True, "infinite": False, "number": 1795430530}, 0),  # a start, not expected
    ],
)
def test_a_pending_job_carries_slurms_expected_start(state: str, start: object, expected: int) -> None:
    raw = {**V40_JOB, "job_state": [state], "start_time": start, "priority": {"set": False}}
    job = Dialect().parse_job(raw)
    assert (job.expected_start, job.priority) == (expected, 0)


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize(
    ("state", "nodes", "count", "expected"),
    [
        # Pending: the nodes the job asks for (a group's: one per member as it was at the submit).
        ("PENDING", "", _num(3), 3),
        # Allocated: the nodes it holds.
        ("RUNNING", "gpu-[000-001]", _num(2), 2),
        # Not said: unknown, never a count of nothing.
        ("PENDING", "", {"set": False, "infinite": False, "number": 0}, 0),
        ("PENDING", "", {"set": True, "infinite": True, "number": 0}, 0),
        ("PENDING", "", None, 0),
    ],
)
def test_a_job_carries_the_node_count_slurm_gives(
    version: str, state: str, nodes: str, count: dict[str, Any] | None, expected: int
) -> None:
    """A group's job says how many nodes it asks for, so a minCount grown since is seen (issue 21)."""
    raw = _with(V40_JOB, job_state=[state], nodes=nodes, node_count=count)
    assert Dialect(version).parse_job(raw).node_count == expected


def test_state_flags_follow_the_base_state() -> None:
    job = Dialect().parse_job(_with(V40_JOB, job_state=["PENDING", "REQUEUED"], flags=["CRON_JOB"]))
    assert job.state == "PENDING"
    assert job.flags == ("REQUEUED", "CRON_JOB")
    assert not job.finished


@pytest.mark.parametrize("state", sorted(FINISHED_STATES))
def test_finished_states(state: str) -> None:
    assert Dialect().parse_job(_with(V40_JOB, job_state=[state])).finished


def test_empty_or_missing_state_is_unknown() -> None:
    assert Dialect().parse_job(_with(V40_JOB, job_state=[])).state == "UNKNOWN"
    raw = _with(V40_JOB)
    del raw["job_state"]
    assert Dialect().parse_job(raw).state == "UNKNOWN"


def test_numbers_may_come_wrapped() -> None:
    job = Dialect().parse_job(_with(V40_JOB, job_id=_num(99), user_id=_num(5), group_id=_num(6)))
    assert (job.job_id, job.user_id, job.group_id) == (99, 5, 6)


@pytest.mark.parametrize(
    "value",
    [
        {"set": False, "infinite": False, "number": 77},
        {"set": True, "infinite": True, "number": 77},
        None,
    ],
)
def test_unset_or_infinite_ids_read_as_zero(value: dict[str, Any] | None) -> None:
    job = Dialect().parse_job(_with(V40_JOB, user_id=value, group_id=value))
    assert (job.user_id, job.group_id) == (0, 0)


@pytest.mark.parametrize(
    ("extra", "comment", "started"),
    [
        (": started", "", True),
        ("traceparent=00-abc-def-01: started", "", True),
        ("", "x: started", False),  # the Pod's own comment says nothing about the script
        ("tandem: starting", "", False),
        ("tandem: started twice", "", False),
        ("", "", False),
        (None, None, False),
    ],
)
def test_the_started_marker_ends_the_extra_field(
    extra: str | None, comment: str | None, started: bool
) -> None:
    assert Dialect().parse_job(_with(V40_JOB, extra=extra, comment=comment)).script_started is started


def test_a_jobs_state_entry_as_slurm_24_11_answers_it() -> None:
    # GET /slurm/v0.0.42/jobs/state/?job_id=14 on 24.11.5 (26.05.5's v0.0.45 alike): the id is a string.
    raw = {"job_id": "14", "state": ["CANCELLED", "COMPLETING"]}
    assert Dialect("v0.0.42").parse_job_state(raw) == (14, "CANCELLED", ("COMPLETING",))


@pytest.mark.parametrize("job_id", ["+1", "14+", "a+1", "_3", "14_", "a_3", "x", ""])
def test_jobs_state_entries_without_a_job_id_are_skipped(job_id: str) -> None:
    assert Dialect().parse_job_state({"job_id": job_id, "state": ["RUNNING"]}) is None


@pytest.mark.parametrize("job_id", ["6802_1", "6802_[1-3]", "6802_*"])
def test_an_array_element_in_jobs_state_is_known_by_its_own_id(job_id: str) -> None:
    # As 24.11 lists array 6801's first task (job 6802): "<own id>_<task>", where squeue says
    # "6801_1"; GET /jobs lists it as job 6802. The mirror matches the two by that id.
    assert Dialect().parse_job_state({"job_id": job_id, "state": ["RUNNING"]}) == (6802, "RUNNING", ())


def test_a_het_component_in_jobs_state_is_known_by_its_own_id() -> None:
    # As 24.11 lists het job 14's second component (job 15): "<own id>+<offset>".
    assert Dialect().parse_job_state({"job_id": "15+1", "state": ["PENDING"]}) == (15, "PENDING", ())


def test_a_het_job_is_submitted_as_one_description_per_component_with_one_script() -> None:
    first = JobSpec(
        name="tandem:t/ns/cpg:x/u", script="#!/bin/bash", environment={"A": "1"}, cpus=4, memory_mb=512
    )
    later = JobSpec(
        name="tandem:t/ns/cpg:x/u",
        script="#!/bin/bash",
        environment={"A": "1"},
        cpus=1,
        memory_mb=64,
        nodes=2,
    )
    body = Dialect("v0.0.41").submit_body(
        JobSpec(name="", script="", environment={}, cpus=0, memory_mb=0, components=(first, later))
    )
    assert "job" not in body
    leader, workers = body["jobs"]
    assert leader["script"] == "#!/bin/bash" and "script" not in workers
    assert (leader["cpus_per_task"], leader["nodes"], leader["memory_per_node"]["number"]) == (4, "1", 512)
    assert (
        workers["cpus_per_task"],
        workers["nodes"],
        workers["tasks"],
        workers["memory_per_node"]["number"],
    ) == (1, "2", 2, 64)


def test_a_het_component_is_parsed_with_its_het_job_and_offset() -> None:
    # As 24.11's v0.0.42 lists the second component of het job 12.
    raw = {
        "job_id": 13,
        "name": "x",
        "job_state": ["RUNNING"],
        "nodes": "cpu-[003,005]",
        "node_count": {"set": True, "infinite": False, "number": 2},
        "het_job_id": {"set": True, "infinite": False, "number": 12},
        "het_job_offset": {"set": True, "infinite": False, "number": 1},
        "het_job_id_set": "12-13",
    }
    job = Dialect("v0.0.42").parse_job(raw)
    assert (job.job_id, job.het_job_id, job.het_job_offset, job.nodes) == (13, 12, 1, ("cpu-003", "cpu-005"))
    assert job.het_job_ids == (12, 13)
    assert Dialect("v0.0.42").parse_job({**raw, "het_job_id_set": "12,14-15"}).het_job_ids == (12, 14, 15)
    plain = Dialect("v0.0.42").parse_job(
        {
            **raw,
            "het_job_id": {"set": True, "infinite": False, "number": 0},
            "het_job_offset": {"set": True, "infinite": False, "number": 0},
        }
    )
    assert (plain.het_job_id, plain.het_job_offset) == (0, 0)


def test_node_fields() -> None:
    node = Dialect().parse_node(V40_NODE)
    assert node == Node(name="gpu-000", state="IDLE", flags=("DRAIN",), reason="k8s: drained by tandem")
    assert node.drained
    assert not node.busy


@pytest.mark.parametrize(
    ("state", "busy", "drained"),
    [
        (["IDLE"], False, False),
        (["ALLOCATED"], True, False),
        (["MIXED"], True, False),
        (["MIXED", "DRAIN"], True, True),
        (["IDLE", "COMPLETING"], True, False),
        (["DOWN", "DRAIN", "NOT_RESPONDING"], False, True),
        (["IDLE", "PLANNED"], False, False),
    ],
)
def test_node_busy_and_drained(state: list[str], busy: bool, drained: bool) -> None:
    node = Dialect().parse_node(_with(V40_NODE, state=state))
    assert node.state == state[0]
    assert node.busy is busy
    assert node.drained is drained


# --- submit bodies -------------------------------------------------------------------------------


def _full_spec(**changes: Any) -> JobSpec:
    spec = JobSpec(
        name="tandem-pod-abc",
        script="#!/bin/sh\nexec sleep infinity\n",
        environment={"PATH": "/usr/bin:/bin", "TANDEM_POD": "default/abc"},
        cpus=8,
        memory_mb=16384,
        working_dir="/var/tmp",
        gpus=2,
        gpu_type="h100",
        account="research",
        comment="tandem pod default/abc",
        constraints="ib&h100",
        exclusive="none",
        excluded_nodes="bad-001,bad-002",
        required_nodes="gpu-001,gpu-002",
        partition="gpu",
        prefer="nvlink",
        priority=500,
        nice=1000,
        dependency="after:41",
        qos="high",
        reservation="maint",
        time_limit_minutes=90,
        user_id=1001,
        group_id=1002,
        extra="traceparent=00-1-2-01",
        extra_fields={"requeue": False},
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_a_submit_body_with_every_field_is_the_same_in_every_version(version: str) -> None:
    spec = _full_spec()
    body = Dialect(version).submit_body(spec)
    # The script inside the job: v0.0.41-42 deprecate the top-level `script` every version takes.
    assert set(body) == {"job"}
    assert body["job"] == {
        "name": "tandem-pod-abc",
        "script": "#!/bin/sh\nexec sleep infinity\n",
        "current_working_directory": "/var/tmp",
        "cpus_per_task": 8,
        "tasks": 1,
        "nodes": "1",
        "tres_per_node": "gres/gpu:h100:2",
        "account": "research",
        "comment": "tandem pod default/abc",
        "constraints": "ib&h100",
        "dependency": "after:41",
        "partition": "gpu",
        "prefer": "nvlink",
        "qos": "high",
        "reservation": "maint",
        "extra": "traceparent=00-1-2-01",
        "excluded_nodes": ["bad-001", "bad-002"],
        "environment": ["PATH=/usr/bin:/bin", "TANDEM_POD=default/abc"],
        "memory_per_node": {"set": True, "infinite": False, "number": 16384},
        "required_nodes": ["gpu-001", "gpu-002"],
        # v0.0.42 dropped the `exclusive` list; `shared: ["none"]` is a whole node in all six.
        "shared": ["none"],
        "priority": {"set": True, "infinite": False, "number": 500},
        # A plain number in every version (slurmrestd's job_desc `nice`, int32).
        "nice": 1000,
        "time_limit": {"set": True, "infinite": False, "number": 90},
        # A root token submits on the user's behalf; slurmrestd takes the ids as strings.
        "user_id": "1001",
        "group_id": "1002",
        "requeue": False,
    }


def test_node_lists_rejoin_to_the_hostlist_given() -> None:
    # slurmrestd joins list items back with commas, so a bracketed hostlist must survive the round trip.
    spec = _full_spec(required_nodes="gpu-[001,003],gpu-009", excluded_nodes="bad-[1-2]")
    job = Dialect().submit_body(spec)["job"]
    assert ",".join(job["required_nodes"]) == "gpu-[001,003],gpu-009"
    assert ",".join(job["excluded_nodes"]) == "bad-[1-2]"


def test_minimal_spec_sends_only_what_was_asked() -> None:
    spec = JobSpec(name="p", script="#!/bin/sh\n", environment={"A": "1"}, cpus=1, memory_mb=100)
    assert Dialect().submit_body(spec)["job"] == {
        "name": "p",
        "script": "#!/bin/sh\n",
        "current_working_directory": "/tmp",
        "cpus_per_task": 1,
        "tasks": 1,
        "nodes": "1",
        "environment": ["A=1"],
        "memory_per_node": {"set": True, "infinite": False, "number": 100},
    }


@pytest.mark.parametrize(
    ("gpus", "gpu_type", "gres"),
    [(2, "h100", "gres/gpu:h100:2"), (2, "", "gres/gpu:2"), (1, "a100-80gb", "gres/gpu:a100-80gb:1")],
)
def test_gpus_as_tres_per_node(gpus: int, gpu_type: str, gres: str) -> None:
    job = Dialect().submit_body(_full_spec(gpus=gpus, gpu_type=gpu_type))["job"]
    assert job["tres_per_node"] == gres


def test_shares_of_a_gpu_as_shards() -> None:
    job = Dialect().submit_body(_full_spec(gpus=0, gpu_shares=4, gpu_type="h100"))["job"]
    assert job["tres_per_node"] == "gres/shard:h100:4"
    untyped = Dialect().submit_body(_full_spec(gpus=0, gpu_shares=4, gpu_type=""))["job"]
    assert untyped["tres_per_node"] == "gres/shard:4"


def test_an_mps_share_of_a_gpu_as_mps() -> None:
    job = Dialect().submit_body(_full_spec(gpus=0, gpu_mps=30, gpu_type="h100"))["job"]
    assert job["tres_per_node"] == "gres/mps:h100:30"
    untyped = Dialect().submit_body(_full_spec(gpus=0, gpu_mps=30, gpu_type=""))["job"]
    assert untyped["tres_per_node"] == "gres/mps:30"


def test_no_gpus_no_gres() -> None:
    job = Dialect().submit_body(_full_spec(gpus=0, gpu_type="h100"))["job"]
    assert "tres_per_node" not in job
    assert "gres" not in job


def test_priority_and_time_limit_zero_are_still_sent() -> None:
    job = Dialect().submit_body(_full_spec(priority=0, time_limit_minutes=0))["job"]
    assert job["priority"] == {"set": True, "infinite": False, "number": 0}
    assert job["time_limit"] == {"set": True, "infinite": False, "number": 0}


def test_unset_priority_time_limit_and_user_are_left_to_slurm() -> None:
    spec = _full_spec(
        priority=None,
        nice=None,
        dependency="",
        time_limit_minutes=None,
        user_id=None,
        group_id=None,
        extra="",
    )
    job = Dialect().submit_body(spec)["job"]
    for key in ("priority", "nice", "dependency", "time_limit", "user_id", "group_id", "extra"):
        assert key not in job


def test_a_nice_of_zero_is_still_sent() -> None:
    assert Dialect().submit_body(_full_spec(nice=0))["job"]["nice"] == 0


def test_root_is_sent_as_uid_0_not_left_out() -> None:
    job = Dialect().submit_body(_full_spec(user_id=0, group_id=0))["job"]
    assert (job["user_id"], job["group_id"]) == ("0", "0")


@pytest.mark.parametrize(
    ("exclusive", "value"),
    [("none", ["none"]), ("ok", ["oversubscribe"]), ("user", ["user"]), ("mcs", ["mcs"]), ("topo", ["topo"])],
)
def test_exclusive_maps_to_slurms_shared(exclusive: str, value: list[str]) -> None:
    job = Dialect().submit_body(_full_spec(exclusive=exclusive))["job"]
    assert job["shared"] == value
    assert "exclusive" not in job


@pytest.mark.parametrize(
    ("version", "known"),
    [
        ("v0.0.40", False),  # Slurm 23.11: none, oversubscribe, user, mcs
        ("v0.0.41", True),
        ("v0.0.42", True),
        ("v0.0.43", True),
        ("v0.0.44", True),
        ("v0.0.45", True),
    ],
)
def test_topology_sharing_exists_from_v0_0_41(version: str, known: bool) -> None:
    dialect = Dialect(version)
    if known:
        assert dialect.submit_body(_full_spec(exclusive="topo"))["job"]["shared"] == ["topo"]
    else:
        with pytest.raises(UnsupportedBySlurm, match=r"'topo' is not a sharing mode of slurmrestd v0\.0\.40"):
            dialect.submit_body(_full_spec(exclusive="topo"))
    # The other four are known to every version.
    for exclusive in ("none", "ok", "user", "mcs"):
        assert dialect.submit_body(_full_spec(exclusive=exclusive))["job"]["shared"]


def test_no_exclusive_leaves_sharing_to_the_partition() -> None:
    job = Dialect().submit_body(_full_spec(exclusive=""))["job"]
    assert "exclusive" not in job
    assert "shared" not in job


def test_an_unknown_exclusive_value_is_unsupported_by_slurm() -> None:
    with pytest.raises(UnsupportedBySlurm, match="sometimes"):
        Dialect().submit_body(_full_spec(exclusive="sometimes"))
    assert issubclass(UnsupportedBySlurm, ValueError)


def test_environment_is_copied_not_shared() -> None:
    spec = _full_spec()
    body = Dialect().submit_body(spec)
    spec.environment["LATE"] = "1"
    assert "LATE=1" not in body["job"]["environment"]


def test_node_state_bodies_drain_with_a_reason_and_resume() -> None:
    assert Dialect().node_state_body("DRAIN", "k8s: maintenance") == {
        "state": ["DRAIN"],
        "reason": "k8s: maintenance",
    }
    assert Dialect("v0.0.40").node_state_body("RESUME") == {"state": ["RESUME"]}


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
def test_the_admin_comment_goes_out_with_the_submit_and_comes_back_with_the_job(version: str) -> None:
    spec = JobSpec(
        name="tandem:s/ns/p/u", admin_comment="tandem:s/ns/p/u", script="#!/bin/sh\n", environment={}, cpus=1,
        memory_mb=1,
    )  # fmt: skip
    assert Dialect(version).submit_body(spec)["job"]["admin_comment"] == "tandem:s/ns/p/u"
    job = Dialect(version).parse_job(_with(V40_JOB, admin_comment="tandem:s/ns/p/u"))
    assert job.admin_comment == "tandem:s/ns/p/u"
    assert Dialect(version).parse_job(V40_JOB).admin_comment == ""
