"""How many members a group's workload asks for now (issue 53), read off the members' controller.

An elastic gang's core is shrunk in Slurm only when its workload asks for fewer members than the
core holds nodes: a member deleted or failed is otherwise replaced (the Job controller makes a new
Pod for it, which takes the core's free node). A batch/v1 Job asks for min(parallelism,
completions - succeeded) active Pods, none while suspended. Members of any other controller, or of
none, or of more than one: not known (None), and no core is shrunk for them.

The scheduler's Job informer keeps only what is read here (`slim_job`), and its changes wake a
group only when the count they give moves (`same_job`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tandem.dra.shape import at, items, obj
from tandem.kube import JSON

JOB_API_VERSION = "batch/v1"
JOB_KIND = "Job"


def owner_job(pod: JSON) -> str | None:
    """`namespace/name` of the Job that controls the Pod, or None."""
    for each in items(at(pod, "metadata", "ownerReferences")):
        ref = obj(each)
        if ref.get("controller") and ref.get("kind") == JOB_KIND and ref.get("apiVersion") == JOB_API_VERSION:
            return f"{at(pod, 'metadata', 'namespace')}/{ref.get('name')}"
    return None


def owner_index(pod: JSON) -> list[str]:
    """The Pod informer's index of Pods by the Job that controls them."""
    job = owner_job(pod)
    return [job] if job else []


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def asked(job: JSON | None) -> int | None:
    """How many active Pods the Job asks for now (None: not a count Tandem can read)."""
    if job is None:
        return None
    spec = obj(job.get("spec"))
    if spec.get("suspend") is True:
        return 0
    parallelism = _count(spec.get("parallelism", 1))
    if parallelism is None:
        return None
    completions = spec.get("completions")
    if completions is None:
        return parallelism
    total = _count(completions)
    if total is None:
        return None
    done = _count(obj(job.get("status")).get("succeeded", 0)) or 0
    return max(0, min(parallelism, total - done))


def asked_of(members: Iterable[JSON], job_of: Callable[[str], JSON | None]) -> int | None:
    """How many members the group's workload asks for: its one controlling Job's count; None when
    any member has no Job controlling it, or they have more than one."""
    owners = {owner_job(m) for m in members}
    if len(owners) != 1 or None in owners:
        return None
    (owner,) = owners
    assert owner is not None
    return asked(job_of(owner))


def slim_job(job: JSON) -> JSON:
    """What the scheduler keeps of a Job: its name and the fields `asked` reads."""
    meta, spec = obj(job.get("metadata")), obj(job.get("spec"))
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta},
        "spec": {k: spec[k] for k in ("parallelism", "completions", "suspend") if k in spec},
        "status": {"succeeded": obj(job.get("status")).get("succeeded", 0)},
    }


def same_job(cached: JSON, new: JSON) -> bool:
    """Nothing `asked` reads moved (most of a Job's updates are its status counting its Pods)."""
    return asked(cached) == asked(new)
