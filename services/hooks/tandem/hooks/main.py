"""Entry point of `tandem-hooks`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from tandem import logs, sakeys, serving, settings, tracing
from tandem.hooks.gateway import HooksGateway
from tandem.hooks.settings import HooksSettings
from tandem.kube import KubeClient
from tandem.v1 import syncer_pb2_grpc

log = logging.getLogger("tandem.hooks")


# The keys are read again when a token names one not seen yet; this often besides, so a key the
# API server stopped publishing stops verifying.
KEYS_REREAD_SECONDS = 600.0


def published_keys(cfg: HooksSettings) -> sakeys.ServiceAccountKeys:
    """The API server's service-account keys, read now and every KEYS_REREAD_SECONDS. An API
    server that does not answer at start is no reason not to serve: node calls get 503 (the
    scripts ask again) until the keys are read."""
    api = KubeClient.from_kubeconfig(cfg.kubeconfig, timeout=10.0)
    keys = sakeys.ServiceAccountKeys(lambda: api.get_as(sakeys.JWKS_PATH, sakeys.JWKS_TYPE))
    keys.refresh()

    def reread() -> None:
        while True:
            time.sleep(KEYS_REREAD_SECONDS)
            keys.refresh()

    threading.Thread(target=reread, name="sa-keys-reread", daemon=True).start()
    return keys


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(HooksSettings, argv)
    logs.setup("hooks", cfg.log_level)
    tracing.setup("tandem-hooks", cfg.otlp_endpoint)
    channel = serving.channel(cfg.syncer_address, cfg.grpc_tls("tandem-hooks"))
    node_keys = published_keys(cfg) if cfg.check_node_signatures else None
    gateway = HooksGateway(
        cfg.hooks_address,
        syncer_pb2_grpc.SyncerServiceStub(channel),
        cfg.call_timeout,
        cfg.limits(),
        node_keys=node_keys,
        lock_budget=cfg.lock_budget,
    )
    gateway.start()
    log.info("serving", extra={"hooks_port": gateway.port})
    serving.wait_for_stop_signal()
    gateway.stop()
    channel.close()
    tracing.shutdown()


if __name__ == "__main__":
    main()
