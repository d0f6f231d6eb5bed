"""An HTTP/1.1 server whose threads never wait, on a client or on the answer: the hooks gateway's
API, and every service's /healthz, /readyz and /metrics (tandem.serving.HealthHttpServer).

One thread does all socket I/O through a selector: it accepts, reads each request until its head
and body are complete (within `request_timeout` of the accept, however slowly the bytes come), asks
`screen` about the head before reading any body (a wrong token is refused without reading it), and
writes every answer. Only a complete request goes to one of `workers` threads, which run `handle`:
it starts the call and returns, and whoever finishes the call (gRPC's thread, once the syncer
replies: a prolog's lock may wait ~55 s) hands the answer back to the I/O thread (issue 40: a
waiting call held a worker thread each, and hundreds of prologs wait at once). At most `max_calls`
calls are in progress; past that the answer is a 503 at once, and the hook scripts ask again a
second later. A connection still sending its request costs a socket and a buffer, no thread; at
`max_connections` the oldest such connection is closed to admit the newest, so slow or idle clients
cannot lock prologs out. One request per connection (`Connection: close`): the scripts run one curl
per call.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import logging
import queue
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from typing import Any

from tandem.metrics import REGISTRY, Counter

log = logging.getLogger(__name__)

CONNECTIONS_REFUSED = REGISTRY.counter(
    "tandem_hook_connections_refused_total",
    "hook API connections closed or refused before a worker served them, by why",
    ["reason"],
)
HEALTH_CONNECTIONS_REFUSED = REGISTRY.counter(
    "tandem_health_connections_refused_total",
    "health and metrics connections closed or refused before they were answered, by why",
    ["reason"],
)

MAX_HEAD = 16 * 1024
# After the answer, what the client still sends is read and dropped this long: closing a socket with
# unread bytes sends a reset, which can destroy the answer before the client reads it.
LINGER = 1.0
_HEAD_END = re.compile(rb"\r?\n\r?\n")
_SWEEP_EVERY = 0.2


@dataclass(frozen=True)
class Limits:
    # Threads that start calls: parse a body, start a gRPC call (microseconds each, under the GIL).
    # More than one, so a handler held up (a certificate rotation's file reads) stops no other.
    workers: int = 8
    request_timeout: float = 10.0
    max_connections: int = 1024
    max_body: int = 64 * 1024
    # Calls in progress at once (a socket and a gRPC call each, no thread): a prolog on every node
    # of a 1,000-node cluster at once, each waiting for its Node.
    max_calls: int = 1024


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: http.client.HTTPMessage
    body: bytes = b""

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


@dataclass(frozen=True)
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = field(default_factory=dict)

    def encode(self) -> bytes:
        lines = [
            f"HTTP/1.1 {int(self.status)} {self.status.phrase}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            *(f"{name}: {value}" for name, value in self.headers.items()),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


def json_response(
    status: HTTPStatus, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
) -> Response:
    return Response(status, (json.dumps(body) + "\n").encode(), headers=headers or {})


class Refused(Exception):
    """A request answered before a worker sees it."""

    def __init__(self, status: HTTPStatus, error: str) -> None:
        super().__init__(error)
        self.response = json_response(status, {"error": error})


def parse_head(head: bytes) -> Request:
    """The request line and headers (everything up to the blank line)."""
    line, _, rest = head.partition(b"\n")
    parts = line.rstrip(b"\r").split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        raise Refused(HTTPStatus.BAD_REQUEST, "not an HTTP/1.x request line")
    try:
        method, target = parts[0].decode("ascii"), parts[1].decode("ascii")
        headers = http.client.parse_headers(io.BytesIO(rest))
    except (UnicodeDecodeError, http.client.HTTPException) as e:
        raise Refused(HTTPStatus.BAD_REQUEST, f"unreadable request head: {type(e).__name__}") from e
    return Request(method, target, headers)


def body_length(head: Request, max_body: int) -> int:
    """How many body bytes follow the head, from its Content-Length."""
    if head.headers.get("Transfer-Encoding"):
        raise Refused(HTTPStatus.LENGTH_REQUIRED, "send the body with a Content-Length, not chunked")
    declared = {v.strip() for v in head.headers.get_all("Content-Length") or ["0"]}
    value = declared.pop() if len(declared) == 1 else ",".join(sorted(declared))
    # isascii: latin-1 headers hold digits such as "²" that isdigit() accepts and int() does not.
    if not (value.isascii() and value.isdigit()):
        raise Refused(HTTPStatus.BAD_REQUEST, f"Content-Length {value!r} is not a byte count")
    if int(value) > max_body:
        raise Refused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"body larger than {max_body} bytes")
    return int(value)


class _Conn:
    """One client connection, owned by the I/O thread (except while a worker holds its request)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.inbox = bytearray()
        self.scanned = 0  # inbox bytes already searched for the end of the head
        self.head: Request | None = None
        self.body_at = 0
        self.body_length = 0
        self.outbox = memoryview(b"")
        self.answered = False
        self.events = 0  # what the selector watches for; 0 = not registered


Screen = Callable[[Request], Response | None]
Answer = Callable[[Response], None]
# Starts serving a complete request; the answer goes to `Answer`, once, from any thread, now or
# when the call ends.
Handle = Callable[[Request, Answer], None]


class _Reply:
    """A request's one answer, back to the I/O thread (a second one is dropped)."""

    def __init__(self, server: BoundedHTTPServer, conn: _Conn) -> None:
        self._server, self._conn = server, conn
        self._lock = threading.Lock()
        self._sent = False

    def __call__(self, response: Response) -> None:
        with self._lock:
            if self._sent:
                return
            self._sent = True
        self._server._answers.put((self._conn, response))
        self._server._wake()


class BoundedHTTPServer:
    def __init__(
        self,
        host: str,
        port: int,
        screen: Screen,
        handle: Handle,
        limits: Limits,
        name: str = "hooks-http",
        refused: Counter = CONNECTIONS_REFUSED,
    ) -> None:
        self.screen, self.handle, self.limits = screen, handle, limits
        self._refused = refused
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.create_server((host, port), family=family, backlog=1024)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        # Insertion order = age: the first one is the one to close when room is needed.
        self._open: dict[_Conn, None] = {}
        self._busy = 0  # requests handed to `handle`, not answered yet; touched by the I/O thread only
        self._jobs: queue.SimpleQueue[tuple[_Conn, Request] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[tuple[_Conn, Response]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._io = threading.Thread(target=self._serve, name=f"{name}-io", daemon=True)
        self._workers = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(limits.workers)
        ]

    def start(self) -> None:
        for worker in self._workers:
            worker.start()
        self._io.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._io.is_alive():
            self._io.join(timeout=5)
        for _ in self._workers:
            self._jobs.put(None)

    # -- the I/O thread ---------------------------------------------------------------------------

    def _serve(self) -> None:
        next_sweep = time.monotonic()
        try:
            while not self._stopping.is_set():
                for key, events in self._selector.select(timeout=_SWEEP_EVERY):
                    if key.fileobj is self._listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._take_answers()
                    else:
                        self._on_ready(key.data, events)
                if time.monotonic() >= next_sweep:
                    self._expire()
                    next_sweep = time.monotonic() + _SWEEP_EVERY
        except Exception:
            log.exception("an HTTP server stopped", extra={"port": self.port})
            raise
        finally:
            for conn in list(self._open):
                self._close(conn)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        for _ in range(64):  # a batch, so reads and writes get their turn in a flood
            try:
                sock, _peer = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                # Out of file descriptors (EMFILE): the oldest unfinished connection makes room.
                log.warning("cannot accept a connection", extra={"port": self.port, "error": str(e)})
                self._evict_oldest()
                return
            sock.setblocking(False)
            if len(self._open) >= self.limits.max_connections:
                self._evict_oldest()
            conn = _Conn(sock, time.monotonic() + self.limits.request_timeout)
            self._open[conn] = None
            self._watch(conn, selectors.EVENT_READ)

    def _evict_oldest(self) -> None:
        for conn in self._open:
            if not conn.answered or not conn.outbox:  # still sending, or lingering after its answer
                self._refused.inc(reason="evicted")
                self._close(conn)
                return

    def _on_ready(self, conn: _Conn, events: int) -> None:
        if events & selectors.EVENT_WRITE:
            self._send(conn)
        elif events & selectors.EVENT_READ:
            self._receive(conn)

    def _receive(self, conn: _Conn) -> None:
        try:
            chunk = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        if not chunk:  # the client is done: before its request was complete, or after our answer
            self._close(conn)
            return
        if conn.answered:
            return  # lingering: dropped
        conn.inbox += chunk
        try:
            outcome = self._advance(conn)
        except Refused as e:
            outcome = e.response
        if isinstance(outcome, Response):
            self._answer(conn, outcome)
        elif outcome is not None:
            self._dispatch(conn, outcome)

    def _advance(self, conn: _Conn) -> Request | Response | None:
        """What the bytes so far call for: a complete request for a worker, an answer from the head
        alone (a probe, a wrong token: the body is never read), or None while more is to come."""
        if conn.head is None:
            # From a little before the last search: the blank line may straddle two chunks.
            end = _HEAD_END.search(conn.inbox, max(0, conn.scanned - 3))
            conn.scanned = len(conn.inbox)
            if (end.end() if end else len(conn.inbox)) > MAX_HEAD:
                too_large = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
                raise Refused(too_large, f"request head over {MAX_HEAD} bytes")
            if end is None:
                return None
            head = parse_head(bytes(conn.inbox[: end.end()]))
            verdict = self._screen(head)
            if verdict is not None:
                return verdict
            conn.head, conn.body_at = head, end.end()
            conn.body_length = body_length(head, self.limits.max_body)
            if self._body_missing(conn) and head.headers.get("Expect", "").lower() == "100-continue":
                _send_now(conn.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        if self._body_missing(conn):
            return None
        return replace(conn.head, body=bytes(conn.inbox[conn.body_at : conn.body_at + conn.body_length]))

    @staticmethod
    def _body_missing(conn: _Conn) -> bool:
        return len(conn.inbox) - conn.body_at < conn.body_length

    def _screen(self, head: Request) -> Response | None:
        try:
            return self.screen(head)
        except Exception:
            log.exception("screening a hooks request failed", extra={"route": head.path})
            return json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"})

    def _dispatch(self, conn: _Conn, request: Request) -> None:
        if self._busy >= self.limits.max_calls:
            self._refused.inc(reason="busy")
            busy = f"{self.limits.max_calls} calls in progress, the most served at once; ask again"
            self._answer(
                conn, json_response(HTTPStatus.SERVICE_UNAVAILABLE, {"error": busy}, {"Retry-After": "1"})
            )
            return
        self._busy += 1
        self._watch(conn, 0)
        del self._open[conn]  # a call in progress: no deadline, never evicted
        self._jobs.put((conn, request))

    def _take_answers(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass
        while True:
            try:
                conn, response = self._answers.get_nowait()
            except queue.Empty:
                return
            self._busy -= 1
            self._open[conn] = None
            self._answer(conn, response)

    def _answer(self, conn: _Conn, response: Response) -> None:
        conn.answered = True
        conn.outbox = memoryview(response.encode())
        conn.deadline = time.monotonic() + self.limits.request_timeout
        self._open.pop(conn, None)
        self._open[conn] = None  # youngest again: an answer in flight is the last to be evicted
        self._watch(conn, selectors.EVENT_WRITE)
        self._send(conn)

    def _send(self, conn: _Conn) -> None:
        try:
            sent = conn.sock.send(conn.outbox)
        except BlockingIOError:
            return
        except OSError:
            self._close(conn)
            return
        conn.outbox = conn.outbox[sent:]
        if conn.outbox:
            return
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.deadline = time.monotonic() + LINGER
        self._watch(conn, selectors.EVENT_READ)

    def _expire(self) -> None:
        now = time.monotonic()
        for conn in [c for c in self._open if c.deadline <= now]:
            if not conn.answered:
                self._refused.inc(reason="request_timeout")
                timeout = self.limits.request_timeout
                _send_now(
                    conn.sock,
                    json_response(
                        HTTPStatus.REQUEST_TIMEOUT, {"error": f"request not complete within {timeout:g}s"}
                    ).encode(),
                )
            self._close(conn)

    def _watch(self, conn: _Conn, events: int) -> None:
        if events == conn.events:
            return
        if not events:
            self._selector.unregister(conn.sock)
        elif not conn.events:
            self._selector.register(conn.sock, events, conn)
        else:
            self._selector.modify(conn.sock, events, conn)
        conn.events = events

    def _close(self, conn: _Conn) -> None:
        self._watch(conn, 0)
        self._open.pop(conn, None)
        conn.sock.close()

    # -- workers ----------------------------------------------------------------------------------

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            conn, request = job
            reply = _Reply(self, conn)
            try:
                self.handle(request, reply)
            except Exception:
                log.exception("a hooks request failed", extra={"route": request.path})
                reply(json_response(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"}))

    def _wake(self) -> None:
        # A full buffer means a wake-up is pending anyway; a closed one, that the server stopped.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")


def _send_now(sock: socket.socket, data: bytes) -> None:
    """Best effort, never blocking: for a few bytes into an empty socket buffer."""
    with contextlib.suppress(OSError):
        sock.send(data)
