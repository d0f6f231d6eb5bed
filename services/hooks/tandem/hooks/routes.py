"""The hook routes: each is one call to the syncer, from a JSON body to an HTTP status and a JSON
answer (tandem.hooks.gateway says who may call which). A bad body, and every syncer error, becomes
a status with a JSON error; the syncer's answer is final unless it says unavailable.

A call is started, not waited for: its answer comes back on gRPC's own thread once the syncer
replies (a prolog's lock may wait a minute), so no thread of the gateway waits with it (issue 40).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import grpc

from tandem import budget
from tandem.slurm.names import node_name_problem
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

MAX_BODY = 64 * 1024
_GRPC_TO_HTTP = {
    grpc.StatusCode.INVALID_ARGUMENT: HTTPStatus.BAD_REQUEST,
    grpc.StatusCode.NOT_FOUND: HTTPStatus.NOT_FOUND,
    # The syncer read the job from Slurm: it is not the placeholder the credential names, or not
    # on that node. Final: the scripts do not ask again.
    grpc.StatusCode.PERMISSION_DENIED: HTTPStatus.FORBIDDEN,
    # The API server refused the node's credential (expired, its Pod gone): final too.
    grpc.StatusCode.UNAUTHENTICATED: HTTPStatus.UNAUTHORIZED,
    grpc.StatusCode.FAILED_PRECONDITION: HTTPStatus.CONFLICT,
    grpc.StatusCode.DEADLINE_EXCEEDED: HTTPStatus.GATEWAY_TIMEOUT,
    grpc.StatusCode.UNAVAILABLE: HTTPStatus.SERVICE_UNAVAILABLE,
}

NODE = ""  # the caller's placeholder reference when it presented a node's credential: none

Answer = tuple[HTTPStatus, dict[str, Any]]
# What a call came to, computed when asked (it may raise: the caller answers 500 for it).
Outcome = Callable[[], Answer]


@dataclass(frozen=True)
class SyncerCall:
    """The one syncer call a route makes (`method`: the stub's, e.g. stub.AcquireNodeLock), with
    how long it may take, and what its reply becomes."""

    method: Any
    request: Any
    timeout: float
    answer: Callable[[Any], Answer]


# A route: the parsed body, the caller's placeholder reference (NODE for a node's credential) and
# the credential it presented (a node's token or a placeholder's job token: the syncer checks it).
Route = Callable[[dict[str, Any], str, str], SyncerCall]


class BadRequest(ValueError):
    pass


class SyncerRoutes:
    def __init__(
        self,
        syncer: syncer_pb2_grpc.SyncerServiceStub | None,
        call_timeout: float,
        lock_budget: float = budget.LOCK_SECONDS,
    ) -> None:
        """`call_timeout`: how long unlock, started and drain wait for the syncer (a lock's wait
        is the prolog's own budget, at most `lock_budget`; a terminating call's, the body's)."""
        self.syncer = syncer
        self.call_timeout = call_timeout
        self.lock_budget = lock_budget
        self.table: dict[str, Route] = {
            "/v1/lock": self.lock,
            "/v1/unlock": self.unlock,
            "/v1/started": self.started,
            "/v1/terminating": self.terminating,
            "/v1/drain": self.drain,
        }

    def start(
        self,
        path: str,
        raw: bytes,
        reference: str,
        credential: str,
        deliver: Callable[[Outcome], None],
    ) -> None:
        """Run a route: `deliver` gets its outcome once, now (a bad body) or on gRPC's thread when
        the syncer replies. A bad body or a syncer error becomes an HTTP status with a JSON error."""
        try:
            if len(raw) > MAX_BODY:
                raise BadRequest(f"body larger than {MAX_BODY} bytes")
            call = self.table[path](_parse_body(raw), reference, credential)
        except BadRequest as e:
            refused: Answer = (HTTPStatus.BAD_REQUEST, {"error": str(e)})
            deliver(lambda: refused)
            return
        pending = call.method.future(call.request, timeout=call.timeout, wait_for_ready=True)
        pending.add_done_callback(lambda done: deliver(lambda: _outcome(call, done)))

    def _stub(self) -> syncer_pb2_grpc.SyncerServiceStub:
        if self.syncer is None:
            raise BadRequest("no syncer configured")
        return self.syncer

    def lock(self, body: dict[str, Any], _node_caller: str, node_token: str = "") -> SyncerCall:
        node, job = _node(body), _job(body)
        # The prolog says how long it waits (tandem.budget); the syncer gets a margin less, so
        # its answer (a lock, or why not and the node drained) arrives before the prolog gives up.
        # A lock longer than any prolog waits would only hold a slot the other nodes need.
        waits = _timeout(body, min(budget.LOCK_SECONDS, self.lock_budget), most=self.lock_budget)
        return SyncerCall(
            self._stub().AcquireNodeLock,
            syncer_pb2.AcquireNodeLockRequest(slurm_node=node, job_id=job, node_token=node_token),
            budget.below(waits),
            lambda reply: (HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}),
        )

    def unlock(self, body: dict[str, Any], _node_caller: str, node_token: str = "") -> SyncerCall:
        node, job = _node(body), _job(body)
        return SyncerCall(
            self._stub().ReleaseNodeLock,
            syncer_pb2.ReleaseNodeLockRequest(slurm_node=node, job_id=job, node_token=node_token),
            self.call_timeout,
            lambda reply: (HTTPStatus.OK, {"node": node, "job": job, "lock": _lock_name(reply.lock.state)}),
        )

    def started(self, body: dict[str, Any], reference: str, token: str = "") -> SyncerCall:
        job = _job(body)
        return SyncerCall(
            self._stub().JobStarted,
            syncer_pb2.JobStartedRequest(
                job_id=job, slurm_node=_optional_node(body), placeholder=reference, job_token=token
            ),
            self.call_timeout,
            lambda reply: (HTTPStatus.OK, {"job": job, "started": True, "marked": reply.marked}),
        )

    def terminating(self, body: dict[str, Any], reference: str, token: str) -> SyncerCall:
        job = _job(body)
        timeout = _timeout(body, self.call_timeout)

        def answer(reply: syncer_pb2.JobTerminatingResponse) -> Answer:
            if reply.pod_gone:
                return HTTPStatus.OK, {"job": job, "pod_gone": True}
            return HTTPStatus.REQUEST_TIMEOUT, {
                "job": job,
                "pod_gone": False,
                "drained_slurm_nodes": list(reply.drained_slurm_nodes),
                "error": "a Pod of the job is still there at the deadline; Tandem drained its nodes",
            }

        return SyncerCall(
            self._stub().JobTerminating,
            syncer_pb2.JobTerminatingRequest(
                job_id=job, slurm_node=_optional_node(body), placeholder=reference, job_token=token
            ),
            # The answer must reach the caller before it gives up (curl --max-time = timeout).
            max(1.0, timeout - 0.5),
            answer,
        )

    def drain(self, body: dict[str, Any], reference: str, token: str = "") -> SyncerCall:
        node, job = _node(body), _job(body)

        def answer(reply: syncer_pb2.DrainNodeResponse) -> Answer:
            if not reply.drained:
                why = "no Pod of the job runs on the node"
                return HTTPStatus.OK, {"node": node, "drained": False, "why": why}
            return HTTPStatus.OK, {"node": node, "drained": True}

        return SyncerCall(
            self._stub().DrainNode,
            syncer_pb2.DrainNodeRequest(slurm_node=node, job_id=job, placeholder=reference, job_token=token),
            self.call_timeout,
            answer,
        )


def _outcome(call: SyncerCall, done: Any) -> Answer:
    """A finished call's reply as an answer; a syncer error as the status it maps to."""
    try:
        reply = done.result()
    except grpc.RpcError as e:
        code = e.code()
        status = _GRPC_TO_HTTP.get(code, HTTPStatus.BAD_GATEWAY)
        return status, {"error": e.details() or code.name, "syncer_status": code.name}
    return call.answer(reply)


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


def _timeout(body: dict[str, Any], default: float, most: float = budget.MAX_CALL_SECONDS) -> float:
    """How long the caller waits (`timeout` in the body, seconds), at most `most`."""
    timeout = body.get("timeout", default)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= most:
        raise BadRequest(f"timeout must be a number of seconds above 0, at most {most:g}")
    return float(timeout)
