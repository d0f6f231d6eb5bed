"""Which Pods form a group that Slurm places as one job (gang scheduling), read off the Pods.
The scheduler places nothing else: a Pod in no group is a group of one (`alone`).

Two kinds of group:
  - a Kubernetes PodGroup (scheduling.k8s.io, in whichever version the cluster serves) with a
    gang policy, which a Pod joins through spec.schedulingGroup.podGroupName (the Job controller
    makes one for an Indexed Job);
  - each replica group of a LeaderWorkerSet: the leader and its size - 1 workers.
A Pod in a PodGroup with the basic policy, or in no group, is placed alone: its key is its own.

A group's key is `<namespace>/pg:<PodGroup>` or `<namespace>/lws:<LWS>:<group index>`: the same
string names its placeholder job (tandem.placeholder), so a restarted scheduler finds the job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tandem import keys
from tandem.kube import JSON
from tandem.placeholder import GROUP_SEPARATOR, PodRef

_PODGROUP = "pg"
_LWS = "lws"


def group_name(pod: JSON) -> str | None:
    """The group a Pod names (`pg:<name>` or `lws:<name>:<index>`), whatever its policy."""
    spec = pod.get("spec") or {}
    podgroup = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if podgroup:
        return f"{_PODGROUP}{GROUP_SEPARATOR}{podgroup}"
    labels = (pod.get("metadata") or {}).get("labels") or {}
    lws, index = labels.get(keys.LWS_NAME_LABEL), labels.get(keys.LWS_GROUP_INDEX_LABEL)
    if lws and index is not None:
        return f"{_LWS}{GROUP_SEPARATOR}{lws}{GROUP_SEPARATOR}{index}"
    return None


def group_key(pod: JSON) -> str | None:
    name = group_name(pod)
    return None if name is None else f"{(pod.get('metadata') or {}).get('namespace')}/{name}"


def is_group_key(key: str) -> bool:
    return GROUP_SEPARATOR in key


def podgroup_key(key: str) -> str | None:
    """`ns/pg:name` -> `ns/name` (the PodGroup object's key); None for other groups."""
    namespace, _, name = key.partition("/")
    kind, _, rest = name.partition(GROUP_SEPARATOR)
    return f"{namespace}/{rest}" if kind == _PODGROUP else None


def key_of_podgroup(podgroup: JSON) -> str:
    meta = podgroup.get("metadata") or {}
    return f"{meta.get('namespace')}/{_PODGROUP}{GROUP_SEPARATOR}{meta.get('name')}"


@dataclass(frozen=True)
class Group:
    """A group as the scheduler places it."""

    ref: PodRef  # namespace, group name (pg:... / lws:...:...), uid (empty until known)
    min_count: int
    # The PodGroup object (its status and Events), None for a LeaderWorkerSet group.
    podgroup: JSON | None = None
    # Why no job can be made for it yet ("" when one can): e.g. its PodGroup is not there.
    waiting_for: str = ""

    @property
    def key(self) -> str:
        return self.ref.key

    @property
    def alone(self) -> bool:
        """A Pod placed alone (a group of one, named and keyed as the Pod)."""
        return not self.ref.is_group

    @property
    def title(self) -> str:
        """How Events and conditions name it."""
        if self.alone:
            return f"Pod {self.ref.key}"
        kind, _, rest = self.ref.name.partition(GROUP_SEPARATOR)
        if kind == _PODGROUP:
            return f"PodGroup {self.ref.namespace}/{rest}"
        lws, _, index = rest.partition(GROUP_SEPARATOR)
        return f"LeaderWorkerSet {self.ref.namespace}/{lws} group {index}"


def alone(key: str, pod: JSON | None) -> Group:
    """A Pod placed alone, as a group of one (its uid empty once it is gone)."""
    namespace, _, name = key.partition("/")
    uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
    return Group(PodRef(namespace, name, uid), 1)


def resolve(key: str, members: Iterable[JSON], podgroup_of: Callable[[str], JSON | None]) -> Group | None:
    """The group behind a key, or None when its Pods are placed one by one (a basic policy)."""
    namespace, _, name = key.partition("/")
    kind, _, _ = name.partition(GROUP_SEPARATOR)
    if kind == _PODGROUP:
        pg_key = podgroup_key(key)
        podgroup = podgroup_of(pg_key) if pg_key else None
        if podgroup is None:
            title = f"PodGroup {pg_key}"
            return Group(PodRef(namespace, name, ""), 0, None, f"{title} does not exist (yet)")
        policy = (podgroup.get("spec") or {}).get("schedulingPolicy") or {}
        gang = policy.get("gang")
        if gang is None:
            return None
        uid = str((podgroup.get("metadata") or {}).get("uid") or "")
        return Group(PodRef(namespace, name, uid), max(1, int(gang.get("minCount") or 1)), podgroup)
    uid, size = "", 0
    for pod in members:
        meta = pod.get("metadata") or {}
        uid = uid or str((meta.get("labels") or {}).get(keys.LWS_GROUP_KEY_LABEL) or "")
        raw = str((meta.get("annotations") or {}).get(keys.LWS_SIZE_ANNOTATION) or "")
        size = size or (int(raw) if raw.isdigit() else 0)
    if not uid or size < 1:
        return Group(PodRef(namespace, name, uid), max(size, 1), None, "the LWS group's key and size labels")
    return Group(PodRef(namespace, name, uid), size, None)


def rank(pod: JSON) -> tuple[int, str]:
    """The order members take the allocation's nodes: the LWS leader (worker 0) or index 0 of an
    Indexed Job first, so it lands on the node that runs the job's batch script."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    for raw in (
        labels.get(keys.LWS_WORKER_INDEX_LABEL),
        annotations.get(keys.JOB_COMPLETION_INDEX_ANNOTATION),
    ):
        if raw is not None and str(raw).isdigit():
            return int(raw), str(meta.get("name"))
    return 1 << 30, str(meta.get("name"))
