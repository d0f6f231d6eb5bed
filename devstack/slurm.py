"""A real Slurm on 127.0.0.1: munge, slurmctld, one slurmd per node, slurmrestd with JWT."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from pathlib import Path

from devstack import config
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for
from tandem.slurm import jwt

PACKAGES = ["slurmctld", "slurmd", "slurmrestd", "slurm-client", "munge", "slurm-wlm-jwt-plugin", "curl"]
REST_USER = "root"


def ensure_packages() -> None:
    """Install Slurm's Debian packages when a binary is missing (root, Debian/Ubuntu)."""
    needed = ["slurmctld", "slurmd", "slurmrestd", "sinfo", "munged"]
    if (
        all(shutil.which(b) for b in needed)
        and Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so").exists()
    ):
        return
    print("installing Slurm packages (apt-get) ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES], check=True, env=env
    )


# A Slurm user for Pods that set sunk.coreweave.com/user-id (the reference's "dedicated user"),
# with a second group for group-id.
POD_USER = ("tandem-pods", 1001, 1001)
POD_EXTRA_GROUP = ("tandem-gpu", 1002)


def ensure_users() -> None:
    name, uid, gid = POD_USER
    group, extra_gid = POD_EXTRA_GROUP
    if subprocess.run(["getent", "group", str(gid)], capture_output=True).returncode != 0:
        subprocess.run(["groupadd", "-g", str(gid), name], check=True)
    if subprocess.run(["getent", "group", str(extra_gid)], capture_output=True).returncode != 0:
        subprocess.run(["groupadd", "-g", str(extra_gid), group], check=True)
    if subprocess.run(["getent", "passwd", str(uid)], capture_output=True).returncode != 0:
        subprocess.run(
            ["useradd", "-u", str(uid), "-g", str(gid), "-G", group, "-M", "-s", "/usr/sbin/nologin", name],
            check=True,
        )


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    names = ["munged", "slurmctld", *(f"slurmd-{n}" for n in cfg.slurm_node_names()), "slurmrestd"]
    return {name: Daemon(name, cfg.run_dir, cfg.log_dir) for name in names}


def paths(cfg: StackConfig) -> dict[str, Path]:
    d = cfg.slurm_dir
    return {
        "munge_key": d / "munge" / "munge.key",
        "munge_socket": d / "munge" / "munge.socket",
        "jwt_key": d / "jwt_hs256.key",
        "state": d / "state",
        "spool": d / "spool",
        "run": d / "run",
        "prolog": d / "prolog",
        "epilog": d / "epilog",
        "gres": d / "gres.conf",
        "dev": d / "dev",
    }


def ensure_files(cfg: StackConfig, prolog: str, epilog: str) -> None:
    p = paths(cfg)
    cfg.slurm_dir.mkdir(parents=True, exist_ok=True)
    # slurmrestd runs as nobody and must read slurm.conf: every directory on the way is 0755.
    for d in (cfg.state_dir, cfg.slurm_dir):
        d.chmod(0o755)
    for key in ("state", "spool", "run"):
        p[key].mkdir(parents=True, exist_ok=True)
    munge_dir = p["munge_key"].parent
    munge_dir.mkdir(exist_ok=True)
    munge_dir.chmod(0o755)  # the socket lives here and every client must reach it
    if not p["munge_key"].exists():
        p["munge_key"].write_bytes(secrets.token_bytes(1024))
        p["munge_key"].chmod(0o400)
    if not p["jwt_key"].exists():
        p["jwt_key"].write_bytes(secrets.token_bytes(32))
        p["jwt_key"].chmod(0o600)
    for name, body in (("prolog", prolog), ("epilog", epilog)):
        p[name].write_text(body)
        p[name].chmod(0o755)
    _ensure_node_dirs(cfg)
    p["gres"].write_text(gres_conf(cfg))
    cfg.slurm_conf.write_text(slurm_conf(cfg))


def slurm_conf(cfg: StackConfig) -> str:
    p = paths(cfg)
    lines = [
        "ClusterName=tandem",
        f"SlurmctldHost={cfg.hostname}(127.0.0.1)",
        f"SlurmctldPort={cfg.ports.slurmctld}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={p['munge_socket']},cred_expire=10",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={p['jwt_key']}",
        f"StateSaveLocation={p['state']}",
        f"SlurmdSpoolDir={p['spool']}/%n",
        f"SlurmctldPidFile={p['run']}/slurmctld.pid",
        f"SlurmdPidFile={p['run']}/slurmd.%n.pid",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # Nodes claim more CPUs/memory than this machine has.
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        # Low latency on a small machine (lab/SLURM.md).
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=250000,default_queue_depth=500,"
        "bf_interval=5,bf_continue,nohold_on_prolog_fail",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=CANCEL",
        f"Prolog={p['prolog']}",
        f"Epilog={p['epilog']}",
        "PrologFlags=Alloc,Contain",
        "PrologEpilogTimeout=60",
        f"KillWait={config.KILL_WAIT_SECONDS}",
        "MinJobAge=60",
        "ReturnToService=2",
        "SlurmdTimeout=300",
        "MessageTimeout=20",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
    ]
    for i, name in enumerate(cfg.slurm_node_names()):
        gres = (
            f" Gres=gpu:{config.GPU_GRES_TYPE}:{config.GPUS_PER_NODE} Features=gpu,{config.GPU_GRES_TYPE}"
            if config.is_gpu_node(i)
            else " Features=cpu"
        )
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={cfg.ports.slurmd_base + i} "
            f"CPUs={config.CPUS_PER_NODE} RealMemory={config.MEMORY_MB_PER_NODE}{gres} State=UNKNOWN"
        )
    lines += [
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
        "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
    ]
    return "\n".join(lines) + "\n"


def gres_conf(cfg: StackConfig) -> str:
    # Slurm 22.05 drops GPUs that have no device file, even with Flags=CountOnly; each fake GPU is
    # a symlink to /dev/null (a character device), so the count is tracked and nothing is opened.
    lines = ["AutoDetect=off"]
    last = config.GPUS_PER_NODE - 1
    for i, name in enumerate(cfg.slurm_node_names()):
        if config.is_gpu_node(i):
            lines.append(
                f"NodeName={name} Name=gpu Type={config.GPU_GRES_TYPE} "
                f"File={paths(cfg)['dev']}/{name}/nvidia[0-{last}]"
            )
    return "\n".join(lines) + "\n"


def _ensure_node_dirs(cfg: StackConfig) -> None:
    p = paths(cfg)
    for i, name in enumerate(cfg.slurm_node_names()):
        (p["spool"] / name).mkdir(parents=True, exist_ok=True)
        if config.is_gpu_node(i):
            dev = p["dev"] / name
            dev.mkdir(parents=True, exist_ok=True)
            for g in range(config.GPUS_PER_NODE):
                link = dev / f"nvidia{g}"
                if not link.is_symlink():
                    link.symlink_to("/dev/null")


def slurm_env(cfg: StackConfig) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(cfg.slurm_conf)}


def start_munged(cfg: StackConfig, daemon: Daemon) -> None:
    p = paths(cfg)
    d = p["munge_key"].parent
    daemon.start(
        [
            "munged",
            "-F",
            "--force",
            f"--key-file={p['munge_key']}",
            f"--socket={p['munge_socket']}",
            f"--pid-file={d / 'munged.pid'}",
            f"--seed-file={d / 'munged.seed'}",
            f"--log-file={cfg.log_dir / 'munged.detail.log'}",
            "--num-threads=4",
        ]
    )
    wait_for("munge socket", lambda: p["munge_socket"].exists(), 15, daemon)


def start_slurmctld(cfg: StackConfig, daemon: Daemon) -> None:
    daemon.start(["slurmctld", "-D", "-i", "-f", str(cfg.slurm_conf)], env=slurm_env(cfg))
    wait_for("slurmctld to answer", lambda: _run_ok(cfg, ["scontrol", "ping"], "UP"), 30, daemon)


def start_slurmd(cfg: StackConfig, node: str, daemon: Daemon) -> None:
    daemon.start(["slurmd", "-D", "-N", node, "-f", str(cfg.slurm_conf)], env=slurm_env(cfg))


def start_slurmrestd(cfg: StackConfig, daemon: Daemon) -> None:
    env = {**slurm_env(cfg), "SLURM_JWT": "daemon"}
    daemon.start(
        [
            "slurmrestd",
            "-f",
            str(cfg.slurm_conf),
            "-a",
            "rest_auth/jwt",
            "-s",
            "openapi/v0.0.38",
            "-u",
            "nobody",
            "-t",
            "8",
            f"127.0.0.1:{cfg.ports.slurmrestd}",
        ],
        env=env,
    )
    wait_for("slurmrestd ping", lambda: _rest_ping(cfg), 30, daemon)


def rest_token(cfg: StackConfig, user: str = REST_USER, lifespan: int = 30 * 86400) -> str:
    return jwt.mint(paths(cfg)["jwt_key"].read_bytes(), user, lifespan)


def nodes_up(cfg: StackConfig) -> bool:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"], env=slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout
    states = dict(line.split() for line in out.splitlines() if line.strip())
    # Registered and responding (no "*"); it may already run jobs, or be reserved, when `up` runs again.
    down = ("down", "unk", "unknown", "fail", "inval", "future", "futr")
    return len(states) >= cfg.nodes and all(not s.endswith("*") and s not in down for s in states.values())


def cancel_all_jobs(cfg: StackConfig) -> None:
    """Before slurmd stops: jobs' slurmstepd processes would otherwise outlive the stack."""
    env = slurm_env(cfg)
    out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True)
    jobs = out.stdout.split()
    if out.returncode != 0 or not jobs:
        return
    subprocess.run(["scancel", "--signal=KILL", "--full", *jobs], env=env, capture_output=True)
    subprocess.run(["scancel", *jobs], env=env, capture_output=True)
    with contextlib.suppress(RuntimeError):
        wait_for(
            "jobs to end",
            lambda: (
                not subprocess.run(
                    ["squeue", "-h", "-t", "R,CG,PD", "-o", "%i"], env=env, capture_output=True, text=True
                ).stdout.strip()
            ),
            20,
        )


def _run_ok(cfg: StackConfig, argv: list[str], needle: str) -> bool:
    out = subprocess.run(argv, env=slurm_env(cfg), capture_output=True, text=True, timeout=10)
    return out.returncode == 0 and needle in out.stdout


def _rest_ping(cfg: StackConfig) -> bool:
    import httpx

    r = httpx.get(
        f"{cfg.slurmrestd_url}/slurm/v0.0.38/ping",
        headers={"X-SLURM-USER-NAME": REST_USER, "X-SLURM-USER-TOKEN": rest_token(cfg, lifespan=60)},
        timeout=5,
    )
    return r.status_code == 200
