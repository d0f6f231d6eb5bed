"""Entry point of `tandem-syncer`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence

from tandem import leader, logs, serving, settings, tracing
from tandem.events import EventRecorder
from tandem.kube import KubeClient, KubeError, pod_path
from tandem.metrics import REGISTRY
from tandem.slurm.rest import SlurmRestClient
from tandem.syncer.locks import NodeLocker
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.service import SyncerServicer
from tandem.syncer.settings import SyncerSettings
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger("tandem.syncer")
LEADER_LABEL = "tandem.coreweave.com/syncer-leader"


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SyncerSettings, argv)
    logs.setup("syncer", cfg.log_level)
    tracing.setup("tandem-syncer", cfg.otlp_endpoint)
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig)
    slurm = SlurmRestClient.from_settings(
        cfg.slurm_api_base, cfg.slurm_user, cfg.slurm_auth_token, cfg.slurm_jwt_key_file
    )
    stop = threading.Event()
    mirror = SlurmMirror(slurm, cfg.poll_interval)
    locker = NodeLocker(
        kube,
        mirror,
        cfg.slurmd_namespace,
        cfg.scheduler_name,
        cfg.lock_timeout,
        events=EventRecorder(kube, "tandem-syncer"),
    )
    servicer = SyncerServicer(mirror, locker, slurm, kube, cfg.terminating_timeout)
    name = syncer_pb2.DESCRIPTOR.services_by_name["SyncerService"].full_name
    grpc_server = serving.GrpcServer(
        cfg.grpc_address,
        [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(servicer, s)],
        [name],
        # Every prolog holds a call while its Node empties; hundreds start at once under load.
        max_workers=512,
    )

    def reconcile_locks() -> None:
        while not stop.wait(cfg.reconcile_interval):
            try:
                locker.reconcile_all()
            except KubeError as e:
                log.warning("lock reconcile failed", extra={"error": str(e)})

    leading = threading.Event()
    lost = threading.Event()

    def ready() -> bool:
        # A standby is healthy and ready; the Service sends calls only to the Pod labelled leader.
        return kube.reachable() and (mirror.synced or not leading.is_set())

    def lead() -> None:
        threading.Thread(target=mirror.run, args=(stop,), name="slurm-poll", daemon=True).start()
        threading.Thread(target=reconcile_locks, name="lock-reconcile", daemon=True).start()
        mirror.wait_synced(30)
        servicer.active = True
        leading.set()
        label_self_leader(kube)
        grpc_server.set_serving(True)

    http = serving.HealthHttpServer(cfg.health_address, ready, REGISTRY.render)
    grpc_server.start()
    http.start()
    leader.lead_when_elected(
        kube, cfg.leader_elect, cfg.leader_election_namespace, cfg.leader_election_id, stop, lead, lost.set
    )
    log.info(
        "serving",
        extra={"grpc_port": grpc_server.port, "health_port": http.port, "leader_elect": cfg.leader_elect},
    )
    serving.wait_for_stop_signal(lost)
    stop.set()
    grpc_server.stop()
    http.stop()
    slurm.close()
    kube.close()
    tracing.shutdown()
    if lost.is_set():
        raise SystemExit("lost the leader lease; exiting so a fresh start rejoins the election")


def label_self_leader(kube: KubeClient) -> None:
    """In a Pod (POD_NAME/POD_NAMESPACE from the downward API), label it the leader: the syncer
    Service selects that label, so prologs and the scheduler reach the replica holding the locks."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        return
    try:
        kube.merge_patch(pod_path(namespace, name), {"metadata": {"labels": {LEADER_LABEL: "true"}}})
    except KubeError as e:
        log.error("cannot label this Pod leader", extra={"error": str(e)})


if __name__ == "__main__":
    main()
