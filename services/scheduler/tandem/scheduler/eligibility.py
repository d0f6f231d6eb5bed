"""Which Slurm nodes a Pod could run on, judged as kube-scheduler's filters would judge their Nodes.

Slurm picks the node; Tandem only offers it the ones whose Node would take the Pod, so a Pod is
never bound where the kubelet refuses it or it cannot stay. A Slurm node is out when its Node:
    is cordoned (spec.unschedulable) or not Ready;
    has a NoSchedule/NoExecute taint the Pod does not tolerate (Tandem's own lock taint aside: the
        Pod gets its toleration when the job is recorded);
    fails the Pod's nodeSelector or required node affinity (terms ORed, expressions ANDed);
    lacks room: allocatable minus the requests of the Pods bound there (any scheduler's) is less
        than the Pod's requests, or it holds its maximum of Pods;
    runs a Pod the Pod's required anti-affinity on kubernetes.io/hostname rules out;
    shows SlurmGpuMismatch (its ResourceSlices and Slurm's GPUs disagree) and the Pod claims GPUs
        by ResourceClaim, or asks nvidia.com/gpu of a Node serving it through DRA: the claim would
        be given devices other than the ones Slurm chose;
    serves nvidia.com/gpu through DRA (no device plugin offers it, a DeviceClass maps it: tandem.
        dra.extended) and the Pod asks it in a way Tandem cannot map (an init container asks);
        where it can, the room for GPUs is Slurm's to judge, as for claims;
or no Node is known to host its slurmd. The rest is Slurm's to choose from; what is out goes to
Slurm as excluded nodes. The first failing check names the node's reason, counted in a message in
kube-scheduler's words: `0/64 nodes are available: 60 node(s) didn't match Pod's node
affinity/selector, 4 node(s) had untolerated taint {dedicated: infer}.`
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem import keys
from tandem.dra import extended
from tandem.dra.claims import DEVICE_CLASSES
from tandem.kube import JSON, pod_finished, slim_identity
from tandem.quantity import parse_quantity
from tandem.scheduler.validation import effective_requests

HOSTNAME = "kubernetes.io/hostname"
_TAINT_EFFECTS = ("NoSchedule", "NoExecute")
_CPU = "cpu"


def slim_node(node: JSON) -> JSON:
    """What the scheduler keeps of a Node: labels, taints, cordon, Ready, allocatable. Not
    Tandem's own lock taint, which no fit reads: a lock or unlock (one per job start and end)
    is then no change, and does not send every waiting Pod to be judged again against every Node
    (at 64 Nodes and 200 Pods, the scheduler's largest cost)."""
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    gpus = any(c.get("type") == keys.GPU_MISMATCH_CONDITION and c.get("status") == "True" for c in conditions)
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {
            "unschedulable": bool(spec.get("unschedulable")),
            "taints": [t for t in spec.get("taints") or [] if t.get("key") != keys.LOCK_KEY],
        },
        "status": {
            "ready": ready,
            "allocatable": _units(status.get("allocatable") or {}),
            "gpuMismatch": gpus,
        },
    }


def same_node(cached: JSON, new: JSON) -> bool:
    """Two slim Nodes that differ at most in resourceVersion: the Node's informer keeps the
    cached one (a lock, an unlock or a heartbeat changes nothing a fit reads)."""
    if cached.get("spec") != new.get("spec") or cached.get("status") != new.get("status"):
        return False
    a, b = cached.get("metadata") or {}, new.get("metadata") or {}
    return all(a.get(k) == b.get(k) for k in a.keys() | b.keys() if k != "resourceVersion")


def slim_bound_pod(pod: JSON) -> JSON:
    """What the scheduler keeps of a Pod bound to a Node: where, its labels, what it requests."""
    spec = pod.get("spec") or {}
    try:
        requests = effective_requests(pod)
    except ValueError:
        requests = {}
    return {
        "metadata": slim_identity(pod),
        "spec": {"nodeName": spec.get("nodeName")},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
        "requests": requests,
    }


def _units(raw: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, text in raw.items():
        try:
            value = parse_quantity(str(text))
        except ValueError:
            continue
        out[name] = int(value * 1000) if name == _CPU else int(value)
    return out


@dataclass(frozen=True)
class Room:
    """What the Pods bound to a Node hold: the ones still running (what anti-affinity reads) and
    their requests summed (what the room check reads)."""

    running: tuple[JSON, ...] = ()
    used: Mapping[str, int] = field(default_factory=dict)


NO_ROOM_TAKEN = Room()


def room_of(bound: Iterable[JSON]) -> Room:
    running = tuple(p for p in bound if not pod_finished(p))
    used: Counter[str] = Counter()
    for p in running:
        used.update(p.get("requests") or {})
    return Room(running, dict(used))


class RoomLedger:
    """Each Node's Room, summed once per change of the Pods bound to it rather than once per Node
    for every Pod judged: at 1,000 Nodes the per-Pod re-summing was most of a fit's cost (issue
    22). `changed(node)` is told by the bound-Pod informer after its cache changed; a Room summed
    while that happened is summed again on the next read (the generation moved past it)."""

    def __init__(self, pods_on: Callable[[str], list[JSON]]) -> None:
        self._pods_on = pods_on
        self._generation: dict[str, int] = {}
        self._rooms: dict[str, tuple[int, Room]] = {}
        # Two informers' threads tell changes (other schedulers' Pods, this one's): a lost
        # increment would keep a stale Room.
        self._changing = threading.Lock()

    def changed(self, node: str) -> None:
        with self._changing:
            self._generation[node] = self._generation.get(node, 0) + 1

    def room(self, node: str) -> Room:
        generation = self._generation.get(node, 0)
        known = self._rooms.get(node)
        if known is not None and known[0] == generation:
            return known[1]
        summed = room_of(self._pods_on(node))
        self._rooms[node] = (generation, summed)
        return summed


@dataclass(frozen=True)
class Eligibility:
    total: int
    # Slurm nodes the Pod must not be given.
    excluded: tuple[str, ...] = ()
    # Why, per reason: "node(s) didn't match Pod's node affinity/selector" -> 60.
    reasons: Counter[str] = field(default_factory=Counter)
    # The Slurm GRES types of the whole GPUs the Nodes that would take the Pod publish; None when
    # not asked (only a Pod whose claims ask whole GPUs of no product needs it: tandem.dra.claims).
    whole_gpu_types: frozenset[str] | None = None
    # Every Slurm node judged, in Slurm's order: what a group's members pinned apart are matched
    # over (tandem.scheduler.decide); empty when not told.
    nodes: tuple[str, ...] = ()

    @property
    def available(self) -> int:
        return self.total - len(self.excluded)

    def message(self) -> str:
        ordered = sorted(self.reasons.items(), key=lambda item: (-item[1], item[0]))
        why = ", ".join(f"{count} {reason}" for reason, count in ordered)
        return f"{self.available}/{self.total} nodes are available" + (f": {why}." if why else ".")


@dataclass(frozen=True)
class DraGpus:
    """How the cluster serves nvidia.com/gpu through DRA: the DeviceClass mapping it ("" none) and
    which Nodes publish NVIDIA devices."""

    device_class: str = ""
    has_devices: Callable[[str], bool] = lambda node: False


@dataclass(frozen=True)
class _ByDra:
    has_devices: Callable[[str], bool]
    unmappable: str  # why the Pod's nvidia.com/gpu cannot be a claim ("" when it can)


def judge(
    pod: JSON,
    requests: Mapping[str, int],
    hosts: Mapping[str, str],
    nodes: Mapping[str, JSON],
    room: Callable[[str], Room],
    dra: DraGpus | None = None,
    verdicts: ShapeVerdicts | None = None,
) -> Eligibility:
    """The Slurm nodes out of reach for this Pod, each with the first reason it fails. `hosts`:
    every Slurm node -> the Node hosting its slurmd ("" none); `nodes`: the Nodes by name; both
    snapshots taken once per Pod (a locked lookup per Node was half a fit's cost at 1,000 Nodes).
    `room`: what the Pods bound to a Node hold, a RoomLedger's. What a Node's own state says is
    reused for Pods of the same shape (`verdicts`)."""
    excluded: list[str] = []
    reasons: Counter[str] = Counter()
    by_dra = _by_dra(pod, requests, dra)
    shape = shape_of(pod)
    for slurm_node, host in hosts.items():
        obj = nodes.get(host) if host else None
        taken = room(host) if obj is not None and host else NO_ROOM_TAKEN
        why = _why_not(pod, requests, obj, taken, by_dra, shape, verdicts or _SHAPE_VERDICTS)
        if why:
            excluded.append(slurm_node)
            for reason in why:
                reasons[reason] += 1
    return Eligibility(len(hosts), tuple(excluded), reasons, nodes=tuple(hosts))


def _by_dra(pod: JSON, requests: Mapping[str, int], dra: DraGpus | None) -> _ByDra | None:
    """Whether, and how, the Pod's nvidia.com/gpu could be served through DRA: judged once per Pod."""
    if dra is None or not dra.device_class or requests.get(keys.GPU_RESOURCE, 0) <= 0:
        return None
    if dra.device_class not in DEVICE_CLASSES:
        return _ByDra(dra.has_devices, f"through DeviceClass {dra.device_class}, not one Tandem translates")
    gpus = extended.container_gpus(pod)
    return _ByDra(dra.has_devices, gpus if isinstance(gpus, str) else "")


class ShapeVerdicts:
    """What a Node's own state says of Pods of one shape, worked out once per version of the Node
    (kube-scheduler's opportunistic batching, KEP-5598, in the small): a burst of Pods that
    tolerate the same taints and select the same Nodes is judged once per Node on those, and each
    Pod after the first only on the room left. A shape is the part of a Pod those checks read
    (tolerations, nodeSelector, required node affinity); a Node's version is the very object the
    Node informer holds (it keeps one object while only the resourceVersion moves: same_node).
    Bounded: past `capacity` verdicts it starts over."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._verdicts: dict[tuple[str, str], tuple[JSON, str]] = {}
        self._lock = threading.Lock()
        self.worked_out = 0  # verdicts computed rather than reused (tests, and to see it work)

    def verdict(self, shape: str, pod: JSON, node: JSON) -> str:
        """Why the Node refuses Pods of this shape ("" when nothing in its own state does)."""
        key = (shape, str(node["metadata"].get("name")))
        found = self._verdicts.get(key)
        if found is not None and found[0] is node:
            return found[1]
        why = _node_refuses(pod, node)
        with self._lock:
            if len(self._verdicts) >= self.capacity:
                self._verdicts.clear()
            self._verdicts[key] = (node, why)  # holding the Node keeps its identity its own
            self.worked_out += 1
        return why


_SHAPE_VERDICTS = ShapeVerdicts()


def shape_of(pod: JSON) -> str:
    """What of a Pod a Node's own state is judged against: its tolerations, nodeSelector and
    required node affinity, as one string (equal for Pods of one template)."""
    spec = pod.get("spec") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    parts = [spec.get("tolerations"), spec.get("nodeSelector"), affinity]
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def _node_refuses(pod: JSON, node: JSON) -> str:
    """The first reason a Node's own state (deletion, cordon, readiness, taints, labels) refuses
    the Pod, "" when none does."""
    meta, spec, status = node["metadata"], node["spec"], node["status"]
    if meta.get("deletionTimestamp"):
        return "node(s) were being deleted"
    if spec.get("unschedulable"):
        return "node(s) were unschedulable"
    if not status.get("ready"):
        return "node(s) were not ready"
    for taint in spec.get("taints") or []:
        if (
            taint.get("effect") in _TAINT_EFFECTS
            and taint.get("key") != keys.LOCK_KEY
            and not _tolerated(pod, taint)
        ):
            return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value') or ''}}}"
    if not affinity_matches(pod, meta.get("labels") or {}, str(meta.get("name"))):
        return "node(s) didn't match Pod's node affinity/selector"
    return ""


def _why_not(
    pod: JSON,
    requests: Mapping[str, int],
    node: JSON | None,
    room: Room,
    by_dra: _ByDra | None = None,
    shape: str | None = None,
    verdicts: ShapeVerdicts = _SHAPE_VERDICTS,
) -> list[str]:
    if node is None:
        return ["node(s) had no Node hosting their slurmd"]
    refused = verdicts.verdict(shape, pod, node) if shape is not None else _node_refuses(pod, node)
    if refused:
        return [refused]
    meta, status = node["metadata"], node["status"]
    allocatable = status.get("allocatable") or {}
    if by_dra is not None and not (
        extended.served_by_dra(allocatable) and by_dra.has_devices(str(meta.get("name")))
    ):
        by_dra = None  # a device plugin serves it here (or nothing does): the room check says
    if status.get("gpuMismatch") and ((pod.get("spec") or {}).get("resourceClaims") or by_dra):
        return ["node(s) had GPU devices that disagree with Slurm's GRES"]
    if by_dra is not None:
        if by_dra.unmappable:
            return [
                f"node(s) served {keys.GPU_RESOURCE} through DRA, which Tandem cannot map:"
                f" {by_dra.unmappable}"
            ]
        # Slurm counts the GPUs it allocates; the claim gets the ones it chose.
        requests = {k: v for k, v in requests.items() if k != keys.GPU_RESOURCE}
    short = _insufficient(requests, allocatable, room)
    if short:
        return short
    if _anti_affinity_violated(pod, room.running):
        return ["node(s) didn't match pod anti-affinity rules"]
    return []


# -- taints ----------------------------------------------------------------------------------------


def _tolerated(pod: JSON, taint: Mapping[str, Any]) -> bool:
    for t in (pod.get("spec") or {}).get("tolerations") or []:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


# -- node affinity ---------------------------------------------------------------------------------


def affinity_matches(pod: JSON, labels: Mapping[str, str], name: str) -> bool:
    """The Pod's nodeSelector and required node affinity accept a Node of these labels and name."""
    spec = pod.get("spec") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_term_matches(term, labels, name) for term in terms)


def _term_matches(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no Node (as in Kubernetes)
    if not all(_expression_matches(e, labels) for e in expressions):
        return False
    return all(_expression_matches(f, {"metadata.name": name}) for f in fields)


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    present = key in labels
    value = labels.get(str(key), "")
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


# -- room ------------------------------------------------------------------------------------------


def _insufficient(requests: Mapping[str, int], allocatable: Mapping[str, int], room: Room) -> list[str]:
    short = []
    if "pods" in allocatable and len(room.running) + 1 > allocatable["pods"]:
        short.append("Too many pods")
    for name, amount in sorted(requests.items()):
        if amount > 0 and name in allocatable and room.used.get(name, 0) + amount > allocatable[name]:
            short.append(f"Insufficient {name}")
        elif amount > 0 and name not in allocatable and name not in (_CPU, "memory", "ephemeral-storage"):
            short.append(f"Insufficient {name}")  # an extended resource the Node does not have
    return short


# -- pod anti-affinity -----------------------------------------------------------------------------


def _anti_affinity_violated(pod: JSON, bound: Iterable[JSON]) -> bool:
    spec = pod.get("spec") or {}
    terms = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    own_namespace = (pod.get("metadata") or {}).get("namespace")
    for term in terms:
        if term.get("topologyKey") != HOSTNAME:
            continue
        if term.get("namespaceSelector") == {}:
            namespaces = None  # every namespace
        else:
            namespaces = set(term.get("namespaces") or [own_namespace])
        for other in bound:
            if pod_finished(other):
                continue
            meta = other.get("metadata") or {}
            if namespaces is not None and meta.get("namespace") not in namespaces:
                continue
            if _selector_matches(term.get("labelSelector"), meta.get("labels") or {}):
                return True
    return False


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False  # a nil selector matches nothing
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])
