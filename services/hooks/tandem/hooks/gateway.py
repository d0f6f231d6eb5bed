"""The hooks HTTP API: Slurm's prolog/epilog and the placeholder script call it; each route is one
gRPC call to the syncer. Each caller presents the credential of what it speaks for:

    prolog, epilog (root on a Slurm node): `Authorization: Bearer <the node's credential>`, the
    token of its slurmd Pod for the audience tandem-hooks (tandem.nodetoken)
    POST /v1/lock         {"node", "job"}   prolog: blocks until the Node is locked
    POST /v1/unlock       {"node", "job"}   epilog: the job no longer holds the lock

    placeholder script (the Pod's user): `Authorization: Bearer <its job token>` and
    `X-Tandem-Placeholder: <its placeholder reference>` (tandem.jobtoken)
    POST /v1/started      {"node", "job"}   placeholder script started
    POST /v1/terminating  {"node", "job", "timeout"?}  placeholder got SIGTERM: 200 once the Pod
                                            is gone, 408 if it is still there at the deadline
    POST /v1/drain        {"node", "job"}   drain its own node at KillWait (the syncer writes
                                            the reason)

Credentials are screened from the request head, before any body is read: a node's credential
against the API server's published signing keys (tandem.sakeys: a token Kubernetes never signed
costs no TokenReview), a placeholder's by its form only (the gateway holds no job key: whoever took
it could mint any placeholder's token). The syncer then checks each call
itself: a node's credential with the API server (a TokenReview: it names the slurmd Pod, so the
node, it speaks for), a placeholder's against Slurm (the job is that placeholder and holds that
node). One credential has at most a few calls waiting at once (handler.PER_NODE_CALLS,
PER_PLACEHOLDER_CALLS), so no one node or job holds every slot of the gateway. `node` is one
Slurm node's name (tandem.slurm.names), never a hostlist or a path. Connections, calls in
progress and timeouts are bounded by tandem.boundedhttp; a call waiting on the syncer holds no
thread.
"""

from __future__ import annotations

from dataclasses import replace

from tandem import budget
from tandem.boundedhttp import BoundedHTTPServer, Limits
from tandem.hooks.handler import Credentials, HookHandler
from tandem.hooks.routes import MAX_BODY, BadRequest, SyncerRoutes
from tandem.sakeys import ServiceAccountKeys
from tandem.settings import split_host_port
from tandem.v1 import syncer_pb2_grpc

__all__ = ["MAX_BODY", "BadRequest", "HooksGateway"]


class HooksGateway:
    def __init__(
        self,
        address: str,
        syncer: syncer_pb2_grpc.SyncerServiceStub | None,
        call_timeout: float = 55.0,
        limits: Limits | None = None,
        node_keys: ServiceAccountKeys | None = None,
        lock_budget: float = budget.LOCK_SECONDS,
    ) -> None:
        self.routes = SyncerRoutes(syncer, call_timeout, lock_budget)
        self.handler = HookHandler(Credentials(node_keys), self.routes)
        host, port = split_host_port(address)
        limits = replace(limits or Limits(), max_body=MAX_BODY)
        self.httpd = BoundedHTTPServer(host, port, self.handler.screen, self.handler.handle, limits)
        self.port = self.httpd.port

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()
