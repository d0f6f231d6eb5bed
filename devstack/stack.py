"""Bring the whole local stack up (idempotently), report on it, and take it down."""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devstack import (
    chart,
    config,
    identities,
    installed,
    kube,
    kueue,
    lws,
    nodetokens,
    pki,
    progress,
    prometheus,
    prometheus_operator,
    realnode,
    services,
    slurm,
    slurm_root,
    tools,
)
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for


def hook_wrapper(cfg: StackConfig, script: str) -> str:
    """What slurm.conf's Prolog=/Epilog= run: the packaged script, pointed at this stack's gateway
    (slurmd gives prologs a bare environment)."""
    env_file = services.hooks_env_file(cfg)
    return f"#!/bin/sh\nexport TANDEM_HOOKS_ENV='{env_file}'\nexec '{slurm.hook_script(cfg, script)}'\n"


def all_daemons(cfg: StackConfig) -> dict[str, Daemon]:
    """In start order; stopped in reverse."""
    real_node = realnode.daemons(cfg) if cfg.real_node else {}
    return {
        **kube.daemons(cfg),
        **real_node,
        **slurm.daemons(cfg),
        **services.daemons(cfg),
        **prometheus.daemons(cfg),
    }


def is_up(cfg: StackConfig) -> bool:
    """The stack runs: every daemon it started alive. Kueue's and LWS's controllers are not asked
    for, since a stack on a fresh machine starts without them (and the tests that use them start
    them): a test session beside others that counted them stopped at once as if no stack ran."""
    return (cfg.state_dir / "stack.json").exists() and all(
        d.alive() for name, d in all_daemons(cfg).items() if name not in kube.LATE_CONTROLLERS
    )


def build(cfg: StackConfig, late_controllers: bool = True) -> None:
    """What this stack runs that is built or installed once per machine, cached by version:
    `python -m devstack build`, which CI runs for its three legs in the background (issue 51)."""
    # Debian's packages and the Slurm root are mostly downloads: fetched beside the Go builds,
    # which want the CPU, not after them (a fresh machine's first stack starts ~2 minutes sooner).
    with ThreadPoolExecutor(1, thread_name_prefix="debian") as debian:
        downloads = debian.submit(_debian_parts, cfg)
        tools.ensure_tools(cfg.bin_dir, tools.lab_tools(cfg.kubernetes_version, late=False))
        downloads.result()
    if late_controllers:
        tools.ensure_tools(cfg.bin_dir, tools.late_controller_tools())
    if cfg.real_node:
        realnode.build(cfg)


def _debian_parts(cfg: StackConfig) -> None:
    prometheus.ensure_installed()
    slurm_root.ensure_root(cfg.slurm_version)


def late_controllers_built() -> bool:
    return all(tool.cached.exists() for tool in tools.late_controller_tools())


def start_late_controllers(cfg: StackConfig) -> None:
    """Kueue's and LWS's controllers on a stack that started without them: built first if need be
    (or waited for, while another process builds them), then started if not running."""
    tools.ensure_tools(cfg.bin_dir, tools.late_controller_tools())
    _start_late_controllers(cfg, kube.daemons(cfg))


def _start_late_controllers(cfg: StackConfig, d: dict[str, Daemon]) -> None:
    if _needs_start("lws-controller", d["lws-controller"]):
        lws.start(cfg, d["lws-controller"])
    if _needs_start("kueue-controller", d["kueue-controller"]):
        kueue.start(cfg, d["kueue-controller"])


def _needs_start(name: str, daemon: Daemon) -> bool:
    """Not running; said so when it had been started and died."""
    if daemon.alive():
        return False
    if daemon.pid_file.exists():
        print(f"{name} is not running (pid {daemon.pid()} gone); starting it again", flush=True)
    return True


def up_as_built(cfg: StackConfig) -> float:
    """`up`, with Kueue's and LWS's controllers only if they are built: what a test session or a
    test restarting what it killed runs, so neither waits on a build still going (issue 51)."""
    return up(cfg, late_controllers=late_controllers_built())


def up(cfg: StackConfig, late_controllers: bool = True) -> float:
    """Start whatever is not running; report by name what had died. Returns seconds taken.
    `late_controllers=False`: without Kueue's and LWS's controllers (start_late_controllers)."""
    started = time.monotonic()
    cfg.save()
    build(cfg, late_controllers)
    slurm.ensure_root(cfg)
    pki.ensure_pki(cfg.pki_dir)
    pki.ensure_grpc_pki(cfg.pki_dir)
    if cfg.real_node:
        # The bridge first: its address is the one the apiserver binds.
        realnode.prepare_host(cfg)
    kube.write_kubeconfigs(cfg)
    if not cfg.real_node:
        services.write_hooks_env(cfg)  # the chart's gateway: once installed, below
    slurm.ensure_files(cfg, prolog=hook_wrapper(cfg, "prolog.sh"), epilog=hook_wrapper(cfg, "epilog.sh"))
    slurm.prepare_root(cfg)
    d = all_daemons(cfg)

    def need(name: str) -> bool:
        return _needs_start(name, d[name])

    # The real Node's containerd and image imports go on while the control plane starts.
    real_node = realnode.Startup(cfg, d, need) if cfg.real_node else None
    if need("etcd"):
        kube.start_etcd(cfg, d["etcd"])
    if need("kube-apiserver"):
        kube.start_apiserver(cfg, d["kube-apiserver"])
    if need("kube-controller-manager"):
        kube.start_controller_manager(cfg, d["kube-controller-manager"])
    if need("kube-scheduler"):
        kube.start_scheduler(cfg, d["kube-scheduler"])
    kube.ensure_cluster_model(cfg)
    prometheus_operator.ensure_installed(cfg)
    if not cfg.real_node:  # else the chart makes its identities itself
        identities.ensure_release_rbac(cfg, identities.MAIN)
        for name in services.KUBE_CLIENTS:
            identities.write_kubeconfig(
                cfg, identities.MAIN, name.removeprefix("tandem-"), services.kubeconfig(cfg, name)
            )
    if need("kwok"):
        kube.start_kwok(cfg, d["kwok"])
    if late_controllers:
        _start_late_controllers(cfg, d)
    if real_node is not None:
        real_node.start_node()
    if need("munged"):
        slurm.start_munged(cfg, d["munged"])
    if need("mariadbd"):
        slurm.start_mariadbd(cfg, d["mariadbd"])
    if need("slurmdbd"):
        slurm.start_slurmdbd(cfg, d["slurmdbd"])
    if need("slurmctld"):
        slurm.ensure_accounting(cfg)
        slurm.start_slurmctld(cfg, d["slurmctld"])
    for node in cfg.slurm_node_names():
        if need(f"slurmd-{node}"):
            slurm.start_slurmd(cfg, node, d[f"slurmd-{node}"])
    if need("slurmrestd"):
        slurm.start_slurmrestd(cfg, d["slurmrestd"])
    wait_for(
        f"{cfg.nodes} kwok Nodes Ready and slurmd Pods Running",
        lambda: kube.cluster_ready(cfg),
        120,
        d["kwok"],
    )
    wait_for(f"{cfg.nodes} Slurm nodes up", lambda: slurm.nodes_up(cfg), 60, d["slurmctld"])
    nodetokens.refresh(cfg)  # each Slurm node's own hook credential (kubelet's part in a cluster)
    if real_node is not None:
        real_node.wait()
        with progress.step("helm upgrade --install tandem (the chart, onto the real Node)"):
            chart.install(cfg, realnode.tandem_image(cfg).rsplit(":", 1)[1])
        services.write_hooks_env(cfg)  # the prolog, epilog and placeholders call its Service
    started_now = set()
    for name in services.names(cfg):
        if need(name):
            services.start(cfg, name, d[name])
            started_now.add(name)
    for name in services.names(cfg):
        try:
            services.wait_serving(cfg, name, d[name])
        except RuntimeError:
            if name in started_now or d[name].alive():
                raise
            # It was alive when we looked but stopping (someone had just sent SIGTERM).
            print(f"{name} stopped while we waited for it; starting it again", flush=True)
            services.start(cfg, name, d[name])
            services.wait_serving(cfg, name, d[name])
    # Scrape jobs and rules as the chart renders them now: a changed chart restarts it.
    if prometheus.write_config(cfg) and d["prometheus"].alive():
        d["prometheus"].stop()
    if need("prometheus"):
        prometheus.start(cfg, d["prometheus"])
    write_env(cfg)
    return time.monotonic() - started


def down(cfg: StackConfig) -> list[str]:
    """Stop exactly the processes the stack started, by PID; forget cluster and Slurm state."""
    d = all_daemons(cfg)
    stopped: list[str] = []
    for name in services.names(cfg):
        if d[name].stop():
            stopped.append(name)
    if d["slurmctld"].alive():
        slurm.cancel_all_jobs(cfg)
    # Its Pods go while the apiserver still runs, and what it did to the host is undone; also
    # after a DEPLOY=chart stack whose stack.json is gone.
    real_node = cfg.real_node or realnode.started(cfg)
    if real_node:
        stopped += realnode.stop(cfg)
    for name in reversed(list(d)):
        if name in services.names(cfg):
            continue
        if d[name].stop():
            stopped.append(name)
    slurm.release_root(cfg)
    kueue.release_host()
    if real_node:
        realnode.release_host(cfg)
    # A fresh cluster and a fresh Slurm next time; keys, certs and tools stay.
    for path in (
        cfg.state_dir / "etcd",
        cfg.slurm_dir / "state",
        cfg.slurm_dir / "spool",
        cfg.slurm_dir / "placeholder-logs",
        slurm.paths(cfg)["mysql"],
        cfg.state_dir / "log.previous",
        prometheus.data_dir(cfg),
    ):
        shutil.rmtree(path, ignore_errors=True)
    # Job ids start again at 1 next time: keep this stack's logs apart from the next one's.
    if cfg.log_dir.exists():
        cfg.log_dir.rename(cfg.state_dir / "log.previous")
    (cfg.state_dir / "stack.json").unlink(missing_ok=True)
    installed.path(cfg.state_dir).unlink(missing_ok=True)
    return stopped


def status(cfg: StackConfig) -> tuple[list[tuple[str, str, int]], int]:
    rows = []
    total = 0
    for name, daemon in all_daemons(cfg).items():
        alive = daemon.alive()
        rss = daemon.rss_kib() if alive else 0
        total += rss
        state = "running" if alive else ("DIED" if daemon.pid_file.exists() else "stopped")
        rows.append((name, state, rss))
    return rows, total


def write_env(cfg: StackConfig) -> None:
    venv_bin = Path(__import__("sys").executable).parent
    addr = services.grpc_addresses(cfg)
    values = {
        "KUBECONFIG": str(cfg.kubeconfig),
        "SLURM_CONF": str(cfg.slurm_conf),
        "TANDEM_STATE_DIR": str(cfg.state_dir),
        "TANDEM_SCHEDULER_ADDR": addr["tandem-scheduler"],
        "TANDEM_SYNCER_ADDR": addr["tandem-syncer"],
        # What kubectl tandem reads (--syncer-address, --scheduler-address, their server names).
        "TANDEM_SYNCER_ADDRESS": addr["tandem-syncer"],
        "TANDEM_SCHEDULER_ADDRESS": addr["tandem-scheduler"],
        **_server_names(cfg),
        "TANDEM_HOOKS_URL": cfg.hooks_url,
        # Each Slurm node's own hook credential, one file per node, as its prolog reads it.
        "TANDEM_HOOKS_TOKEN_DIR": str(services.hooks_token_dir(cfg)),
        # An operator's client certificate: grpcurl -cacert ... -cert ... -key ..., kubectl tandem.
        **services.operator_tls_env(cfg),
        "TANDEM_SCHEDULER_NAME": cfg.scheduler_name,
        "TANDEM_SLURMD_NAMESPACE": config.SLURM_NAMESPACE,
        "TANDEM_SLURMRESTD_URL": cfg.slurmrestd_url,
        "TANDEM_SLURM_USER": slurm.REST_USER,
        "TANDEM_SLURM_TOKEN": slurm.rest_token(cfg),
        "TANDEM_PROMETHEUS_URL": prometheus.url(cfg),
    }
    lines = [f"export {k}='{v}'" for k, v in values.items()]
    lines.append(f"export PATH='{cfg.bin_dir}:{venv_bin}':\"$PATH\"")
    # A root Slurm token: for the operator's shell only, never a Slurm user's.
    services.publish(cfg.env_file, "\n".join(lines) + "\n", mode=0o600)


def _server_names(cfg: StackConfig) -> dict[str, str]:
    """With DEPLOY=chart the host dials ClusterIPs, and the certificates carry the Services' names:
    grpcurl's -authority and kubectl tandem's --syncer-server-name."""
    if cfg.deploy != "chart":
        return {}
    release = installed.load(cfg.state_dir)
    return {
        "TANDEM_SCHEDULER_SERVER_NAME": release.scheduler_name,
        "TANDEM_SYNCER_SERVER_NAME": release.syncer_name,
    }


def summary(cfg: StackConfig) -> str:
    env = {**slurm.slurm_env(cfg), "KUBECONFIG": str(cfg.kubeconfig)}
    kubectl = str(cfg.bin_dir / "kubectl")
    out = []
    for title, argv in (
        ("Kubernetes Nodes", [kubectl, "get", "nodes", "-L", "gpu.nvidia.com/model"]),
        ("slurmd Pods", [kubectl, "get", "pods", "-n", config.SLURM_NAMESPACE, "-o", "wide"]),
        ("Slurm", ["sinfo", "-N", "-o", "%N %P %t %c %m %G"]),
        ("Slurm QOS", ["sacctmgr", "-n", "show", "qos", "format=name,priority,preempt"]),
    ):
        res = subprocess.run(argv, env=env, capture_output=True, text=True)
        out.append(f"== {title}\n{res.stdout.rstrip() or res.stderr.rstrip()}")
    out.append(
        f"Slurm {slurm.version(cfg)} (slurmrestd {slurm.rest_api_version(cfg)}), accounting by slurmdbd"
    )
    addr = services.grpc_addresses(cfg)
    out.append("== Tandem")
    for name, address in addr.items():
        out.append(f"{name:18} gRPC {address:22} {services.health_status(cfg, address)}")
    hooks = "SERVING" if services.serving(cfg, "tandem-hooks") else "NOT SERVING"
    out.append(f"{'tandem-hooks':18} HTTP {cfg.hooks_url:22} {hooks}")
    out.append(f"\nPrometheus: {prometheus.url(cfg)} (the chart's PodMonitors and PrometheusRule)")
    out.append(f"\nshell: . {cfg.env_file}")
    return "\n".join(out)
