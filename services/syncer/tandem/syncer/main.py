"""Entry point of `tandem-syncer`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from tandem import logs, serving, settings
from tandem.events import EventRecorder
from tandem.kube import KubeClient, KubeError
from tandem.metrics import REGISTRY
from tandem.slurm.rest import SlurmRestClient
from tandem.syncer.locks import NodeLocker
from tandem.syncer.mirror import SlurmMirror
from tandem.syncer.service import SyncerServicer
from tandem.syncer.settings import SyncerSettings
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger("tandem.syncer")


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SyncerSettings, argv)
    logs.setup("syncer", cfg.log_level)
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

    def ready() -> bool:
        return mirror.synced and kube.reachable()

    http = serving.HealthHttpServer(cfg.health_address, ready, REGISTRY.render)
    threading.Thread(target=mirror.run, args=(stop,), name="slurm-poll", daemon=True).start()
    threading.Thread(target=reconcile_locks, name="lock-reconcile", daemon=True).start()
    grpc_server.start()
    http.start()
    mirror.wait_synced(30)
    grpc_server.set_serving(True)
    log.info("serving", extra={"grpc_port": grpc_server.port, "health_port": http.port})
    serving.wait_for_stop_signal()
    stop.set()
    grpc_server.stop()
    http.stop()
    slurm.close()
    kube.close()


if __name__ == "__main__":
    main()
