"""The hooks HTTP API under random requests (hypothesis): raw bytes on a socket, so methods, paths,
headers, Content-Length and bodies can be anything. Only documented statuses come back, nothing
but 503/504 in the 5xx range, the gateway keeps serving, and nothing unauthenticated or malformed
reaches the syncer. `FUZZ_EXAMPLES` sets the size (bench/fuzz.py runs 10,000)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem import jobtoken
from tandem.hooks.gateway import HooksGateway
from tandem.v1 import lock_pb2, syncer_pb2
from tests.unit.future_stub import FutureStub
from tests.unit.node_credentials import node_token

# Node credentials (tandem.nodetoken): the gateway serves any of the right form (the syncer's
# review says which node each speaks for), and no other.
TOKEN = node_token("gpu-001", uid="uid-gpu-001")
ANOTHER_NODES = node_token("gpu-002", uid="uid-gpu-002")
NODE_TOKENS = {TOKEN, ANOTHER_NODES}
EXPIRED = node_token("gpu-001", uid="uid-gpu-001", expires_in=-10)
OTHER_AUDIENCE = node_token("gpu-001", uid="uid-gpu-001", audience="kubernetes")
JOB_KEY = "k" * 32
PLACEHOLDER = "tandem:tandem/default/web/uid-1"
JOB_TOKEN = jobtoken.token(JOB_KEY.encode(), PLACEHOLDER)
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
DOCUMENTED = {200, 400, 401, 403, 404, 405, 408, 409, 411, 413, 431, 503, 504}
ROUTES = ["/v1/lock", "/v1/unlock", "/v1/started", "/v1/terminating", "/v1/drain", "/healthz", "/metrics"]


class RecordingSyncer:
    """Answers every call at once, and remembers it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def _record(self, name: str, request: Any, reply: Any) -> Any:
        self.calls.append((name, request))
        return reply

    def AcquireNodeLock(self, request: Any, **_: Any) -> Any:
        return self._record("lock", request, syncer_pb2.AcquireNodeLockResponse(lock=lock_pb2.NodeLock()))

    def ReleaseNodeLock(self, request: Any, **_: Any) -> Any:
        return self._record("unlock", request, syncer_pb2.ReleaseNodeLockResponse(lock=lock_pb2.NodeLock()))

    def JobStarted(self, request: Any, **_: Any) -> Any:
        return self._record("started", request, syncer_pb2.JobStartedResponse())

    def JobTerminating(self, request: Any, **_: Any) -> Any:
        return self._record("terminating", request, syncer_pb2.JobTerminatingResponse(pod_gone=True))

    def DrainNode(self, request: Any, **_: Any) -> Any:
        return self._record("drain", request, syncer_pb2.DrainNodeResponse())


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[HooksGateway, RecordingSyncer]]:
    syncer = RecordingSyncer()
    gateway = HooksGateway(
        "127.0.0.1:0",
        FutureStub(syncer),  # type: ignore[arg-type]
        call_timeout=2,
    )
    gateway.start()
    yield gateway, syncer
    gateway.stop()


def _exchange(port: int, raw: bytes) -> int | None:
    """Send raw bytes, half-close, read the status line (None: the gateway closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) >= 2 and line[1].isdigit() else None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
bodies = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries(
        {},
        optional={
            "node": st.one_of(st.text(max_size=30), st.integers(), st.none()),
            "job": st.one_of(st.integers(min_value=-5, max_value=2**40), st.text(max_size=10), st.none()),
            "timeout": st.one_of(
                st.floats(allow_nan=False, allow_infinity=False), st.integers(-5, 100), st.text(max_size=5)
            ),
            "reason": st.one_of(st.text(max_size=40), st.none()),
        },
    ).map(lambda v: json.dumps(v).encode()),
)
requests = st.fixed_dictionaries(
    {
        "method": st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "BREW"]),
        "path": st.one_of(
            st.sampled_from(ROUTES), st.text(alphabet="/abcv1?=&%.", max_size=30).map(lambda p: "/" + p)
        ),
        "token": st.sampled_from(
            [TOKEN, ANOTHER_NODES, "wrong", "", TOKEN + " ", JOB_TOKEN, EXPIRED, OTHER_AUDIENCE]
        ),
        # The placeholder a job token speaks for (None: the header is not sent).
        "placeholder": st.sampled_from([None, PLACEHOLDER, "tandem:tandem/default/other/uid-2", "../x", ""]),
        "scheme": st.sampled_from(["Bearer", "bearer", "Basic", ""]),
        "body": bodies,
        "length": st.one_of(st.none(), st.integers(-10, 70_000), st.sampled_from(["abc", "1e3", ""])),
    }
)


def _raw(r: dict[str, Any]) -> bytes:
    length = len(r["body"]) if r["length"] is None else r["length"]
    head = [
        f"{r['method']} {r['path']} HTTP/1.1",
        "Host: 127.0.0.1",
        f"Authorization: {r['scheme']} {r['token']}".rstrip(),
        *([] if r["placeholder"] is None else [f"{jobtoken.PLACEHOLDER_HEADER}: {r['placeholder']}"]),
        "Content-Type: application/json",
        f"Content-Length: {length}",
        "Connection: close",
    ]
    body: bytes = r["body"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(request=requests)
def test_random_requests_get_documented_answers_and_never_reach_the_syncer_unless_valid(
    served: tuple[HooksGateway, RecordingSyncer], request: dict[str, Any]
) -> None:
    gateway, syncer = served
    before = len(syncer.calls)
    status = _exchange(gateway.port, _raw(request))
    assert status is None or status in DOCUMENTED, status
    bearer = request["scheme"].lower() == "bearer"
    presented = request["token"].strip()
    if request["placeholder"] is None:
        authorized = bearer and presented in NODE_TOKENS
    else:
        authorized = bearer and request["placeholder"] == PLACEHOLDER and presented == JOB_TOKEN
    if not authorized or status != 200:
        assert len(syncer.calls) == before  # refused: nothing changed anywhere
    if len(syncer.calls) > before:
        # What reached the syncer carries the credential presented, for the syncer to check again.
        name, sent = syncer.calls[-1]
        assert (sent.node_token if name in ("lock", "unlock") else sent.job_token) == presented
    # Still serving.
    assert httpx.get(f"http://127.0.0.1:{gateway.port}/healthz", timeout=5).status_code == 200
