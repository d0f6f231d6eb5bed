"""The hooks gateway under clients that do not play along (issue 18): slow or silent connections,
a flood beyond its workers, a body sent with the wrong token, node names that are not one node.
Prologs must keep getting answers: a prolog without one fails and Slurm drains its node."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import grpc
import httpx
import pytest

from tandem import jobtoken
from tandem.boundedhttp import Limits
from tandem.hooks import handler
from tandem.hooks.gateway import HooksGateway
from tandem.v1 import lock_pb2, syncer_pb2
from tests.unit.future_stub import FutureStub
from tests.unit.node_credentials import node_token

# A node's credential (tandem.nodetoken): what the prolog and epilog present.
TOKEN = node_token("gpu-001", uid="uid-gpu-001")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JOB_KEY = b"k" * 32
PLACEHOLDER = "tandem:tandem/default/web/uid-1"
# A placeholder's own credential (started, terminating, drain); AUTH is the prolog's and epilog's.
PLACEHOLDER_AUTH = {
    "Authorization": f"Bearer {jobtoken.token(JOB_KEY, PLACEHOLDER)}",
    jobtoken.PLACEHOLDER_HEADER: PLACEHOLDER,
}


def auth(route: str) -> dict[str, str]:
    return AUTH if route in ("lock", "unlock") else PLACEHOLDER_AUTH


class Refusal(grpc.RpcError):  # type: ignore[misc]
    """What the syncer's stub raises for a call the syncer refused."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


class Syncer:
    """Answers lock calls (after `hold` is set, when one is given) and records every call; refuses
    each with `refusal`, when set."""

    def __init__(self, hold: threading.Event | None = None) -> None:
        self.hold = hold
        self.calls: list[tuple[str, Any]] = []
        self.refusal: Refusal | None = None

    def _answer(self, name: str, request: Any, reply: Any) -> Any:
        self.calls.append((name, request))
        if self.hold is not None:
            self.hold.wait(10)
        if self.refusal is not None:
            raise self.refusal
        return reply

    def AcquireNodeLock(self, request: Any, **_: Any) -> Any:
        return self._answer("lock", request, syncer_pb2.AcquireNodeLockResponse(lock=lock_pb2.NodeLock()))

    def ReleaseNodeLock(self, request: Any, **_: Any) -> Any:
        return self._answer("unlock", request, syncer_pb2.ReleaseNodeLockResponse(lock=lock_pb2.NodeLock()))

    def JobStarted(self, request: Any, **_: Any) -> Any:
        return self._answer("started", request, syncer_pb2.JobStartedResponse())

    def JobTerminating(self, request: Any, **_: Any) -> Any:
        return self._answer("terminating", request, syncer_pb2.JobTerminatingResponse(pod_gone=True))

    def DrainNode(self, request: Any, **_: Any) -> Any:
        return self._answer("drain", request, syncer_pb2.DrainNodeResponse())


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(syncer, **limits) -> a started gateway, stopped after the test."""
    with ExitStack() as stack:

        def start(syncer: Syncer | None = None, **limits: Any) -> HooksGateway:
            g = HooksGateway(
                "127.0.0.1:0",
                FutureStub(syncer or Syncer()),  # type: ignore[arg-type]
                5,
                Limits(**limits),
            )
            g.start()
            stack.callback(g.stop)
            return g

        yield start


def _node_auth(node: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {node_token(node, uid=f'uid-{node}')}"}


def _lock(
    gateway: HooksGateway, node: str = "gpu-001", timeout: float = 5, auth: dict[str, str] | None = None
) -> httpx.Response:
    return httpx.post(
        f"http://127.0.0.1:{gateway.port}/v1/lock",
        json={"node": node, "job": 42},
        headers=auth or AUTH,
        timeout=timeout,
    )


def _exchange(port: int, raw: bytes, timeout: float = 3) -> bytes:
    """Send raw bytes, read until the gateway closes (a timeout here is the defect)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    return data


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


# -- the token before the body ------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrong",
    ["wrong", node_token("gpu-001", expires_in=-10), node_token("gpu-001", audience="kubernetes")],
    ids=["not a jwt", "expired", "other audience"],
)
def test_a_wrong_token_is_refused_before_the_body_is_read(serve: Any, wrong: str) -> None:
    """Headers promising 60 KiB and no body at all: a server that reads the body first waits for
    it (here: until the client gives up); the gateway answers 401 from the head and closes."""
    syncer = Syncer()
    gateway = serve(syncer)
    started = time.monotonic()
    reply = _exchange(
        gateway.port,
        b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
        b"Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n" % wrong.encode(),
    )
    assert _status(reply) == 401 and b"bearer token" in reply
    assert time.monotonic() - started < 1
    assert not syncer.calls


def test_no_token_and_a_body_far_over_the_limit_is_401_not_413(serve: Any) -> None:
    """Whoever has no token learns nothing about the body limits: it is refused first."""
    gateway = serve()
    head = b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n"
    reply = _exchange(gateway.port, head)
    assert _status(reply) == 401


def test_expect_100_continue_gets_401_and_never_a_go_ahead_without_the_token(serve: Any) -> None:
    gateway = serve()
    reply = _exchange(
        gateway.port,
        b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 20\r\n\r\n",
    )
    assert _status(reply) == 401 and b"100 Continue" not in reply


def test_expect_100_continue_with_the_token_gets_the_go_ahead_then_the_answer(serve: Any) -> None:
    gateway = serve()
    body = b'{"node": "gpu-001", "job": 42}'
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=3) as s:
        s.sendall(
            b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
            b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (TOKEN.encode(), len(body))
        )
        assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert _status(reply) == 200 and b'"lock"' in reply


# -- node names ---------------------------------------------------------------------------------


BAD_NODES = ["gpu-[000-999]", "ALL", "../job/5", "a b", "x" * 300, "gpu-001,gpu-002", "gpu-001\n"]


@pytest.mark.parametrize("node", BAD_NODES)
@pytest.mark.parametrize("route", ["lock", "unlock", "drain", "started", "terminating"])
def test_a_node_name_that_is_not_one_node_is_400_and_never_reaches_the_syncer(
    serve: Any, route: str, node: str
) -> None:
    syncer = Syncer()
    gateway = serve(syncer)
    r = httpx.post(
        f"http://127.0.0.1:{gateway.port}/v1/{route}",
        json={"node": node, "job": 42, "reason": "k8s: test"},
        headers=auth(route),
        timeout=5,
    )
    assert r.status_code == 400, r.text
    assert "node name" in r.json()["error"]
    assert not syncer.calls


def test_a_placeholder_call_may_leave_its_node_out(serve: Any) -> None:
    syncer = Syncer()
    gateway = serve(syncer)
    r = httpx.post(
        f"http://127.0.0.1:{gateway.port}/v1/started", json={"job": 42}, headers=PLACEHOLDER_AUTH, timeout=5
    )
    assert r.status_code == 200
    assert syncer.calls[0][1].slurm_node == ""


# -- slow clients and floods --------------------------------------------------------------------


def _open_slow(port: int, n: int) -> list[socket.socket]:
    """n connections: a third send nothing, a third half a request head, a third a head whose
    body never comes (all without a token, as an attacker has none)."""
    parts = [b"", b"POST /v1/lock HTTP/1.1\r\nHost: x\r\nContent-Le", b"GET /healthz HTTP/1.1\r\nHo"]
    slow = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if parts[i % 3]:
            s.sendall(parts[i % 3])
        slow.append(s)
    return slow


def test_200_slow_unauthenticated_connections_do_not_keep_a_prolog_waiting(serve: Any) -> None:
    gateway = serve(workers=8)  # fewer workers than slow clients: they must hold none
    slow = _open_slow(gateway.port, 200)
    try:
        time.sleep(0.3)
        for s in slow[:50]:  # the trickle goes on while the prolog calls
            s.send(b"X")
        started = time.monotonic()
        r = _lock(gateway, timeout=2)
        took = time.monotonic() - started
        assert r.status_code == 200 and took < 1, (r.status_code, took)
        assert httpx.get(f"http://127.0.0.1:{gateway.port}/healthz", timeout=2).status_code == 200
    finally:
        for s in slow:
            s.close()


def test_a_request_not_complete_within_the_timeout_gets_408_and_is_closed(serve: Any) -> None:
    gateway = serve(request_timeout=0.5)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        s.sendall(b"POST /v1/lock HTTP/1.1\r\n")
        started = time.monotonic()
        for _ in range(3):  # trickling does not move the deadline
            time.sleep(0.1)
            s.sendall(b"X-Slow: 1\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert _status(reply) == 408
    assert time.monotonic() - started < 2


def test_past_max_connections_the_oldest_unfinished_one_makes_room(serve: Any) -> None:
    gateway = serve(max_connections=20)
    slow = _open_slow(gateway.port, 100)
    try:
        time.sleep(0.2)
        started = time.monotonic()
        assert _lock(gateway, timeout=2).status_code == 200
        assert time.monotonic() - started < 1
        slow[0].settimeout(2)
        assert slow[0].recv(100) == b""  # closed to make room
    finally:
        for s in slow:
            s.close()


def test_calls_beyond_max_calls_get_a_quick_503_and_probes_still_answer(serve: Any) -> None:
    hold = threading.Event()
    syncer = Syncer(hold)
    gateway = serve(syncer, max_calls=2)
    waiting = [threading.Thread(target=_lock, args=(gateway,)) for _ in range(2)]
    for t in waiting:
        t.start()
    try:
        deadline = time.monotonic() + 3
        while len(syncer.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        r = _lock(gateway, timeout=2)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert "2 calls in progress" in r.json()["error"]
        assert time.monotonic() - started < 0.5
        assert httpx.get(f"http://127.0.0.1:{gateway.port}/healthz", timeout=2).status_code == 200
    finally:
        hold.set()
        for t in waiting:
            t.join()
    assert _lock(gateway).status_code == 200  # a call ended: served


class WaitingLocks(Syncer):
    """Lock calls wait until `hold` is set (a Node still emptying); the rest answer at once."""

    def __init__(self) -> None:
        super().__init__(threading.Event())

    def AcquireNodeLock(self, request: Any, **_: Any) -> Any:
        self.calls.append(("lock", request))
        assert self.hold is not None and self.hold.wait(10)
        return syncer_pb2.AcquireNodeLockResponse(lock=lock_pb2.NodeLock())

    def ReleaseNodeLock(self, request: Any, **_: Any) -> Any:
        self.calls.append(("unlock", request))
        return syncer_pb2.ReleaseNodeLockResponse(lock=lock_pb2.NodeLock())


def test_calls_waiting_on_the_syncer_hold_no_worker(serve: Any) -> None:
    """Issue 40. Before: each waiting prolog held a worker thread (128), and past them every call
    got a 503. One worker here, 20 prologs waiting: an epilog's call is still served at once."""
    syncer = WaitingLocks()
    gateway = serve(syncer, workers=1)
    locks: list[httpx.Response] = []
    # Twenty nodes' prologs (one node's credential has at most PER_NODE_CALLS waiting).
    nodes = [f"gpu-{i:03d}" for i in range(100, 120)]
    waiting = [
        threading.Thread(target=lambda n=n: locks.append(_lock(gateway, n, timeout=10, auth=_node_auth(n))))
        for n in nodes
    ]
    for t in waiting:
        t.start()
    try:
        deadline = time.monotonic() + 3
        while len(syncer.calls) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(syncer.calls) == 20
        started = time.monotonic()
        r = httpx.post(
            f"http://127.0.0.1:{gateway.port}/v1/unlock",
            json={"node": "gpu-001", "job": 41},
            headers=AUTH,
            timeout=2,
        )
        assert r.status_code == 200, r.text
        assert time.monotonic() - started < 0.5
        assert not locks  # still waiting
        workers = [
            t for t in threading.enumerate() if t.name.startswith("hooks-http-") and t.name != "hooks-http-io"
        ]
        assert len(workers) == 1
    finally:
        assert syncer.hold is not None
        syncer.hold.set()
        for t in waiting:
            t.join()
    assert [r.status_code for r in locks] == [200] * 20


@pytest.mark.parametrize("whole", [True, False])
def test_a_request_head_over_16_kib_is_431(serve: Any, whole: bool) -> None:
    """Whole: its end is there, past the limit; else no end in sight, and the limit is reached."""
    gateway = serve()
    head = b"GET /healthz HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20_000 + b"\r\n\r\n"
    if whole:
        reply = _exchange(gateway.port, head)
    else:
        with socket.create_connection(("127.0.0.1", gateway.port), timeout=3) as s:
            s.sendall(head[:17_000])
            reply = s.recv(4096)
    assert _status(reply) == 431


def test_one_node_credential_cannot_hold_every_slot_and_another_nodes_prolog_is_served(serve: Any) -> None:
    """Issue 50: one node's token held every waiting slot (1,024 lock calls for up to 600 s), and
    every other node's prolog failed. Now it has at most PER_NODE_CALLS waiting; past them it is
    told to ask again (503), and another node's lock goes through at once."""
    syncer = WaitingLocks()
    gateway = serve(syncer, max_calls=64)
    flood: list[httpx.Response] = []
    waiting = [
        threading.Thread(target=lambda: flood.append(_lock(gateway, timeout=10)))
        for _ in range(handler.PER_NODE_CALLS)
    ]
    for t in waiting:
        t.start()
    try:
        deadline = time.monotonic() + 3
        while len(syncer.calls) < handler.PER_NODE_CALLS and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(syncer.calls) == handler.PER_NODE_CALLS
        over = _lock(gateway, timeout=5)
        assert over.status_code == 503 and over.headers.get("Retry-After") == "1", over.text
        assert "already has 8 calls waiting" in over.json()["error"]
        assert len(syncer.calls) == handler.PER_NODE_CALLS  # the refused call reached no syncer
        other = httpx.post(
            f"http://127.0.0.1:{gateway.port}/v1/unlock",
            json={"node": "gpu-002", "job": 7},
            headers=_node_auth("gpu-002"),
            timeout=2,
        )
        assert other.status_code == 200, other.text
    finally:
        assert syncer.hold is not None
        syncer.hold.set()
        for t in waiting:
            t.join()
    assert [r.status_code for r in flood] == [200] * handler.PER_NODE_CALLS
    # Its slots are free again once its calls were answered.
    assert _lock(gateway).status_code == 200


def test_a_placeholders_credential_has_at_most_two_calls_waiting(serve: Any) -> None:
    syncer = Syncer(threading.Event())
    gateway = serve(syncer)
    body = {"node": "gpu-001", "job": 7, "timeout": 5}
    url = f"http://127.0.0.1:{gateway.port}/v1/terminating"
    answers: list[httpx.Response] = []
    waiting = [
        threading.Thread(
            target=lambda: answers.append(httpx.post(url, json=body, headers=PLACEHOLDER_AUTH, timeout=10))
        )
        for _ in range(handler.PER_PLACEHOLDER_CALLS)
    ]
    for t in waiting:
        t.start()
    try:
        deadline = time.monotonic() + 3
        while len(syncer.calls) < handler.PER_PLACEHOLDER_CALLS and time.monotonic() < deadline:
            time.sleep(0.01)
        third = httpx.post(url, json=body, headers=PLACEHOLDER_AUTH, timeout=5)
        assert third.status_code == 429, third.text
    finally:
        assert syncer.hold is not None
        syncer.hold.set()
        for t in waiting:
            t.join()
    assert len(syncer.calls) == handler.PER_PLACEHOLDER_CALLS
