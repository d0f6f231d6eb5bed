"""Entry point of `tandem-syncer`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

import grpc

from tandem import jobtoken, logs, serving, settings, topology, tracing
from tandem.dra.claims import dra_config
from tandem.events import EventRecorder
from tandem.kube import JSON, KubeClient, KubeError, pod_path
from tandem.manager import Election, Manager, Run
from tandem.metrics import REGISTRY
from tandem.mtls import TlsFiles
from tandem.nodetoken import TOKEN_REVIEWS, ReviewUnavailable, TokenReviewer, review_body
from tandem.runner import NotYet, Runner
from tandem.slurm.rest import SlurmRestClient
from tandem.syncer import watches
from tandem.syncer.cluster import ClusterView
from tandem.syncer.holds import HoldStore
from tandem.syncer.lockcalls import NodeLocks
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.nodeapply import NodeSync
from tandem.syncer.nodefacts import CacheFacts, resync_keys
from tandem.syncer.service import SyncerServicer
from tandem.syncer.settings import SyncerSettings
from tandem.syncer.slurmstate import SlurmState
from tandem.syncer.topologysync import KEY as TOPOLOGY_KEY
from tandem.syncer.topologysync import TopologyConfig, TopologySync
from tandem.syncer.writes import LockWrites
from tandem.v1 import syncer_pb2, syncer_pb2_grpc
from tandem.workqueue import WorkQueue

log = logging.getLogger("tandem.syncer")
LEADER_LABEL = "tandem.coreweave.com/syncer-leader"
# A leader whose label was refused asks again after this, doubling up to the maximum.
LABEL_RETRY_SECONDS = 1.0
LABEL_RETRY_MAX_SECONDS = 30.0
# Passes run side by side on different Slurm nodes (never two on one: the work queue's rule); a
# prolog stuck behind a PodDisruptionBudget holds up no pass, since nothing waits inside one.
NODE_SYNC_WORKERS = 8
# The gRPC server's threads. A waiting call (a prolog's lock, an epilog's unlock, a placeholder's
# end, a WatchSlurm stream) holds none while it waits (grpc.aio, issue 40); threads run only the
# work around the waits and the short calls: a TokenReview or a Slurm read each (seconds at worst,
# bounded by their clients' timeouts), the rest in memory under the GIL. The API server's and
# slurmrestd's clients have 64 connections each, shared with the node sync's 8 workers, the
# informers and the Slurm poll: more threads than half of those would only queue for a connection,
# and 32 still review a wave of 500 new node credentials in 500/32 rounds of one review each.
GRPC_WORKERS = 32


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SyncerSettings, argv)
    logs.setup("syncer", cfg.log_level)
    tracing.setup("tandem-syncer", cfg.otlp_endpoint)
    tls = cfg.grpc_tls("tandem-syncer")
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig)
    slurm = SlurmRestClient.for_service(cfg)
    mirror = SlurmMirror(slurm, cfg.poll_interval)
    levels = topology.parse_levels(cfg.topology_levels)
    cluster = ClusterView(
        kube,
        cfg.slurmd_namespace,
        on_slurmd_moved=mirror.broker.republish_node,
        health_conditions=cfg.health_conditions,
        topology_labels=levels,
    )
    node_queue = WorkQueue(name="node-sync")
    servicer, facts, node_sync = _lock_and_sync(cfg, kube, slurm, mirror, cluster, node_queue)
    manager = Manager(kube, Election(cfg.leader_elect, cfg.leader_election_namespace, cfg.leader_election_id))
    # Everything a node sync or a lock reads. Standbys keep their Kubernetes caches warm (a new
    # leader locks without listing first); only the leader polls Slurm.
    manager.add_source("Pods", cluster.pods, cluster.pods.run)
    manager.add_source("Nodes", cluster.nodes, cluster.nodes.run)
    manager.add_source("ResourceSlices", cluster.slices, cluster.slices.run)
    manager.add_source("DeviceTaintRules", cluster.taint_rules, cluster.taint_rules.run)
    manager.add_source("DaemonSets", cluster.daemonsets, cluster.daemonsets.run)
    manager.add_source("Slurm (slurmrestd)", mirror, mirror.run, leader_only=True)
    # The rest works only while this replica leads, once all of that is read.
    runner = Runner("node-sync", node_queue, node_sync.reconcile, NODE_SYNC_WORKERS)
    manager.add_controller(
        runner, on_started=lambda: enqueue_every_node(mirror.state, cluster, facts, node_queue)
    )
    manager.add_runnable(
        "node-resync", resync(mirror.state, cluster, facts, node_queue, cfg.reconcile_interval)
    )
    if levels:
        topology_queue = WorkQueue(name="topology")
        sync = TopologySync(
            TopologyConfig(
                levels,
                cfg.topology_plugin,
                cfg.topology_file,
                cfg.topology_configmap,
                cfg.topology_min_interval,
            ),
            topology_labels(mirror.state, cluster),
            slurm,
            kube,
            reads_yaml=lambda: slurm.dialect.version >= "v0.0.43",  # Slurm 25.05's data parser
            features=lambda: {n.name: n.features for n in mirror.state.nodes()},
        )
        watches.register_topology(topology_queue, cluster, mirror.state)
        manager.add_controller(
            Runner("topology", topology_queue, sync.reconcile),
            on_started=lambda: topology_queue.add(TOPOLOGY_KEY),
        )
    grpc_server = grpc_service(cfg.grpc_address, tls, servicer)
    leadership = Leadership(
        kube, manager.wait_synced, serve_as_leader(servicer, grpc_server), manager.stopping
    )
    manager.add_runnable("leadership", lambda _stop: leadership.lead(), on_lost=leadership.on_lost)
    http = serving.HealthHttpServer(cfg.health_address, readiness(kube, manager), REGISTRY.render)
    leadership.standby()
    grpc_server.start()
    http.start()
    manager.start()
    log.info(
        "serving",
        extra={"grpc_port": grpc_server.port, "health_port": http.port, "leader_elect": cfg.leader_elect},
    )
    manager.run_until_signal(grpc_server.stop, http.stop, slurm.close, kube.close, tracing.shutdown)


def _lock_and_sync(
    cfg: SyncerSettings,
    kube: KubeClient,
    slurm: SlurmRestClient,
    mirror: SlurmMirror,
    cluster: ClusterView,
    node_queue: WorkQueue,
) -> tuple[SyncerServicer, CacheFacts, NodeSync]:
    """Node state both ways and node locks: one runner keyed by Slurm node (and `node/<Node>` for a
    stale lock taint), fed by the Node and Pod informers, the Slurm poll, the hook calls and a
    periodic resync. The hook calls record in `holds`, enqueue the node and wait for the caches to
    show the outcome."""
    events = EventRecorder(kube, "tandem-syncer")
    holds = HoldStore(on_change=cluster.wake)
    writes = LockWrites(kube, cfg.slurmd_namespace, cluster.node)
    try:
        dra = dra_config(cfg.gpu_products)
    except ValueError as e:
        raise SystemExit(f"--gpu-products: {e}") from e
    facts = CacheFacts(
        cluster,
        mirror.state,
        cfg.slurm_user,
        holds,
        writes,
        cfg.scheduler_name,
        dra,
        sharing_namespaces=frozenset(cfg.lock_sharing_namespaces),
    )
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
    servicer = SyncerServicer(
        mirror,
        locks,
        slurm,
        cluster,
        cfg.terminating_timeout,
        jobtoken.KeyRing(cfg.job_key_file).values,
        TokenReviewer(token_review(kube)),
        accept_unbound_tokens=cfg.accept_unbound_job_tokens,
    )
    watches.register_node_sync(node_queue, cluster, mirror.state, facts)
    return servicer, facts, node_sync


def token_review(kube: KubeClient, timeout: float = 5.0) -> Callable[[str], JSON]:
    """A TokenReview of a node credential (tandem.nodetoken), answered by the API server."""

    def review(token: str) -> JSON:
        try:
            return kube.request("POST", TOKEN_REVIEWS, body=review_body(token), timeout=timeout)
        except KubeError as e:
            # 403: this syncer's role lacks `create tokenreviews`; 0/5xx: no answer. Either way the
            # prolog asks again, and the operator reads why in the syncer's log and the reply.
            raise ReviewUnavailable(f"TokenReview failed: {e}") from e

    return review


def topology_labels(
    slurm: SlurmState, cluster: ClusterView
) -> Callable[[], dict[str, dict[str, str] | None]]:
    """Every Slurm node -> the topology labels of the Node hosting it (None: its slurmd Pod is on
    no Node known). Slurm not read yet: nothing to say (an empty topology would drop every node)."""

    def labels() -> dict[str, dict[str, str] | None]:
        if not slurm.synced:
            raise NotYet("Slurm's nodes are not read yet")
        found: dict[str, dict[str, str] | None] = {}
        for node in slurm.nodes():
            host = cluster.kube_node_of(node.name)
            kube_node = cluster.node(host) if host else None
            found[node.name] = (
                dict((kube_node or {}).get("metadata", {}).get("labels") or {}) if kube_node else None
            )
        return found

    return labels


def enqueue_every_node(slurm: SlurmState, cluster: ClusterView, facts: CacheFacts, queue: WorkQueue) -> None:
    """Every Slurm node, and every Node with a lock taint that no Slurm node maps to."""
    for key in resync_keys(slurm, cluster, facts):
        queue.add(key)


def resync(
    slurm: SlurmState, cluster: ClusterView, facts: CacheFacts, queue: WorkQueue, interval: float
) -> Run:
    """The safety net: every `interval`, every key again (a lost event, a lost epilog)."""

    def run(stop: threading.Event) -> None:
        while not stop.wait(interval):
            enqueue_every_node(slurm, cluster, facts, queue)

    return run


def grpc_service(address: str, tls: TlsFiles | None, servicer: SyncerServicer) -> serving.GrpcServer:
    """Every prolog holds a lock call while its Node empties, hundreds at once under load: served
    by grpc.aio, each waits as a coroutine, not on a thread (`tls=None`: plaintext, for tests)."""
    name = syncer_pb2.DESCRIPTOR.services_by_name["SyncerService"].full_name

    def register(server: grpc.Server) -> None:
        syncer_pb2_grpc.add_SyncerServiceServicer_to_server(servicer, server)

    return serving.GrpcServer(address, [register], [name], tls, max_workers=GRPC_WORKERS)


def serve_as_leader(servicer: SyncerServicer, grpc_server: serving.GrpcServer) -> Callable[[bool], None]:
    def serve(active: bool) -> None:
        servicer.active = active
        grpc_server.set_serving(active)

    return serve


def readiness(kube: KubeClient, manager: Manager) -> Callable[[], list[str]]:
    """What /readyz says. A standby is healthy and ready: the Service sends calls only to the Pod
    labelled leader. A leader is ready once it has read Slurm and Kubernetes; past the cache-sync
    timeout, it says which source is missing and why."""

    def waiting_for() -> list[str]:
        if not kube.reachable():
            return ["the Kubernetes API is unreachable"]
        if manager.leading.is_set():
            return [f"leading, and {why}" for why in manager.waiting_for()]
        return []

    return waiting_for


def label_self_leader(kube: KubeClient, leader: bool) -> bool:
    """In a Pod (POD_NAME/POD_NAMESPACE from the downward API), label it the leader, or remove the
    label: the syncer Service selects it, so prologs and the scheduler reach the replica holding
    the locks and no other. False when the API refused or could not be reached."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return True
    try:
        kube.merge_patch(
            pod_path(namespace, name), {"metadata": {"labels": {LEADER_LABEL: "true" if leader else None}}}
        )
    except KubeError as e:
        log.error("cannot label this Pod", extra={"leader": leader, "error": str(e)})
        return False
    return True


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
            labelled = label_self_leader(self.kube, leader=True)
        # Unlabelled, the leader is out of its Service's reach (no prolog, no scheduler calls it):
        # keep asking (the API back, a policy fixed) until it is labelled or no longer leads.
        delay = LABEL_RETRY_SECONDS
        while not labelled:
            if self.stop.wait(delay):
                return
            delay = min(2 * delay, LABEL_RETRY_MAX_SECONDS)
            with self._lock:
                if self.lost.is_set():
                    return
                labelled = label_self_leader(self.kube, leader=True)

    def on_lost(self) -> None:
        """The label goes before `lost` ends the process: a standby must not attract calls."""
        with self._lock:
            self.leading.clear()
            self.serve(False)
            label_self_leader(self.kube, leader=False)
            self.lost.set()


if __name__ == "__main__":
    main()
