"""How a placeholder job names its scheduler and its Pod. This reference is the only link both
services can read back from Slurm after a crash, so it is built and parsed here and nowhere else:

    tandem:<scheduler name>/<namespace>/<pod name>/<pod uid>

It is the job's name (for people: squeue shows it) and the start of its AdminComment, which only
Slurm's administrators can write; Tandem submits as one. The AdminComment also holds the binding
of the job's own credential (`<reference> token-binding=<hex>`, tandem.jobtoken). A job is
Tandem's placeholder by its AdminComment (`pod_of`), never by its name: any Slurm user may name a
job like a placeholder.

Several Tandem schedulers may share one Slurm cluster; each acts only on its own jobs.

A group of Pods placed together (gang scheduling) is one job, named the same way after the group:
its "pod name" is `pg:<PodGroup name>` or `lws:<LeaderWorkerSet name>:<group index>` (no Kubernetes
name holds a ':'), its uid the PodGroup's uid or the LWS group's key.

An elastic gang's member beyond its minCount (an extra, issue 53) runs as a job of its own, linked
to the group's: the group's reference with `+x.<member Pod uid>` after the group's uid (no
Kubernetes uid holds a '+'). It is still the group's (its key is the group's placement key, and the
syncer finds its Pod by the job id the Pod carries, as for any group job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tandem import keys

if TYPE_CHECKING:
    from tandem.slurm.models import Job

_PREFIX = "tandem:"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    # `namespace/name`: the Pod's key, or its group's placement key (read as a value, not computed
    # at each read: it is what the scheduler queues and looks up by).
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    @property
    def is_group(self) -> bool:
        return GROUP_SEPARATOR in self.name


# Never in a Kubernetes name: what tells a group's job from a Pod's.
GROUP_SEPARATOR = ":"
# The kinds of group a placement key names: `<ns>/pg:<PodGroup>`, `<ns>/cpg:<CompositePodGroup>`,
# `<ns>/lws:<LeaderWorkerSet>:<group index>` (tandem.scheduler.groups reads them).
PODGROUP_KIND, COMPOSITE_KIND, LWS_KIND = "pg", "cpg", "lws"


def group_name(pod: dict[str, Any]) -> str | None:
    """The group a Pod names (`pg:<name>` or `lws:<name>:<index>`), whatever its policy."""
    spec = pod.get("spec") or {}
    podgroup = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if podgroup:
        return f"{PODGROUP_KIND}{GROUP_SEPARATOR}{podgroup}"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    lws, index = labels.get(keys.LWS_NAME_LABEL), labels.get(keys.LWS_GROUP_INDEX_LABEL)
    if lws and index is not None:
        return f"{LWS_KIND}{GROUP_SEPARATOR}{lws}{GROUP_SEPARATOR}{index}"
    return None


_EXTRA = "+x."


def extra_ref(group: PodRef, member_uid: str) -> PodRef:
    """The reference of the job an elastic gang's extra member runs as, linked to its group's."""
    return PodRef(group.namespace, group.name, f"{group.uid}{_EXTRA}{member_uid}")


def extra_member(ref: PodRef) -> str | None:
    """The uid of the extra member a group's linked job stands for; None for any other job."""
    return _member_in(ref.name, ref.uid)


def _member_in(name: str, uid: str) -> str | None:
    # A PodGroup's only: its uid is the apiserver's, where an LWS group's key is a label's value.
    _, found, member = uid.partition(_EXTRA)
    return member if found and member and name.startswith(PODGROUP_KIND + GROUP_SEPARATOR) else None


def job_name(pod: PodRef, scheduler: str) -> str:
    return f"{_PREFIX}{scheduler}/{pod.namespace}/{pod.name}/{pod.uid}"


def _parts(name: str) -> list[str] | None:
    if not name.startswith(_PREFIX):
        return None
    parts = name[len(_PREFIX) :].split("/")
    return parts if len(parts) == 4 and all(parts) else None


def parse_job_name(name: str) -> PodRef | None:
    """The Pod a placeholder job stands for; None for any other job."""
    parts = _parts(name)
    return PodRef(*parts[1:]) if parts else None


def scheduler_of(name: str) -> str | None:
    """The scheduler that submitted a placeholder job; None for any other job."""
    parts = _parts(name)
    return parts[0] if parts else None


# Between the reference and the binding of the job's credential in its AdminComment.
_BINDING = " token-binding="


def admin_comment(reference: str, binding: str) -> str:
    """A placeholder job's AdminComment: its reference, and the binding its credential names
    (tandem.jobtoken), which only Slurm's administrators can write or rewrite."""
    return f"{reference}{_BINDING}{binding}" if binding else reference


_REVOKED = " token-revoked"


def revoked_comment(reference: str) -> str:
    """The AdminComment that revokes a placeholder job's credential (an administrator writes it:
    `scontrol update JobId=<id> AdminComment="<reference> token-revoked"`); the job stays Tandem's."""
    return f"{reference}{_REVOKED}"


def is_revoked(comment: str) -> bool:
    return comment.split(" ")[1:] == [_REVOKED.strip()]


def reference_of(comment: str) -> str:
    """The placeholder reference of an AdminComment (no reference holds a space)."""
    return comment.partition(" ")[0]


def binding_of(comment: str) -> str:
    """The credential binding an AdminComment holds ("" for none: a job submitted before
    bindings, or one whose credential was revoked, `revoked_comment`)."""
    _, found, binding = comment.partition(_BINDING)
    return binding.strip() if found else ""


def pod_of(job: Job) -> PodRef | None:
    """The Pod (or group) a job stands for, if Tandem submitted it; None for any other job,
    whatever its name."""
    return parse_job_name(reference_of(job.admin_comment))


def extra_member_of(job: Job) -> str | None:
    """The uid of the elastic gang's extra member a job stands for, if Tandem submitted it as one
    (`extra_ref`); None for any other job, whatever its name."""
    ref = pod_of(job)
    return _member_in(ref.name, ref.uid) if ref is not None else None


def scheduler_of_job(job: Job) -> str | None:
    """The scheduler that submitted a placeholder job; None for any other job, whatever its name."""
    return scheduler_of(reference_of(job.admin_comment))
