"""What the fuzzer found in the hooks HTTP API, each pinned by a test that failed before the fix."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tandem.hooks.gateway import MAX_BODY, HooksGateway
from tests.unit.node_credentials import node_token


@pytest.fixture
def port() -> Iterator[int]:
    g = HooksGateway("127.0.0.1:0", None)
    g.start()
    yield g.port
    g.stop()


def _send(port: int, head: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(4096):  # the gateway closes: a timeout here is the defect
            data += chunk
    return data


AUTH = f"Authorization: Bearer {node_token()}"


def test_an_unknown_method_gets_a_json_405_not_an_html_501(port: int) -> None:
    reply = _send(port, f"PUT /v1/lock HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Length: 0")
    assert reply.startswith(b"HTTP/1.0 405") or reply.startswith(b"HTTP/1.1 405")
    assert b"Allow: GET, POST" in reply and b'"error"' in reply


def test_a_negative_content_length_is_refused_at_once_not_read_until_the_client_hangs_up(port: int) -> None:
    reply = _send(port, f"POST /v1/lock HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Length: -1")
    assert b" 400 " in reply.split(b"\r\n", 1)[0] and b"not a byte count" in reply


def test_a_body_over_the_limit_is_413_and_the_connection_closes(port: int) -> None:
    reply = _send(
        port, f"POST /v1/lock HTTP/1.1\r\nHost: x\r\n{AUTH}\r\nContent-Length: {MAX_BODY + 1}", b"{"
    )
    assert b" 413 " in reply.split(b"\r\n", 1)[0]
