"""The scheduler's configuration, from flags and environment."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.settings import ClusterSettings, Seconds, option


@dataclass(frozen=True)
class SchedulerSettings(ClusterSettings):
    """Tandem scheduler: schedules Pods through Slurm."""

    grpc_address: str = option(
        ":50051", flag="--grpc-bind-address", env="TANDEM_SCHEDULER_GRPC_ADDRESS", help="gRPC listen address"
    )
    health_address: str = option(
        ":8081",
        flag="--health-probe-bind-address",
        env="TANDEM_SCHEDULER_HEALTH_ADDRESS",
        help="HTTP address for /healthz, /readyz and /metrics",
    )
    watch_namespaces: tuple[str, ...] = option(
        (),
        flag="--watch-namespace",
        env="TANDEM_WATCH_NAMESPACE",
        help="comma-separated namespaces; empty means the whole cluster",
    )
    # None: not given, KillWait is read from Slurm (tandem.scheduler.killwait_source).
    slurm_kill_wait: Seconds | None = option(
        None,
        flag="--slurm-kill-wait",
        env="TANDEM_SLURM_KILL_WAIT",
        help="override Slurm's KillWait (Pods' grace periods must stay below it minus 5s); unset or"
        " empty: read from slurmrestd's /conf (Slurm 26.05+), else --slurm-conf-file, else 30s",
    )
    slurm_conf_file: str = option(
        "",
        flag="--slurm-conf-file",
        env="TANDEM_SLURM_CONF_FILE",
        help="a copy of slurm.conf (KillWait=) for a slurmrestd without /conf (Slurm 24.11); read"
        " again when it changes",
    )
    slurm_conf_refresh: Seconds = option(
        60.0,
        flag="--slurm-conf-refresh",
        env="TANDEM_SLURM_CONF_REFRESH",
        help="how often KillWait is read from Slurm again (a change is followed within this)",
    )
    syncer_address: str = option(
        "tandem-syncer:50052",
        flag="--syncer-address",
        env="TANDEM_SYNCER_ADDRESS",
        help="the syncer's gRPC address",
    )
    gpu_types: str = option(
        "H100_NVLINK_80GB=h100,A100_PCIE_80GB=a100,A100_NVLINK_80GB=a100",
        flag="--gpu-types",
        env="TANDEM_GPU_TYPES",
        help="GPU model label value=Slurm GRES type, comma-separated",
    )
    hooks_env_file: str = option(
        "/etc/tandem/hooks.env",
        flag="--hooks-env-file",
        env="TANDEM_HOOKS_ENV",
        help="path, on the Slurm nodes, of the file naming the hooks API and token",
    )
    job_key_file: str = option(
        "",
        flag="--job-key-file",
        env="TANDEM_JOB_KEY_FILE",
        help="the key (shared with the hooks gateway) that signs each placeholder's own credential",
    )
    placeholder_output: str = option(
        "/dev/null",
        flag="--placeholder-output",
        env="TANDEM_PLACEHOLDER_OUTPUT",
        help="where placeholder scripts write, on the Slurm nodes (%%j = job id)",
    )
    reject_static_cpu: bool = option(
        False,
        flag="--reject-static-cpu",
        env="TANDEM_REJECT_STATIC_CPU",
        help="refuse Guaranteed Pods with whole CPUs (kubelet CPU pinning Slurm cannot see), not only warn",
    )
    extra_member_nice: int = option(
        1000,
        flag="--extra-member-nice",
        env="TANDEM_EXTRA_MEMBER_NICE",
        help="the nice of an elastic gang's extra members' jobs (members beyond its minCount), which"
        " puts them below their core when Slurm picks jobs to preempt (an explicit priority is"
        " lowered by as much instead)",
    )
    policy_configmap: str = option(
        "",
        flag="--policy-configmap",
        env="TANDEM_POLICY_CONFIGMAP",
        help="NAMESPACE/NAME of the tenant policy ConfigMap (key policy.yaml); empty: no policy",
    )
    topology_configmap: str = option(
        "",
        flag="--topology-configmap",
        env="TANDEM_TOPOLOGY_CONFIGMAP",
        help="NAMESPACE/NAME of tandem-syncer's topology ConfigMap (key topology.json), which gangs asking"
        " for one domain (spec.schedulingConstraints.topology) are placed by; empty: none",
    )
    workers: int = option(
        16, flag="--workers", env="TANDEM_SCHEDULER_WORKERS", help="Pods reconciled in parallel"
    )
    leader_election_id: str = option(
        "tandem-scheduler",
        flag="--leader-election-id",
        env="TANDEM_LEADER_ELECTION_ID",
        help="name of the Lease",
    )
