"""Trace context crosses each hop: HTTP header -> gateway span -> gRPC metadata -> syncer span;
the scheduler's context reaches the job's comment and environment; the scripts find it there."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tandem import scripts, serving, tracing
from tandem.hooks.gateway import HooksGateway
from tandem.scheduler import jobspec
from tandem.slurm.models import JobSpec
from tandem.v1 import lock_pb2, syncer_pb2, syncer_pb2_grpc
from tests.unit.node_credentials import node_token

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
NODE_TOKEN = node_token("gpu-000")

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    # A process has one tracer provider: set it once for every test here.
    if not tracing.enabled():
        tracing.setup("unit", "", processor=SimpleSpanProcessor(_EXPORTER))
    return _EXPORTER


class FakeSyncer(syncer_pb2_grpc.SyncerServiceServicer):
    def __init__(self) -> None:
        self.metadata: list[dict[str, str]] = []

    def AcquireNodeLock(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.metadata.append(dict(context.invocation_metadata()))
        return syncer_pb2.AcquireNodeLockResponse(
            lock=lock_pb2.NodeLock(slurm_node=request.slurm_node, state=lock_pb2.LOCK_STATE_LOCKED)
        )


class WaitingFakeSyncer(FakeSyncer):
    """Its lock call a coroutine, as the syncer's (served by grpc.aio)."""

    async def AcquireNodeLock(self, request: Any, context: Any) -> Any:
        await asyncio.sleep(0.01)
        return super().AcquireNodeLock(request, context)


FAKES: dict[str, type[FakeSyncer]] = {"a plain method": FakeSyncer, "a coroutine": WaitingFakeSyncer}


@pytest.fixture(params=sorted(FAKES))
def gateway_to_fake_syncer(
    exporter: InMemorySpanExporter, request: pytest.FixtureRequest
) -> Iterator[tuple[HooksGateway, FakeSyncer]]:
    fake = FAKES[request.param]()
    server = serving.GrpcServer(
        "127.0.0.1:0", [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(fake, s)], [], None
    )
    server.start()
    channel = serving.channel(f"127.0.0.1:{server.port}", None)
    gateway = HooksGateway("127.0.0.1:0", syncer_pb2_grpc.SyncerServiceStub(channel))
    gateway.start()
    exporter.clear()
    yield gateway, fake
    gateway.stop()
    channel.close()
    server.stop()


def _lock(gateway: HooksGateway, body: dict[str, Any], traceparent: str = "") -> httpx.Response:
    headers = {"Authorization": f"Bearer {NODE_TOKEN}"}
    if traceparent:
        headers["traceparent"] = traceparent
    return httpx.post(f"http://127.0.0.1:{gateway.port}/v1/lock", json=body, headers=headers)


def test_a_prolog_call_continues_the_callers_trace_through_gateway_and_syncer(
    gateway_to_fake_syncer: tuple[HooksGateway, FakeSyncer], exporter: InMemorySpanExporter
) -> None:
    gateway, fake = gateway_to_fake_syncer
    r = _lock(gateway, {"node": "gpu-000", "job": 7}, TRACEPARENT)
    assert r.status_code == 200, r.text
    spans = {s.name: s for s in exporter.get_finished_spans()}
    http_span, rpc_span = spans["POST /v1/lock"], spans["AcquireNodeLock"]
    assert format(http_span.context.trace_id, "032x") == TRACE_ID
    assert http_span.parent is not None and format(http_span.parent.span_id, "016x") == PARENT_ID
    assert rpc_span.parent is not None and rpc_span.parent.span_id == http_span.context.span_id
    # What the syncer received names the gateway's span as its parent.
    assert fake.metadata[0]["traceparent"].split("-")[2] == format(http_span.context.span_id, "016x")


def test_a_call_without_context_starts_a_new_trace(
    gateway_to_fake_syncer: tuple[HooksGateway, FakeSyncer], exporter: InMemorySpanExporter
) -> None:
    gateway, _ = gateway_to_fake_syncer
    _lock(gateway, {"node": "gpu-000", "job": 7})
    (http_span,) = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/lock"]
    assert http_span.parent is None


def test_a_refused_call_is_an_error_span(
    gateway_to_fake_syncer: tuple[HooksGateway, FakeSyncer], exporter: InMemorySpanExporter
) -> None:
    gateway, _ = gateway_to_fake_syncer
    r = _lock(gateway, {"node": "gpu-000"}, TRACEPARENT)
    assert r.status_code == 400
    (http_span,) = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/lock"]
    assert not http_span.status.is_ok


def _spec(comment: str = "") -> JobSpec:
    return JobSpec(
        name="j", script="#!/bin/sh\n", environment={"A": "1"}, cpus=1, memory_mb=1, comment=comment
    )


def test_the_submits_context_goes_into_the_jobs_extra_and_environment() -> None:
    spec = jobspec.with_trace_context(_spec("nightly eval"), TRACEPARENT)
    assert spec.comment == "nightly eval"  # the Pod's own comment is left alone
    assert spec.extra == f"traceparent={TRACEPARENT}"
    # The script appends its marker to the Extra it was given (a batch script cannot read Extra).
    assert spec.environment == {
        "A": "1",
        "TRACEPARENT": TRACEPARENT,
        "TANDEM_JOB_EXTRA": f"traceparent={TRACEPARENT}",
    }


def test_without_tracing_the_job_is_unchanged() -> None:
    assert jobspec.with_trace_context(_spec("nightly eval"), "") == _spec("nightly eval")


@pytest.mark.parametrize(
    ("extra", "found"),
    [
        (f"traceparent={TRACEPARENT}", TRACEPARENT),
        (f"traceparent={TRACEPARENT}: started", TRACEPARENT),
        ("", ""),
        ("traceparent=00-nothex-00f067aa0ba902b7-01", ""),
    ],
)
def test_the_prolog_reads_the_context_from_the_jobs_extra(extra: str, found: str) -> None:
    out = subprocess.run(
        ["bash", "-c", f'. "{scripts.DIR / "common.sh"}"; printf %s "$TRACEPARENT"'],
        env={"SLURM_JOB_EXTRA": extra, "TANDEM_HOOKS_ENV": "/nonexistent", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == found


def test_tracing_is_off_without_an_endpoint() -> None:
    assert tracing.setup("unit", "") is False


def test_with_tracing_off_a_span_without_a_callers_context_is_no_new_span(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing, "_provider", None)
    exporter.clear()
    before = trace.get_current_span()
    with tracing.span("submit placeholder job") as current:
        assert current is before
    assert exporter.get_finished_spans() == ()


def test_with_tracing_off_a_callers_context_still_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing, "_provider", None)
    with tracing.span("hop", parent={"traceparent": TRACEPARENT}):
        assert TRACE_ID in tracing.current_traceparent()
