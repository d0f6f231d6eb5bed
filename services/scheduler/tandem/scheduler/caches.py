"""What the scheduler reads of Kubernetes, as its informers hold it: the shapes the controller and
the watches read them in, the indexes the informers keep, and the key each Pod is placed under."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tandem import reasons
from tandem.informer import IndexFunc, Informer
from tandem.kube import JSON, object_key
from tandem.scheduler import eligibility, groups, workloads
from tandem.scheduler.dra_source import BY_CLAIM, DraCaches, claim_index
from tandem.scheduler.podapi import condition

# The Pod informer's index of Pods by the group they name (tandem.scheduler.groups.group_key).
BY_GROUP = "group"
# The Pod informer's index of the Pods no Node would take now (PodScheduled reason Unschedulable).
BY_UNSCHEDULABLE = "unschedulable"
# The bound-Pod informer's index by Node.
BY_NODE = "node"
# The PodGroup informer's index by the CompositePodGroup each belongs to (`ns/<name>`).
BY_PARENT = "parent"
# The Pod informer's index of the Pods not bound yet: what a Node's or the topology's change concerns.
BY_UNBOUND = "unbound"
# The Pod informer's index by namespace: what a change of one namespace's tenant policy concerns.
BY_NAMESPACE = "namespace"
# The Pod informer's index by the batch/v1 Job controlling a Pod (`ns/name`): what a change of the
# Job's size concerns (tandem.scheduler.workloads).
BY_OWNER_JOB = "owner-job"


class PodCache(Protocol):
    """The Pod informer, as the controller reads it."""

    @property
    def synced(self) -> bool: ...

    def get(self, key: str) -> JSON | None: ...

    def items(self) -> list[JSON]: ...

    def by_index(self, index: str, value: str) -> list[JSON]: ...


class ObjectCache(Protocol):
    """An informer the controller only reads by key (PodGroups)."""

    def get(self, key: str) -> JSON | None: ...


class NodeCache(ObjectCache, Protocol):
    """The Node informer: read by key, and copied whole for judging a fit against every Node."""

    def snapshot(self) -> Mapping[str, JSON]: ...


class IndexedCache(ObjectCache, Protocol):
    """An informer read by key and by index (PodGroups, by the CompositePodGroup they belong to)."""

    def by_index(self, index: str, value: str) -> list[JSON]: ...


class _NoPodGroups:
    def get(self, key: str) -> JSON | None:
        return None

    def by_index(self, index: str, value: str) -> list[JSON]:
        return []


def unschedulable_index(pod: JSON) -> list[str]:
    c = condition(pod, "PodScheduled") or {}
    return ["yes"] if c.get("status") == "False" and c.get("reason") == reasons.REASON_UNSCHEDULABLE else []


def node_index(pod: JSON) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def unbound_index(pod: JSON) -> list[str]:
    return [] if (pod.get("spec") or {}).get("nodeName") else ["yes"]


def namespace_index(pod: JSON) -> list[str]:
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [str(namespace)] if namespace else []


def group_index(pod: JSON) -> list[str]:
    key = groups.group_key(pod)
    return [key] if key else []


# The indexes of the Pod informer (this scheduler's Pods), each a question a reconcile or a watch
# asks without reading every Pod.
POD_INDEXES: dict[str, IndexFunc] = {
    BY_GROUP: group_index,
    BY_UNSCHEDULABLE: unschedulable_index,
    BY_CLAIM: claim_index,
    BY_NODE: node_index,
    BY_UNBOUND: unbound_index,
    BY_NAMESPACE: namespace_index,
    BY_OWNER_JOB: workloads.owner_index,
}


@dataclass
class ClusterCaches:
    """What judging a fit reads: the Nodes and every Pod bound to one (tandem.scheduler.eligibility),
    the latter summed per Node as it changes (`rooms`). `bound` holds the Pods of other schedulers
    (slim); `own`, when given, is this scheduler's Pod informer (indexed by Node), which `bound`
    leaves out: each update of this scheduler's Pods would otherwise be sent and decoded twice."""

    nodes: NodeCache
    bound: PodCache
    own: PodCache | None = None
    rooms: eligibility.RoomLedger = field(init=False)

    def __post_init__(self) -> None:
        self.rooms = eligibility.RoomLedger(self._pods_on)

    def _pods_on(self, node: str) -> list[JSON]:
        held = self.bound.by_index(BY_NODE, node)
        if self.own is None:
            return held
        return held + [eligibility.slim_bound_pod(p) for p in self.own.by_index(BY_NODE, node)]


@dataclass
class Caches:
    """Everything a reconcile reads of Kubernetes. `cluster`: None when no Node is watched (no fit
    is judged); `dra`: None when Pods' ResourceClaims are not read."""

    pods: PodCache
    podgroups: IndexedCache = field(default_factory=_NoPodGroups)
    composites: ObjectCache = field(default_factory=_NoPodGroups)
    cluster: ClusterCaches | None = None
    dra: DraCaches | None = None
    # batch/v1 Jobs, slimmed to the size they ask for (tandem.scheduler.workloads).
    kube_jobs: ObjectCache = field(default_factory=_NoPodGroups)

    def placement_key(self, gkey: str) -> str:
        """The key that places a group: a PodGroup's own, or its CompositePodGroup's when it has a
        gang parent (or one not there yet: its members wait for it)."""
        placed = groups.target(gkey)
        parent = groups.parent_of(self.podgroups.get(placed.podgroup)) if placed.podgroup else ""
        if not parent:
            return gkey
        namespace = placed.namespace
        composite = self.composites.get(f"{namespace}/{parent}")
        if composite is not None and not groups.is_gang(composite):
            return gkey  # a basic composite: each child is placed as a group of its own
        return groups.composite_key_of(namespace, parent)

    def key_of(self, pod: JSON) -> str:
        """The key a Pod is placed under: its group's, or its own when alone."""
        gkey = groups.group_key(pod)
        return self.placement_key(gkey) if gkey is not None else object_key(pod)


@dataclass(frozen=True)
class Informers:
    """The informers themselves: what main starts and the watches are called back by."""

    pods: Informer  # this scheduler's Pods
    nodes: Informer
    bound: Informer  # every Pod bound to a Node
    podgroups: Informer
    composites: Informer
    claims: Informer
    claim_templates: Informer
    slices: Informer
    device_classes: Informer
    kube_jobs: Informer  # batch/v1 Jobs, slimmed to the size they ask for
