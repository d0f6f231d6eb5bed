"""Entry point of `tandem-syncer`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tandem import kube, logs, serving, settings
from tandem.slurm.rest import SlurmRestClient
from tandem.syncer.service import SyncerServicer
from tandem.syncer.settings import SyncerSettings
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger("tandem.syncer")


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SyncerSettings, argv)
    logs.setup("syncer", cfg.log_level)
    api = kube.api_client(cfg.kubeconfig)
    slurm = SlurmRestClient.from_settings(
        cfg.slurm_api_base, cfg.slurm_user, cfg.slurm_auth_token, cfg.slurm_jwt_key_file
    )
    servicer = SyncerServicer(cfg, api, slurm)
    name = syncer_pb2.DESCRIPTOR.services_by_name["SyncerService"].full_name
    grpc_server = serving.GrpcServer(
        cfg.grpc_address, [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(servicer, s)], [name]
    )

    def ready() -> bool:
        return kube.reachable(api) and slurm.ping()

    http = serving.HealthHttpServer(cfg.health_address, ready, lambda: "")
    grpc_server.start()
    http.start()
    grpc_server.set_serving(True)
    log.info("serving", extra={"grpc_port": grpc_server.port, "health_port": http.port})
    serving.wait_for_stop_signal()
    grpc_server.stop()
    http.stop()
    slurm.close()


if __name__ == "__main__":
    main()
