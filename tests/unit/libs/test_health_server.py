"""Every service's /healthz, /readyz and /metrics on the bounded server (issue 50): a Pod that
opens connections and sends nothing used to hold a thread each, with no timeout, until the
liveness probe failed and the scheduler or the syncer restarted."""

from __future__ import annotations

import socket
import threading
import time

import httpx

from tandem.serving import HEALTH_LIMITS, HealthHttpServer


def test_probes_are_answered_while_silent_clients_hold_connections() -> None:
    server = HealthHttpServer("127.0.0.1:0", lambda: [], lambda: "x 1\n")
    server.start()
    # Counted before the connections open: a thread ending elsewhere in the worker must not fail
    # the test, and a server with a thread per connection would add hundreds.
    before = threading.active_count()
    silent: list[socket.socket] = []
    try:
        for _ in range(300):  # more than it keeps open: the oldest are closed to admit the new
            silent.append(socket.create_connection(("127.0.0.1", server.port), timeout=5))
        started = time.monotonic()
        r = httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=2)
        assert r.status_code == 200 and r.text == "ok\n"
        assert time.monotonic() - started < 1.0
        assert threading.active_count() <= before  # no thread per connection
        assert httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=2).text == "x 1\n"
    finally:
        for s in silent:
            s.close()
        server.stop()


def test_a_client_that_never_finishes_its_request_is_cut_off() -> None:
    server = HealthHttpServer("127.0.0.1:0", lambda: [], lambda: "")
    server.start()
    try:
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=HEALTH_LIMITS.request_timeout + 5)
        slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the head never ends
        started = time.monotonic()
        closed = slow.recv(1024)  # the server's answer (408) or its close
        assert time.monotonic() - started <= HEALTH_LIMITS.request_timeout + 2
        assert closed == b"" or closed.startswith(b"HTTP/1.1 408")
        slow.close()
    finally:
        server.stop()


def test_readyz_says_what_the_service_waits_for() -> None:
    server = HealthHttpServer("127.0.0.1:0", lambda: ["the informer caches"], lambda: "")
    server.start()
    try:
        r = httpx.get(f"http://127.0.0.1:{server.port}/readyz", timeout=2)
        assert r.status_code == 503 and r.text == "not ready: the informer caches\n"
        assert httpx.post(f"http://127.0.0.1:{server.port}/healthz", timeout=2).status_code == 405
        assert httpx.get(f"http://127.0.0.1:{server.port}/nothing", timeout=2).status_code == 404
    finally:
        server.stop()
