"""Entry point of `tandem-hooks`."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tandem import logs, serving, settings, tracing
from tandem.hooks.gateway import HooksGateway
from tandem.hooks.settings import HooksSettings
from tandem.v1 import syncer_pb2_grpc

log = logging.getLogger("tandem.hooks")


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(HooksSettings, argv)
    logs.setup("hooks", cfg.log_level)
    tracing.setup("tandem-hooks", cfg.otlp_endpoint)
    channel = serving.channel(cfg.syncer_address, cfg.grpc_tls("tandem-hooks"))
    gateway = HooksGateway(
        cfg.hooks_address,
        syncer_pb2_grpc.SyncerServiceStub(channel),
        cfg.call_timeout,
        cfg.limits(),
        job_keys=cfg.job_keys(),
    )
    gateway.start()
    log.info("serving", extra={"hooks_port": gateway.port})
    serving.wait_for_stop_signal()
    gateway.stop()
    channel.close()
    tracing.shutdown()


if __name__ == "__main__":
    main()
