"""A fault-injecting HTTP proxy in front of the real slurmrestd: seeded, it answers some calls
itself (503), slows some, and garbles, truncates or drops the answer of others after slurmrestd
acted on them (the case where the caller cannot know whether its submit was taken)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

# Each round of seven calls holds every fault once, in a seeded order: a short run still meets
# each one.
FAULTS = {
    "pass": 2,
    "unavailable": 1,  # 503 from the proxy; slurmrestd never sees the call
    "slow": 1,  # two seconds, then the real answer
    "garbled": 1,  # slurmrestd acted; the caller gets half a JSON document with a 200
    "truncated": 1,  # slurmrestd acted; the body stops before its Content-Length
    "dropped": 1,  # slurmrestd acted; the connection closes without an answer
}
# Hop-by-hop and length headers are the proxy's own to write.
_SKIP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


class FaultProxy:
    def __init__(self, upstream: str, seed: int) -> None:
        self.upstream = upstream
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self._round: list[str] = []
        self.client = httpx.Client(base_url=upstream, timeout=30)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.handle(self)

            do_POST = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()

    def _fault(self, path: str) -> str:
        with self.lock:
            # Version negotiation is left alone: a client that cannot pick a version is not the
            # question here.
            if path.split("?")[0].endswith("/ping"):
                return "pass"
            if not self._round:
                self._round = [f for f, n in FAULTS.items() for _ in range(n)]
                self.rng.shuffle(self._round)
            fault = self._round.pop()
            self.injected[fault] += 1
            return fault

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        fault = self._fault(h.path)
        if fault == "unavailable":
            self._answer(h, 503, b'{"errors": [{"error": "injected: slurmrestd unavailable"}]}')
            return
        if fault == "slow":
            time.sleep(2)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _SKIP}
        r = self.client.request(h.command, h.path, headers=headers, content=body)
        if fault == "garbled":
            self._answer(h, 200, r.content[: len(r.content) // 2] or b"{")
        elif fault == "truncated":
            h.send_response(r.status_code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(r.content) + 100))
            h.end_headers()
            h.wfile.write(r.content[: len(r.content) // 2])
            h.close_connection = True
        elif fault == "dropped":
            h.close_connection = True  # no status line at all
        else:
            self._answer(h, r.status_code, r.content)

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
