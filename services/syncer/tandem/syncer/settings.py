"""The syncer's configuration, and its uninstall cleanup's, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem import topology
from tandem.settings import ClusterAccess, ClusterSettings, Seconds, option
from tandem.syncer import health
from tandem.syncer.topologysync import MIN_INTERVAL_SECONDS

# Below it a relabelling burst would reconfigure slurmctld once per debounced change.
MIN_TOPOLOGY_INTERVAL = 1.0


@dataclass(frozen=True)
class HealthSettings:
    """Which Node conditions drain a Slurm node (tandem.syncer.health): the syncer drains and
    resumes on them, and the uninstall cleanup leaves such a drain while its condition holds."""

    health_conditions: tuple[str, ...] = option(
        (),
        flag="--health-conditions",
        env="TANDEM_HEALTH_CONDITIONS",
        help="comma-separated Node condition types (e.g. GpuUnhealthy,KernelDeadlock) that drain the "
        "Slurm node while True; empty: none",
    )

    def __post_init__(self) -> None:
        if bad := health.refused(self.health_conditions):
            raise ValueError(
                f"--health-conditions / TANDEM_HEALTH_CONDITIONS: {', '.join(bad)} cannot be a health "
                "condition (Ready is True on a healthy Node; SlurmCordon is Tandem's own)"
            )


@dataclass(frozen=True)
class SyncerSettings(ClusterSettings, HealthSettings):
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
        Seconds(60.0),
        flag="--lock-reconcile-interval",
        env="TANDEM_LOCK_RECONCILE_INTERVAL",
        help="how often every Slurm node, and each Node with a lock taint and no slurmd Pod, is"
        " resynced: a safety net for a lost event (each pass costs ~1 ms of CPU a node)",
    )
    terminating_timeout: Seconds = option(
        Seconds(120.0),
        flag="--terminating-timeout",
        env="TANDEM_TERMINATING_TIMEOUT",
        help="longest a terminating call waits for the Pod to go",
    )
    job_key_file: str = option(
        "",
        flag="--job-key-file",
        env="TANDEM_JOB_KEY_FILE",
        help="the job key ring (shared with the scheduler and the hooks gateway): a placeholder's"
        " credential is checked against it here too, not only by the gateway",
    )
    accept_unbound_job_tokens: bool = option(
        False,
        flag="--accept-unbound-job-tokens",
        env="TANDEM_ACCEPT_UNBOUND_JOB_TOKENS",
        help="accept a placeholder's job token bound to no job (made before credentials were bound,"
        " and valid for every later job of its placeholder): only while upgrading from such a Tandem",
    )
    topology_levels: str = option(
        "",
        flag="--topology-levels",
        env="TANDEM_TOPOLOGY_LEVELS",
        help="Node label keys, widest domain first (e.g. topology.kubernetes.io/zone,"
        "topology.kubernetes.io/rack), from which Slurm's topology is written; empty: none",
    )
    topology_plugin: str = option(
        "tree",
        flag="--topology-plugin",
        env="TANDEM_TOPOLOGY_PLUGIN",
        help="tree (every level a switch level; racks of any size) or block (the narrowest level's"
        " domains as blocks)",
    )
    topology_file: str = option(
        "",
        flag="--topology-file",
        env="TANDEM_TOPOLOGY_FILE",
        help="where slurmctld reads the topology: topology.conf (Slurm 24.11) or topology.yaml"
        " (25.05 and later, by its suffix); empty: not written to a file",
    )
    topology_configmap: str = option(
        "",
        flag="--topology-configmap",
        env="TANDEM_TOPOLOGY_CONFIGMAP",
        help="namespace/name of the ConfigMap the topology is published in (the file for a Slurm"
        " side that mounts it, and topology.json for kubectl tandem topology); empty: none",
    )
    topology_min_interval: Seconds = option(
        MIN_INTERVAL_SECONDS,
        flag="--topology-min-interval",
        env="TANDEM_TOPOLOGY_MIN_INTERVAL",
        help="the least time between two topology writes, each a reconfigure of slurmctld: Node"
        " labels changed in steps reach Slurm at most this often",
    )
    lock_sharing_namespaces: tuple[str, ...] = option(
        ("kube-system",),
        flag="--lock-sharing-namespaces",
        env="TANDEM_LOCK_SHARING_NAMESPACES",
        help="comma-separated namespaces whose DaemonSet Pods stay under a placeholder's strict lock"
        " (the slurmd namespace always does): an administrator's decision, which the chart's admission"
        " policy also enforces on the lock toleration (lock.sharingNamespaces)",
    )
    leader_election_id: str = option(
        "tandem-syncer",
        flag="--leader-election-id",
        env="TANDEM_LEADER_ELECTION_ID",
        help="name of the Lease",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            topology.parse_levels(self.topology_levels)
        except ValueError as e:
            raise ValueError(f"--topology-levels / TANDEM_TOPOLOGY_LEVELS: {e}") from e
        if self.topology_plugin not in topology.PLUGINS:
            raise ValueError(
                f"--topology-plugin / TANDEM_TOPOLOGY_PLUGIN: {self.topology_plugin!r} is not one of"
                f" {', '.join(topology.PLUGINS)}"
            )
        if self.topology_configmap and self.topology_configmap.count("/") != 1:
            raise ValueError("--topology-configmap / TANDEM_TOPOLOGY_CONFIGMAP must be namespace/name")
        if self.topology_min_interval < MIN_TOPOLOGY_INTERVAL:
            raise ValueError(
                f"--topology-min-interval / TANDEM_TOPOLOGY_MIN_INTERVAL must be {MIN_TOPOLOGY_INTERVAL:g}s"
                f" or more, not {self.topology_min_interval:g}s: each write reconfigures slurmctld"
            )


@dataclass(frozen=True)
class UninstallSettings(ClusterAccess, HealthSettings):
    """tandem-uninstall: what `helm uninstall` runs first (the chart's pre-delete hook). Stops the
    release's scheduler, cancels its placeholder jobs and deletes their Pods, waits for Slurm to end
    them, stops the syncer, then removes every lock taint, lock annotation and Tandem Node
    annotation left and resumes the Slurm nodes Tandem drained. Acts as the syncer's Slurm user."""

    release_namespace: str = option(
        "",
        flag="--release-namespace",
        env="TANDEM_RELEASE_NAMESPACE",
        help="namespace of the release's Deployments",
    )
    scheduler_deployment: str = option(
        "",
        flag="--scheduler-deployment",
        env="TANDEM_SCHEDULER_DEPLOYMENT",
        help="the release's scheduler Deployment, scaled to 0 before anything else (empty: none)",
    )
    syncer_deployment: str = option(
        "",
        flag="--syncer-deployment",
        env="TANDEM_SYNCER_DEPLOYMENT",
        help="the release's syncer Deployment, scaled to 0 once the placeholders ended (empty: none)",
    )
    timeout: Seconds = option(
        Seconds(240.0),
        flag="--timeout",
        env="TANDEM_UNINSTALL_TIMEOUT",
        help="the whole cleanup's time; the waits stop early enough to leave time to remove what is left",
    )
    call_timeout: Seconds = option(
        Seconds(30.0),
        flag="--call-timeout",
        env="TANDEM_UNINSTALL_CALL_TIMEOUT",
        help="the longest one Kubernetes or slurmrestd call may take",
    )
