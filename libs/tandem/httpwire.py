"""A small HTTP/1.1 client for the services' calls to the apiserver and slurmrestd: the stdlib's
`http.client` behind a pool of kept-alive connections.

Why not httpx: measured against the lab's apiserver, one GET cost 1.4 ms of CPU through httpx and
0.28 ms through http.client on the same TLS connection (issue 40); every Pod costs the services a
dozen such calls. What is kept of httpx's behaviour is what the callers read: a status, the body
(whole, as text lines, or as text chunks), one error type for "no answer", a timeout per call,
bounded connections.

A kept connection the server closed while idle is noticed before it is used (its socket reads as
ready), so no request is sent on it; a GET that still meets a connection closed under it is tried
once more on a new one. Nothing else is retried: a POST may have been carried out."""

from __future__ import annotations

import codecs
import http.client
import json as jsonlib
import select
import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import orjson

Params = Mapping[str, str | Sequence[str]]

# Connections kept idle at most, and open at once at most (httpx's limits the clients had).
MAX_CONNECTIONS = 64
# A streamed body is read this much at a time.
CHUNK = 64 * 1024


class HttpError(Exception):
    """No answer: the server is unreachable, the connection broke, or the call timed out."""


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with its query
    headers: Mapping[str, str]
    content: bytes | None = None


class Response:
    """An answer: its body read whole, or (streamed) left to read until `close`."""

    def __init__(
        self,
        status_code: int,
        content: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        json: Any = None,
        chunks: Iterator[bytes] | None = None,
        on_close: Callable[[bool], None] = lambda reusable: None,
    ) -> None:
        """`json`: a body to send as JSON (what tests answer with). `chunks`: a body still to come
        (streamed); `on_close(fully_read)` gives its connection back."""
        if json is not None:
            content = jsonlib.dumps(json).encode()
        self.status_code = status_code
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}
        self._content: bytes | None = None if chunks is not None else content
        self._chunks = chunks
        self._on_close = on_close
        self._closed = chunks is None

    @property
    def content(self) -> bytes:
        if self._content is None:
            self.read()
        return self._content or b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        # orjson: a third of stdlib json's CPU on the API server's and slurmrestd's answers.
        return orjson.loads(self.content)

    def read(self) -> bytes:
        if self._content is None:
            self._content = b"".join(self.iter_bytes())
        return self._content

    def iter_bytes(self) -> Iterator[bytes]:
        if self._content is not None:
            if self._content:
                yield self._content
            return
        assert self._chunks is not None
        try:
            yield from self._chunks
        except (OSError, http.client.HTTPException) as e:
            self._finish(False)
            raise HttpError(f"the answer broke off: {_describe(e)}") from e
        self._finish(True)

    def iter_text(self) -> Iterator[str]:
        decoder = _utf8_decoder()
        for chunk in self.iter_bytes():
            text = decoder.decode(chunk)
            if text:
                yield text
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail

    def iter_lines(self) -> Iterator[bytes]:
        """The body's lines (without their line ends), as they arrive."""
        pending = b""
        for chunk in self.iter_bytes():
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.rstrip(b"\r")
        if pending:
            yield pending

    def close(self) -> None:
        self._finish(False)

    def _finish(self, fully_read: bool) -> None:
        if not self._closed:
            self._closed = True
            self._on_close(fully_read)

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# A stand-in for the network (unit tests): a request in, an answer out.
Transport = Callable[[Request], Response]


@dataclass
class _Pool:
    idle: list[http.client.HTTPConnection] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(MAX_CONNECTIONS)
    )


class Client:
    """One server (`base_url`: http:// or https://), its connections kept alive and shared by
    threads; each call takes one, and gives it back once its answer is read."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        headers: Mapping[str, str] | None = None,
        transport: Transport | None = None,
    ) -> None:
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// address: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path
        # The system's CAs cost ~40 ms to load: only for an https:// server, and once.
        if ssl_context is None and self._https:
            ssl_context = ssl.create_default_context()
        self._ssl = ssl_context
        self.timeout = timeout
        self._headers = dict(headers or {})
        self._transport = transport
        self._pool = _Pool()

    def close(self) -> None:
        with self._pool.lock:
            idle, self._pool.idle = self._pool.idle, []
        for conn in idle:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        content: bytes | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
        connect_timeout: float | None = None,
        stream: bool = False,
    ) -> Response:
        """One call. `timeout` bounds each wait for the server (the client's by default), and
        connecting unless `connect_timeout` does. `stream`: the body is left to read; close the
        answer (or read it all)."""
        if json is not None:
            content = jsonlib.dumps(json).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        target = self._prefix + path + (f"?{urlencode(params, doseq=True)}" if params else "")
        sent = {**self._headers, **(headers or {})}
        if self._transport is not None:
            return self._transport(Request(method, target, sent, content))
        wait = self.timeout if timeout is None else timeout
        if not self._pool.slots.acquire(timeout=wait):
            raise HttpError(f"no free connection to {self.base_url} within {wait:g}s")
        try:
            return self._send(method, target, sent, content, wait, connect_timeout or wait, stream)
        except BaseException:
            self._pool.slots.release()
            raise

    def _send(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        content: bytes | None,
        wait: float,
        connect_wait: float,
        stream: bool,
    ) -> Response:
        conn, reused = self._take(connect_wait)
        try:
            answer = self._exchange(conn, method, target, headers, content, wait)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
            conn.close()
            if not (reused and method in ("GET", "HEAD")):
                raise HttpError(f"{method} {self.base_url}{target}: {_describe(e)}") from e
            conn = self._connect(connect_wait)  # closed under us as we sent: once more, on a new one
            try:
                answer = self._exchange(conn, method, target, headers, content, wait)
            except (OSError, http.client.HTTPException) as again:
                conn.close()
                raise HttpError(f"{method} {self.base_url}{target}: {_describe(again)}") from again
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise HttpError(f"{method} {self.base_url}{target}: {_describe(e)}") from e
        return self._answer(conn, answer, stream)

    def _answer(
        self, conn: http.client.HTTPConnection, answer: http.client.HTTPResponse, stream: bool
    ) -> Response:
        status, headers = answer.status, dict(answer.getheaders())

        def give_back(fully_read: bool) -> None:
            # Read to its end, a body of known length is not marked closed until read past it;
            # a connection whose last answer is not closed refuses the next request.
            answer.close()
            if fully_read and not answer.will_close:
                self._keep(conn)
            else:
                conn.close()
            self._pool.slots.release()

        if stream:
            return Response(status, headers=headers, chunks=_chunks(answer), on_close=give_back)
        try:
            body = answer.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()  # its slot: `request` gives it back as the error passes
            raise HttpError(f"the answer from {self.base_url} broke off: {_describe(e)}") from e
        give_back(True)
        return Response(status, body, headers)

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection,
        method: str,
        target: str,
        headers: dict[str, str],
        content: bytes | None,
        wait: float,
    ) -> http.client.HTTPResponse:
        conn.request(method, target, body=content, headers=headers)  # connects if new
        assert conn.sock is not None
        conn.sock.settimeout(wait)
        return conn.getresponse()

    def _take(self, wait: float) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection still open (the newest first), else a new one."""
        while True:
            with self._pool.lock:
                conn = self._pool.idle.pop() if self._pool.idle else None
            if conn is None:
                return self._connect(wait), False
            if _still_open(conn):
                return conn, True
            conn.close()

    def _connect(self, wait: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=wait, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=wait)

    def _keep(self, conn: http.client.HTTPConnection) -> None:
        with self._pool.lock:
            if len(self._pool.idle) < MAX_CONNECTIONS:
                self._pool.idle.append(conn)
                return
        conn.close()


def _chunks(answer: http.client.HTTPResponse) -> Iterator[bytes]:
    while chunk := answer.read1(CHUNK):
        yield chunk
    if answer.length:  # read1 takes the end of the connection for the end of the body
        raise http.client.IncompleteRead(b"", answer.length)


def _still_open(conn: http.client.HTTPConnection) -> bool:
    """An idle kept-alive connection has nothing to read: if its socket is readable, the server
    closed it (or sent what nobody asked for) and it must not carry a request."""
    sock = conn.sock
    if sock is None:
        return False
    poller = select.poll()  # not select.select: it fails on descriptors past 1023
    try:
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


def _describe(e: BaseException) -> str:
    if isinstance(e, socket.timeout | TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__


def _utf8_decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")
