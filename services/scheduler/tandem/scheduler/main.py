"""Entry point of `tandem-scheduler`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tandem import kube, logs, serving, settings
from tandem.scheduler.service import SchedulerServicer
from tandem.scheduler.settings import SchedulerSettings
from tandem.slurm.rest import SlurmRestClient
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger("tandem.scheduler")


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SchedulerSettings, argv)
    logs.setup("scheduler", cfg.log_level)
    if not cfg.scheduler_name:
        raise SystemExit("--scheduler-name (TANDEM_SCHEDULER_NAME) is required")
    api = kube.api_client(cfg.kubeconfig)
    slurm = SlurmRestClient.from_settings(
        cfg.slurm_api_base, cfg.slurm_user, cfg.slurm_auth_token, cfg.slurm_jwt_key_file
    )
    servicer = SchedulerServicer()
    name = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name
    grpc_server = serving.GrpcServer(
        cfg.grpc_address,
        [lambda s: scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(servicer, s)],
        [name],
    )

    def ready() -> bool:
        return kube.reachable(api) and slurm.ping()

    http = serving.HealthHttpServer(cfg.health_address, ready, lambda: "")
    grpc_server.start()
    http.start()
    grpc_server.set_serving(True)
    log.info("serving", extra={"scheduler_name": cfg.scheduler_name, "grpc_port": grpc_server.port})
    serving.wait_for_stop_signal()
    grpc_server.stop()
    http.stop()
    slurm.close()


if __name__ == "__main__":
    main()
