"""Which Pods form a group that Slurm places as one job (gang scheduling), read off the Pods.
The scheduler places nothing else: a Pod in no group is a group of one (`alone`).

Three kinds of group:
  - a Kubernetes PodGroup (scheduling.k8s.io, in whichever version the cluster serves) with a
    gang policy, which a Pod joins through spec.schedulingGroup.podGroupName (the Job controller
    makes one for an Indexed Job);
  - a CompositePodGroup with a gang policy: its child PodGroups (each naming it as its parent),
    placed together as one heterogeneous job, a component per child sized by its own Pods;
  - each replica group of a LeaderWorkerSet: the leader and its size - 1 workers; two components
    (leader, workers) when the leader asks for other resources than its workers.
A Pod in a PodGroup with the basic policy, or in no group, is placed alone: its key is its own.

A group's key is `<namespace>/pg:<PodGroup>`, `<namespace>/cpg:<CompositePodGroup>` or
`<namespace>/lws:<LWS>:<group index>`: the same string names its placeholder job
(tandem.placeholder), so a restarted scheduler finds the job, and it is the work queue's key. Read
as a `Target` (`target`: parsed once per distinct key, remembered) at the top of a reconcile and
passed down; nothing else takes a key apart. A Pod names its PodGroup only: the controller finds
the composite a PodGroup belongs to (tandem.scheduler.caches.Caches.placement_key).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tandem import keys
from tandem.kube import JSON
from tandem.placeholder import COMPOSITE_KIND, GROUP_SEPARATOR, LWS_KIND, PODGROUP_KIND, PodRef, group_name
from tandem.scheduler.validation import effective_requests

_PODGROUP, _COMPOSITE, _LWS = PODGROUP_KIND, COMPOSITE_KIND, LWS_KIND
# The components of a LeaderWorkerSet group whose leader differs from its workers.
LEADER, WORKERS = "leader", "workers"
_KINDS = (_PODGROUP, _COMPOSITE, _LWS)


@dataclass(frozen=True)
class GroupKey:
    """A group's key, typed: what kind of group, in which namespace, named what."""

    namespace: str
    kind: str  # _PODGROUP, _COMPOSITE or _LWS
    name: str  # the PodGroup's, the CompositePodGroup's or the LeaderWorkerSet's
    index: str = ""  # a LeaderWorkerSet's group index

    @staticmethod
    def parse(key: str) -> GroupKey | None:
        """The group `key` names, or None for a Pod's own key (a Pod placed alone)."""
        return target(key).group

    def __str__(self) -> str:
        tail = f"{GROUP_SEPARATOR}{self.index}" if self.kind == _LWS else ""
        return f"{self.namespace}/{self.kind}{GROUP_SEPARATOR}{self.name}{tail}"

    @property
    def title(self) -> str:
        """How Events and conditions name it."""
        return _title(self.kind, self.namespace, self.name, self.index)


def _title(kind: str, namespace: str, name: str, index: str) -> str:
    if kind == _PODGROUP:
        return f"PodGroup {namespace}/{name}"
    if kind == _COMPOSITE:
        return f"CompositePodGroup {namespace}/{name}"
    return f"LeaderWorkerSet {namespace}/{name} group {index}"


@dataclass(frozen=True)
class Target:
    """A placement key resolved: a Pod placed alone, or a group of one of the three kinds."""

    key: str
    namespace: str
    name: str  # what follows the namespace: the Pod's name, or `pg:<name>`, `cpg:...`, `lws:...`
    group: GroupKey | None  # None: a Pod placed alone
    alone: bool
    podgroup: str | None  # `ns/name` of the PodGroup it is; None for any other kind
    composite: str | None  # `ns/name` of the CompositePodGroup it is; None for any other kind
    title: str  # how Events and conditions name it


@functools.lru_cache(maxsize=8192)
def target(key: str) -> Target:
    """What `key` places: the one place a key is taken apart."""
    namespace, _, name = key.partition("/")
    kind, separator, rest = name.partition(GROUP_SEPARATOR)
    if not separator or kind not in _KINDS:
        return Target(key, namespace, name, None, True, None, None, f"Pod {key}")
    lws, _, index = rest.partition(GROUP_SEPARATOR)
    group = GroupKey(namespace, kind, lws, index) if kind == _LWS else GroupKey(namespace, kind, rest)
    own = f"{group.namespace}/{group.name}"
    return Target(
        key,
        namespace,
        name,
        group,
        False,
        own if kind == _PODGROUP else None,
        own if kind == _COMPOSITE else None,
        _title(kind, group.namespace, group.name, group.index),
    )


def group_key(pod: JSON) -> str | None:
    name = group_name(pod)
    return None if name is None else f"{(pod.get('metadata') or {}).get('namespace')}/{name}"


def key_of_podgroup(podgroup: JSON) -> str:
    meta = podgroup.get("metadata") or {}
    return str(GroupKey(str(meta.get("namespace")), _PODGROUP, str(meta.get("name"))))


def key_of_composite(composite: JSON) -> str:
    meta = composite.get("metadata") or {}
    return str(GroupKey(str(meta.get("namespace")), _COMPOSITE, str(meta.get("name"))))


def parent_of(podgroup: JSON | None) -> str:
    """The CompositePodGroup a PodGroup belongs to ("" for none)."""
    return str(((podgroup or {}).get("spec") or {}).get("parentCompositePodGroupName") or "")


def parent_index(podgroup: JSON) -> list[str]:
    """The PodGroup informer's index: `ns/<CompositePodGroup>` for a child."""
    parent = parent_of(podgroup)
    return [f"{(podgroup.get('metadata') or {}).get('namespace')}/{parent}"] if parent else []


def composite_key_of(namespace: str, name: str) -> str:
    """The placement key of the CompositePodGroup `namespace/name`."""
    return str(GroupKey(namespace, _COMPOSITE, name))


def is_gang(obj: JSON) -> bool:
    """A PodGroup or CompositePodGroup with a gang policy (any other is placed member by member)."""
    return _gang(obj) is not None


@dataclass(frozen=True)
class Component:
    """One component of a heterogeneous job: a kind of member, each on a node sized for it."""

    name: str  # the child PodGroup's name, or LEADER / WORKERS
    min_count: int
    # Node label keys whose one domain this component's nodes share (its PodGroup's
    # spec.schedulingConstraints.topology).
    topology: tuple[str, ...] = ()


@dataclass(frozen=True)
class Group:
    """A group as the scheduler places it."""

    # namespace, group name (pg:... / cpg:... / lws:...:...), uid (empty until known)
    ref: PodRef
    min_count: int
    # The PodGroup or CompositePodGroup object (its status and Events), None for a
    # LeaderWorkerSet group.
    podgroup: JSON | None = None
    # Why no job can be made for it yet ("" when one can): e.g. its PodGroup is not there.
    waiting_for: str = ""
    # A heterogeneous job's components, in order (min_count is theirs summed); empty: one
    # homogeneous job, a node per member.
    components: tuple[Component, ...] = ()
    # Node label keys whose one domain all its nodes share (its PodGroup's or CompositePodGroup's
    # spec.schedulingConstraints.topology; the members' annotation adds to it: decide).
    topology: tuple[str, ...] = ()
    # What its key places (from `ref`): read as plain values, the key is never taken apart again.
    target: Target = field(init=False)
    key: str = field(init=False)
    # A Pod placed alone (a group of one, named and keyed as the Pod).
    alone: bool = field(init=False)
    title: str = field(init=False)  # how Events and conditions name it

    def __post_init__(self) -> None:
        resolved = target(self.ref.key)
        object.__setattr__(self, "target", resolved)
        object.__setattr__(self, "key", resolved.key)
        object.__setattr__(self, "alone", resolved.alone)
        object.__setattr__(self, "title", resolved.title)

    @property
    def elastic(self) -> bool:
        """A PodGroup's homogeneous gang, whose members beyond its core run on jobs of their own
        (tandem.scheduler.elastic); an LWS group is always its whole size, a het job's components
        are placed whole."""
        return not self.alone and not self.components and self.target.podgroup is not None

    def component_of(self, pod: JSON) -> int:
        """Which component a member belongs to (-1: none of them); 0 for a homogeneous group."""
        if not self.components:
            return 0
        typed = self.target.group
        if typed is not None and typed.kind == _LWS:
            return 0 if _is_leader(pod) else 1
        podgroup = str(((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "")
        return next((i for i, c in enumerate(self.components) if c.name == podgroup), -1)


def _is_leader(pod: JSON) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(keys.LWS_WORKER_INDEX_LABEL)) == "0"


def topology_keys(obj: JSON | None) -> tuple[str, ...]:
    """The Node label keys a PodGroup or CompositePodGroup (any served version) asks its Pods to
    share one domain of: spec.schedulingConstraints.topology[].key, each once."""
    constraints = ((obj or {}).get("spec") or {}).get("schedulingConstraints") or {}
    entries = constraints.get("topology") if isinstance(constraints, dict) else None
    found = [
        str(e["key"])
        for e in entries or []
        if isinstance(e, dict) and isinstance(e.get("key"), str) and e["key"]
    ]
    return tuple(dict.fromkeys(found))


def _gang(obj: JSON) -> JSON | None:
    policy = (obj.get("spec") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    return gang if isinstance(gang, dict) else None


def alone(placed: Target, pod: JSON | None) -> Group:
    """A Pod placed alone, as a group of one (its uid empty once it is gone)."""
    uid = str(((pod or {}).get("metadata") or {}).get("uid") or "")
    return Group(PodRef(placed.namespace, placed.name, uid), 1)


def resolve_composite(
    placed: Target, composite: JSON | None, children: Iterable[JSON], members: Iterable[JSON]
) -> Group:
    """A CompositePodGroup with a gang policy: one component per child PodGroup (by name), of its
    gang's minCount (a basic child: as many as it has members), all placed as one het job."""
    namespace, name = placed.namespace, placed.name
    title = f"CompositePodGroup {placed.composite}"
    if composite is None:
        return Group(PodRef(namespace, name, ""), 0, None, f"{title} does not exist (yet)")
    uid = str((composite.get("metadata") or {}).get("uid") or "")
    count: dict[str, int] = {}
    for pod in members:
        podgroup = str(((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "")
        count[podgroup] = count.get(podgroup, 0) + 1
    components = []
    for child in sorted(children, key=lambda c: str((c.get("metadata") or {}).get("name"))):
        child_name = str((child.get("metadata") or {}).get("name"))
        gang = _gang(child)
        size = int(gang.get("minCount") or 1) if gang is not None else count.get(child_name, 0)
        components.append(Component(child_name, max(1, size), topology_keys(child)))
    wanted = int((_gang(composite) or {}).get("minGroupCount") or 0) or len(components)
    total = sum(c.min_count for c in components)
    ref = PodRef(namespace, name, uid)
    if not components or len(components) < wanted:
        why = f"{wanted} PodGroups of {title} ({len(components)} there)"
        return Group(ref, max(total, 1), composite, why, tuple(components), topology_keys(composite))
    # The composite carries the group's PodGroupScheduled condition and Events.
    return Group(ref, total, composite, "", tuple(components), topology_keys(composite))


def resolve(
    placed: Target, members: Iterable[JSON], podgroup_of: Callable[[str], JSON | None]
) -> Group | None:
    """The group behind a key, or None when its Pods are placed one by one (a basic policy)."""
    namespace, name = placed.namespace, placed.name
    if placed.podgroup is not None:
        pg_key = placed.podgroup
        podgroup = podgroup_of(pg_key)
        if podgroup is None:
            title = f"PodGroup {pg_key}"
            return Group(PodRef(namespace, name, ""), 0, None, f"{title} does not exist (yet)")
        policy = (podgroup.get("spec") or {}).get("schedulingPolicy") or {}
        gang = policy.get("gang")
        if gang is None:
            return None
        uid = str((podgroup.get("metadata") or {}).get("uid") or "")
        size = max(1, int(gang.get("minCount") or 1))
        return Group(PodRef(namespace, name, uid), size, podgroup, topology=topology_keys(podgroup))
    uid, size = "", 0
    pods = list(members)
    for pod in pods:
        meta = pod.get("metadata") or {}
        uid = uid or str((meta.get("labels") or {}).get(keys.LWS_GROUP_KEY_LABEL) or "")
        raw = str((meta.get("annotations") or {}).get(keys.LWS_SIZE_ANNOTATION) or "")
        size = size or (int(raw) if raw.isdigit() else 0)
    if not uid or size < 1:
        return Group(PodRef(namespace, name, uid), max(size, 1), None, "the LWS group's key and size labels")
    parts = (Component(LEADER, 1), Component(WORKERS, size - 1)) if _leader_differs(pods) and size > 1 else ()
    return Group(PodRef(namespace, name, uid), size, None, "", parts)


def _leader_differs(members: list[JSON]) -> bool:
    """The LWS leader asks for other resources than its workers (a leaderTemplate of its own):
    each then gets a node sized for it, not every node for the larger."""
    leaders = [p for p in members if _is_leader(p)]
    workers = [p for p in members if not _is_leader(p)]
    if not leaders or not workers:
        return False
    try:
        return effective_requests(leaders[0]) != effective_requests(workers[0])
    except ValueError:
        return False  # validation refuses the group, and says why


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
