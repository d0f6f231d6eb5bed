"""The hooks HTTP API: Slurm's prolog/epilog and the placeholder script call it; each route is one
gRPC call to the syncer. Each caller presents the credential of what it speaks for:

    prolog, epilog (root on a Slurm node): `Authorization: Bearer <hooks token>`
    POST /v1/lock         {"node", "job"}   prolog: blocks until the Node is locked
    POST /v1/unlock       {"node", "job"}   epilog: the job no longer holds the lock

    placeholder script (the Pod's user): `Authorization: Bearer <its job token>` and
    `X-Tandem-Placeholder: <its placeholder reference>` (tandem.jobtoken)
    POST /v1/started      {"node", "job"}   placeholder script started
    POST /v1/terminating  {"node", "job", "timeout"?}  placeholder got SIGTERM: 200 once the Pod
                                            is gone, 408 if it is still there at the deadline
    POST /v1/drain        {"node", "job"}   drain its own node at KillWait (the syncer writes
                                            the reason)

Credentials are checked from the request head, before any body is read; the syncer then checks a
placeholder's call against Slurm (the job is that placeholder and holds that node). `node` is one
Slurm node's name (tandem.slurm.names), never a hostlist or a path. Connections, workers and
timeouts are bounded by tandem.hooks.server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from http import HTTPStatus
from typing import Any

import grpc
from opentelemetry.trace import SpanKind

from tandem import budget, jobtoken, placeholder, tracing
from tandem.hooks.server import BoundedHTTPServer, Limits, Request, Response, json_response
from tandem.hooks.tokens import BearerTokens
from tandem.metrics import REGISTRY
from tandem.settings import split_host_port
from tandem.slurm.names import node_name_problem
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
    # The syncer read the job from Slurm: it is not the placeholder the credential names, or not
    # on that node. Final: the scripts do not ask again.
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.CONFLICT,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
}


class BadRequest(ValueError):
    pass


NODE = ""  # the caller's placeholder reference when it presented the hooks token: none
_NODE_ROUTES = frozenset({"/v1/lock", "/v1/unlock"})
_PLACEHOLDER_ROUTES = frozenset({"/v1/started", "/v1/terminating", "/v1/drain"})
_MAX_REFERENCE = 512
Route = Callable[[dict[str, Any], str], tuple[HTTPStatus, dict[str, Any]]]


class HooksGateway:
    def __init__(
        self,
        address: str,
        token: str | BearerTokens,
        syncer: syncer_pb2_grpc.SyncerServiceStub | None,
        call_timeout: float = 55.0,
        limits: Limits | None = None,
        job_keys: BearerTokens | None = None,
    ) -> None:
        self.tokens = token if isinstance(token, BearerTokens) else BearerTokens(token)
        self.job_keys = job_keys
        self.syncer = syncer
        self.call_timeout = call_timeout
        self.routes: dict[str, Route] = {
            "/v1/lock": self.lock,
            "/v1/unlock": self.unlock,
            "/v1/started": self.started,
            "/v1/terminating": self.terminating,
            "/v1/drain": self.drain,
        }
        host, port = split_host_port(address)
        limits = replace(limits or Limits(), max_body=MAX_BODY)
        self.httpd = BoundedHTTPServer(host, port, self.screen, self.handle, limits)
        self.port = self.httpd.port

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()

    def authorized(self, header: str) -> bool:
        scheme, _, presented = header.partition(" ")
        return scheme.lower() == "bearer" and self.tokens.accepts(presented.strip())

    def caller(self, headers: Any) -> str | None:
        """Who the credential in the head speaks for: NODE (the hooks token: root on a Slurm node),
        a placeholder reference (that placeholder's own token), or None (nobody we serve)."""
        header = headers.get("Authorization", "")
        reference = headers.get(jobtoken.PLACEHOLDER_HEADER)
        if reference is None:
            return NODE if self.authorized(header) else None
        scheme, _, presented = header.partition(" ")
        if (
            self.job_keys is None
            or scheme.lower() != "bearer"
            or len(reference) > _MAX_REFERENCE
            or placeholder.parse_job_name(reference) is None
        ):
            return None
        return reference if jobtoken.verifies(self.job_keys.values(), reference, presented.strip()) else None

    def screen(self, head: Request) -> Response | None:
        """Answers what needs neither a body nor the syncer, before any body is read: probes,
        methods we do not serve, a missing or wrong token, unknown routes. None: read the body and
        hand the call to `handle`."""
        if head.method == "GET" and head.path == "/healthz":
            return json_response(HTTPStatus.OK, {"status": "ok"})
        if head.method == "GET" and head.path == "/metrics":
            return Response(HTTPStatus.OK, REGISTRY.render().encode(), "text/plain; version=0.0.4")
        if head.method not in ("GET", "POST"):
            return json_response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": f"{head.method} is not served: hook routes take POST, probes GET"},
                {"Allow": "GET, POST"},
            )
        caller = self.caller(head.headers)
        if caller is None:
            if head.method == "POST":
                # Bounded label values: a scanner's made-up paths must not grow the metrics.
                HOOK_CALLS.inc(route=head.path if head.path in self.routes else "unknown", code="401")
            return json_response(
                HTTPStatus.UNAUTHORIZED,
                {"error": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="tandem-hooks"'},
            )
        if head.method == "GET":
            return json_response(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "hook routes take POST"})
        if head.path not in self.routes:
            return json_response(
                HTTPStatus.NOT_FOUND, {"error": f"no route {head.target}", "routes": sorted(self.routes)}
            )
        allowed = _NODE_ROUTES if caller == NODE else _PLACEHOLDER_ROUTES
        if head.path not in allowed:
            HOOK_CALLS.inc(route=head.path, code="403")
            who = "the hooks token (prolog, epilog)" if caller == NODE else "a placeholder's credential"
            return json_response(
                HTTPStatus.FORBIDDEN,
                {"error": f"{who} speaks for {', '.join(sorted(allowed))} only, not {head.path}"},
            )
        return None

    def handle(self, request: Request) -> Response:
        """An authorized POST to a route, its body read: one syncer call (in a worker thread)."""
        path = request.path
        started = time.monotonic()
        caller = {tracing.TRACEPARENT: request.headers.get(tracing.TRACEPARENT, "")}
        with tracing.span(
            f"POST {path}", parent=caller, kind=SpanKind.SERVER, attributes={"http.route": path}
        ) as span:
            reference = self.caller(request.headers) or NODE  # screened: not None
            status, body = self.serve(self.routes[path], request.body, reference)
            span.set_attribute("http.response.status_code", int(status))
            if status >= 400:
                tracing.mark_error(span, str(body.get("error", "")))
        HOOK_CALLS.inc(route=path, code=str(int(status)))
        HOOK_SECONDS.observe(time.monotonic() - started, route=path)
        log.info(
            "hook",
            extra={
                "route": request.target,
                "status": int(status),
                "job": body.get("job"),
                "node": body.get("node"),
                "ms": round((time.monotonic() - started) * 1000, 1),
            },
        )
        return json_response(status, body)

    def serve(self, route: Route, raw: bytes, reference: str = NODE) -> tuple[HTTPStatus, dict[str, Any]]:
        """Run a route; a bad body or a syncer error becomes an HTTP status with a JSON error."""
        try:
            if len(raw) > MAX_BODY:
                raise BadRequest(f"body larger than {MAX_BODY} bytes")
            return route(_parse_body(raw), reference)
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

    def lock(self, body: dict[str, Any], _node_caller: str) -> tuple[HTTPStatus, dict[str, Any]]:
        node, job = _node(body), _job(body)
        # The prolog says how long it waits (tandem.budget); the syncer gets a margin less, so
        # its answer (a lock, or why not and the node drained) arrives before the prolog gives up.
        waits = _timeout(body, budget.LOCK_SECONDS)
        reply = self._stub().AcquireNodeLock(
            syncer_pb2.AcquireNodeLockRequest(slurm_node=node, job_id=job),
            timeout=budget.below(waits),
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}

    def unlock(self, body: dict[str, Any], _node_caller: str) -> tuple[HTTPStatus, dict[str, Any]]:
        node, job = _node(body), _job(body)
        reply = self._stub().ReleaseNodeLock(
            syncer_pb2.ReleaseNodeLockRequest(slurm_node=node, job_id=job),
            timeout=self.call_timeout,
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}

    def started(self, body: dict[str, Any], reference: str) -> tuple[HTTPStatus, dict[str, Any]]:
        job = _job(body)
        self._stub().JobStarted(
            syncer_pb2.JobStartedRequest(job_id=job, slurm_node=_optional_node(body), placeholder=reference),
            timeout=self.call_timeout,
            wait_for_ready=True,
        )
        return HTTPStatus.OK, {"job": job, "started": True}

    def terminating(self, body: dict[str, Any], reference: str) -> tuple[HTTPStatus, dict[str, Any]]:
        job = _job(body)
        timeout = _timeout(body, self.call_timeout)
        reply = self._stub().JobTerminating(
            syncer_pb2.JobTerminatingRequest(
                job_id=job, slurm_node=_optional_node(body), placeholder=reference
            ),
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

    def drain(self, body: dict[str, Any], reference: str) -> tuple[HTTPStatus, dict[str, Any]]:
        node, job = _node(body), _job(body)
        self._stub().DrainNode(
            syncer_pb2.DrainNodeRequest(slurm_node=node, job_id=job, placeholder=reference),
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
    problem = node_name_problem(node)
    if problem is not None or not isinstance(node, str):
        raise BadRequest(problem or "node must be a string")
    return node


def _optional_node(body: dict[str, Any]) -> str:
    """The node of a placeholder's call, when it names one (the syncer falls back to the job's)."""
    return "" if body.get("node") in (None, "") else _node(body)


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
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not 0 < timeout <= budget.MAX_CALL_SECONDS
    ):
        raise BadRequest(
            f"timeout must be a number of seconds above 0, at most {budget.MAX_CALL_SECONDS:.0f}"
        )
    return float(timeout)
