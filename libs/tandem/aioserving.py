"""tandem.serving's GrpcServer, served by grpc.aio: a call written as a coroutine holds no thread
while it waits (issue 40: every prolog's lock call waits in the syncer while its Node empties, and
hundreds wait at once). Plain methods still run as they did, on a bounded thread pool.

The event loop runs on a thread of its own; the rest of the process stays threaded and calls this
server's methods from any thread but that one. The same guarantees as GrpcServer: mutual TLS with
each caller's identity checked before any work (tandem.mtls), a SERVER span around each unary call
(tandem.tracing), grpc.health.v1 reporting SERVING only once `set_serving(True)` is called, and
reflection.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from concurrent import futures
from typing import Any, TypeVar

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from tandem import mtls, tracing
from tandem.serving import Registrar
from tandem.settings import split_host_port

T = TypeVar("T")

# How long a thread waits for the loop to start, stop or set the health status: it does each
# in well under a second unless the loop is wedged, which this then reports.
LOOP_CALL_SECONDS = 30.0


class AioGrpcServer:
    """GrpcServer's interface (`port`, `start`, `set_serving`, `stop`) over grpc.aio.

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
        guard = [mtls.AioAuthorizationInterceptor()] if tls is not None else []
        server = grpc.aio.server(
            migration_thread_pool=self._pool,
            interceptors=[*guard, tracing.AioServerInterceptor(), *interceptors],
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
