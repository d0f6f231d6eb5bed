"""The syncer's configuration, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.settings import ClusterSettings, Seconds, option


@dataclass(frozen=True)
class SyncerSettings(ClusterSettings):
    """Tandem syncer: Slurm mirror, node locks and drains."""

    grpc_address: str = option(
        ":50052", flag="--grpc-bind-address", env="TANDEM_SYNCER_GRPC_ADDRESS", help="gRPC listen address"
    )
    health_address: str = option(
        ":8081",
        flag="--health-probe-bind-address",
        env="TANDEM_SYNCER_HEALTH_ADDRESS",
        help="HTTP address for /healthz, /readyz and /metrics",
    )
    poll_interval: Seconds = option(
        Seconds(5.0),
        flag="--slurm-poll-interval",
        env="TANDEM_SLURM_POLL_INTERVAL",
        help="safety-net poll of slurmrestd",
    )
    lock_timeout: Seconds = option(
        Seconds(0.0),
        flag="--lock-timeout",
        env="TANDEM_SYNCER_LOCK_TIMEOUT",
        help="cap on a lock call's wait for Pods to leave (0: the prolog's budget, less a margin)",
    )
    reconcile_interval: Seconds = option(
        Seconds(5.0),
        flag="--lock-reconcile-interval",
        env="TANDEM_LOCK_RECONCILE_INTERVAL",
        help="how often every Slurm node, and each Node with a lock taint and no slurmd Pod, is resynced",
    )
    terminating_timeout: Seconds = option(
        Seconds(120.0),
        flag="--terminating-timeout",
        env="TANDEM_TERMINATING_TIMEOUT",
        help="longest a terminating call waits for the Pod to go",
    )
    leader_election_id: str = option(
        "tandem-syncer",
        flag="--leader-election-id",
        env="TANDEM_LEADER_ELECTION_ID",
        help="name of the Lease",
    )
