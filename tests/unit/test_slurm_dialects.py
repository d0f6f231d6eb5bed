"""slurmrestd JSON <-> Tandem's Job / Node / JobSpec, for v0.0.38 (Slurm 22.05) and v0.0.40+ (23.11+)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tandem.slurm.dialects import (
    SUPPORTED_VERSIONS,
    V0038,
    V0040,
    UnsupportedBySlurm,
    dialect_for,
)
from tandem.slurm.models import FINISHED_STATES, Job, JobSpec, Node

# --- JSON as slurmrestd prints it ----------------------------------------------------------------

# GET /slurm/v0.0.38/jobs, one element of "jobs" (Slurm 22.05), trimmed to a realistic subset.
V38_JOB: dict[str, Any] = {
    "account": "research",
    "batch_flag": True,
    "comment": "x: started",
    "cpus": 4,
    "current_working_directory": "/tmp",
    "excluded_nodes": "",
    "flags": ["TRES_STR_CALC"],
    "group_id": 1002,
    "job_id": 7,
    "job_state": "RUNNING",
    "memory_per_node": 1024,
    "name": "wrap",
    "node_count": 2,
    "nodes": "cpu-[001-002]",
    "partition": "batch",
    "priority": 4294901759,
    "shared": None,
    "state_description": "",
    "state_reason": "None",
    "time_limit": 60,
    "user_id": 1001,
    "user_name": "alice",
}

V38_NODE: dict[str, Any] = {
    "architecture": "x86_64",
    "cpus": 64,
    "name": "cpu-001",
    "reason": "k8s: x",
    "state": "idle",
    "state_flags": ["DRAIN"],
}


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


def _with(raw: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    out.update(changes)
    return out


# --- dialect_for ---------------------------------------------------------------------------------


def test_dialect_for_every_supported_version() -> None:
    assert isinstance(dialect_for("v0.0.38"), V0038)
    for version in ("v0.0.40", "v0.0.41", "v0.0.42"):
        dialect = dialect_for(version)
        assert isinstance(dialect, V0040)
        assert dialect.version == version
    assert {dialect_for(v).version for v in SUPPORTED_VERSIONS} == set(SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", ["v0.0.39", "v0.0.37", "0.0.40", "auto", ""])
def test_dialect_for_unknown_version_is_refused(version: str) -> None:
    with pytest.raises(ValueError, match="unsupported slurmrestd OpenAPI version"):
        dialect_for(version)


# --- v0.0.38 parsing -----------------------------------------------------------------------------


def test_v38_job_fields() -> None:
    job = V0038().parse_job(V38_JOB)
    assert job == Job(
        job_id=7,
        name="wrap",
        state="RUNNING",
        state_reason="",
        nodes=("cpu-001", "cpu-002"),
        partition="batch",
        comment="x: started",
        extra="",
        user_id=1001,
        group_id=1002,
        flags=("TRES_STR_CALC",),
    )
    assert not job.finished
    assert job.script_started


def test_v38_state_reason_other_than_none_is_kept() -> None:
    job = V0038().parse_job(_with(V38_JOB, job_state="PENDING", state_reason="Resources", nodes=""))
    assert job.state == "PENDING"
    assert job.state_reason == "Resources"
    assert job.nodes == ()


@pytest.mark.parametrize("nodes", ["", None, "(null)"])
def test_v38_job_without_nodes(nodes: str | None) -> None:
    assert V0038().parse_job(_with(V38_JOB, nodes=nodes)).nodes == ()


def test_v38_job_with_missing_optional_fields() -> None:
    job = V0038().parse_job({"job_id": 3, "job_state": "PENDING"})
    assert job == Job(job_id=3, name="", state="PENDING")
    assert not job.script_started


def test_v38_null_comment_user_and_group() -> None:
    job = V0038().parse_job(_with(V38_JOB, comment=None, user_id=None, group_id=None, flags=None))
    assert (job.comment, job.user_id, job.group_id, job.flags) == ("", 0, 0, ())


@pytest.mark.parametrize("state", sorted(FINISHED_STATES))
def test_v38_finished_states(state: str) -> None:
    assert V0038().parse_job(_with(V38_JOB, job_state=state)).finished


@pytest.mark.parametrize("state", ["PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING"])
def test_v38_unfinished_states(state: str) -> None:
    assert not V0038().parse_job(_with(V38_JOB, job_state=state)).finished


def test_v38_lower_case_state_is_normalised() -> None:
    job = V0038().parse_job(_with(V38_JOB, job_state="completed"))
    assert job.state == "COMPLETED"
    assert job.finished


def test_v38_ignores_an_extra_field_for_the_started_marker() -> None:
    # 22.05 has no Extra; only the comment may carry the marker.
    job = V0038().parse_job(_with(V38_JOB, comment="", extra="x: started"))
    assert job.extra == ""
    assert not job.script_started


@pytest.mark.parametrize(
    ("comment", "started"),
    [
        ("x: started", True),
        ("tandem/pod-abc: started", True),
        (": started", True),
        ("x: starting", False),
        ("x: started later", False),
        ("x:started", False),
        ("", False),
    ],
)
def test_v38_started_marker_must_end_the_comment(comment: str, started: bool) -> None:
    assert V0038().parse_job(_with(V38_JOB, comment=comment)).script_started is started


def test_v38_node_fields() -> None:
    node = V0038().parse_node(V38_NODE)
    assert node == Node(name="cpu-001", state="IDLE", flags=("DRAIN",), reason="k8s: x")
    assert node.drained
    assert not node.busy


@pytest.mark.parametrize(
    ("state", "flags", "busy", "drained"),
    [
        ("idle", [], False, False),
        ("allocated", [], True, False),
        ("mixed", ["DRAIN"], True, True),
        ("idle", ["COMPLETING"], True, False),
        ("down", ["NOT_RESPONDING"], False, False),
        ("idle", ["drain"], False, True),
    ],
)
def test_v38_node_busy_and_drained(state: str, flags: list[str], busy: bool, drained: bool) -> None:
    node = V0038().parse_node(_with(V38_NODE, state=state, state_flags=flags, reason=""))
    assert node.busy is busy
    assert node.drained is drained


def test_v38_node_without_state_or_reason() -> None:
    node = V0038().parse_node({"name": "cpu-009"})
    assert node == Node(name="cpu-009", state="UNKNOWN", flags=(), reason="")
    assert not node.busy
    assert not node.drained


# --- v0.0.40 parsing -----------------------------------------------------------------------------


def test_v40_job_fields() -> None:
    job = V0040().parse_job(V40_JOB)
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
    )
    assert not job.finished
    assert job.script_started


def test_v40_state_flags_follow_the_base_state() -> None:
    job = V0040().parse_job(_with(V40_JOB, job_state=["PENDING", "REQUEUED"], flags=["CRON_JOB"]))
    assert job.state == "PENDING"
    assert job.flags == ("REQUEUED", "CRON_JOB")
    assert not job.finished


@pytest.mark.parametrize("state", sorted(FINISHED_STATES))
def test_v40_finished_states(state: str) -> None:
    assert V0040().parse_job(_with(V40_JOB, job_state=[state])).finished


def test_v40_empty_or_missing_state_is_unknown() -> None:
    assert V0040().parse_job(_with(V40_JOB, job_state=[])).state == "UNKNOWN"
    raw = _with(V40_JOB)
    del raw["job_state"]
    assert V0040().parse_job(raw).state == "UNKNOWN"


def test_v40_numbers_may_come_wrapped() -> None:
    job = V0040().parse_job(_with(V40_JOB, job_id=_num(99), user_id=_num(5), group_id=_num(6)))
    assert (job.job_id, job.user_id, job.group_id) == (99, 5, 6)


@pytest.mark.parametrize(
    "value",
    [
        {"set": False, "infinite": False, "number": 77},
        {"set": True, "infinite": True, "number": 77},
        None,
    ],
)
def test_v40_unset_or_infinite_ids_read_as_zero(value: dict[str, Any] | None) -> None:
    job = V0040().parse_job(_with(V40_JOB, user_id=value, group_id=value))
    assert (job.user_id, job.group_id) == (0, 0)


@pytest.mark.parametrize(
    ("extra", "comment", "started"),
    [
        ("tandem: started", "", True),
        ("", "x: started", True),  # a 23.11 cluster may still see 22.05-style comments
        ("tandem: started", "x: started", True),
        ("tandem: starting", "", False),
        ("tandem: started twice", "", False),
        ("", "", False),
        (None, None, False),
    ],
)
def test_v40_started_marker_in_extra_or_comment(
    extra: str | None, comment: str | None, started: bool
) -> None:
    assert V0040().parse_job(_with(V40_JOB, extra=extra, comment=comment)).script_started is started


def test_v40_node_fields() -> None:
    node = V0040().parse_node(V40_NODE)
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
def test_v40_node_busy_and_drained(state: list[str], busy: bool, drained: bool) -> None:
    node = V0040().parse_node(_with(V40_NODE, state=state))
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
        qos="high",
        reservation="maint",
        time_limit_minutes=90,
        extra_fields={"requeue": False},
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


def test_v38_submit_body_with_every_field() -> None:
    spec = _full_spec()
    body = V0038().submit_body(spec)
    assert set(body) == {"script", "job"}
    assert body["script"] == spec.script
    job = body["job"]
    expected = {
        "name": "tandem-pod-abc",
        "current_working_directory": "/var/tmp",
        "cpus_per_task": 8,
        "tasks": 1,
        "nodes": "1",
        "account": "research",
        "comment": "tandem pod default/abc",
        "constraints": "ib&h100",
        "partition": "gpu",
        "prefer": "nvlink",
        "qos": "high",
        "reservation": "maint",
        "environment": {"PATH": "/usr/bin:/bin", "TANDEM_POD": "default/abc"},
        "memory_per_node": 16384,
        "gres": "gpu:h100:2",
        "exclude_nodes": "bad-001,bad-002",
        "nodelist": "gpu-001,gpu-002",
        "exclusive": "exclusive",
        "priority": 500,
        "time_limit": 90,
        "requeue": False,
    }
    assert job == expected


def test_v40_submit_body_with_every_field() -> None:
    spec = _full_spec()
    body = V0040().submit_body(spec)
    assert set(body) == {"script", "job"}
    assert body["script"] == spec.script
    assert body["job"] == {
        "name": "tandem-pod-abc",
        "current_working_directory": "/var/tmp",
        "cpus_per_task": 8,
        "tasks": 1,
        "nodes": "1",
        "tres_per_node": "gres/gpu:h100:2",
        "account": "research",
        "comment": "tandem pod default/abc",
        "constraints": "ib&h100",
        "partition": "gpu",
        "prefer": "nvlink",
        "qos": "high",
        "reservation": "maint",
        "excluded_nodes": ["bad-001", "bad-002"],
        "environment": ["PATH=/usr/bin:/bin", "TANDEM_POD=default/abc"],
        "memory_per_node": {"set": True, "infinite": False, "number": 16384},
        "required_nodes": ["gpu-001", "gpu-002"],
        "exclusive": ["true"],
        "priority": {"set": True, "infinite": False, "number": 500},
        "time_limit": {"set": True, "infinite": False, "number": 90},
        "requeue": False,
    }


def test_v38_node_lists_are_sent_as_the_hostlist_given() -> None:
    spec = _full_spec(required_nodes="gpu-[001,003],gpu-009", excluded_nodes="bad-[1-2]")
    job = V0038().submit_body(spec)["job"]
    assert job["nodelist"] == "gpu-[001,003],gpu-009"
    assert job["exclude_nodes"] == "bad-[1-2]"


def test_v40_node_lists_rejoin_to_the_hostlist_given() -> None:
    # slurmrestd joins list items back with commas, so a bracketed hostlist must survive the round trip.
    spec = _full_spec(required_nodes="gpu-[001,003],gpu-009", excluded_nodes="bad-[1-2]")
    job = V0040().submit_body(spec)["job"]
    assert ",".join(job["required_nodes"]) == "gpu-[001,003],gpu-009"
    assert ",".join(job["excluded_nodes"]) == "bad-[1-2]"


def test_minimal_spec_sends_only_what_was_asked() -> None:
    spec = JobSpec(name="p", script="#!/bin/sh\n", environment={"A": "1"}, cpus=1, memory_mb=100)
    v38 = V0038().submit_body(spec)["job"]
    v40 = V0040().submit_body(spec)["job"]
    common = {"name": "p", "current_working_directory": "/tmp", "cpus_per_task": 1, "tasks": 1, "nodes": "1"}
    assert v38 == {**common, "environment": {"A": "1"}, "memory_per_node": 100}
    assert v40 == {
        **common,
        "environment": ["A=1"],
        "memory_per_node": {"set": True, "infinite": False, "number": 100},
    }


@pytest.mark.parametrize(
    ("gpus", "gpu_type", "gres"),
    [(2, "h100", "gres/gpu:h100:2"), (2, "", "gres/gpu:2"), (1, "a100-80gb", "gres/gpu:a100-80gb:1")],
)
def test_v40_gpus_as_tres_per_node(gpus: int, gpu_type: str, gres: str) -> None:
    job = V0040().submit_body(_full_spec(gpus=gpus, gpu_type=gpu_type))["job"]
    assert job["tres_per_node"] == gres


@pytest.mark.parametrize(
    ("gpus", "gpu_type", "gres"),
    [(2, "h100", "gpu:h100:2"), (2, "", "gpu:2"), (1, "a100-80gb", "gpu:a100-80gb:1")],
)
def test_v38_gpus_as_gres(gpus: int, gpu_type: str, gres: str) -> None:
    job = V0038().submit_body(_full_spec(gpus=gpus, gpu_type=gpu_type))["job"]
    assert job["gres"] == gres
    assert "tres_per_node" not in job


@pytest.mark.parametrize("dialect", [V0038(), V0040()], ids=["v0.0.38", "v0.0.40"])
def test_no_gpus_no_gres(dialect: V0038 | V0040) -> None:
    job = dialect.submit_body(_full_spec(gpus=0, gpu_type="h100"))["job"]
    assert "tres_per_node" not in job
    assert "gres" not in job


def test_priority_and_time_limit_zero_are_still_sent() -> None:
    spec = _full_spec(priority=0, time_limit_minutes=0)
    v38 = V0038().submit_body(spec)["job"]
    v40 = V0040().submit_body(spec)["job"]
    assert (v38["priority"], v38["time_limit"]) == (0, 0)
    assert v40["priority"] == {"set": True, "infinite": False, "number": 0}
    assert v40["time_limit"] == {"set": True, "infinite": False, "number": 0}


def test_unset_priority_and_time_limit_are_left_to_slurm() -> None:
    spec = _full_spec(priority=None, time_limit_minutes=None)
    for dialect in (V0038(), V0040()):
        job = dialect.submit_body(spec)["job"]
        assert "priority" not in job
        assert "time_limit" not in job


@pytest.mark.parametrize(
    ("exclusive", "value"),
    [("none", "exclusive"), ("ok", "oversubscribe"), ("user", "user"), ("mcs", "mcs")],
)
def test_v38_exclusive_mapping(exclusive: str, value: str) -> None:
    job = V0038().submit_body(_full_spec(exclusive=exclusive))["job"]
    assert job["exclusive"] == value
    assert "shared" not in job


@pytest.mark.parametrize(
    ("exclusive", "key", "value"),
    [
        ("none", "exclusive", ["true"]),
        ("ok", "shared", ["oversubscribe"]),
        ("user", "shared", ["user"]),
        ("mcs", "shared", ["mcs"]),
        ("topo", "shared", ["topo"]),
    ],
)
def test_v40_exclusive_mapping(exclusive: str, key: str, value: list[str]) -> None:
    job = V0040().submit_body(_full_spec(exclusive=exclusive))["job"]
    assert job[key] == value
    other = "shared" if key == "exclusive" else "exclusive"
    assert other not in job


def test_no_exclusive_leaves_sharing_to_the_partition() -> None:
    for dialect in (V0038(), V0040()):
        job = dialect.submit_body(_full_spec(exclusive=""))["job"]
        assert "exclusive" not in job
        assert "shared" not in job


def test_v38_refuses_topo() -> None:
    with pytest.raises(UnsupportedBySlurm, match="topo"):
        V0038().submit_body(_full_spec(exclusive="topo"))


def test_unsupported_by_slurm_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        V0038().submit_body(_full_spec(exclusive="topo"))


def test_environment_is_copied_not_shared() -> None:
    spec = _full_spec()
    body = V0038().submit_body(spec)
    spec.environment["LATE"] = "1"
    assert "LATE" not in body["job"]["environment"]


def test_drain_body() -> None:
    assert V0038().drain_body("k8s: maintenance") is None
    assert V0040().drain_body("k8s: maintenance") == {"state": ["DRAIN"], "reason": "k8s: maintenance"}
    assert V0040("v0.0.42").drain_body("r") == {"state": ["DRAIN"], "reason": "r"}


# --- what slurmrestd 22.05 accepts ---------------------------------------------------------------

# Non-disabled keys of `job_params` in slurm-22.05 src/plugins/openapi/v0.0.38/jobs.c that a JobSpec
# can need. "excluded_nodes" and "required_nodes" are in that table but disabled; "tres_per_node" is
# not in it at all, so slurmrestd answers `Unknown key "tres_per_node"` and refuses the job.
_V38_ACCEPTED_KEYS = {
    "account",
    "comment",
    "constraint",
    "constraints",
    "cpus_per_task",
    "current_working_directory",
    "environment",
    "exclude_nodes",
    "exclusive",
    "gpus",
    "gpus_per_node",
    "gres",
    "memory_per_node",
    "name",
    "node_list",
    "nodelist",
    "nodes",
    "partition",
    "prefer",
    "priority",
    "qos",
    "requeue",
    "reservation",
    "tasks",
    "time_limit",
}


def test_v38_submit_body_uses_only_keys_slurmrestd_22_05_accepts() -> None:
    spec = _full_spec()
    job = V0038().submit_body(spec)["job"]
    assert set(job) <= _V38_ACCEPTED_KEYS, sorted(set(job) - _V38_ACCEPTED_KEYS)
    # ... and still carries the excluded nodes and the GPUs.
    assert job["exclude_nodes"] == "bad-001,bad-002"
    assert job["gres"] == "gpu:h100:2"


# --- known bugs, pinned so a fix shows up as XPASS(strict) --------------------------------------


def test_v40_unknown_exclusive_value_is_unsupported_by_slurm() -> None:
    with pytest.raises(UnsupportedBySlurm):
        V0040().submit_body(_full_spec(exclusive="sometimes"))
