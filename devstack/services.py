"""The three Tandem services, started as the local stack's processes."""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from devstack import config, coverage_by_test, files, identities, installed, pki, slurm
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for
from tandem import mtls
from tandem.slurm import jwt

SERVICES = ("tandem-syncer", "tandem-scheduler", "tandem-hooks")
# REPLICAS=2: a second scheduler and syncer, each pair electing a leader on its Lease as the
# chart's HA install does, and the stand-in for the syncer's Service (devstack.leader_router).
SECOND = "-b"
SYNCER_ROUTER = "syncer-service"


def names(cfg: StackConfig) -> tuple[str, ...]:
    """The stack's Tandem processes, in start order (none when the chart runs them)."""
    if cfg.deploy == "chart":
        return ()
    if cfg.replicas == 1:
        return SERVICES
    return (
        "tandem-syncer",
        "tandem-syncer" + SECOND,
        SYNCER_ROUTER,
        "tandem-scheduler",
        "tandem-scheduler" + SECOND,
        "tandem-hooks",
    )


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    return {name: Daemon(name, cfg.run_dir, cfg.log_dir) for name in names(cfg)}


def _own_address(cfg: StackConfig, name: str) -> str:
    """Where a replica itself listens (the syncers sit behind the router with two replicas)."""
    p, second = cfg.ports, name.endswith(SECOND)
    if name.startswith("tandem-syncer"):
        if cfg.replicas == 1:
            return f"127.0.0.1:{p.syncer_grpc}"
        return f"127.0.0.1:{p.syncer_grpc_b if second else p.syncer_grpc_a}"
    return f"127.0.0.1:{p.scheduler_grpc_b if second else p.scheduler_grpc}"


def metrics_url(cfg: StackConfig, name: str) -> str | None:
    """A lab Tandem process's /metrics: the health port of a scheduler or syncer replica, the hooks
    gateway's own port; None for the syncer's router, which is no Tandem service."""
    p, second = cfg.ports, name.endswith(SECOND)
    if name.startswith("tandem-syncer"):
        return f"http://127.0.0.1:{p.syncer_health_b if second else p.syncer_health}/metrics"
    if name.startswith("tandem-scheduler"):
        return f"http://127.0.0.1:{p.scheduler_health_b if second else p.scheduler_health}/metrics"
    if name == "tandem-hooks":
        return f"{cfg.hooks_url}/metrics"
    return None


def job_key_file(cfg: StackConfig) -> Path:
    """The job key ring the scheduler signs each placeholder's credential with and the gateway and
    the syncer check it with (a Secret of the chart's in a cluster); nobody on the Slurm nodes has
    it. One key per line, newest first (tandem.jobtoken)."""
    path = cfg.pki_dir / "job.key"
    if not path.exists():
        cfg.pki_dir.mkdir(parents=True, exist_ok=True)
        files.write_whole(path, secrets.token_hex(32))
    return path


def slurm_token_file(cfg: StackConfig, service: str) -> Path:
    """Where a service's own Slurm JWT lives (a Secret's mounted file in a cluster)."""
    return cfg.pki_dir / "slurm" / f"{service}.jwt"


def ensure_slurm_token(cfg: StackConfig, service: str) -> None:
    """A service's own Slurm JWT, as an operator makes it with `scontrol token` and keeps in a
    Secret: the services never see slurmctld's key. Minted again when it has less than a week left."""
    user = slurm.SERVICE_USERS[service]
    path = slurm_token_file(cfg, service)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = jwt.claims(path.read_text().strip())
        fresh = current.user == user and current.expires - time.time() > 7 * 86400
    except (OSError, ValueError):
        fresh = False
    if not fresh:
        publish(path, slurm.rest_token(cfg, user=user), mode=0o400)


def placeholder_log_dir(cfg: StackConfig) -> Path:
    """Placeholder jobs of every Pod user write here (sticky and world-writable, like /tmp)."""
    path = cfg.slurm_dir / "placeholder-logs"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    return path


def hooks_env_file(cfg: StackConfig) -> Path:
    return cfg.slurm_dir / "hooks.env"


def write_hooks_env(cfg: StackConfig) -> None:
    """What the prolog, epilog and placeholder scripts read on a Slurm node (a mounted ConfigMap in
    a cluster). Each node's own credential is in the token directory (devstack.nodetokens), root
    only; placeholder jobs, which run as their Pod's user, read the rest and present their own
    job's credential."""
    cfg.slurm_dir.mkdir(parents=True, exist_ok=True)
    publish(
        hooks_env_file(cfg),
        f"TANDEM_HOOKS_URL='{cfg.hooks_url}'\nTANDEM_HOOKS_TOKEN_DIR='{hooks_token_dir(cfg)}'\n"
        "TANDEM_LOCK_TIMEOUT=50\n",
    )


def hooks_token_dir(cfg: StackConfig) -> Path:
    """Where each Slurm node's own credential lies, one file per node (devstack.nodetokens)."""
    return cfg.slurm_dir / "hooks-tokens"


def publish(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace a file the scripts read, whole or not at all (as a Secret's mount swaps its files):
    `make up` runs again while jobs run (the soak restarts daemons through it), and a prolog that
    read a token file in the middle of its rewrite sent an empty token and failed (401)."""
    if path.exists() and path.read_text() == text and (path.stat().st_mode & 0o777) == mode:
        return
    files.write_whole(path, text, mode)


def grpc_tls(cfg: StackConfig, identity: str) -> mtls.TlsFiles:
    """The certificate files of a Tandem gRPC identity in the lab (devstack.pki); with the chart
    installed, the operator's is the chart's own (devstack.chart reads it back)."""
    if cfg.deploy == "chart" and identity == mtls.OPERATOR:
        d = chart_tls_dir(cfg)
        return mtls.TlsFiles(str(d / "ca.crt"), str(d / "operator.crt"), str(d / "operator.key"))
    d = pki.grpc_dir(cfg.pki_dir)
    return mtls.TlsFiles(str(d / "ca.crt"), str(d / f"{identity}.crt"), str(d / f"{identity}.key"))


def operator_tls_env(cfg: StackConfig) -> dict[str, str]:
    """What grpcurl's -cacert/-cert/-key and kubectl tandem read (TANDEM_GRPC_CA, _CERT, _KEY)."""
    tls = grpc_tls(cfg, mtls.OPERATOR)
    return {"TANDEM_GRPC_CA": tls.ca, "TANDEM_GRPC_CERT": tls.cert, "TANDEM_GRPC_KEY": tls.key}


def operator_channel(cfg: StackConfig, address: str) -> grpc.Channel:
    """A channel to a Tandem service as the operator (what the demo, tests and benchmarks read as).
    The chart's certificates name the Services, and the host dials their ClusterIPs."""
    name = installed.load(cfg.state_dir).server_name(address) if cfg.deploy == "chart" else None
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(address, mtls.channel_credentials(grpc_tls(cfg, mtls.OPERATOR)), options)


def chart_tls_dir(cfg: StackConfig) -> Path:
    """The installed chart's CA and operator certificate, read back from its Secret."""
    return cfg.pki_dir / "chart"


def _tls_args(cfg: StackConfig, identity: str) -> list[str]:
    tls = grpc_tls(cfg, identity)
    return [f"--grpc-ca-file={tls.ca}", f"--grpc-cert-file={tls.cert}", f"--grpc-key-file={tls.key}"]


def grpc_addresses(cfg: StackConfig) -> dict[str, str]:
    if cfg.deploy == "chart":
        release = installed.load(cfg.state_dir)
        return {"tandem-syncer": release.syncer, "tandem-scheduler": release.scheduler}
    p = cfg.ports
    return {
        "tandem-syncer": f"127.0.0.1:{p.syncer_grpc}",
        "tandem-scheduler": f"127.0.0.1:{p.scheduler_grpc}",
    }


# The services that call the Kubernetes API, each as its chart ServiceAccount (devstack.identities).
# The gateway reads only the API server's published service-account keys (/openid/v1/jwks).
KUBE_CLIENTS = ("tandem-scheduler", "tandem-syncer", "tandem-hooks")


def kubeconfig(cfg: StackConfig, name: str) -> Path:
    return cfg.state_dir / f"kubeconfig-{name}"


def argv(cfg: StackConfig, name: str) -> list[str]:
    p = cfg.ports
    if name == SYNCER_ROUTER:
        return [
            sys.executable,
            "-m",
            "devstack.leader_router",
            f"--listen=127.0.0.1:{p.syncer_grpc}",
            f"--kubeconfig={cfg.kubeconfig}",
            f"--lease={config.TANDEM_NAMESPACE}/{_lease('syncer')}",
            *(
                f"--backend={cfg.run_dir / (s + '.pid')}={_own_address(cfg, s)}"
                for s in ("tandem-syncer", "tandem-syncer" + SECOND)
            ),
        ]
    second = name.endswith(SECOND)
    name = name.removesuffix(SECOND)
    exe = str(Path(sys.executable).parent / name)
    elect = (
        [
            "--leader-elect=true",
            f"--leader-election-namespace={config.TANDEM_NAMESPACE}",
            f"--leader-election-id={_lease(name.removeprefix('tandem-'))}",
        ]
        if cfg.replicas > 1
        else []
    )
    slurm_args = (
        [
            f"--slurm-api-base={cfg.slurmrestd_url}",
            # slurmrestd listens on 127.0.0.1 only: the token never leaves the machine.
            "--slurm-api-allow-plaintext=true",
            f"--slurm-user={slurm.SERVICE_USERS[name]}",
            f"--slurm-token-file={slurm_token_file(cfg, name)}",
        ]
        if name in slurm.SERVICE_USERS
        else []
    )
    kubeconfig_arg = f"--kubeconfig={kubeconfig(cfg, name)}"
    addr = grpc_addresses(cfg)
    if name == "tandem-syncer":
        return [
            exe,
            *elect,
            *_tls_args(cfg, name),
            f"--grpc-bind-address={_own_address(cfg, name + (SECOND if second else ''))}",
            f"--health-probe-bind-address=127.0.0.1:{p.syncer_health_b if second else p.syncer_health}",
            kubeconfig_arg,
            *slurm_args,
            f"--slurmd-namespace={config.SLURM_NAMESPACE}",
            f"--scheduler-name={cfg.scheduler_name}",
            f"--health-conditions={','.join(config.HEALTH_CONDITIONS)}",
            f"--lock-sharing-namespaces={','.join(identities.LOCK_SHARING_NAMESPACES)}",
            f"--topology-levels={','.join(config.TOPOLOGY_LEVELS)}",
            f"--topology-file={slurm.topology_file(cfg)}",
            f"--topology-configmap={config.TOPOLOGY_CONFIGMAP}",
            # Not the 10 s a site gets: slurmctld reconfigures in about a second here, and the
            # topology tests relabel in steps (issue 51).
            "--topology-min-interval=3s",
            f"--job-key-file={job_key_file(cfg)}",
        ]
    if name == "tandem-scheduler":
        return [
            exe,
            *elect,
            *_tls_args(cfg, name),
            f"--grpc-bind-address={_own_address(cfg, name + (SECOND if second else ''))}",
            f"--health-probe-bind-address=127.0.0.1:{p.scheduler_health_b if second else p.scheduler_health}",
            kubeconfig_arg,
            *slurm_args,
            f"--scheduler-name={cfg.scheduler_name}",
            # KillWait as Slurm says it (slurmrestd's /conf on 26.05, slurm.conf on 24.11),
            # followed within 2 s of a change (the integration test changes it).
            f"--slurm-conf-file={cfg.slurm_conf}",
            "--slurm-conf-refresh=2s",
            f"--syncer-address={addr['tandem-syncer']}",
            f"--slurmd-namespace={config.SLURM_NAMESPACE}",
            f"--hooks-env-file={hooks_env_file(cfg)}",
            f"--placeholder-output={placeholder_log_dir(cfg)}/%j.out",
            f"--job-key-file={job_key_file(cfg)}",
            f"--policy-configmap={config.TANDEM_NAMESPACE}/{config.POLICY_CONFIGMAP}",
            f"--topology-configmap={config.TOPOLOGY_CONFIGMAP}",
        ]
    if name == "tandem-hooks":
        return [
            exe,
            *_tls_args(cfg, name),
            f"--hooks-api-bind-address=127.0.0.1:{p.hooks_http}",
            kubeconfig_arg,
            f"--syncer-address={addr['tandem-syncer']}",
        ]
    raise KeyError(name)


def start(cfg: StackConfig, name: str, daemon: Daemon, extra_env: dict[str, str] | None = None) -> None:
    service = name.removesuffix(SECOND)
    if service in slurm.SERVICE_USERS:
        ensure_slurm_token(cfg, service)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("TANDEM_", "OTEL_")) and k != "KUBECONFIG"
    }
    env.update(extra_env or {})
    daemon.start(coverage_by_test.wrapped(argv(cfg, name)), env=env)


def wait_serving(cfg: StackConfig, name: str, daemon: Daemon) -> None:
    wait_for(f"{name} serving", lambda: serving(cfg, name), 60, daemon)


def serving(cfg: StackConfig, name: str) -> bool:
    """gRPC health SERVING; the hooks gateway (HTTP only) answers /healthz. With two replicas, a
    syncer standby (NOT_SERVING) is up too, and the router serves once a leader does."""
    if name == "tandem-hooks":
        try:
            return httpx.get(f"{cfg.hooks_url}/healthz", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False
    if name == SYNCER_ROUTER:
        return health_status(cfg, grpc_addresses(cfg)["tandem-syncer"]) == "SERVING"
    status = health_status(cfg, _own_address(cfg, name))
    standby_ok = cfg.replicas > 1 and name.startswith("tandem-syncer")
    return status == "SERVING" or (standby_ok and status == "NOT_SERVING")


def _lease(component: str) -> str:
    """The Lease a component's replicas elect on, named as the chart names it."""
    return f"{config.TANDEM_RELEASE}-{component}"


def health_status(cfg: StackConfig, address: str, service: str = "") -> str:
    """The service's health as gRPC's health check answers it, or why it did not answer (a stack
    of 1,000 nodes keeps the machine so busy that a check can take longer than its deadline)."""
    try:
        with operator_channel(cfg, address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
            return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    except grpc.RpcError as e:
        return f"{UNANSWERED} ({e.code().name})"


# What health_status says of a service that did not answer.
UNANSWERED = "NO ANSWER"
