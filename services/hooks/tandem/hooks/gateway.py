"""The hooks HTTP API: Slurm's prolog/epilog and the placeholder script call it; each route is one
gRPC call to the syncer. Every request must carry `Authorization: Bearer <token>`.

    POST /v1/lock         {"node", "job"}   prolog: blocks until the Node is locked
    POST /v1/unlock       {"node", "job"}   epilog: the job no longer holds the lock
    POST /v1/started      {"node", "job"}   placeholder script started
    POST /v1/terminating  {"node", "job", "timeout"?}  placeholder got SIGTERM: 200 once the Pod
                                            is gone, 408 if it is still there at the deadline
    POST /v1/drain        {"node", "reason"}  drain a Slurm node ("k8s:" reasons)
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.trace import SpanKind

from tandem import tracing
from tandem.metrics import REGISTRY
from tandem.settings import split_host_port
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

log = logging.getLogger(__name__)

HOOK_CALLS = REGISTRY.counter(
    "tandem_hook_calls_total", "hook API calls by route and HTTP status", ["route", "code"]
)
HOOK_SECONDS = REGISTRY.histogram("tandem_hook_call_seconds", "hook API call latency", ["route"])

MAX_BODY = 64 * 1024
_GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.CONFLICT,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
}


class BadRequest(ValueError):
    pass


class HooksGateway:
    def __init__(
        self,
        address: str,
        token: str,
        syncer: syncer_pb2_grpc.SyncerServiceStub | None,
        call_timeout: float = 55.0,
    ) -> None:
        if not token:
            raise ValueError("the hooks API needs a bearer token; anonymous calls are never served")
        self.token = token
        self.syncer = syncer
        self.call_timeout = call_timeout
        self.routes: dict[str, Callable[[dict[str, Any]], tuple[HTTPStatus, dict[str, Any]]]] = {
            "/v1/lock": self.lock,
            "/v1/unlock": self.unlock,
            "/v1/started": self.started,
            "/v1/terminating": self.terminating,
            "/v1/drain": self.drain,
        }
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if self.path == "/healthz":
                    self._reply(HTTPStatus.OK, {"status": "ok"})
                elif self.path == "/metrics":
                    data = REGISTRY.render().encode()
                    self.send_response(HTTPStatus.OK)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                elif not gateway.authorized(self.headers.get("Authorization", "")):
                    self._unauthorized()
                else:
                    self._reply(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "hook routes take POST"})

            def __getattr__(self, name: str) -> Any:
                # PUT, DELETE, BREW...: a JSON 405 naming what works, not http.server's HTML 501.
                if name.startswith("do_"):
                    return self._not_allowed
                raise AttributeError(name)

            def _not_allowed(self) -> None:
                self.close_connection = True
                self._reply(
                    HTTPStatus.METHOD_NOT_ALLOWED,
                    {"error": f"{self.command} is not served: hook routes take POST, probes GET"},
                    {"Allow": "GET, POST"},
                )

            def do_POST(self) -> None:
                declared = (self.headers.get("Content-Length") or "0").strip()
                if not declared.isdigit():
                    # Unreadable or negative: we cannot know where the body ends, so no keep-alive.
                    self.close_connection = True
                    self._reply(
                        HTTPStatus.BAD_REQUEST, {"error": f"Content-Length {declared!r} is not a byte count"}
                    )
                    return
                length = int(declared)
                if length > MAX_BODY:
                    self.close_connection = True  # the body stays unread
                    self._reply(
                        HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body larger than {MAX_BODY} bytes"}
                    )
                    return
                raw = self.rfile.read(length) if length else b""
                path = self.path.split("?", 1)[0]
                # Bounded label values: a scanner's made-up paths must not grow the metrics.
                route_name = path if path in gateway.routes else "unknown"
                if not gateway.authorized(self.headers.get("Authorization", "")):
                    HOOK_CALLS.inc(route=route_name, code="401")
                    self._unauthorized()
                    return
                route = gateway.routes.get(path)
                if route is None:
                    self._reply(
                        HTTPStatus.NOT_FOUND,
                        {"error": f"no route {self.path}", "routes": sorted(gateway.routes)},
                    )
                    return
                started = time.monotonic()
                caller = {tracing.TRACEPARENT: self.headers.get(tracing.TRACEPARENT, "")}
                with tracing.span(
                    f"POST {path}", parent=caller, kind=SpanKind.SERVER, attributes={"http.route": path}
                ) as span:
                    status, body = gateway.serve(route, raw)
                    span.set_attribute("http.response.status_code", int(status))
                    if status >= 400:
                        tracing.mark_error(span, str(body.get("error", "")))
                HOOK_CALLS.inc(route=route_name, code=str(int(status)))
                HOOK_SECONDS.observe(time.monotonic() - started, route=route_name)
                log.info(
                    "hook",
                    extra={
                        "route": self.path,
                        "status": int(status),
                        "job": body.get("job"),
                        "node": body.get("node"),
                        "ms": round((time.monotonic() - started) * 1000, 1),
                    },
                )
                self._reply(status, body)

            def _unauthorized(self) -> None:
                self.send_response(HTTPStatus.UNAUTHORIZED)
                data = b'{"error": "missing or wrong bearer token"}\n'
                self.send_header("WWW-Authenticate", 'Bearer realm="tandem-hooks"')
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _reply(
                self, status: HTTPStatus, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = (json.dumps(body) + "\n").encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
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

    def serve(
        self, route: Callable[[dict[str, Any]], tuple[HTTPStatus, dict[str, Any]]], raw: bytes
    ) -> tuple[HTTPStatus, dict[str, Any]]:
        """Run a route; a bad body or a syncer error becomes an HTTP status with a JSON error."""
        try:
            if len(raw) > MAX_BODY:
                raise BadRequest(f"body larger than {MAX_BODY} bytes")
            return route(_parse_body(raw))
        except BadRequest as e:
            return HTTPStatus.BAD_REQUEST, {"error": str(e)}
        except grpc.RpcError as e:
            code = e.code()
            status = _GRPC_TO_HTTP.get(code, HTTPStatus.BAD_GATEWAY)
            return status, {"error": e.details() or code.name, "syncer_status": code.name}

    # -- routes ----------------------------------------------------------------------------------

    def _stub(self) -> syncer_pb2_grpc.SyncerServiceStub:
        if self.syncer is None:
            raise BadRequest("no syncer configured")
        return self.syncer

    def lock(self, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        node, job = _node(body), _job(body)
        # The prolog says how long it waits; the syncer gets a second less, so its answer (a
        # lock, or why not and the node drained) arrives before the prolog gives up.
        waits = _timeout(body, self.call_timeout)
        reply = self._stub().AcquireNodeLock(
            syncer_pb2.AcquireNodeLockRequest(slurm_node=node, job_id=job),
            timeout=max(1.0, min(self.call_timeout, waits - 1)),
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}

    def unlock(self, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        node, job = _node(body), _job(body)
        reply = self._stub().ReleaseNodeLock(
            syncer_pb2.ReleaseNodeLockRequest(slurm_node=node, job_id=job),
            timeout=self.call_timeout,
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}

    def started(self, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        job = _job(body)
        self._stub().JobStarted(
            syncer_pb2.JobStartedRequest(job_id=job, slurm_node=str(body.get("node", ""))),
            timeout=self.call_timeout,
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"job": job, "started": True}

    def terminating(self, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        job = _job(body)
        timeout = _timeout(body, self.call_timeout)
        reply = self._stub().JobTerminating(
            syncer_pb2.JobTerminatingRequest(job_id=job, slurm_node=str(body.get("node", ""))),
            # The answer must reach the caller before it gives up (curl --max-time = timeout).
            timeout=max(1.0, timeout - 0.5),
            wait_for_ready=True,
        )
        if reply.pod_gone:
            return HTTPStatus.OK, {"job": job, "pod_gone": True}
        return HTTPStatus.REQUEST_TIMEOUT, {
            "job": job,
            "pod_gone": False,
            "drained_slurm_nodes": list(reply.drained_slurm_nodes),
            "error": "a Pod of the job is still there at the deadline; Tandem drained its nodes",
        }

    def drain(self, body: dict[str, Any]) -> tuple[HTTPStatus, dict[str, Any]]:
        node = _node(body)
        reason = body.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise BadRequest("reason must be a non-empty string")
        self._stub().DrainNode(
            syncer_pb2.DrainNodeRequest(slurm_node=node, reason=reason),
            timeout=self.call_timeout,
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"node": node, "drained": True}


def _parse_body(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequest('a JSON object body is required, e.g. {"node": "gpu-001", "job": 42}')
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"body is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


def _node(body: dict[str, Any]) -> str:
    node = body.get("node")
    if not isinstance(node, str) or not node or len(node) > 253 or any(c.isspace() for c in node):
        raise BadRequest("node must be a Slurm node name")
    return node


def _job(body: dict[str, Any]) -> int:
    job = body.get("job")
    if isinstance(job, str) and job.isdigit():
        job = int(job)
    if not isinstance(job, int) or isinstance(job, bool) or not 0 < job < 2**32:
        raise BadRequest("job must be a positive Slurm job id")
    return job


def _lock_name(state: int) -> str:
    from tandem.v1 import lock_pb2

    return str(lock_pb2.LockState.Name(state)).removeprefix("LOCK_STATE_").lower()


def _timeout(body: dict[str, Any], default: float) -> float:
    """How long the caller waits (`timeout` in the body, seconds)."""
    timeout = body.get("timeout", default)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise BadRequest("timeout must be a positive number of seconds")
    return float(timeout)
