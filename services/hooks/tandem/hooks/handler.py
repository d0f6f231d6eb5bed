"""What the hooks gateway does with each request (tandem.hooks.gateway describes the API): the
head is screened first (probes, methods, the credential, the route, whether that credential may
call it), and only then is a body read and handed to the route, traced, counted and logged."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from opentelemetry.trace import Span, SpanKind

from tandem import jobtoken, nodetoken, placeholder, sakeys, tracing
from tandem.boundedhttp import Request, Response, json_response
from tandem.hooks.routes import NODE, Outcome, SyncerRoutes
from tandem.metrics import CONTENT_TYPE, REGISTRY

log = logging.getLogger("tandem.hooks.gateway")

HOOK_CALLS = REGISTRY.counter(
    "tandem_hook_calls_total", "hook API calls by route and HTTP status", ["route", "code"]
)
HOOK_SECONDS = REGISTRY.histogram("tandem_hook_call_seconds", "hook API call latency", ["route"])

_NODE_ROUTES = frozenset({"/v1/lock", "/v1/unlock"})
_PLACEHOLDER_ROUTES = frozenset({"/v1/started", "/v1/terminating", "/v1/drain"})
_MAX_REFERENCE = 512


# What `Credentials.caller` says of a node credential signed by a key the API server has not
# published yet, while the gateway reads its keys again: ask again in a second.
UNSETTLED = "\x00unsettled"
# Calls one credential may have waiting at once (issue 50: one credential held every slot, and
# every other node's prolog failed). A node's prolog and epilog run one call per job; a
# placeholder's script one at a time.
PER_NODE_CALLS = 8
PER_PLACEHOLDER_CALLS = 2


class Credentials:
    """Who a request speaks for, from its head: root on one Slurm node (that node's credential,
    tandem.nodetoken), or one placeholder (its own job token, tandem.jobtoken, with its reference)."""

    def __init__(self, node_keys: sakeys.ServiceAccountKeys | None = None) -> None:
        # The API server's published keys: a node credential Kubernetes never signed is refused
        # here, before the syncer spends a TokenReview on it. None: its form only (a gateway
        # without access to the API server; the syncer's review still decides).
        self.node_keys = node_keys

    def caller(self, headers: Any) -> str | None:
        """Who the credential in the head speaks for: NODE (a node's credential: root on a Slurm
        node; which node, the syncer learns from the API server), a placeholder reference (that
        placeholder's own token), UNSETTLED (a node credential under a key not read yet), or
        None (nobody we serve)."""
        scheme, _, presented = str(headers.get("Authorization", "")).partition(" ")
        reference = headers.get(jobtoken.PLACEHOLDER_HEADER)
        if reference is None:
            token = presented.strip()
            if scheme.lower() != "bearer" or not nodetoken.plausible(token):
                return None
            if self.node_keys is None:
                return NODE
            verdict = self.node_keys.verdict(token)
            if verdict is sakeys.Verdict.UNKNOWN:
                return UNSETTLED
            return NODE if verdict is sakeys.Verdict.SIGNED else None
        # Its form only: the gateway holds no job key (whoever took it could mint tokens); the
        # syncer verifies the mac, before it reads anything from Slurm.
        if (
            scheme.lower() != "bearer"
            or len(reference) > _MAX_REFERENCE
            or placeholder.parse_job_name(reference) is None
            or not jobtoken.well_formed(presented.strip())
        ):
            return None
        return str(reference)

    @staticmethod
    def presented(headers: Any) -> str:
        """The bearer token of a screened call (a node's credential or a job token): the syncer
        checks it again."""
        scheme, _, presented = str(headers.get("Authorization", "")).partition(" ")
        return presented.strip() if scheme.lower() == "bearer" else ""


class HookHandler:
    """The two halves tandem.boundedhttp asks for: `screen` (the head alone) and `handle` (an
    authorized call with its body: started in a worker thread, answered when the syncer replies)."""

    def __init__(self, credentials: Credentials, routes: SyncerRoutes) -> None:
        self.credentials = credentials
        self.routes = routes
        # Calls waiting on the syncer, per credential presented (the hash of its reference and token).
        self._waiting: dict[str, int] = {}
        self._waiting_lock = threading.Lock()

    def _admit(self, who: str, cap: int) -> bool:
        with self._waiting_lock:
            if self._waiting.get(who, 0) >= cap:
                return False
            self._waiting[who] = self._waiting.get(who, 0) + 1
            return True

    def _release(self, who: str) -> None:
        with self._waiting_lock:
            left = self._waiting.get(who, 0) - 1
            if left > 0:
                self._waiting[who] = left
            else:
                self._waiting.pop(who, None)

    def screen(self, head: Request) -> Response | None:
        """Answers what needs neither a body nor the syncer, before any body is read: probes,
        methods we do not serve, a missing or wrong token, unknown routes. None: read the body and
        hand the call to `handle`."""
        if head.method == "GET" and head.path == "/healthz":
            return json_response(HTTPStatus.OK, {"status": "ok"})
        if head.method == "GET" and head.path == "/metrics":
            return Response(HTTPStatus.OK, REGISTRY.render().encode(), CONTENT_TYPE)
        if head.method not in ("GET", "POST"):
            return json_response(
                HTTPStatus.METHOD_NOT_ALLOWED,
                {"error": f"{head.method} is not served: hook routes take POST, probes GET"},
                {"Allow": "GET, POST"},
            )
        caller = self.credentials.caller(head.headers)
        if caller == UNSETTLED:
            return json_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                {"error": "the credential's signing key is being read from the API server; ask again"},
                {"Retry-After": "1"},
            )
        if caller is None:
            if head.method == "POST":
                # Bounded label values: a scanner's made-up paths must not grow the metrics.
                HOOK_CALLS.inc(route=head.path if head.path in self.routes.table else "unknown", code="401")
            return json_response(
                HTTPStatus.UNAUTHORIZED,
                {"error": "missing or wrong bearer token"},
                {"WWW-Authenticate": 'Bearer realm="tandem-hooks"'},
            )
        if head.method == "GET":
            return json_response(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "hook routes take POST"})
        if head.path not in self.routes.table:
            return json_response(
                HTTPStatus.NOT_FOUND,
                {"error": f"no route {head.target}", "routes": sorted(self.routes.table)},
            )
        allowed = _NODE_ROUTES if caller == NODE else _PLACEHOLDER_ROUTES
        if head.path not in allowed:
            HOOK_CALLS.inc(route=head.path, code="403")
            who = "a node's credential (prolog, epilog)" if caller == NODE else "a placeholder's credential"
            return json_response(
                HTTPStatus.FORBIDDEN,
                {"error": f"{who} speaks for {', '.join(sorted(allowed))} only, not {head.path}"},
            )
        return None

    def handle(self, request: Request, answer: Callable[[Response], None]) -> None:
        """An authorized POST to a route, its body read: one syncer call, started here (in a
        worker thread) and answered through `answer` when it ends (on gRPC's thread)."""
        path = request.path
        started = time.monotonic()
        caller = {tracing.TRACEPARENT: request.headers.get(tracing.TRACEPARENT, "")}
        # Open until the syncer replies; current while the call starts, so the call carries it.
        span = tracing.begin_span(
            f"POST {path}", parent=caller, kind=SpanKind.SERVER, attributes={"http.route": path}
        )

        def finish(outcome: Outcome) -> None:
            try:
                status, body = outcome()
            except Exception:
                log.exception("a hooks request failed", extra={"route": path})
                status, body = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error"}
            try:
                self._record(request, span, status, body, started)
            finally:
                answer(json_response(status, body))

        reference = self.credentials.caller(request.headers)
        if reference in (None, UNSETTLED):  # screened: a node's (its keys were read again since)
            reference = NODE
        token = self.credentials.presented(request.headers)
        # Per token: a placeholder's is screened by form only here, so a forger naming another's
        # reference must not take that placeholder's slots.
        who = hashlib.sha256(f"{reference}\x00{token}".encode()).hexdigest()
        cap = PER_NODE_CALLS if reference == NODE else PER_PLACEHOLDER_CALLS
        if not self._admit(who, cap):
            # A node's scripts ask again on 503; a placeholder's script never has two calls out.
            status = HTTPStatus.SERVICE_UNAVAILABLE if reference == NODE else HTTPStatus.TOO_MANY_REQUESTS
            busy = {
                "error": f"this credential already has {cap} calls waiting, the most it may; ask again later"
            }
            self._record(request, span, status, busy, started)
            answer(json_response(status, busy, {"Retry-After": "1"}))
            return

        def finish_once(outcome: Outcome) -> None:
            self._release(who)
            finish(outcome)

        try:
            with tracing.use_span(span):
                self.routes.start(path, request.body, reference, token, finish_once)
        except BaseException:
            self._release(who)
            span.end()  # the server answers 500 for it
            raise

    def _record(
        self, request: Request, span: Span, status: HTTPStatus, body: dict[str, Any], started: float
    ) -> None:
        """The answer on the call's span (ended here), in the metrics and in the log."""
        path = request.path
        span.set_attribute("http.response.status_code", int(status))
        # Which job and node: a bare job's prolog call has no trace to join, only these.
        for attribute, value in (("slurm.job_id", body.get("job")), ("slurm.node", body.get("node"))):
            if isinstance(value, int | str) and value != "":
                span.set_attribute(attribute, value)
        if status >= 400:
            tracing.mark_error(span, str(body.get("error", "")))
        span.end()
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
