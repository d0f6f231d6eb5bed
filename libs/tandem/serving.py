"""What every Tandem service serves: gRPC over mutual TLS with reflection and grpc.health.v1, and
a small bounded HTTP server for `/healthz`, `/readyz` and `/metrics` (probes carry no certificate);
and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from concurrent import futures
from http import HTTPStatus
from typing import Any, TypeVar

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tandem import mtls, tracing
from tandem.boundedhttp import HEALTH_CONNECTIONS_REFUSED, BoundedHTTPServer, Limits, Request, Response
from tandem.metrics import CONTENT_TYPE
from tandem.settings import split_host_port

log = logging.getLogger(__name__)

Registrar = Callable[[grpc.Server], None]
T = TypeVar("T")


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


# How long a thread waits for the loop to start, stop or set the health status: it does each
# in well under a second unless the loop is wedged, which this then reports.
LOOP_CALL_SECONDS = 30.0


class GrpcServer:
    """A gRPC server on grpc.aio whose health service reports SERVING once `set_serving(True)` is
    called. With `tls`, every caller presents a certificate from Tandem's CA and may make only the
    calls `mtls.ACCESS` grants its identity (checked before any work); `tls=None` (plaintext,
    anyone) is for tests only. Each unary call gets a SERVER span (tandem.tracing).

    A call written as a coroutine holds no thread while it waits (issue 40: every prolog's lock
    call waits in the syncer while its Node empties, and hundreds wait at once); a plain method
    runs on the bounded thread pool. The event loop runs on a thread of its own; the rest of the
    process stays threaded and calls this server's methods from any thread but that one.

    `max_workers` bounds the threads: plain methods run there, and so do the steps of coroutines
    that may block (`asyncio.to_thread` uses this pool too, as the loop's default executor)."""

    def __init__(
        self,
        address: str,
        registrars: Iterable[Registrar],
        service_names: Iterable[str],
        tls: mtls.TlsFiles | None,
        max_workers: int = 32,
        interceptors: Iterable[Any] = (),
    ) -> None:
        self.service_names = list(service_names)
        self._stopped = False
        self._pool = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc")
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._pool)
        self._thread = threading.Thread(target=self._loop.run_forever, name="grpc-aio", daemon=True)
        self._thread.start()
        try:
            # grpc.aio binds a server to the loop it is made on: made there, then.
            self.server, self.health, self.port = self._on_loop(
                self._build(address, list(registrars), tls, list(interceptors))
            )
            self.set_serving(False)
        except BaseException:
            self._close_loop()
            raise

    async def _build(
        self, address: str, registrars: list[Registrar], tls: mtls.TlsFiles | None, interceptors: list[Any]
    ) -> tuple[Any, Any, int]:
        guard = [mtls.AuthorizationInterceptor()] if tls is not None else []
        server = grpc.aio.server(
            migration_thread_pool=self._pool,
            interceptors=[*guard, tracing.ServerInterceptor(), *interceptors],
            options=[("grpc.so_reuseport", 0)],
        )
        status = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(status, server)
        for register in registrars:
            register(server)
        reflection.enable_server_reflection(
            [
                *self.service_names,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ],
            server,
        )
        host, port = split_host_port(address)
        bind = f"{host or '[::]'}:{port}"
        if tls is None:
            bound = server.add_insecure_port(bind)
        else:
            bound = server.add_secure_port(bind, mtls.server_credentials(tls))
        if bound == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        return server, status, bound

    def start(self) -> None:
        self._on_loop(self.server.start())

    def set_serving(self, serving: bool) -> None:
        """From any thread but the loop's. Once stopped, the status stays NOT_SERVING."""
        if self._stopped:
            return
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        self._on_loop(self._set_all(status))

    async def _set_all(self, status: Any) -> None:
        for name in ["", *self.service_names]:
            await self.health.set(name, status)

    def stop(self, grace: float = 5.0) -> None:
        """Calls in progress get `grace` seconds, then are cancelled: a waiting lock call lets go
        of its waiter (its client sees the call end, as with the threaded server)."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._on_loop(self._stop(grace), timeout=grace + LOOP_CALL_SECONDS)
        finally:
            self._close_loop()

    async def _stop(self, grace: float) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)

    def _on_loop(self, work: Coroutine[Any, Any, T], timeout: float = LOOP_CALL_SECONDS) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def _close_loop(self) -> None:
        self._stopped = True
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=LOOP_CALL_SECONDS)
        # A step still running on the pool finishes there; its caller is gone (cancelled), so
        # nothing waits for it, and its answer is dropped (tandem.syncer.steps).
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self._thread.is_alive():
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()


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
