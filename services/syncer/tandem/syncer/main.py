"""Entry point of `tandem-syncer`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

from tandem import leader, logs, serving, settings, tracing
from tandem.events import EventRecorder
from tandem.kube import JSON, KubeClient, KubeError, pod_path
from tandem.metrics import REGISTRY
from tandem.runner import Runner
from tandem.slurm.rest import SlurmRestClient
from tandem.sources import Source, Sources
from tandem.syncer.cluster import ClusterView
from tandem.syncer.holds import HoldStore
from tandem.syncer.lockcalls import NodeLocks
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodeapply import NodeSync
from tandem.syncer.nodefacts import CacheFacts, resync_keys
from tandem.syncer.nodesync import drained_for
from tandem.syncer.service import SyncerServicer
from tandem.syncer.settings import SyncerSettings
from tandem.syncer.writes import LockWrites
from tandem.v1 import syncer_pb2, syncer_pb2_grpc
from tandem.workqueue import WorkQueue

log = logging.getLogger("tandem.syncer")
LEADER_LABEL = "tandem.coreweave.com/syncer-leader"
# Slurm nodes reconciled at once; the work queue never gives one node to two workers.
NODE_SYNC_WORKERS = 8


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SyncerSettings, argv)
    logs.setup("syncer", cfg.log_level)
    tracing.setup("tandem-syncer", cfg.otlp_endpoint)
    tls = cfg.grpc_tls("tandem-syncer")
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig)
    slurm = SlurmRestClient.for_service(cfg)
    stop = threading.Event()
    mirror = SlurmMirror(slurm, cfg.poll_interval)
    cluster = ClusterView(kube, cfg.slurmd_namespace, on_slurmd_moved=mirror.republish_node)
    events = EventRecorder(kube, "tandem-syncer")
    # Node state both ways and node locks: a runner keyed by Slurm node (and `node/<Node>` for a
    # stale lock taint), fed by the Node and Pod informers, the Slurm poll, the hook calls and a
    # periodic resync; it works only while this replica leads. The hook calls record in `holds`,
    # enqueue the node and wait for the caches to show the outcome.
    holds = HoldStore()
    holds.on_change = cluster.wake_waiters
    writes = LockWrites(kube, cfg.slurmd_namespace, cluster.node)
    facts = CacheFacts(cluster, mirror, cfg.slurm_user, holds, writes, cfg.scheduler_name)
    node_queue = WorkQueue()
    node_sync = NodeSync(
        kube,
        slurm,
        facts,
        mirror.expect_node,
        store=holds,
        writes=writes,
        events=events,
        lookup=mirror.refresh_job,
    )
    locks = NodeLocks(holds, node_queue, cluster, facts, mirror, cap=cfg.lock_timeout)
    servicer = SyncerServicer(mirror, locks, slurm, cluster, cfg.terminating_timeout)
    # Everything a node sync or a lock reads: the workers wait for all of it, and a leader's
    # readiness names what is missing.
    sources = Sources(
        [
            Source.of("Pods", cluster.pods),
            Source.of("Nodes", cluster.nodes),
            Source.of("Slurm (slurmrestd)", mirror),
        ]
    )
    node_runner = Runner("node-sync", node_queue, node_sync.reconcile, [sources.synced], NODE_SYNC_WORKERS)
    cluster.on_slurm_node_changed = node_queue.add
    mirror.on_node_changed = node_queue.add

    def pods_changed(kube_node: str) -> None:
        for slurm_node in facts.waiting_on(kube_node):
            node_queue.add(slurm_node)

    cluster.on_node_pods_changed = pods_changed

    def pod_gone(pod: JSON) -> None:
        for slurm_node in drained_for(mirror.nodes(), pod):
            node_queue.add(slurm_node)

    cluster.on_pod_gone = pod_gone
    name = syncer_pb2.DESCRIPTOR.services_by_name["SyncerService"].full_name
    grpc_server = serving.GrpcServer(
        cfg.grpc_address,
        [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(servicer, s)],
        [name],
        tls,
        # Every prolog holds a call while its Node empties; hundreds start at once under load.
        max_workers=512,
    )

    def resync() -> None:
        while not stop.wait(cfg.reconcile_interval):
            for key in resync_keys(mirror, cluster, facts):
                node_queue.add(key)

    def serve(active: bool) -> None:
        servicer.active = active
        grpc_server.set_serving(active)

    def synced(timeout: float) -> bool:
        return cluster.wait_synced(timeout) and mirror.wait_synced(timeout)

    leadership = Leadership(kube, synced, serve, stop)

    def waiting_for() -> list[str]:
        # A standby is healthy and ready; the Service sends calls only to the Pod labelled leader.
        if not kube.reachable():
            return ["the Kubernetes API is unreachable"]
        if leadership.leading.is_set():
            return [f"leading, and {why}" for why in sources.waiting_for()]
        return []

    def sync_every_node() -> None:
        for key in resync_keys(mirror, cluster, facts):
            node_queue.add(key)

    def lead() -> None:
        threading.Thread(target=mirror.run, args=(stop,), name="slurm-poll", daemon=True).start()
        threading.Thread(target=resync, name="node-resync", daemon=True).start()
        node_runner.start(stop, on_started=sync_every_node)
        leadership.lead()

    http = serving.HealthHttpServer(cfg.health_address, waiting_for, REGISTRY.render)
    leadership.standby()
    grpc_server.start()
    http.start()
    # Standbys keep their Kubernetes caches warm too: a new leader locks without listing first.
    cluster.start(stop)
    leader.lead_when_elected(
        kube,
        cfg.leader_elect,
        cfg.leader_election_namespace,
        cfg.leader_election_id,
        stop,
        lead,
        leadership.on_lost,
    )
    log.info(
        "serving",
        extra={"grpc_port": grpc_server.port, "health_port": http.port, "leader_elect": cfg.leader_elect},
    )
    serving.wait_for_stop_signal(leadership.lost)
    stop.set()
    node_queue.shutdown()
    grpc_server.stop()
    http.stop()
    slurm.close()
    kube.close()
    tracing.shutdown()
    if leadership.lost.is_set():
        raise SystemExit("lost the leader lease; exiting so a fresh start rejoins the election")


def label_self_leader(kube: KubeClient, leader: bool) -> None:
    """In a Pod (POD_NAME/POD_NAMESPACE from the downward API), label it the leader, or remove the
    label: the syncer Service selects it, so prologs and the scheduler reach the replica holding
    the locks and no other."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return
    try:
        kube.merge_patch(
            pod_path(namespace, name), {"metadata": {"labels": {LEADER_LABEL: "true" if leader else None}}}
        )
    except KubeError as e:
        log.error("cannot label this Pod", extra={"leader": leader, "error": str(e)})


class Leadership:
    """The syncer's side of the lease. The Service routes to the Pod labelled leader, so the label
    follows what the replica does: set once it leads and has read Slurm and Kubernetes, removed when
    it loses the lease and when it starts (a restarted container keeps its Pod and its labels)."""

    def __init__(
        self,
        kube: KubeClient,
        synced: Callable[[float], bool],
        serve: Callable[[bool], None],
        stop: threading.Event,
        sync_wait: float = 30.0,
    ) -> None:
        self.kube, self.synced, self.serve, self.stop, self.sync_wait = kube, synced, serve, stop, sync_wait
        self.leading = threading.Event()
        self.lost = threading.Event()
        self._lock = threading.Lock()  # a loss reported while the start still runs comes last

    def standby(self) -> None:
        label_self_leader(self.kube, leader=False)

    def lead(self) -> None:
        """Serve only with Slurm and Kubernetes read: an empty mirror would call busy nodes idle."""
        while not self.synced(self.sync_wait):
            if self.stop.is_set() or self.lost.is_set():
                return
            log.warning("leader waits for its first Slurm poll and Kubernetes lists")
        with self._lock:
            if self.stop.is_set() or self.lost.is_set():
                return
            self.serve(True)
            self.leading.set()
            label_self_leader(self.kube, leader=True)

    def on_lost(self) -> None:
        """The label goes before `lost` ends the process: a standby must not attract calls."""
        with self._lock:
            self.leading.clear()
            self.serve(False)
            label_self_leader(self.kube, leader=False)
            self.lost.set()


if __name__ == "__main__":
    main()
