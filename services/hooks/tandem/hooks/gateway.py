"""The hooks HTTP API. Every request must carry `Authorization: Bearer <token>`."""

from __future__ import annotations

import hmac
import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tandem.settings import split_host_port

log = logging.getLogger(__name__)


class HooksGateway:
    def __init__(self, address: str, token: str) -> None:
        if not token:
            raise ValueError("the hooks API needs a bearer token; anonymous calls are never served")
        self.token = token
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._reply(HTTPStatus.OK, {"status": "ok"})
                    return
                if not gateway.authorized(self.headers.get("Authorization", "")):
                    self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
                    return
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

            def do_POST(self) -> None:
                if not gateway.authorized(self.headers.get("Authorization", "")):
                    self._reply(HTTPStatus.UNAUTHORIZED, {"error": "missing or wrong bearer token"})
                    return
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no route {self.path}"})

            def _reply(self, status: HTTPStatus, body: dict[str, Any]) -> None:
                data = (json.dumps(body) + "\n").encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        host, port = split_host_port(address)
        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="hooks-http", daemon=True)

    def authorized(self, header: str) -> bool:
        scheme, _, presented = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            presented.strip().encode(), self.token.encode()
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
