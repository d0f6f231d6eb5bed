"""The syncer's view of Kubernetes: every Pod (by Node and by uid), every Node, the slurmd Pods
that say which Node hosts each Slurm node, and every DaemonSet (whose Pods a strict lock may
spare). Informers keep it; nothing here calls the API to look, and whoever waits for a Pod to
leave wakes on the change instead of polling.

The syncer owns the Slurm node -> Node mapping: it publishes it on its stream (SlurmNode.kube_node)
and the scheduler binds from it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

from tandem import keys, slurmd
from tandem.discovery import Versioned
from tandem.dra.claims import DRIVER
from tandem.dra.slices import slim_slice
from tandem.dra.taints import slim_rule
from tandem.informer import Informer
from tandem.kube import JSON, KubeClient, pod_finished, slim_identity
from tandem.syncer import devicehealth, health
from tandem.syncer.locking import daemonset_ref_of
from tandem.syncer.waiters import Key, Waiters, job_key, node_key, pod_key

BY_NODE = "node"
BY_UID = "uid"
BY_JOB = "job"
SLURMD = "slurmd"
BY_DAEMONSET = "daemonset"


def slim_pod(pod: JSON) -> JSON:
    """What the syncer reads of a Pod; every Pod of the cluster is cached, so only that is kept."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if str(k).startswith(keys.PREFIX)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **slim_identity(pod),
            "annotations": annotations,
            # Its controller only (a strict lock spares a DaemonSet's Pod in a sharing namespace).
            "ownerReferences": [
                {
                    "apiVersion": o.get("apiVersion"),
                    "kind": o.get("kind"),
                    "name": o.get("name"),
                    # Whether the DaemonSet it names is the one the cache holds of that name.
                    "uid": o.get("uid"),
                    "controller": True,
                }
                for o in meta.get("ownerReferences") or []
                if o.get("controller") is True
            ],
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "tolerations": spec.get("tolerations") or [],
        },
        "status": {
            "phase": (pod.get("status") or {}).get("phase"),
            "ready": _condition(pod, "Ready") != "False",
            # The devices the kubelet reports Unhealthy in it (KEP-4680): a bad GPU drains Slurm's.
            **({"unhealthyDevices": bad} if (bad := devicehealth.kept(pod)) else {}),
        },
    }


def slim_daemonset(daemonset: JSON) -> JSON:
    """What the syncer reads of a DaemonSet: which one it is (a Pod's owner reference names its
    uid) and whether its Pod template tolerates the lock (tandem.syncer.locking)."""
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    tolerations = (template.get("spec") or {}).get("tolerations") or []
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        },
        "spec": {"template": {"spec": {"tolerations": tolerations}}},
    }


def slim_node(node: JSON, health_conditions: Collection[str] = (), label_keys: Collection[str] = ()) -> JSON:
    """What the syncer reads of a Node (every Node is cached): its drain annotation and
    SlurmCordon, cordon, taints, readiness, the conditions the health drains watch, and the
    labels Slurm's topology is written from."""
    meta = node.get("metadata") or {}
    labels = {k: str(v) for k, v in (meta.get("labels") or {}).items() if k in label_keys}
    annotations = meta.get("annotations") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    cordon = next((c for c in conditions if c.get("type") == "SlurmCordon"), None)
    gpus = next((c for c in conditions if c.get("type") == keys.GPU_MISMATCH_CONDITION), None)
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "annotations": {k: v for k, v in annotations.items() if k == keys.DRAIN_ANNOTATION},
            "labels": labels,
        },
        "spec": {k: v for k, v in (node.get("spec") or {}).items() if k in ("taints", "unschedulable")},
        # Ready unless it says otherwise (a Node without conditions yet is not called NotReady).
        "status": {
            "ready": _condition(node, "Ready") in ("True", None),
            "slurmCordon": cordon.get("message") if cordon is not None else None,
            "gpuMismatch": gpus.get("message") if gpus is not None else None,
            "health": health.kept(node, health_conditions),
        },
    }


def _condition(obj: JSON, type_: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return str(c.get("status"))
    return None


class ClusterView:
    def __init__(
        self,
        kube: KubeClient,
        slurmd_namespace: str,
        on_slurmd_moved: Callable[[str], None] = lambda slurm_node: None,
        health_conditions: tuple[str, ...] = (),
        topology_labels: tuple[str, ...] = (),
    ) -> None:
        self.slurmd_namespace = slurmd_namespace
        # The Node labels Slurm's topology is written from (tandem.syncer.topologysync).
        self.topology_labels = topology_labels
        # Told when the topology may have changed: a Node's topology labels, or which Node a
        # Slurm node is on.
        self.on_topology_changed: Callable[[], None] = lambda: None
        # The Node condition types that drain a Slurm node while True (tandem.syncer.health).
        self.health_conditions = health_conditions
        self.on_slurmd_moved = on_slurmd_moved
        # Told the Slurm nodes whose Kubernetes side changed (their Node, or their slurmd Pod).
        self.on_slurm_node_changed: Callable[[str], None] = lambda slurm_node: None
        # Told each Pod that was deleted or finished (its last state).
        self.on_pod_gone: Callable[[JSON], None] = lambda pod: None
        # Told the Nodes where a Pod other than a slurmd Pod came, changed or went (a lock waits
        # for Pods to leave).
        self.on_node_pods_changed: Callable[[str], None] = lambda kube_node: None
        # Told each Node whose lock taint no Slurm node's pass may reach: a slurmd Pod left it
        # (moved away or deleted), or it came or changed with the taint and no slurmd Pod on it.
        self.on_node_without_slurmd: Callable[[str], None] = lambda kube_node: None
        # The hook calls waiting on these caches (and on the hold store), by what they wait on.
        self.waiters = Waiters()
        self.pods = Informer(
            kube,
            ["/api/v1/pods"],
            {},
            self._on_pod,
            indexes={
                BY_NODE: _node_of,
                BY_UID: _uid_of,
                BY_JOB: _job_of,
                SLURMD: self._slurm_node_of,
                BY_DAEMONSET: _daemonset_of,
            },
            transform=slim_pod,
        )
        self.nodes = Informer(
            kube,
            ["/api/v1/nodes"],
            {},
            self._on_node,
            transform=lambda n: slim_node(n, health_conditions, topology_labels),
        )
        # Each Node's NVIDIA devices, checked against its Slurm node's GPUs (tandem.syncer.gpucheck);
        # a cluster that serves no resource.k8s.io/v1 has none.
        self.slices = Informer(
            kube,
            [f"/apis/{{api}}/{keys.RESOURCE_SLICES}"],
            {"fieldSelector": f"spec.driver={DRIVER}"},
            self._on_slice,
            indexes={BY_NODE: _slice_node_of},
            transform=slim_slice,
            api=Versioned(keys.DRA_GROUP, keys.RESOURCE_SLICES, keys.DRA_VERSIONS),
        )
        # The DeviceTaintRules: an admin's or a health controller's taint a GPU, which Slurm must
        # then not give out (tandem.syncer.gputaints); the syncer's own mirror Slurm drains. A
        # cluster that serves none (before 1.36's beta) has none.
        self.taint_rules = Informer(
            kube,
            [f"/apis/{{api}}/{keys.DEVICE_TAINT_RULES}"],
            {},
            self._on_taint_rule,
            indexes={SLURMD: _rule_slurm_node_of},
            transform=slim_rule,
            api=Versioned(keys.DRA_GROUP, keys.DEVICE_TAINT_RULES, keys.DEVICE_TAINT_RULE_VERSIONS),
        )
        # The DaemonSets a Pod's owner reference may name: a strict lock spares a DaemonSet's Pod
        # only for a real DaemonSet whose template tolerates the lock (an owner reference is what
        # any tenant can write on its own Pod). Only the sharing namespaces' matter, yet every
        # namespace is watched: one cluster-wide rule serves a list of namespaces that may change
        # or name one not made yet (a Role each could not), a cluster has few DaemonSets, and a
        # template shows nothing its Pods, read cluster-wide already, do not.
        self.daemonsets = Informer(
            kube,
            ["/apis/apps/v1/daemonsets"],
            {},
            self._on_daemonset,
            transform=slim_daemonset,
        )

    def start(self, stop: threading.Event) -> None:
        self.pods.start(stop)
        self.nodes.start(stop)
        self.slices.start(stop)
        self.taint_rules.start(stop)
        self.daemonsets.start(stop)

    @property
    def synced(self) -> bool:
        return (
            self.pods.synced
            and self.nodes.synced
            and self.slices.synced
            and self.taint_rules.synced
            and self.daemonsets.synced
        )

    def wait_synced(self, timeout: float) -> bool:
        return (
            self.pods.wait_synced(timeout)
            and self.nodes.wait_synced(timeout)
            and self.slices.wait_synced(timeout)
            and self.taint_rules.wait_synced(timeout)
            and self.daemonsets.wait_synced(timeout)
        )

    # -- reading ---------------------------------------------------------------------------------

    def pods_on(self, kube_node: str) -> list[JSON]:
        return self.pods.by_index(BY_NODE, kube_node)

    def pod_by_uid(self, uid: str) -> JSON | None:
        found = self.pods.by_index(BY_UID, uid)
        return found[0] if found else None

    def pod(self, namespace: str, name: str) -> JSON | None:
        return self.pods.get(f"{namespace}/{name}")

    def pods_of_job(self, job_id: int) -> list[JSON]:
        """The Pods that carry this job id (every member of a group's job)."""
        return self.pods.by_index(BY_JOB, str(job_id))

    def slurmd_pod(self, slurm_node: str) -> JSON | None:
        found = self.pods.by_index(SLURMD, slurm_node)
        return found[0] if found else None

    def slurmd_pods(self) -> list[JSON]:
        return [p for p in self.pods.items() if self._slurm_node_of(p)]

    def kube_node_of(self, slurm_node: str) -> str:
        """The Node hosting this Slurm node's slurmd Pod; "" when unknown."""
        return slurmd.host_of(self.slurmd_pod(slurm_node))

    def slurm_nodes_on(self, kube_node: str) -> list[str]:
        """The Slurm nodes whose slurmd Pods run on this Node."""
        return sorted(n for p in self.pods_on(kube_node) for n in self._slurm_node_of(p))

    def node(self, name: str) -> JSON | None:
        return self.nodes.get(name)

    def slices_on(self, kube_node: str) -> list[JSON]:
        """The NVIDIA ResourceSlices of this Node's devices."""
        return self.slices.by_index(BY_NODE, kube_node)

    def taint_rules_all(self) -> list[JSON]:
        """Every DeviceTaintRule (a few: one per tainted device or group of devices)."""
        return self.taint_rules.items()

    def gpu_rules_of(self, slurm_node: str) -> list[JSON]:
        """The syncer's own DeviceTaintRules mirroring this Slurm node's drain."""
        return self.taint_rules.by_index(SLURMD, slurm_node)

    def daemonset(self, namespace: str, name: str) -> JSON | None:
        return self.daemonsets.get(f"{namespace}/{name}")

    def wake(self, *keys: Key) -> None:
        """Have the calls waiting on these keys look again: something they read besides the
        caches changed (the hold store)."""
        self.waiters.wake(*keys)

    # -- indexes ---------------------------------------------------------------------------------

    def _slurm_node_of(self, pod: JSON) -> list[str]:
        name = slurmd.slurm_node_of(pod, self.slurmd_namespace)
        return [name] if name is not None else []

    def _on_pod(self, key: str, old: JSON | None, new: JSON | None) -> None:
        if _only_version_moved(old, new):
            return
        if old is not None and not pod_finished(old) and (new is None or pod_finished(new)):
            self.on_pod_gone(new or old)
        changed = old or new or {}
        self.waiters.wake(
            *(node_key(n) for n in self._slurm_node_of(changed)),
            *(job_key(j) for j in {*_job_of(old or {}), *_job_of(new or {})}),
            *(pod_key(u) for u in _uid_of(changed)),
        )
        for slurm_node in self._slurm_node_of(changed):
            if _node_of(old or {}) != _node_of(new or {}):
                self.on_slurmd_moved(slurm_node)
                self.on_topology_changed()
                for kube_node in set(_node_of(old or {})) - set(_node_of(new or {})):
                    self.on_node_without_slurmd(kube_node)
            self.on_slurm_node_changed(slurm_node)
        if not self._slurm_node_of(changed):
            for kube_node in {*_node_of(old or {}), *_node_of(new or {})}:
                self.on_node_pods_changed(kube_node)
                if _unhealthy(old) != _unhealthy(new):
                    self._on_node(kube_node, None, None)  # a GPU's health: the Node's Slurm nodes

    def _on_node(self, key: str, old: JSON | None, new: JSON | None) -> None:
        if _only_version_moved(old, new):
            return
        if self.topology_labels and ((old is None) != (new is None) or _labels(old) != _labels(new)):
            self.on_topology_changed()
        hosted = False
        for pod in self.pods_on(key):
            for slurm_node in self._slurm_node_of(pod):
                hosted = True
                self.waiters.wake(node_key(slurm_node))
                self.on_slurm_node_changed(slurm_node)
        if not hosted and new is not None and _lock_tainted(new):
            self.on_node_without_slurmd(key)

    def _on_slice(self, key: str, old: JSON | None, new: JSON | None) -> None:
        for kube_node in {*_slice_node_of(old or {}), *_slice_node_of(new or {})}:
            self._on_node(kube_node, None, None)

    def _on_taint_rule(self, key: str, old: JSON | None, new: JSON | None) -> None:
        """A rule taints the devices of the pools it names (a node-local driver's pool is its
        Node's), or of every pool: the Nodes whose slices it may reach look again."""
        pools = {_rule_pool_of(old or {}), _rule_pool_of(new or {})}
        for resource_slice in self.slices.items():
            spec = resource_slice.get("spec") or {}
            if None in pools or (spec.get("pool") or {}).get("name") in pools:
                for kube_node in _slice_node_of(resource_slice):
                    self._on_node(kube_node, None, None)
        for slurm_node in {*_rule_slurm_node_of(old or {}), *_rule_slurm_node_of(new or {})}:
            self.on_slurm_node_changed(slurm_node)

    def _on_daemonset(self, key: str, old: JSON | None, new: JSON | None) -> None:
        """A DaemonSet came, went, was made again or now tolerates the lock otherwise: the Nodes
        of the Pods that name it look again (a strict lock may now spare them, or not)."""
        if _only_version_moved(old, new):
            return
        for pod in self.pods.by_index(BY_DAEMONSET, key):
            for kube_node in _node_of(pod):
                self.on_node_pods_changed(kube_node)


def _only_version_moved(old: JSON | None, new: JSON | None) -> bool:
    """Whether an update moved nothing the syncer keeps of the object (slim_pod, slim_node,
    slim_daemonset) but its resourceVersion: a kubelet's report on a Pod's containers, a Node's
    status heartbeat, a DaemonSet's count of ready Pods. The cache holds the new version (the
    writes' preconditions need it); nothing reading it has anything new to look at, so no node's
    pass is queued for it."""
    if old is None or new is None:
        return False
    return _without_version(old) == _without_version(new)


def _without_version(obj: JSON) -> JSON:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _unhealthy(pod: JSON | None) -> object:
    return ((pod or {}).get("status") or {}).get("unhealthyDevices")


def _labels(node: JSON | None) -> object:
    return ((node or {}).get("metadata") or {}).get("labels")


def _rule_pool_of(rule: JSON) -> str | None:
    """The pool a DeviceTaintRule names; None when it names none (it may reach every pool)."""
    selector = (rule.get("spec") or {}).get("deviceSelector") or {}
    pool = selector.get("pool") if isinstance(selector, dict) else None
    return str(pool) if pool else None


def _rule_slurm_node_of(rule: JSON) -> list[str]:
    labels = (rule.get("metadata") or {}).get("labels") or {}
    ours = labels.get(keys.MANAGED_BY_LABEL) == keys.SYNCER_MANAGER
    node = labels.get(keys.SLURM_GPU_RULE_LABEL) if ours else None
    return [str(node)] if node else []


def _slice_node_of(resource_slice: JSON) -> list[str]:
    node = (resource_slice.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def _lock_tainted(node: JSON) -> bool:
    return any(t.get("key") == keys.LOCK_KEY for t in (node.get("spec") or {}).get("taints") or [])


def _node_of(pod: JSON) -> list[str]:
    node = (pod.get("spec") or {}).get("nodeName")
    return [str(node)] if node else []


def _job_of(pod: JSON) -> list[str]:
    job_id = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.JOB_ID_ANNOTATION)
    return [str(job_id)] if job_id else []


def _daemonset_of(pod: JSON) -> list[str]:
    """namespace/name of the DaemonSet the Pod's controller reference names (what it says)."""
    ref = daemonset_ref_of(pod)
    namespace = (pod.get("metadata") or {}).get("namespace")
    return [f"{namespace}/{ref['name']}"] if ref is not None and ref.get("name") and namespace else []


def _uid_of(pod: JSON) -> list[str]:
    uid = (pod.get("metadata") or {}).get("uid")
    return [str(uid)] if uid else []
