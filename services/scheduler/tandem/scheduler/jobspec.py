"""A valid Pod -> the placeholder job that stands for it in Slurm."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tandem import jobtoken, keys
from tandem.dra import gres
from tandem.placeholder import PodRef, admin_comment, extra_ref, job_name
from tandem.scheduler.domains import combined
from tandem.scheduler.validation import CPU, MEMORY, Pod, effective_requests, pod_annotations
from tandem.slurm.hostlist import compress, expand
from tandem.slurm.models import JobSpec

MIB = 1024 * 1024

# Kubernetes label values; GRES types end up inside `gres/gpu:<type>:<n>`, so no ':' ',' or '='.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


@dataclass(frozen=True)
class PlaceholderConfig:
    script: str
    environment: Mapping[str, str]
    # GPU model label value on the Node (H100_NVLINK_80GB) -> Slurm GRES type (h100).
    gpu_types: Mapping[str, str]
    # Written into every job's name, so each scheduler finds its own jobs and only those.
    scheduler_name: str = "tandem"
    # The placeholder script's own output (it only says when a hook call failed).
    output: str = "/dev/null"
    default_working_dir: str = "/tmp"
    # Signs each placeholder's own credential (tandem.jobtoken); empty: the job gets none.
    job_key: bytes = b""
    # The nice of an elastic gang's extra members' jobs (tandem.scheduler.elastic): what puts them
    # below their core when Slurm picks what to preempt (--extra-member-nice).
    extra_nice: int = 1000


def parse_gpu_types(text: str) -> dict[str, str]:
    """`H100_NVLINK_80GB=h100,A100_PCIE_80GB=a100` -> {label value: GRES type}."""
    return gres.parse_type_map(
        text,
        what="GPU type",
        key="LABEL_VALUE",
        key_ok=lambda label: _LABEL_VALUE.fullmatch(label) is not None,
        key_is="a Kubernetes label value",
        example="H100_NVLINK_80GB=h100",
    )


def pod_ref(pod: Pod) -> PodRef:
    meta = pod.get("metadata") or {}
    ref = PodRef(str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))
    # A job named after a partial reference could never be matched back to its Pod after a crash.
    if not (ref.namespace and ref.name and ref.uid):
        raise ValueError(f"Pod {ref.namespace}/{ref.name} lacks metadata.namespace, .name or .uid")
    return ref


def gpu_type(pod: Pod, gpu_types: Mapping[str, str]) -> str:
    """The Slurm GRES type of the GPU model the Pod requires; "" when it requires none we know."""
    spec = pod.get("spec") or {}
    # nodeSelector first: it holds for every Node the Pod may use, an affinity term only for some.
    selector = spec.get("nodeSelector") or {}
    for label in keys.GPU_MODEL_LABELS:
        if label in selector and selector[label] in gpu_types:
            return gpu_types[selector[label]]
    for value in _required_affinity_values(spec):
        if value in gpu_types:
            return gpu_types[value]
    return ""


def _required_affinity_values(spec: Mapping[str, Any]) -> list[str]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    values: list[str] = []
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") in keys.GPU_MODEL_LABELS and expression.get("operator") == "In":
                values.extend(str(v) for v in expression.get("values") or [])
    return values


def exclusive(value: str) -> str:
    """JobSpec.exclusive from the annotation: legacy `true` is a whole node, `false` is Slurm's default."""
    return keys.LEGACY_EXCLUSIVE.get(value.lower(), value)


def build_group_job_spec(
    group: PodRef,
    members: Sequence[Pod],
    cfg: PlaceholderConfig,
    requests: Sequence[Mapping[str, int]],
    unfit: Sequence[str] = (),
    annotations: Mapping[str, str] | None = None,
    components: Sequence[int] = (),
    claimed_types: Sequence[str] = (),
    domains: Sequence[str] = (),
) -> JobSpec:
    """One job for a group: a node per member, each node sized for the largest member. With
    `components` (how many of the members, in order, each component holds), a heterogeneous job
    instead: each component's nodes sized for its own largest member (a leader and its workers,
    prefill and decode). The members' job annotations agree (validation.disagreements).
    `claimed_types`: each member's GRES type from its GPU claims (Validation.gpu_type). `domains`:
    the one-domain constraint of each component (of the job), added to the Pods' own
    (tandem.scheduler.domains)."""
    types = tuple(claimed_types) or ("",) * len(members)
    binding = jobtoken.new_binding()  # one job, one credential, whatever its components
    if not components:
        job = _sized_for_largest(group, members, cfg, requests, unfit, annotations, types, binding)
        return _in_domain(job, domains[0] if domains else "")
    parts, start = [], 0
    for index, count in enumerate(components):
        end = start + count
        part = _sized_for_largest(
            group, members[start:end], cfg, requests[start:end], unfit, annotations, types[start:end], binding
        )
        parts.append(_in_domain(part, domains[index] if index < len(domains) else ""))
        start = end
    return replace(parts[0], components=tuple(parts))


def build_extra_job_spec(
    group: PodRef,
    member: Pod,
    cfg: PlaceholderConfig,
    requests: Mapping[str, int],
    annotations: Mapping[str, str],
    taken: Sequence[str] = (),
    domain: str = "",
    of_core: bool = False,
) -> JobSpec:
    """The job of an elastic gang's extra member: the core's job annotations (`annotations`, which
    the members agree on) on one node none of `taken` (the core's, the other extras'), in the
    core's `domain`, named after the group and the member (placeholder.extra_ref), and below the
    core when Slurm takes nodes back: `cfg.extra_nice`, or for an explicit priority, that much
    lower (never 0, which holds a job). `of_core`: a member within minCount beyond a running core
    (minCount raised while it ran, which Slurm cannot grow): linked alike, at the core's own
    priority."""
    spec = build_job_spec(
        member,
        cfg,
        requests,
        ref=extra_ref(group, str((member.get("metadata") or {}).get("uid") or "")),
        unfit=taken,
        annotations=annotations,
    )
    # The core holds the nodes the group requires: an extra requiring them too could never run.
    spec = replace(_in_domain(spec, domain), required_nodes="")
    if of_core:
        return spec
    if spec.priority is not None:
        return replace(spec, priority=max(1, spec.priority - cfg.extra_nice))
    return replace(spec, nice=cfg.extra_nice)


def _in_domain(spec: JobSpec, domain: str) -> JobSpec:
    return replace(spec, constraints=combined(spec.constraints, domain)) if domain else spec


def _sized_for_largest(
    group: PodRef,
    members: Sequence[Pod],
    cfg: PlaceholderConfig,
    requests: Sequence[Mapping[str, int]],
    unfit: Sequence[str],
    annotations: Mapping[str, str] | None,
    claimed_types: Sequence[str],
    binding: str,
) -> JobSpec:
    largest = {name: max(r.get(name, 0) for r in requests) for name in {n for r in requests for n in r}}
    claimed = next((t for t in claimed_types if t), "")
    spec = build_job_spec(
        members[0],
        cfg,
        largest,
        ref=group,
        unfit=unfit,
        annotations=annotations,
        claimed_type=claimed,
        binding=binding,
    )
    return replace(spec, nodes=len(members))


def build_job_spec(
    pod: Pod,
    cfg: PlaceholderConfig,
    requests: Mapping[str, int] | None = None,
    ref: PodRef | None = None,
    unfit: Sequence[str] = (),
    defaults: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    claimed_type: str = "",
    binding: str = "",
) -> JobSpec:
    """The placeholder job for a Pod that passed `validate` (`requests`: what it parsed;
    `annotations`: its job annotations as validated, Validation.job_annotations), or with `ref`,
    for the group that Pod belongs to. Without `annotations`, the Pod's own are read, `defaults`
    (what the tenant policy filled in) under them."""
    ref = ref or pod_ref(pod)
    found = dict(annotations) if annotations is not None else {**(defaults or {}), **pod_annotations(pod)}
    if requests is None:
        requests = effective_requests(pod)
    gpus = requests.get(keys.GPU_RESOURCE, 0)
    shares = requests.get(keys.GPU_SHARES, 0)
    mps = requests.get(keys.GPU_MPS, 0)
    environment = {
        **cfg.environment,
        "TANDEM_POD_NAMESPACE": ref.namespace,
        "TANDEM_POD_NAME": ref.name,
        "TANDEM_POD_UID": ref.uid,
        # The script appends its started marker to the job's Extra, which its environment lacks.
        "TANDEM_JOB_EXTRA": "",
    }
    uid, gid = job_user(pod, annotations=found)
    name = job_name(ref, cfg.scheduler_name)
    if cfg.job_key:
        # What its script presents to the hooks API: good for this job and nothing else (a
        # binding made for this submit, in its AdminComment too).
        binding = binding or jobtoken.new_binding()
        environment["TANDEM_PLACEHOLDER"] = name
        environment["TANDEM_JOB_TOKEN"] = jobtoken.token(cfg.job_key, name, binding)
    else:
        binding = ""
    return JobSpec(
        name=name,
        admin_comment=admin_comment(name, binding),
        script=cfg.script,
        environment=environment,
        cpus=max(1, math.ceil(requests.get(CPU, 0) / 1000)),
        memory_mb=math.ceil(requests.get(MEMORY, 0) / MIB),
        working_dir=found.get(keys.CURRENT_WORKING_DIR) or cfg.default_working_dir,
        gpus=0 if shares or mps else gpus,
        gpu_shares=0 if mps else shares,
        gpu_mps=mps,
        # A type without a count cannot be expressed as GRES, and would only narrow a CPU job.
        gpu_type=(claimed_type or gpu_type(pod, cfg.gpu_types)) if gpus or shares or mps else "",
        account=found.get(keys.ACCOUNT, ""),
        comment=found.get(keys.COMMENT, ""),
        constraints=found.get(keys.CONSTRAINTS, ""),
        exclusive=exclusive(found.get(keys.EXCLUSIVE, "")),
        excluded_nodes=_excluded(found.get(keys.EXCLUDED_NODES, ""), unfit),
        required_nodes=found.get(keys.REQUIRED_NODES, ""),
        partition=found.get(keys.PARTITION, ""),
        prefer=found.get(keys.PREFER, ""),
        priority=_optional_int(found.get(keys.PRIORITY)),
        qos=found.get(keys.QOS, ""),
        reservation=found.get(keys.RESERVATION, ""),
        time_limit_minutes=_optional_int(found.get(keys.TIMEOUT)),
        user_id=uid,
        group_id=gid,
        output=cfg.output,
    )


def _excluded(named: str, unfit: Sequence[str]) -> str:
    """The annotation's excluded nodes and the ones whose Nodes would not take the Pod, as one
    compact hostlist (ranges, never a list of every eligible node)."""
    if not unfit:
        return named
    return compress(sorted(set(expand(named) if named else ()) | set(unfit)))


def job_user(
    pod: Pod, defaults: Mapping[str, str] | None = None, annotations: Mapping[str, str] | None = None
) -> tuple[int, int]:
    """(uid, gid) the job runs as: the Pod's `user-id`, else the tenant policy's default user for
    its namespace (`defaults`, from validation), and the user's own id as group when no group is
    given (SUNK's rule). Never root by default: a Pod with neither was refused by validation, and
    one that reaches here anyway raises rather than run as whoever submits (root). `annotations`:
    the job annotations validation passed (the Pod is not read again)."""
    found = annotations if annotations is not None else {**(defaults or {}), **pod_annotations(pod)}
    uid = _optional_int(found.get(keys.USER_ID))
    gid = _optional_int(found.get(keys.GROUP_ID))
    if uid is None:
        raise ValueError(f"{keys.USER_ID} is not set and the tenant policy gave no default user")
    return uid, gid if gid is not None else uid


def _optional_int(value: str | None) -> int | None:
    return None if value is None else int(value)


def with_trace_context(spec: JobSpec, traceparent: str) -> JobSpec:
    """Carry the submit's trace context into the job: the prolog learns of a job only what its
    environment holds (SLURM_JOB_EXTRA among it), the script reads TRACEPARENT. The script keeps
    it when it appends its started marker to the Extra field."""
    if not traceparent:
        return spec
    extra = f"traceparent={traceparent}"
    return replace(
        spec,
        extra=extra,
        environment={**spec.environment, "TRACEPARENT": traceparent, "TANDEM_JOB_EXTRA": extra},
        components=tuple(with_trace_context(c, traceparent) for c in spec.components),
    )
