"""The JSON shapes of slurmrestd's data-parser versions v0.0.40 to v0.0.45 (Slurm 23.11 to 26.05).

For what Tandem sends and reads they nearly agree (checked against each version's parser in
SchedMD's source): numbers are `{"set", "infinite", "number"}` objects, states are lists
(`["RUNNING", "COMPLETING"]`: base state first, then flags), the environment is a list of `K=V`
strings, node lists are comma-separated lists, and sharing is `shared` (v0.0.40-41 also took a
deprecated `exclusive`; v0.0.45 no longer reports `shared` on a job, but still takes it). The
differences Tandem meets: v0.0.40 has no `topo` sharing mode, v0.0.40-41 leave out the per-job
`status` of a DELETE /job answer, and a ping says `pinged: "UP"` up to v0.0.41, `responding: true`
from v0.0.42 (v0.0.42-44 say both). The batch script goes in `job.script`, which all six
take (v0.0.41-42 deprecated the top-level `script`). Everything above this module sees only
`models.Job` / `models.Node` / `JobSpec`.
"""

from __future__ import annotations

import functools
from typing import Any

from tandem import keys
from tandem.slurm.hostlist import expand, split_items
from tandem.slurm.models import Job, JobSpec, Node

# Newest first: the client speaks the first of these the server serves.
SUPPORTED_VERSIONS = ("v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40")
# SUNK's exclusive values (tandem.keys) are the names of Slurm's job_desc "shared" settings, but
# for "ok" ("none": whole node).
_SHARED = {value: {"ok": "oversubscribe"}.get(value, value) for value in keys.EXCLUSIVE_VALUES}
# Sharing within a topology segment only came with Slurm 24.05's v0.0.41.
_TOPO_SINCE = "v0.0.41"
# GET /conf (Slurm's running configuration) is served from this data-parser version on (Slurm
# 26.05; v0.0.44 answers that it is not served, 24.11's versions have no such path).
_CONF_SINCE = "v0.0.45"


class UnsupportedBySlurm(ValueError):
    """The job asks for something Slurm cannot express."""


def _number(value: Any) -> int | None:
    """A `{set, infinite, number}` object, or a plain number (or a number in a string)."""
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
    return _expanded(str(value))


# A mirror reads every job again on each poll and the same hostlists come back each time (a
# pending job's excluded nodes, a running job's nodes): expanding them anew was a fifth of the
# syncer's CPU in a burst. Slurm only names nodes that exist, so an entry holds at most the
# cluster's node names; 256 of them bound the cache to a few MiB even at 1,000 nodes.
@functools.lru_cache(maxsize=256)
def _expanded(hostlist: str) -> tuple[str, ...]:
    return tuple(expand(hostlist))


def _id_set(value: Any) -> tuple[int, ...]:
    """Slurm's job id set, `12-13` or `12,14-15`, expanded; () when absent or unreadable."""
    ids: list[int] = []
    for part in str(value or "").split(","):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return ()
        ids.extend(range(int(first), int(last or first) + 1))
    return tuple(ids)


def _reason(value: Any) -> str:
    text = str(value or "")
    return "" if text == "None" else text


def _gres(spec: JobSpec) -> str:
    # Slurm types a node's shards and MPS after its GPUs (gres.conf `Name=shard Type=h100`).
    if spec.gpu_mps:
        name, count = "mps", spec.gpu_mps
    else:
        name, count = ("shard", spec.gpu_shares) if spec.gpu_shares else ("gpu", spec.gpus)
    return f"{name}:{spec.gpu_type}:{count}" if spec.gpu_type else f"{name}:{count}"


def _common_submit(spec: JobSpec) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": spec.name,
        "script": spec.script,
        "current_working_directory": spec.working_dir,
        "cpus_per_task": spec.cpus,
        "tasks": spec.nodes,
        "nodes": str(spec.nodes),
    }
    for key, value in (
        ("account", spec.account),
        ("comment", spec.comment),
        ("admin_comment", spec.admin_comment),
        ("constraints", spec.constraints),
        ("dependency", spec.dependency),
        ("partition", spec.partition),
        ("prefer", spec.prefer),
        ("qos", spec.qos),
        ("reservation", spec.reservation),
        ("extra", spec.extra),
        ("standard_output", spec.output),
        ("standard_error", spec.output),
    ):
        if value:
            job[key] = value
    job.update(spec.extra_fields)
    return job


class Dialect:
    """One data-parser version's JSON (they differ in nothing Tandem uses: see the module doc)."""

    def __init__(self, version: str = SUPPORTED_VERSIONS[0]) -> None:
        if version not in SUPPORTED_VERSIONS:
            raise ValueError(
                f"unsupported slurmrestd data-parser version {version!r}; use one of {SUPPORTED_VERSIONS}"
            )
        self.version = version
        # Versions are listed newest first: a smaller index is a newer version.
        newer = SUPPORTED_VERSIONS.index(version) <= SUPPORTED_VERSIONS.index(_TOPO_SINCE)
        self._sharing = _SHARED if newer else {k: v for k, v in _SHARED.items() if k != "topo"}
        self.serves_conf = SUPPORTED_VERSIONS.index(version) <= SUPPORTED_VERSIONS.index(_CONF_SINCE)

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
            admin_comment=str(raw.get("admin_comment") or ""),
            extra=str(raw.get("extra") or ""),
            user_id=_number(raw.get("user_id")) or 0,
            group_id=_number(raw.get("group_id")) or 0,
            flags=flags + tuple(raw.get("flags") or ()),
            excluded_nodes=_nodes(raw.get("excluded_nodes")),
            priority=_number(raw.get("priority")) or 0,
            expected_start=(_number(raw.get("start_time")) or 0) if state == "PENDING" else 0,
            # The nodes asked for while pending, the nodes held once allocated.
            node_count=_number(raw.get("node_count")) or 0,
            het_job_id=_number(raw.get("het_job_id")) or 0,
            het_job_offset=_number(raw.get("het_job_offset")) or 0,
            het_job_ids=_id_set(raw.get("het_job_id_set")),
            tres_per_node=str(raw.get("tres_per_node") or ""),
            gres_detail=_strings(raw.get("gres_detail")),
            features=str(raw.get("features") or ""),
        )

    def parse_node(self, raw: dict[str, Any]) -> Node:
        state, flags = _states(raw.get("state"))
        return Node(
            name=str(raw["name"]),
            state=state,
            flags=flags,
            reason=str(raw.get("reason") or ""),
            reason_set_by=str(raw.get("reason_set_by_user") or ""),
            gres=str(raw.get("gres") or "") if isinstance(raw.get("gres"), str) else "",
            features=_features(raw.get("features")),
        )

    def parse_job_state(self, raw: dict[str, Any]) -> tuple[int, str, tuple[str, ...]] | None:
        """One element of GET /jobs/state: (job id, base state, flags); None when the id is not
        one. A heterogeneous job's component says "<its own job id>+<offset>" ("15+1"), an array
        job's element "<its own job id>_<task>" ("14_3"; "14_[4-9]" for tasks not split off yet):
        its own id is what counts, as in GET /jobs."""
        job_id = str(raw.get("job_id", ""))
        for separator in ("+", "_"):
            own, found, rest = job_id.partition(separator)
            if found and own.isdigit() and rest:
                job_id = own
                break
        if not job_id.isdigit():
            return None
        state, flags = _states(raw.get("state"))
        return int(job_id), state, flags

    def controller_responding(self, answer: dict[str, Any]) -> bool:
        """Whether a GET /ping answer says a slurmctld answered (slurmrestd says 200 either way)."""
        for ping in answer.get("pings") or []:
            if not isinstance(ping, dict):
                continue
            if ping.get("responding", str(ping.get("pinged", "")).upper() == "UP") is True:
                return True
        return False

    def signal_results(self, answer: dict[str, Any]) -> list[tuple[int, str]]:
        """(error number, Slurm's words) of each job in a DELETE /job/{id} answer; v0.0.42+
        list them under `status` (also for an unknown job, with HTTP 200), v0.0.40-41 do not."""
        results = []
        for entry in answer.get("status") or []:
            error = entry.get("error") if isinstance(entry, dict) else None
            if isinstance(error, dict):
                results.append(
                    (int(error.get("code") or 0), str(error.get("message") or error.get("string") or ""))
                )
        return results

    def submit_body(self, spec: JobSpec) -> dict[str, Any]:
        """`{"job": ...}`, or for a heterogeneous job `{"jobs": [...]}`: one job description per
        component, the batch script in the first only (it runs once, for the whole job)."""
        if spec.components:
            jobs = [self._job_desc(c) for c in spec.components]
            for later in jobs[1:]:
                later.pop("script", None)
            return {"jobs": jobs}
        return {"job": self._job_desc(spec)}

    def _job_desc(self, spec: JobSpec) -> dict[str, Any]:
        job = _common_submit(spec)
        job["environment"] = [f"{k}={v}" for k, v in spec.environment.items()]
        job["memory_per_node"] = _set(spec.memory_mb)
        if spec.gpus or spec.gpu_shares or spec.gpu_mps:
            job["tres_per_node"] = f"gres/{_gres(spec)}"
        if spec.required_nodes:
            job["required_nodes"] = split_items(spec.required_nodes)
        if spec.excluded_nodes:
            job["excluded_nodes"] = split_items(spec.excluded_nodes)
        if spec.exclusive:
            if spec.exclusive not in self._sharing:
                raise UnsupportedBySlurm(
                    f"exclusive={spec.exclusive!r} is not a sharing mode of slurmrestd {self.version}"
                    f" (known: {', '.join(self._sharing)})"
                )
            job["shared"] = [self._sharing[spec.exclusive]]
        if spec.priority is not None:
            job["priority"] = _set(spec.priority)
        if spec.nice is not None:
            job["nice"] = spec.nice
        if spec.time_limit_minutes is not None:
            job["time_limit"] = _set(spec.time_limit_minutes)
        # A root token submits on behalf of the Pod's user and group (SUNK's user-id / group-id).
        if spec.user_id is not None:
            job["user_id"] = str(spec.user_id)
        if spec.group_id is not None:
            job["group_id"] = str(spec.group_id)
        return job

    def node_features_body(self, features: tuple[str, ...]) -> dict[str, Any]:
        """POST /node/{name}: its available and active features, both these (scontrol's
        AvailableFeatures= and ActiveFeatures=)."""
        return {"features": list(features), "features_act": list(features)}

    def node_state_body(self, state: str, reason: str = "") -> dict[str, Any]:
        """POST /node/{name}: DRAIN with a reason, or RESUME."""
        body: dict[str, Any] = {"state": [state]}
        if reason:
            body["reason"] = reason
        return body


def _set(number: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": number}


def _features(value: Any) -> tuple[str, ...]:
    """A node's features: a list (v0.0.41 and later) or Slurm's comma-separated string."""
    if isinstance(value, str):
        return tuple(f for f in value.split(",") if f)
    return _strings(value)


def _strings(value: Any) -> tuple[str, ...]:
    """A list of strings as a tuple; anything else (absent, a lone string) as none."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()
