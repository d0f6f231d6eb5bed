"""An in-process OTLP/gRPC trace collector, and Tandem's three services restarted to export to it:
what the trace test asserts on and what bench/latency.py times stages with."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from devstack import services
from devstack.config import StackConfig


@dataclass(frozen=True)
class ExportedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, str]
    # Wall-clock nanoseconds, as the exporting process saw them.
    start_ns: int = 0
    end_ns: int = 0

    @property
    def start(self) -> float:
        return self.start_ns / 1e9

    @property
    def end(self) -> float:
        return self.end_ns / 1e9


class InMemoryCollector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[ExportedSpan] = []
        self._lock = threading.Lock()

    def Export(self, request: object, context: grpc.ServicerContext) -> object:
        received = []
        for rs in request.resource_spans:  # type: ignore[attr-defined]
            service = next(
                (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), ""
            )
            for scope in rs.scope_spans:
                for s in scope.spans:
                    received.append(
                        ExportedSpan(
                            service=service,
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            attributes={
                                a.key: a.value.string_value or str(a.value.int_value) for a in s.attributes
                            },
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()

    def snapshot(self) -> list[ExportedSpan]:
        with self._lock:
            return list(self.spans)


def restart_services(cfg: StackConfig, extra_env: dict[str, str]) -> None:
    daemons = services.daemons(cfg)
    for name in services.SERVICES:
        daemons[name].stop()
    for name in services.SERVICES:
        services.start(cfg, name, daemons[name], extra_env)
    for name in services.SERVICES:
        services.wait_serving(cfg, name, daemons[name])


@contextmanager
def tracing_to_memory(cfg: StackConfig) -> Iterator[InMemoryCollector]:
    """Tandem's services export their spans here while inside; restarted without tracing after."""
    sink = InMemoryCollector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    restart_services(cfg, {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"})
    try:
        yield sink
    finally:
        restart_services(cfg, {})
        server.stop(0)
