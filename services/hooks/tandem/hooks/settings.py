"""The hooks gateway's configuration, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.boundedhttp import Limits
from tandem.budget import LOCK_SECONDS
from tandem.settings import Seconds, ServiceSettings, option


@dataclass(frozen=True)
class HooksSettings(ServiceSettings):
    """Tandem hooks gateway: HTTP API for Slurm prolog/epilog and placeholder scripts."""

    hooks_address: str = option(
        ":8000",
        flag="--hooks-api-bind-address",
        env="TANDEM_HOOKS_API_BIND_ADDRESS",
        help="HTTP listen address of the hooks API",
    )
    syncer_address: str = option(
        "tandem-syncer:50052",
        flag="--syncer-address",
        env="TANDEM_SYNCER_ADDRESS",
        help="the syncer's gRPC address",
    )
    kubeconfig: str = option(
        "",
        flag="--kubeconfig",
        env="KUBECONFIG",
        help="kubeconfig file to read the API server's published service-account keys with; empty"
        " means in-cluster (the gateway's ServiceAccount may read nothing else)",
    )
    check_node_signatures: bool = option(
        True,
        flag="--check-node-token-signatures",
        env="TANDEM_HOOKS_CHECK_NODE_TOKEN_SIGNATURES",
        help="refuse a node credential Kubernetes did not sign (its published keys, /openid/v1/jwks)"
        " before the syncer reviews it; false: its form only, and every forged token costs the API"
        " server a TokenReview",
    )
    call_timeout: Seconds = option(
        Seconds(55.0),
        flag="--call-timeout",
        env="TANDEM_HOOKS_CALL_TIMEOUT",
        help="longest a hook call waits for the syncer",
    )
    lock_budget: Seconds = option(
        Seconds(LOCK_SECONDS),
        flag="--lock-budget",
        env="TANDEM_HOOKS_LOCK_BUDGET",
        help="longest a prolog's lock call may ask to wait (its TANDEM_LOCK_TIMEOUT); a longer"
        " `timeout` is refused, so no credential holds a gateway slot longer than a prolog would",
    )
    workers: int = option(
        Limits.workers,
        flag="--hooks-workers",
        env="TANDEM_HOOKS_WORKERS",
        help="threads that start hook calls (a call waiting on the syncer holds none)",
    )
    max_calls: int = option(
        Limits.max_calls,
        flag="--hooks-max-calls",
        env="TANDEM_HOOKS_MAX_CALLS",
        help="hook calls in progress at once (a prolog's lock call lasts until its Node is locked); "
        "beyond them a call gets 503 at once and the scripts ask again",
    )
    request_timeout: Seconds = option(
        Seconds(Limits.request_timeout),
        flag="--hooks-request-timeout",
        env="TANDEM_HOOKS_REQUEST_TIMEOUT",
        help="longest a client may take to send its whole request (headers and body)",
    )
    max_connections: int = option(
        Limits.max_connections,
        flag="--hooks-max-connections",
        env="TANDEM_HOOKS_MAX_CONNECTIONS",
        help="connections still sending their request; past it the oldest is closed",
    )

    def limits(self) -> Limits:
        return Limits(
            workers=self.workers,
            request_timeout=self.request_timeout,
            max_connections=self.max_connections,
            max_calls=self.max_calls,
        )
