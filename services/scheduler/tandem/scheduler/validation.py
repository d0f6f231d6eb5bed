"""Whether a Pod can become a placeholder job, with reasons a user can act on.

A Pod that fails here gets a Warning Event and is never retried (the Pod must be recreated), so
every problem is reported at once, each naming the field and the value at fault. The checks are
"can Slurm be handed this", never "does this account/partition/node exist": only Slurm knows that,
and it says so through the job's pending reason.
"""

from __future__ import annotations

import difflib
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from tandem import keys, topology
from tandem.quantity import parse_quantity
from tandem.scheduler.policy import Policy, Verdict, check
from tandem.slurm import hostlist

# A raw Pod as the API server returns it (camelCase JSON).
Pod = Mapping[str, Any]

CPU = "cpu"
MEMORY = "memory"
# Slurm's 32-bit fields reserve 0xFFFFFFFF (INFINITE, and (uid_t)-1 for ids).
MAX_SLURM_UINT32 = 0xFFFFFFFE
# Used when the field is absent from the Pod (the API server's default).
DEFAULT_GRACE_SECONDS = 30
# The placeholder script needs this long after the Pod is gone to exit before Slurm's KillWait.
KILL_WAIT_MARGIN_SECONDS = 5

_INTEGER_RANGES: dict[str, tuple[int, int]] = {
    keys.PRIORITY: (0, MAX_SLURM_UINT32),
    keys.USER_ID: (0, MAX_SLURM_UINT32),
    keys.GROUP_ID: (0, MAX_SLURM_UINT32),
    keys.TIMEOUT: (1, MAX_SLURM_UINT32),
}
# Slurm reads these as a single name: a space or comma would split it into something else.
_SINGLE_NAMES = (keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION)
_FREE_TEXT = (keys.COMMENT, keys.CONSTRAINTS, keys.PREFER)
_NODE_LISTS = (keys.EXCLUDED_NODES, keys.REQUIRED_NODES)
# The longest value each annotation may have, in UTF-8 bytes (what Slurm and memory count). Checked
# before anything else reads the value, so no rule (int(), a regex, a hostlist) sees more than this.
MAX_BYTES: dict[str, int] = {
    # Slurm names: far beyond any real account, partition, QOS or reservation name.
    keys.ACCOUNT: 255,
    keys.PARTITION: 255,
    keys.QOS: 255,
    keys.RESERVATION: 255,
    # Slurm refuses a job whose comment or feature expression is longer (ESLURM_PATHNAME_TOO_LONG).
    keys.COMMENT: 1024,
    keys.CONSTRAINTS: 1024,
    keys.PREFER: 1024,
    keys.TOPOLOGY: 1024,
    # Hostlists: ranges keep real ones short; hostlist.MAX_NAMES bounds what they name.
    keys.EXCLUDED_NODES: 4096,
    keys.REQUIRED_NODES: 4096,
    # Linux's PATH_MAX (4096) counts the terminating NUL.
    keys.CURRENT_WORKING_DIR: 4095,
    # 4294967294 is ten digits; room for a sign and zero padding, never a number int() is slow on.
    keys.PRIORITY: 32,
    keys.USER_ID: 32,
    keys.GROUP_ID: 32,
    keys.TIMEOUT: 32,
    # One of a handful of short words.
    keys.EXCLUSIVE: 32,
}
# Pod-level requests (spec.resources) replace the containers' sum only for these.
_POD_LEVEL_RESOURCES = (CPU, MEMORY)

_INTEGER = re.compile(r"[+-]?[0-9]+")
_NODE_NAME = re.compile(r"(?:[A-Za-z0-9._-]+|\[[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*\])+")
_BRACKET = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")
_QUOTE_LIMIT = 64


@dataclass(frozen=True)
class Problem:
    field: str
    rule: str

    def __str__(self) -> str:
        return f"{self.field}: {self.rule}"

    @property
    def reason(self) -> str:
        """What was wrong, as a metrics label: the annotation's key, or the field's path."""
        if self.field.startswith("metadata.annotations[") and self.field.endswith("]"):
            return self.field.removeprefix("metadata.annotations[").removesuffix("]")
        return self.field


@dataclass(frozen=True)
class Validation:
    errors: tuple[Problem, ...]
    warnings: tuple[str, ...]
    # The Pod's requests as `effective_requests` gives them (empty when they did not parse): the
    # job is built from these, not from a second parse.
    requests: Mapping[str, int] = field(default_factory=dict)
    # Why the kubelet would pin this Pod's CPUs ("" when it would not): a Warning Event.
    static_cpu: str = ""
    # Annotations the tenant policy fills in when the Pod leaves them out (its first allowed ids).
    defaults: Mapping[str, str] = field(default_factory=dict)
    # What the job is made of: the Pod's job annotations as validated, the defaults filled in.
    # The job is built from these, never from a second read of the Pod.
    job_annotations: Mapping[str, str] = field(default_factory=dict)
    # The GRES type the Pod's GPU claims ask for (tandem.dra.claims); "" to take it from the
    # Pod's GPU model node selector, as for nvidia.com/gpu.
    gpu_type: str = ""

    @property
    def ok(self) -> bool:
        return not self.errors

    def message(self) -> str:
        """One line for a Warning Event; empty when the Pod is valid."""
        if not self.errors:
            return ""
        return "invalid for Slurm: " + "; ".join(str(p) for p in self.errors)


def pod_annotations(pod: Pod) -> dict[str, str]:
    raw = (pod.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in raw.items()}


def effective_requests(pod: Pod) -> dict[str, int]:
    """The Pod's request per resource as the scheduler and kubelet count it.

    `cpu` in millicores, `memory` in bytes, anything else as a count (rounded up). Only resources
    some container (or the overhead) names appear. Raises ValueError on an unparsable quantity.
    """
    problems: list[Problem] = []
    total = _effective(pod, problems)
    if problems:
        raise ValueError("; ".join(str(p) for p in problems))
    return {name: _to_units(name, value) for name, value in total.items()}


def validate(
    pod: Pod,
    kill_wait_seconds: float,
    reject_static_cpu: bool = False,
    policy: Policy | None = None,
    kill_wait_source: str = "--slurm-kill-wait",
) -> Validation:
    """`policy`: the tenant policy (the scheduler always passes its own); None checks only that
    Slurm can be handed the Pod. `kill_wait_source`: where Slurm's KillWait came from, as a
    refusal cites it (tandem.scheduler.killwait_source)."""
    errors: list[Problem] = []
    warnings: list[str] = []
    found = pod_annotations(pod)
    for key in sorted(found):
        if key.startswith(keys.PREFIX):
            rule = _annotation_rule(key, found[key])
            if rule:
                errors.append(Problem(f"metadata.annotations[{key}]", rule))
            elif key not in keys.JOB_ANNOTATIONS and key not in keys.OWN_ANNOTATIONS:
                warnings.append(_unknown_annotation(key))
    request_problems: list[Problem] = []
    total = _effective(pod, request_problems)
    errors.extend(_request_problems(total, request_problems))
    errors.extend(_grace_problems(pod, kill_wait_seconds, kill_wait_source))
    requests = {} if request_problems else {name: _to_units(name, value) for name, value in total.items()}
    verdict = Verdict()
    if policy is not None and not any(p.field.startswith("metadata.annotations[") for p in errors):
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        verdict = check(policy, namespace, {k: v for k, v in found.items() if k in keys.JOB_ANNOTATIONS})
        errors.extend(Problem(key, rule) for key, rule in verdict.problems)
    static = static_cpu(pod) if not request_problems else ""
    if static and reject_static_cpu:
        errors.append(Problem("spec.containers[].resources", f"{static} (--reject-static-cpu)"))
        static = ""
    job_annotations = {**verdict.defaults, **{k: v for k, v in found.items() if k in keys.JOB_ANNOTATIONS}}
    return Validation(tuple(errors), tuple(warnings), requests, static, verdict.defaults, job_annotations)


def static_cpu(pod: Pod) -> str:
    """Why the kubelet's static CPU manager would pin this Pod's CPUs: Guaranteed QoS (every
    container's requests equal its limits for cpu and memory) with an integer CPU count. Slurm
    does not know those CPUs are taken, so its own jobs can land on them and slurmd drains the
    node (the reference's warning). "" when it would not."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    if not containers:
        return ""
    cpus = Decimal(0)
    for c in containers:
        resources = c.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for name in (CPU, MEMORY):
            if name not in limits:
                return ""
            try:
                limit = parse_quantity(str(limits[name]))
                request = parse_quantity(str(requests.get(name, limits[name])))
            except ValueError:
                return ""
            if limit != request:
                return ""
        if c in (spec.get("containers") or []):
            cpus += parse_quantity(str(limits[CPU]))
    if cpus <= 0 or cpus != cpus.to_integral_value():
        return ""
    return (
        f"Guaranteed QoS with {int(cpus)} whole CPU(s): a kubelet with the static CPU manager pins them, "
        "and Slurm, which does not see the pinning, may give them to its own jobs"
    )


def disagreements(members: list[Pod]) -> tuple[Problem, ...]:
    """A group is one job: every job annotation must be the same on each member (absent included)."""
    problems = []
    for key in sorted(keys.JOB_ANNOTATIONS):
        seen: dict[str, str] = {}
        for pod in members:
            value = pod_annotations(pod).get(key, "")
            seen.setdefault(value, str((pod.get("metadata") or {}).get("name")))
        if len(seen) > 1:
            shown = ", ".join(
                f"{name}={_quote(value) if value else '(unset)'}" for value, name in seen.items()
            )
            problems.append(
                Problem(f"metadata.annotations[{key}]", f"must be the same on every member, got {shown}")
            )
    return tuple(problems)


# --- annotations ---------------------------------------------------------------------------------


def _annotation_rule(key: str, value: str) -> str:
    """What is wrong with the value of a known annotation; "" when it is fine (or not ours)."""
    if key in MAX_BYTES and len(value.encode()) > MAX_BYTES[key]:
        return f"must be at most {MAX_BYTES[key]} bytes long, got {len(value.encode())}: {_quote(value)}"
    if key in _INTEGER_RANGES:
        return _integer_rule(value, *_INTEGER_RANGES[key])
    if key == keys.EXCLUSIVE:
        if value in keys.EXCLUSIVE_VALUES or value.lower() in keys.LEGACY_EXCLUSIVE:
            return ""
        return (
            f"must be one of {', '.join(keys.EXCLUSIVE_VALUES)} (or legacy true/false), got {_quote(value)}"
        )
    if key in _NODE_LISTS:
        return _node_list_rule(value)
    if key == keys.TOPOLOGY:
        try:
            return "" if topology.parse_levels(value) else "must name a Node label key, got nothing"
        except ValueError as e:
            return f"must be comma-separated Node label keys: {e}"
    if _has_control(value) and (key in _FREE_TEXT or key in _SINGLE_NAMES or key == keys.CURRENT_WORKING_DIR):
        return f"must not contain control characters (newline, tab, NUL...), got {_quote(value)}"
    if key in _SINGLE_NAMES and any(ch.isspace() or ch == "," for ch in value):
        return f"must be a single Slurm name without whitespace or commas, got {_quote(value)}"
    if key == keys.CURRENT_WORKING_DIR and not value.startswith("/"):
        return f"must be an absolute path, got {_quote(value)}"
    return ""


def _integer_rule(value: str, low: int, high: int) -> str:
    if not _INTEGER.fullmatch(value):
        return f"must be an integer, got {_quote(value)}"
    digits = value.lstrip("+-").lstrip("0")
    # A string of digits this long is out of range anyway; int() on it could be slow or refuse.
    if len(digits) > 20 or not low <= int(value) <= high:
        return f"must be an integer from {low} to {high}, got {_quote(value)}"
    return ""


def _node_list_rule(value: str) -> str:
    """Slurm hostlist syntax: `a100-092-01,gpu-[001-004,007]`. An empty value names no node."""
    if not value:
        return ""
    for item in hostlist.split_items(value):
        if not item:
            return f"must be comma-separated Slurm node names with no empty items, got {_quote(value)}"
        if not _NODE_NAME.fullmatch(item):
            return (
                "must be comma-separated Slurm node names (letters, digits, '-', '_', '.', ranges like"
                f" gpu-[001-004]; no spaces), got {_quote(value)} (bad item {_quote(item)})"
            )
        for body in _BRACKET.findall(item):
            for lo, hi in _RANGE.findall(body):
                if int(lo) > int(hi):
                    return f"has a backwards node range {lo}-{hi}, got {_quote(value)}"
    # Counted from the ranges, never expanded: `gpu-[0-99999999]` is short and names 100 M nodes.
    try:
        size = hostlist.measure(value)
    except ValueError as e:
        return f"is not a hostlist Slurm can read ({e}), got {_quote(value)}"
    if size.names > hostlist.MAX_NAMES:
        return (
            f"must name at most {hostlist.MAX_NAMES} nodes (Slurm's own limit for a range), "
            f"got {hostlist.shown_count(size.names)} in {_quote(value)}"
        )
    if size.longest > hostlist.MAX_NAME_LENGTH:
        return (
            f"must name nodes of at most {hostlist.MAX_NAME_LENGTH} characters (a Kubernetes Node name), "
            f"got one of {size.longest} in {_quote(value)}"
        )
    return ""


def _unknown_annotation(key: str) -> str:
    known = {k.removeprefix(keys.PREFIX): k for k in keys.JOB_ANNOTATIONS}
    close = difflib.get_close_matches(key.removeprefix(keys.PREFIX), sorted(known), n=1, cutoff=0.75)
    hint = f"typo of {known[close[0]]}?" if close else "typo?"
    return f"unknown annotation {key} is ignored ({hint})"


# --- resources -----------------------------------------------------------------------------------


def _request_problems(total: Mapping[str, Decimal], parse_problems: list[Problem]) -> list[Problem]:
    problems = list(parse_problems)
    for name in (CPU, MEMORY):
        # A garbled quantity is already reported; "not set" on top of it would mislead.
        if any(p.field.endswith(f".{name}") for p in problems):
            continue
        field = f"spec.containers[].resources.requests.{name}"
        if name not in total:
            problems.append(Problem(field, "must be set so Slurm can account for the Pod, got none"))
        elif total[name] <= 0:
            shown = _format_cpu(total[name]) if name == CPU else str(_to_units(name, total[name]))
            problems.append(
                Problem(field, f"must be greater than zero so Slurm can account for the Pod, got {shown}")
            )
    return problems


def _effective(pod: Pod, problems: list[Problem]) -> dict[str, Decimal]:
    """Kubernetes' PodRequests: regular containers and sidecars run together, each plain init
    container runs alone beside the sidecars started before it, and the Pod needs the larger."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(total, _container_requests(container, f"spec.containers[{i}]", problems))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        requests = _container_requests(container, f"spec.initContainers[{i}]", problems)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            running = dict(sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    pod_level = _quantities(
        (spec.get("resources") or {}).get("requests"), "spec.resources.requests", problems
    )
    for name in _POD_LEVEL_RESOURCES:
        if name in pod_level:
            total[name] = pod_level[name]
    _add(total, _quantities(spec.get("overhead"), "spec.overhead", problems))
    return total


def _container_requests(
    container: Mapping[str, Any], field: str, problems: list[Problem]
) -> dict[str, Decimal]:
    requests = (container.get("resources") or {}).get("requests")
    return _quantities(requests, f"{field}.resources.requests", problems)


def _quantities(raw: Mapping[str, Any] | None, field: str, problems: list[Problem]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, text in (raw or {}).items():
        try:
            out[name] = parse_quantity(str(text))
        except ValueError:
            problems.append(
                Problem(f"{field}.{name}", f"must be a Kubernetes quantity, got {_quote(str(text))}")
            )
    return out


def _add(into: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, Decimal(0)) + value


def _max(into: dict[str, Decimal], other: Mapping[str, Decimal]) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def _to_units(name: str, value: Decimal) -> int:
    return math.ceil(value * 1000) if name == CPU else math.ceil(value)


def _format_cpu(cores: Decimal) -> str:
    millis = _to_units(CPU, cores)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


# --- termination grace period --------------------------------------------------------------------


def _grace_problems(pod: Pod, kill_wait_seconds: float, source: str) -> list[Problem]:
    field = "spec.terminationGracePeriodSeconds"
    raw = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = DEFAULT_GRACE_SECONDS if raw is None else raw
    if isinstance(grace, bool) or not isinstance(grace, int):
        return [Problem(field, f"must be an integer, got {_quote(str(raw))}")]
    limit = kill_wait_seconds - KILL_WAIT_MARGIN_SECONDS
    if grace < limit:
        return []
    why = f"KillWait {_number(kill_wait_seconds)}s minus {KILL_WAIT_MARGIN_SECONDS}s, KillWait from {source}"
    got = f"{grace} (the default when unset)" if raw is None else str(grace)
    return [Problem(field, f"must be less than {_number(limit)} ({why}), got {got}")]


# --- text ----------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _has_control(text: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in text)


def _quote(text: str) -> str:
    """A value as it appears in an Event: quoted, escaped, and short enough to read."""
    shown = text if len(text) <= _QUOTE_LIMIT else text[: _QUOTE_LIMIT - 3] + "..."
    return '"' + "".join(_escape(ch) for ch in shown) + '"'


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if unicodedata.category(ch) == "Cc":
        return f"\\x{ord(ch):02x}"
    return ch
