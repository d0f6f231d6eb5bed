"""The facts of one Slurm node, as the node sync decides on them (tandem.syncer.NodeFacts):
read from the syncer's caches (the informers, the Slurm mirror) and the hold store, with this
syncer's own writes the caches do not show yet (tandem.assume). No API call: a Pod whose job must
be read from Slurm before it is judged is named for the pass to look up.
"""

from __future__ import annotations

from dataclasses import replace

from tandem import keys, placeholder, slurmd
from tandem.dra import gpuhealth, gres, slices
from tandem.dra.claims import DraConfig
from tandem.dra.slices import NodeDevices
from tandem.dra.taints import taint_rule
from tandem.keys import LockState
from tandem.kube import JSON, pod_finished
from tandem.slurm.models import JobStatus
from tandem.syncer import devicehealth, gpucheck, killwait
from tandem.syncer.cluster import ClusterView
from tandem.syncer.facts import NodeFacts, RunningJob
from tandem.syncer.holds import HoldStore, KillWait
from tandem.syncer.killwait import NodeKillWait
from tandem.syncer.locking import OrphanFacts, may_share_strict_lock
from tandem.syncer.slurmstate import SlurmState
from tandem.syncer.writes import LockWrites

# A key of the node sync is a Slurm node's name, or this prefix and a Kubernetes Node's name for a
# Node that may carry a stale lock taint (Slurm node names cannot contain "/").
NODE_KEY_PREFIX = "node/"


def has_lock_taint(node: JSON | None) -> bool:
    return any(t.get("key") == keys.LOCK_KEY for t in ((node or {}).get("spec") or {}).get("taints") or [])


class CacheFacts:
    """The facts of one Slurm node, read from the syncer's caches and the hold store (no API
    call), with this syncer's own writes that the caches do not show yet."""

    def __init__(
        self,
        cluster: ClusterView,
        slurm: SlurmState,
        own_user: str,
        store: HoldStore | None = None,
        writes: LockWrites | None = None,
        scheduler_name: str = "",
        dra: DraConfig | None = None,
        sharing_namespaces: frozenset[str] = frozenset({"kube-system"}),
    ) -> None:
        self.cluster, self.slurm, self.own_user = cluster, slurm, own_user
        # How a Node's devices are typed the Slurm way (--gpu-products).
        self.dra = dra if dra is not None else DraConfig(product_types={})
        self.store = store if store is not None else HoldStore()
        self.writes = (
            writes
            if writes is not None
            else LockWrites(cluster.pods.kube, cluster.slurmd_namespace, cluster.node)
        )
        self.scheduler_name = scheduler_name
        # Whose DaemonSet Pods stay under a strict lock (--lock-sharing-namespaces).
        self.sharing_namespaces = sharing_namespaces | {cluster.slurmd_namespace}

    def facts(self, slurm_node: str) -> NodeFacts:
        pod = self.cluster.slurmd_pod(slurm_node)
        name = slurmd.host_of(pod)
        slurm = self.slurm.node(slurm_node)
        named = keys.killwait_drain_of(slurm.reason) if slurm is not None else None
        stuck = self.cluster.pod(named[0], named[1]) if named else None
        kube_node = self.cluster.node(name) if name else None
        memory = self.store.memory(slurm_node)
        statuses = self.slurm.jobs_on(slurm_node)
        ended = frozenset(j for j in memory.holds if (s := self.slurm.job(j)) is not None and s.ended)
        slurmd_uid = ((pod or {}).get("metadata") or {}).get("uid")
        pods = tuple(
            p
            for p in (self.cluster.pods_on(name) if name else ())
            if not pod_finished(p) and (p.get("metadata") or {}).get("uid") != slurmd_uid
        )
        sharers, undetermined = self._judge(pods, name)
        node_slices = self.cluster.slices_on(name) if name else []
        devices = self._devices(name, node_slices)
        evicting = any(g.evicts for g in gpuhealth.tainted_gpus(devices))
        return NodeFacts(
            slurm_node,
            slurm,
            name,
            kube_node,
            pod,
            stuck,
            self.own_user,
            health_conditions=self.cluster.health_conditions,
            slurm_read=self.slurm.synced,
            jobs=tuple(
                RunningJob(
                    s.job_id,
                    placeholder.pod_of(s.job) is not None,
                    gres.gpu_indices(s.job.gres_detail, s.job.nodes, slurm_node) if evicting else (),
                )
                for s in statuses
            ),
            ended=ended,
            lock=self.lock_of(pod),
            tainted=self.tainted(name),
            pods=pods,
            sharers=sharers,
            undetermined=undetermined,
            neighbours_locked=any(n != slurm_node for n in self.waiting_on(name) if name),
            memory=memory,
            killwaits=tuple(self._killwait(slurm_node, k) for k in memory.killwaits),
            gpu_mismatch=gpucheck.mismatch(slurm, name, node_slices, self.dra),
            devices=devices,
            gpu_rules=tuple(self.cluster.gpu_rules_of(slurm_node)),
            rules_served=self.cluster.taint_rules.served,
        )

    def _devices(self, kube_node: str, node_slices: list[JSON]) -> NodeDevices | str | None:
        """The Node's GPUs numbered the Slurm way, each with its taints (its slice's and the
        DeviceTaintRules'); None when it publishes none."""
        if not kube_node or not node_slices:
            return None
        rules = [r for raw in self.cluster.taint_rules_all() if (r := taint_rule(raw)) is not None]
        found = slices.node_devices(kube_node, node_slices, self.dra, rules)
        if isinstance(found, str):
            return found
        bad = devicehealth.unhealthy(self.cluster.pods_on(kube_node), found.driver, found.pool)
        if not bad:
            return found
        return replace(
            found,
            devices=tuple(
                replace(d, taints=(*d.taints, devicehealth.UNHEALTHY)) if d.name in bad else d
                for d in found.devices
            ),
        )

    def _killwait(self, slurm_node: str, entry: KillWait) -> NodeKillWait:
        """A KillWait deadline as this node sees it: which Pod of the job keeps the node, as
        killwait.drain_targets decides for the whole job (a group's Pods on all its nodes)."""
        pods = self.killwait_pods(entry.status, entry.ref, entry.script_node)
        targets = killwait.drain_targets(entry.status, entry.script_node, pods, self.cluster.kube_node_of)
        return NodeKillWait(entry.job_id, entry.drain_at, targets.get(slurm_node), gone=not pods)

    def killwait_pods(self, status: JobStatus, ref: placeholder.PodRef, script_node: str) -> list[JSON]:
        """The ended placeholder job's Pods that still occupy its nodes (killwait.job_pods, from
        the caches)."""
        return killwait.job_pods(
            status,
            ref,
            self.cluster.pods_of_job(status.job_id) if ref.is_group else (),
            None if ref.is_group else self.cluster.pod_by_uid(ref.uid),
            self.cluster.kube_node_of,
            script_node,
        )

    def lock_of(self, slurmd_pod: JSON | None) -> LockState:
        """The slurmd Pod's lock annotation, or what this syncer wrote there since."""
        written = self.writes.lock_of(slurmd_pod) if slurmd_pod is not None else None
        return written if written is not None else slurmd.lock_state_of(slurmd_pod)

    def tainted(self, kube_node: str) -> bool:
        """Whether the Node carries the lock taint, or this syncer wrote so since."""
        node = self.cluster.node(kube_node) if kube_node else None
        written = self.writes.tainted(kube_node, node) if kube_node else None
        return written if written is not None else has_lock_taint(node)

    def waiting_on(self, kube_node: str) -> list[str]:
        """The Slurm nodes on this Node whose lock a Pod coming or going there may move on: those
        held or locked (a lock waits for Pods to leave)."""
        return [
            n
            for n in self.cluster.slurm_nodes_on(kube_node)
            if self.store.holds_of(n) or self.lock_of(self.cluster.slurmd_pod(n)) != LockState.FALSE
        ]

    def orphan(self, kube_node: str) -> OrphanFacts:
        tainted = self.tainted(kube_node)
        hosts = bool(self.cluster.slurm_nodes_on(kube_node))
        since = self.store.orphaned_since(
            kube_node, tainted and not hosts and self.cluster.node(kube_node) is not None
        )
        return OrphanFacts(kube_node, tainted, hosts, since)

    def _judge(self, pods: tuple[JSON, ...], kube_node: str) -> tuple[frozenset[str], dict[str, int]]:
        """Which Pods may share a strict lock; and those whose job the mirror does not know yet
        (uid -> job id), to read from Slurm before judging. Judged here, on a worker, never under an
        informer's lock: a judgement may wait for slurmrestd."""
        sharers: set[str] = set()
        undetermined: dict[str, int] = {}
        for p in pods:
            uid = str((p.get("metadata") or {}).get("uid", ""))
            recorded = keys.recorded_job_id(p)
            job = self.slurm.job(recorded) if recorded is not None else None
            ours = (p.get("spec") or {}).get("schedulerName") == self.scheduler_name
            if ours and recorded is not None and job is None and not self.store.recently_looked_up(recorded):
                undetermined[uid] = recorded
            elif may_share_strict_lock(
                p,
                kube_node,
                self.cluster.slurmd_namespace,
                self.scheduler_name,
                job,
                self.cluster.kube_node_of,
                self.cluster.daemonset,
                self.sharing_namespaces,
            ):
                sharers.add(uid)
        return frozenset(sharers), undetermined


def resync_keys(slurm: SlurmState, cluster: ClusterView, facts: CacheFacts) -> list[str]:
    """What the periodic resync looks at: every Slurm node (Slurm's and those a slurmd Pod names),
    and every Node with the lock taint and no slurmd Pod on it, whose taint no Slurm node's pass
    would ever reach."""
    slurm_nodes = {n.name for n in slurm.nodes()} | {
        str(p["metadata"]["name"]) for p in cluster.slurmd_pods()
    }
    hosting = {slurmd.host_of(p) for p in cluster.slurmd_pods()}
    stale = [
        NODE_KEY_PREFIX + str(n["metadata"]["name"])
        for n in cluster.nodes.items()
        if n["metadata"]["name"] not in hosting and facts.tainted(str(n["metadata"]["name"]))
    ]
    return sorted(slurm_nodes) + sorted(stale)
