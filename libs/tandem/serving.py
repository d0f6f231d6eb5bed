"""What every Tandem service serves: gRPC over mutual TLS with reflection and grpc.health.v1, and
a small bounded HTTP server for `/healthz`, `/readyz` and `/metrics` (probes carry no certificate);
and a clean stop on SIGTERM."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent import futures
from http import HTTPStatus
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tandem import mtls, tracing
from tandem.boundedhttp import HEALTH_CONNECTIONS_REFUSED, BoundedHTTPServer, Limits, Request, Response
from tandem.metrics import CONTENT_TYPE
from tandem.settings import split_host_port

log = logging.getLogger(__name__)

Registrar = Callable[[grpc.Server], None]


# Reconnect within a second or two of a peer's restart; gRPC's default backoff grows to 120 s,
# which would stall every prolog long after the syncer is back.
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30000),
]


def channel(address: str, tls: mtls.TlsFiles | None) -> grpc.Channel:
    """A channel whose calls carry the caller's trace context, over mutual TLS with this process's
    certificate (`tls=None`, plaintext, only for tests of this module's users)."""
    if tls is None:
        return tracing.intercept_channel(grpc.insecure_channel(address, options=CHANNEL_OPTIONS))
    return tracing.intercept_channel(mtls.ReloadingChannel(address, tls, CHANNEL_OPTIONS))


class GrpcServer:
    """A gRPC server whose health service reports SERVING once `set_serving(True)` is called.
    With `tls`, every caller presents a certificate from Tandem's CA and may make only the calls
    `mtls.ACCESS` grants its identity; `tls=None` (plaintext, anyone) is for tests only."""

    def __init__(
        self,
        address: str,
        registrars: Iterable[Registrar],
        service_names: Iterable[str],
        tls: mtls.TlsFiles | None,
        max_workers: int = 64,
        interceptors: Iterable[Any] = (),
    ) -> None:
        guard = [mtls.AuthorizationInterceptor()] if tls is not None else []
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            interceptors=[*guard, tracing.ServerInterceptor(), *interceptors],
            options=[("grpc.so_reuseport", 0)],
        )
        self.health = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.service_names = list(service_names)
        for register in registrars:
            register(self.server)
        reflection.enable_server_reflection(
            [
                *self.service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            self.server,
        )
        host, port = split_host_port(address)
        bind = f"{host or '[::]'}:{port}"
        if tls is None:
            self.port = self.server.add_insecure_port(bind)
        else:
            self.port = self.server.add_secure_port(bind, mtls.server_credentials(tls))
        if self.port == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        self.set_serving(False)

    def start(self) -> None:
        self.server.start()

    def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self.service_names]:
            self.health.set(name, status)

    def stop(self, grace: float = 5.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace).wait()


# The health port serves probes and a scrape now and then: a few connections, answered at once.
# A client that opens many, or sends nothing, is cut off without a thread per connection (issue
# 50: it was the stdlib's thread-per-connection server, with no timeout, open to every Pod).
HEALTH_LIMITS = Limits(workers=2, request_timeout=5.0, max_connections=64, max_body=0, max_calls=8)


class HealthHttpServer:
    """`/healthz` (the process is alive), `/readyz` (`waiting_for()` is empty; else 503 and what
    the service still waits for, one line each, for `kubectl describe`'s probe message), `/metrics`;
    on the bounded server the hooks gateway uses (tandem.boundedhttp)."""

    def __init__(
        self, address: str, waiting_for: Callable[[], Sequence[str]], metrics: Callable[[], str]
    ) -> None:
        self.waiting_for = waiting_for
        self.metrics = metrics
        host, port = split_host_port(address)
        self.httpd = BoundedHTTPServer(
            host, port, self._screen, self._handle, HEALTH_LIMITS, "health-http", HEALTH_CONNECTIONS_REFUSED
        )
        self.port = self.httpd.port

    @staticmethod
    def _screen(head: Request) -> Response | None:
        """/healthz at once, on the I/O thread; /readyz and /metrics on a worker (they compute)."""
        if head.method != "GET":
            return _text(HTTPStatus.METHOD_NOT_ALLOWED, "only GET is served\n")
        if head.path == "/healthz":
            return _text(HTTPStatus.OK, "ok\n")
        if head.path in ("/readyz", "/metrics"):
            return None
        return _text(HTTPStatus.NOT_FOUND, "not found\n")

    def _handle(self, request: Request, answer: Callable[[Response], None]) -> None:
        if request.path == "/metrics":
            answer(Response(HTTPStatus.OK, self.metrics().encode(), CONTENT_TYPE))
            return
        waiting = list(self.waiting_for())
        answer(
            _text(
                HTTPStatus.SERVICE_UNAVAILABLE if waiting else HTTPStatus.OK,
                "".join(f"not ready: {why}\n" for why in waiting) or "ok\n",
            )
        )

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()


def _text(status: HTTPStatus, body: str) -> Response:
    return Response(status, body.encode(), "text/plain")


def wait_for_stop_signal(also: threading.Event | None = None) -> None:
    """Block the main thread until SIGTERM or SIGINT, or until `also` is set."""
    stop = threading.Event()
    if also is not None:

        def watch() -> None:
            also.wait()
            stop.set()

        threading.Thread(target=watch, name="stop-watch", daemon=True).start()

    def handler(signum: int, _frame: object) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    stop.wait()
