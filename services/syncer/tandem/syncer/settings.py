"""The syncer's configuration, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.settings import Seconds, option


@dataclass(frozen=True)
class SyncerSettings:
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
    kubeconfig: str = option(
        "", flag="--kubeconfig", env="KUBECONFIG", help="kubeconfig file; empty means in-cluster"
    )
    slurm_api_base: str = option(
        "http://slurm-controller:6820",
        flag="--slurm-api-base",
        env="TANDEM_SLURM_API_BASE",
        help="slurmrestd base URL",
    )
    slurm_user: str = option(
        "root", flag="--slurm-user", env="TANDEM_SLURM_USER", help="Slurm user the syncer acts as"
    )
    slurm_auth_token: str = option(
        "",
        flag="--slurm-auth-token",
        env="TANDEM_SLURM_TOKEN",
        help="Slurm JWT (used when no key file is given)",
    )
    slurm_jwt_key_file: str = option(
        "",
        flag="--slurm-jwt-key-file",
        env="TANDEM_SLURM_JWT_KEY_FILE",
        help="slurmctld's jwt_key, to mint tokens",
    )
    slurmd_namespace: str = option(
        "slurm", flag="--slurmd-namespace", env="TANDEM_SLURMD_NAMESPACE", help="namespace of the slurmd Pods"
    )
    poll_interval: Seconds = option(
        Seconds(5.0),
        flag="--slurm-poll-interval",
        env="TANDEM_SLURM_POLL_INTERVAL",
        help="safety-net poll of slurmrestd",
    )
    lock_timeout: Seconds = option(
        Seconds(50.0),
        flag="--lock-timeout",
        env="TANDEM_LOCK_TIMEOUT",
        help="longest a lock call waits for Pods to leave",
    )
    scheduler_name: str = option(
        "",
        flag="--scheduler-name",
        env="TANDEM_SCHEDULER_NAME",
        help="Pods with this schedulerName are Tandem's and survive strict locks",
    )
    reconcile_interval: Seconds = option(
        Seconds(5.0),
        flag="--lock-reconcile-interval",
        env="TANDEM_LOCK_RECONCILE_INTERVAL",
        help="how often locks of idle Slurm nodes are released",
    )
    terminating_timeout: Seconds = option(
        Seconds(120.0),
        flag="--terminating-timeout",
        env="TANDEM_TERMINATING_TIMEOUT",
        help="longest a terminating call waits for the Pod to go",
    )
    leader_elect: bool = option(
        False,
        flag="--leader-elect",
        env="TANDEM_LEADER_ELECT",
        help="run several replicas; only the holder of a Lease acts",
    )
    leader_election_namespace: str = option(
        "",
        flag="--leader-election-namespace",
        env="TANDEM_LEADER_ELECTION_NAMESPACE",
        help="namespace of the Lease (default: this Pod's namespace)",
    )
    leader_election_id: str = option(
        "tandem-syncer",
        flag="--leader-election-id",
        env="TANDEM_LEADER_ELECTION_ID",
        help="name of the Lease",
    )
    log_level: str = option("info", flag="--log-level", env="TANDEM_LOG_LEVEL", help="log level")
