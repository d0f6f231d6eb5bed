"""The JSON shapes of slurmrestd's OpenAPI versions.

v0.0.38 (Slurm 22.05) uses plain numbers and strings. v0.0.40+ (23.11+) wraps numbers in
`{"set", "infinite", "number"}`, reports states as lists, and takes the environment as a list of
`K=V` strings. Everything above this module sees only `models.Job` / `models.Node` / `JobSpec`.
"""

from __future__ import annotations

from typing import Any, Protocol

from tandem.slurm.hostlist import expand
from tandem.slurm.models import Job, JobSpec, Node

# SUNK's exclusive values are the names of Slurm's job_desc "shared" settings.
_EXCLUSIVE_V38 = {"none": "exclusive", "ok": "oversubscribe", "user": "user", "mcs": "mcs"}
_EXCLUSIVE_V40 = {"none": "exclusive", "ok": "oversubscribe", "user": "user", "mcs": "mcs", "topo": "topo"}


class UnsupportedBySlurm(ValueError):
    """The job asks for something this slurmrestd version cannot express."""


class Dialect(Protocol):
    version: str

    def parse_job(self, raw: dict[str, Any]) -> Job: ...
    def parse_node(self, raw: dict[str, Any]) -> Node: ...
    def submit_body(self, spec: JobSpec) -> dict[str, Any]: ...
    def drain_body(self, reason: str) -> dict[str, Any] | None: ...


def _number(value: Any) -> int | None:
    """A v0.0.40 number object, or a plain number."""
    if isinstance(value, dict):
        if not value.get("set", False) or value.get("infinite", False):
            return None
        return int(value.get("number", 0))
    if value is None:
        return None
    return int(value)


def _states(value: Any) -> tuple[str, tuple[str, ...]]:
    """(base state, flags) from `"idle"`, `"RUNNING"` or `["IDLE", "DRAIN"]`."""
    parts = [str(v).upper() for v in (value if isinstance(value, list) else [value]) if v]
    if not parts:
        return "UNKNOWN", ()
    return parts[0], tuple(parts[1:])


def _nodes(value: Any) -> tuple[str, ...]:
    if not value or value == "(null)":
        return ()
    return tuple(expand(str(value)))


def _reason(value: Any) -> str:
    text = str(value or "")
    return "" if text == "None" else text


def _gres(spec: JobSpec) -> str:
    return f"gpu:{spec.gpu_type}:{spec.gpus}" if spec.gpu_type else f"gpu:{spec.gpus}"


def _common_submit(spec: JobSpec) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": spec.name,
        "current_working_directory": spec.working_dir,
        "cpus_per_task": spec.cpus,
        "tasks": 1,
        "nodes": "1",
    }
    for key, value in (
        ("account", spec.account),
        ("comment", spec.comment),
        ("constraints", spec.constraints),
        ("partition", spec.partition),
        ("prefer", spec.prefer),
        ("qos", spec.qos),
        ("reservation", spec.reservation),
        ("standard_output", spec.output),
        ("standard_error", spec.output),
    ):
        if value:
            job[key] = value
    job.update(spec.extra_fields)
    return job


class V0038:
    version = "v0.0.38"

    def parse_job(self, raw: dict[str, Any]) -> Job:
        state, flags = _states(raw.get("job_state"))
        return Job(
            job_id=int(raw["job_id"]),
            name=str(raw.get("name", "")),
            state=state,
            state_reason=_reason(raw.get("state_reason")),
            nodes=_nodes(raw.get("nodes")),
            partition=str(raw.get("partition", "")),
            comment=str(raw.get("comment") or ""),
            extra="",
            user_id=int(raw.get("user_id") or 0),
            group_id=int(raw.get("group_id") or 0),
            flags=flags + tuple(raw.get("flags") or ()),
        )

    def parse_node(self, raw: dict[str, Any]) -> Node:
        state, flags = _states(raw.get("state"))
        extra_flags = tuple(str(f).upper() for f in raw.get("state_flags") or ())
        return Node(
            name=str(raw["name"]), state=state, flags=flags + extra_flags, reason=str(raw.get("reason") or "")
        )

    def submit_body(self, spec: JobSpec) -> dict[str, Any]:
        job = _common_submit(spec)
        job["environment"] = dict(spec.environment)
        job["memory_per_node"] = spec.memory_mb
        if spec.gpus:
            job["gres"] = _gres(spec)  # 22.05 has no tres_per_node key on submit
        if spec.excluded_nodes:
            job["exclude_nodes"] = spec.excluded_nodes
        if spec.required_nodes:
            job["nodelist"] = spec.required_nodes
        if spec.exclusive:
            if spec.exclusive not in _EXCLUSIVE_V38:
                raise UnsupportedBySlurm(f"exclusive={spec.exclusive!r} needs Slurm 23.02 or newer")
            job["exclusive"] = _EXCLUSIVE_V38[spec.exclusive]
        if spec.priority is not None:
            job["priority"] = spec.priority
        if spec.time_limit_minutes is not None:
            job["time_limit"] = spec.time_limit_minutes
        return {"script": spec.script, "job": job}

    def drain_body(self, reason: str) -> dict[str, Any] | None:
        return None  # v0.0.38 cannot update nodes


class V0040:
    def __init__(self, version: str = "v0.0.40") -> None:
        self.version = version

    def parse_job(self, raw: dict[str, Any]) -> Job:
        state, flags = _states(raw.get("job_state"))
        return Job(
            job_id=int(_number(raw["job_id"]) or 0),
            name=str(raw.get("name", "")),
            state=state,
            state_reason=_reason(raw.get("state_reason")),
            nodes=_nodes(raw.get("nodes")),
            partition=str(raw.get("partition", "")),
            comment=str(raw.get("comment") or ""),
            extra=str(raw.get("extra") or ""),
            user_id=_number(raw.get("user_id")) or 0,
            group_id=_number(raw.get("group_id")) or 0,
            flags=flags + tuple(raw.get("flags") or ()),
        )

    def parse_node(self, raw: dict[str, Any]) -> Node:
        state, flags = _states(raw.get("state"))
        return Node(name=str(raw["name"]), state=state, flags=flags, reason=str(raw.get("reason") or ""))

    def submit_body(self, spec: JobSpec) -> dict[str, Any]:
        job = _common_submit(spec)
        job["environment"] = [f"{k}={v}" for k, v in spec.environment.items()]
        job["memory_per_node"] = {"set": True, "infinite": False, "number": spec.memory_mb}
        if spec.gpus:
            job["tres_per_node"] = f"gres/{_gres(spec)}"
        if spec.required_nodes:
            job["required_nodes"] = spec.required_nodes.split(",")
        if spec.excluded_nodes:
            job["excluded_nodes"] = spec.excluded_nodes.split(",")
        if spec.exclusive:
            if spec.exclusive == "none":
                job["exclusive"] = ["true"]
            elif spec.exclusive in _EXCLUSIVE_V40:
                job["shared"] = [_EXCLUSIVE_V40[spec.exclusive]]
            else:
                raise UnsupportedBySlurm(f"exclusive={spec.exclusive!r} is not a Slurm sharing mode")
        if spec.priority is not None:
            job["priority"] = {"set": True, "infinite": False, "number": spec.priority}
        if spec.time_limit_minutes is not None:
            job["time_limit"] = {"set": True, "infinite": False, "number": spec.time_limit_minutes}
        return {"script": spec.script, "job": job}

    def drain_body(self, reason: str) -> dict[str, Any] | None:
        return {"state": ["DRAIN"], "reason": reason}


SUPPORTED_VERSIONS = ("v0.0.42", "v0.0.41", "v0.0.40", "v0.0.38")


def dialect_for(version: str) -> Dialect:
    if version == "v0.0.38":
        return V0038()
    if version in ("v0.0.40", "v0.0.41", "v0.0.42"):
        return V0040(version)
    raise ValueError(f"unsupported slurmrestd OpenAPI version {version!r}; use one of {SUPPORTED_VERSIONS}")
