"""OpenTelemetry traces: one trace follows a Pod from the scheduler's submit, through Slurm's
prolog and the placeholder script's calls to the hooks gateway and the syncer, back to the
scheduler's bind.

Off unless an OTLP endpoint is configured: the API's no-op tracer then costs next to nothing.
Context crosses every hop as W3C `traceparent`: HTTP headers (prolog/placeholder -> gateway,
scheduler -> slurmrestd), gRPC metadata (interceptors below), the placeholder job's comment and
environment (scheduler -> prolog and script), and the syncer's WatchSlurm messages
(syncer -> scheduler).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import grpc
import grpc.aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from tandem import rpcwrap

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"

_provider: TracerProvider | None = None


def setup(service: str, otlp_endpoint: str, processor: SpanProcessor | None = None) -> bool:
    """Export this process's spans to `otlp_endpoint` (gRPC), or to `processor` (tests).
    Returns whether tracing is on."""
    global _provider
    if not otlp_endpoint and processor is None:
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if processor is None:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        insecure = otlp_endpoint.startswith("http://")
        processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=otlp_endpoint, insecure=insecure), schedule_delay_millis=1000
        )
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _provider = provider
    log.info("tracing on", extra={"otlp_endpoint": otlp_endpoint, "service": service})
    return True


def shutdown() -> None:
    """Flush what is buffered (on SIGTERM: the last spans of a stopping service are not lost)."""
    if _provider is not None:
        _provider.shutdown()


def tracer() -> trace.Tracer:
    return trace.get_tracer("tandem")


def enabled() -> bool:
    return _provider is not None


# -- carriers ---------------------------------------------------------------------------------


def inject(carrier: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """The current context as W3C headers (empty when no span is recording)."""
    out: dict[str, str] = dict(carrier or {})
    propagate.inject(out)
    return out


def extract(carrier: Mapping[str, str]) -> otel_context.Context:
    return propagate.extract(carrier)


def current_traceparent() -> str:
    return inject().get(TRACEPARENT, "")


@contextmanager
def span(
    name: str,
    *,
    parent: Mapping[str, str] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Mapping[str, Any] | None = None,
) -> Iterator[Span]:
    """A span, child of `parent` (W3C headers) when given, else of the current context."""
    if _provider is None and not parent:
        # Off, and no caller's context to carry on: the no-op tracer would only wrap the current
        # span again. A few percent of a service's CPU in a burst (issue 40).
        yield trace.get_current_span()
        return
    ctx = extract(parent) if parent else None
    with tracer().start_as_current_span(
        name, context=ctx, kind=kind, attributes=dict(attributes or {})
    ) as current:
        yield current


def mark_error(current: Span, message: str) -> None:
    current.set_status(Status(StatusCode.ERROR, message))


# -- gRPC ---------------------------------------------------------------------------------------


class _ClientCallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, details: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = details.compression


class ClientInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Puts the caller's trace context into the call's metadata."""

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        headers = inject()
        if not headers:
            return details
        metadata = [*(details.metadata or []), *headers.items()]
        return _ClientCallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


class ServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """A SERVER span around each unary call, child of the caller's context from the metadata, a
    coroutine's (its awaits included) or a plain method's. Streams are left alone: a WatchSlurm
    stream lives for hours and is no one request."""

    async def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None or not enabled():
            return handler
        method = details.method.rsplit("/", 1)[-1]
        parent = {k: v for k, v in (details.invocation_metadata or ()) if k == TRACEPARENT}
        return rpcwrap.spanned(
            handler,
            lambda: span(method, parent=parent, kind=SpanKind.SERVER, attributes={"rpc.method": method}),
        )


def begin_span(
    name: str, *, parent: Mapping[str, str] | None = None, kind: SpanKind, attributes: Mapping[str, Any]
) -> Span:
    """A span that outlives this call (ended by whoever gets the answer, on any thread), child of
    `parent` (W3C headers) when given; `use_span` makes it current while a call starts."""
    ctx = extract(parent) if parent else None
    return tracer().start_span(name, context=ctx, kind=kind, attributes=dict(attributes))


def use_span(current: Span) -> AbstractContextManager[Span]:
    """`current` as the current span (what the gRPC client interceptor sends on), not ended here."""
    return trace.use_span(current, end_on_exit=False)


def intercept_channel(channel: grpc.Channel) -> grpc.Channel:
    return grpc.intercept_channel(channel, ClientInterceptor())
