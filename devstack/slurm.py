"""A real, current Slurm on 127.0.0.1, run in its Debian root: munge, MariaDB + slurmdbd,
slurmctld, one slurmd per node, slurmrestd with JWT."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from devstack import config, files, slurm_root
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for
from tandem import scripts
from tandem.slurm import hostlist, jwt
from tandem.slurm.rest import SlurmRestClient, TokenSource

REST_USER = "root"
# A Slurm user for Pods that set sunk.coreweave.com/user-id (the reference's "dedicated user"),
# with a second group for group-id.
POD_USER = ("tandem-pods", 1001, 1001)
POD_EXTRA_GROUP = ("tandem-gpu", 1002)
# The syncer's own Slurm user, AdminLevel=Administrator: slurmctld lets no lesser level update a
# node (an Operator's drain is a "Security violation, UPDATE_NODE RPC"). A user of its own, so a
# drain's `reason_set_by_user` tells Tandem's drains from anyone else's.
SYNCER_USER = ("tandem", 990, 990)
# Whom each service acts as in Slurm. The scheduler submits on behalf of the Pods' users, which
# only SlurmUser or root may do (the lab's SlurmUser is root).
SERVICE_USERS = {"tandem-scheduler": REST_USER, "tandem-syncer": SYNCER_USER[0]}
# Accounting: the accounts and QOS a platform team would have (lab/SLURM.md "Accounting").
ACCOUNTS = ("root", "k8s")
QOS = {"normal": 0, "high": 1000}


def root(cfg: StackConfig) -> Path:
    return slurm_root.root_dir(cfg.slurm_version)


def ensure_root(cfg: StackConfig) -> Path:
    """The Slurm root of this stack's version, built on first use, with the users jobs run as."""
    r = slurm_root.ensure_root(cfg.slurm_version)
    name, _, gid = POD_USER
    group, extra_gid = POD_EXTRA_GROUP
    syncer, _, syncer_gid = SYNCER_USER
    slurm_root.ensure_users(
        r, users=[POD_USER, SYNCER_USER], groups=[(name, gid), (group, extra_gid), (syncer, syncer_gid)]
    )
    slurm_root.add_supplementary_group(r, name, group)
    return r


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    names = [
        "munged",
        "mariadbd",
        "slurmdbd",
        "slurmctld",
        *(f"slurmd-{n}" for n in cfg.slurm_node_names()),
        "slurmrestd",
    ]
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
        "hooks": d / "hooks",
        "prolog": d / "prolog",
        "epilog": d / "epilog",
        "gres": d / "gres.conf",
        # Slurm's topology, which the syncer writes (24.11 reads topology.conf, 26.05 topology.yaml).
        "topology_conf": d / "topology.conf",
        "topology_yaml": d / "topology.yaml",
        "cgroup": d / "cgroup.conf",
        "slurmdbd_conf": d / "slurmdbd.conf",
        "db_password": d / "db.password",
        "mysql": d / "mysql",
        "mysql_socket": d / "mysql" / "mysqld.sock",
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
        files.write_whole(p["munge_key"], secrets.token_bytes(1024), 0o400)
    if not p["jwt_key"].exists():
        files.write_whole(p["jwt_key"], secrets.token_bytes(32))
    if not p["db_password"].exists():
        files.write_whole(p["db_password"], secrets.token_hex(16))
    # Slurm runs inside its root: the hook scripts must be under the state dir bound into it.
    shutil.copytree(scripts.DIR, p["hooks"], dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py", "__*"))
    for name, body in (("prolog", prolog), ("epilog", epilog)):
        p[name].write_text(body)
        p[name].chmod(0o755)
    _ensure_node_dirs(cfg)
    p["gres"].write_text(gres_conf(cfg))
    if uses_topology_conf(cfg) and not p["topology_conf"].exists():
        # topology/tree wants a topology.conf at slurmctld's start: one switch for every node
        # until the syncer writes the Nodes' (it keeps its own across `make up`).
        names = ",".join(config.slurm_node_name(i) for i in range(cfg.nodes))
        p["topology_conf"].write_text(f"SwitchName=tandem-root Nodes={names}\n")
    # No cgroup filesystem in the root: slurmd fails "No filesystem mounted on /sys/fs/cgroup".
    p["cgroup"].write_text("CgroupPlugin=disabled\n")
    files.write_whole(p["slurmdbd_conf"], slurmdbd_conf(cfg))  # the database password; slurmdbd insists
    cfg.slurm_conf.write_text(slurm_conf(cfg))


def uses_topology_conf(cfg: StackConfig) -> bool:
    """Slurm 24.11 reads its topology from topology.conf, with `TopologyPlugin=` in slurm.conf;
    25.05 and later from topology.yaml, with no such line."""
    return cfg.slurm_version == "24.11"


def topology_file(cfg: StackConfig) -> Path:
    """Where the syncer writes Slurm's topology."""
    return paths(cfg)["topology_conf" if uses_topology_conf(cfg) else "topology_yaml"]


def hook_script(cfg: StackConfig, name: str) -> Path:
    """A hook script as Slurm sees it, inside its root."""
    return paths(cfg)["hooks"] / name


def slurm_conf(cfg: StackConfig, hooks: bool = True) -> str:
    """The lab's slurm.conf; without `hooks`, as a site without Tandem has it: no prolog and no
    epilog (the benchmark's truly bare Slurm, issue 55)."""
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
        # A job's processes by process group, as cgroup would keep them without a scan:
        # linuxproc reads every /proc/<pid>/stat on each look, and with 1,000 slurmd and their
        # jobs that was most of slurmstepd's CPU (issue 22). No cgroup filesystem here.
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        # Accounting through slurmdbd: accounts, users and QOS are enforced as in production.
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={cfg.ports.slurmdbd}",
        f"AccountingStoragePass={p['munge_socket']}",  # the dbd link ignores AuthInfo
        "AccountingStorageEnforce=associations,limits,qos",
        "AccountingStoreFlags=job_comment,job_extra",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        "GresTypes=gpu,shard"
        + (",mps" if any(config.mps(i) for i in range(len(cfg.slurm_node_names()))) else ""),
        "SchedulerType=sched/backfill",
        # Low latency on a small machine (lab/SLURM.md). sched_interval: a requeued job (a prolog
        # that failed) is started by the main scheduler's periodic pass only, not by backfill; at
        # the default 60 s it waited 42 s past its eligible time for the next pass (issue 51).
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=250000,default_queue_depth=500,"
        "bf_interval=5,bf_continue,nohold_on_prolog_fail,sched_interval=5",
        *(["TopologyPlugin=topology/tree"] if uses_topology_conf(cfg) else []),
        f"PreemptType=preempt/{cfg.preempt}",
        "PreemptMode=CANCEL",
        *(
            [
                f"Prolog={p['prolog']}",
                f"Epilog={p['epilog']}",
                # Contain needs proctrack/cgroup, which a root without a cgroup filesystem cannot have.
                "PrologFlags=Alloc",
            ]
            if hooks
            else []
        ),
        "MailProg=/bin/true",
        "PrologEpilogTimeout=60",
        f"KillWait={config.KILL_WAIT_SECONDS}",
        "MinJobAge=60",
        "ReturnToService=2",
        "SlurmdTimeout=300",
        "MessageTimeout=20",
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
    ]
    lines += node_lines(cfg)
    lines += [
        "PartitionName=batch Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1",
        "PartitionName=high Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10",
    ]
    return "\n".join(lines) + "\n"


def node_lines(cfg: StackConfig) -> list[str]:
    """One NodeName line per kind of node, its names and slurmd ports as hostlists (Slurm pairs
    them in order). Every Slurm client (scontrol, sbatch, srun, each job's placeholder) parses all
    of slurm.conf: a line per node cost each one 60-130 ms of CPU at 1,000 nodes, a line per kind
    ~0 (issue 22)."""
    kinds: dict[str, list[int]] = {}
    for i in range(cfg.nodes):
        kinds.setdefault(_node_kind(i), []).append(i)
    return [
        f"NodeName={hostlist.compress([config.slurm_node_name(i) for i in members])} "
        "NodeHostname=localhost NodeAddr=127.0.0.1 "
        f"Port={hostlist.compress([str(cfg.ports.slurmd_base + i) for i in members])} {kind}"
        for kind, members in kinds.items()
    ]


def _node_kind(index: int) -> str:
    """What a node's line says besides its name and port."""
    gres = (
        f" Gres={config.gres_string(index)} Features=gpu,{config.GPU_GRES_TYPE}"
        if config.is_gpu_node(index)
        else " Features=cpu"
    )
    return f"CPUs={config.CPUS_PER_NODE} RealMemory={config.MEMORY_MB_PER_NODE}{gres} State=UNKNOWN"


def slurmdbd_conf(cfg: StackConfig) -> str:
    p = paths(cfg)
    return (
        "\n".join(
            [
                "AuthType=auth/munge",
                f"AuthInfo=socket={p['munge_socket']}",
                "DbdHost=localhost",
                "DbdAddr=127.0.0.1",
                f"DbdPort={cfg.ports.slurmdbd}",
                "SlurmUser=root",
                f"PidFile={p['run']}/slurmdbd.pid",
                "DebugLevel=info",
                "StorageType=accounting_storage/mysql",
                "StorageHost=127.0.0.1",
                f"StoragePort={cfg.ports.mariadb}",
                "StorageUser=slurm",
                f"StoragePass={p['db_password'].read_text().strip()}",
                "StorageLoc=slurm_acct_db",
            ]
        )
        + "\n"
    )


def gres_conf(cfg: StackConfig) -> str:
    # Slurm drops GPUs that have no device file, even with Flags=CountOnly; each fake GPU is
    # a symlink to /dev/null (a character device), so the count is tracked and nothing is opened.
    lines = ["AutoDetect=off"]
    for i, name in enumerate(cfg.slurm_node_names()):
        for g in config.gpu_gres(i):
            lines.append(
                f"NodeName={name} Name=gpu Type={g.gres_type} "
                f"File={paths(cfg)['dev']}/{name}/{g.file}[{g.first}-{g.first + g.count - 1}]"
            )
        for shared, count in config.shared_gres(i):
            lines.append(f"NodeName={name} Name={shared} Type={config.GPU_GRES_TYPE} Count={count}")
    return "\n".join(lines) + "\n"


def _ensure_node_dirs(cfg: StackConfig) -> None:
    p = paths(cfg)
    for i, name in enumerate(cfg.slurm_node_names()):
        (p["spool"] / name).mkdir(parents=True, exist_ok=True)
        if config.is_gpu_node(i):
            dev = p["dev"] / name
            dev.mkdir(parents=True, exist_ok=True)
            for g in config.gpu_gres(i):
                for n in range(g.first, g.first + g.count):
                    link = dev / f"{g.file}{n}"
                    if not link.is_symlink():
                        link.symlink_to("/dev/null")


def slurm_env(cfg: StackConfig) -> dict[str, str]:
    """The environment for Slurm's commands: the root's CLI wrappers first on PATH."""
    return {
        **os.environ,
        "SLURM_CONF": str(cfg.slurm_conf),
        "PATH": f"{cfg.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    }


def prepare_root(cfg: StackConfig) -> None:
    """Mount this stack into its Slurm root and put the root's commands on the stack's PATH."""
    r = root(cfg)
    slurm_root.mount(r, cfg.state_dir)
    slurm_root.write_command_wrappers(r, cfg.bin_dir, cfg.slurm_conf)


def release_root(cfg: StackConfig) -> None:
    slurm_root.unmount(root(cfg), cfg.state_dir)


def _in_root(cfg: StackConfig, argv: list[str], user: tuple[int, int] | None = None) -> list[str]:
    return slurm_root.chroot_argv(root(cfg), argv, user)


def start_munged(cfg: StackConfig, daemon: Daemon) -> None:
    p = paths(cfg)
    d = p["munge_key"].parent
    daemon.start(
        _in_root(
            cfg,
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
            ],
        )
    )
    wait_for("munge socket", lambda: p["munge_socket"].exists(), 15, daemon)


def start_mariadbd(cfg: StackConfig, daemon: Daemon) -> None:
    """MariaDB for slurmdbd: a fresh data directory per stack, 127.0.0.1 only, a small buffer pool."""
    p = paths(cfg)
    if not (p["mysql"] / "mysql").exists():
        out = subprocess.run(
            _in_root(
                cfg,
                [
                    "mariadb-install-db",
                    "--user=root",
                    f"--datadir={p['mysql']}",
                    "--auth-root-authentication-method=socket",
                    "--skip-test-db",
                ],
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed: {out.stdout[-1500:]}{out.stderr[-1500:]}")
    daemon.start(
        _in_root(
            cfg,
            [
                "mariadbd",
                "--user=root",
                f"--datadir={p['mysql']}",
                f"--socket={p['mysql_socket']}",
                f"--port={cfg.ports.mariadb}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                f"--pid-file={p['run']}/mariadbd.pid",
                "--innodb-buffer-pool-size=32M",
                # slurmdbd's queries fail under 11.8's snapshot isolation (lab/SLURM.md).
                "--innodb-snapshot-isolation=OFF",
                "--innodb-flush-log-at-trx-commit=0",
                "--skip-log-bin",
                "--performance-schema=OFF",
            ],
        )
    )
    wait_for("MariaDB socket", lambda: _sql(cfg, "SELECT 1"), 60, daemon)
    password = p["db_password"].read_text().strip()
    _sql(
        cfg,
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';",
        check=True,
    )


def _sql(cfg: StackConfig, statement: str, check: bool = False) -> bool:
    out = subprocess.run(
        _in_root(cfg, ["mariadb", f"--socket={paths(cfg)['mysql_socket']}", "-u", "root", "-e", statement]),
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check and out.returncode != 0:
        raise RuntimeError(f"MariaDB refused {statement!r}: {out.stderr.strip()}")
    return out.returncode == 0


def start_slurmdbd(cfg: StackConfig, daemon: Daemon) -> None:
    env = slurm_env(cfg)
    release = slurm_root.release(cfg.slurm_version)
    if release.mariadb_client_from:
        env["LD_LIBRARY_PATH"] = slurm_root.COMPAT_LIB_DIR
    daemon.start(_in_root(cfg, ["slurmdbd", "-D"]), env=env)
    wait_for(
        "slurmdbd to answer",
        lambda: _run_ok(cfg, ["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], ""),
        60,
        daemon,
    )


def ensure_accounting(cfg: StackConfig) -> None:
    """The cluster, accounts, users and QOS, before slurmctld's first start registers with them
    (a cluster configured later gets "CLUSTER ID MISMATCH")."""

    def sacctmgr(*args: str) -> str:
        out = subprocess.run(
            ["sacctmgr", "-i", "-n", "-P", *args],
            env=slurm_env(cfg),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0 and "Nothing new added" not in out.stdout + out.stderr:
            raise RuntimeError(
                f"sacctmgr {' '.join(args)} failed: {out.stderr.strip() or out.stdout.strip()}"
            )
        return out.stdout

    if "tandem" not in sacctmgr("show", "cluster", "format=cluster").split():
        sacctmgr("add", "cluster", "tandem")
    existing_qos = set(sacctmgr("show", "qos", "format=name").split())
    for name, priority in QOS.items():
        if name not in existing_qos:
            sacctmgr("add", "qos", name)
        sacctmgr("modify", "qos", name, "set", f"priority={priority}")
    # preempt/qos, when a stack turns it on: high preempts normal.
    sacctmgr("modify", "qos", "high", "set", "preempt=normal", "preemptmode=cancel")
    existing_accounts = set(sacctmgr("show", "account", "format=account").split())
    for account in ACCOUNTS:
        if account not in existing_accounts:
            sacctmgr("add", "account", account, "cluster=tandem")
    qos_list = ",".join(QOS)
    existing_users = sacctmgr("show", "assoc", "format=user,account")
    for user in ("root", POD_USER[0]):
        for account in ACCOUNTS:
            if f"{user}|{account}" not in existing_users:
                sacctmgr("add", "user", user, f"account={account}", "cluster=tandem")
        default = "root" if user == "root" else "k8s"
        sacctmgr(
            "modify", "user", user, "set", f"defaultaccount={default}", f"qos={qos_list}", "defaultqos=normal"
        )
    if f"{SYNCER_USER[0]}|root" not in existing_users:
        sacctmgr("add", "user", SYNCER_USER[0], "account=root", "cluster=tandem")
    sacctmgr("modify", "user", SYNCER_USER[0], "set", "adminlevel=admin")


def start_slurmctld(cfg: StackConfig, daemon: Daemon) -> None:
    daemon.start(_in_root(cfg, ["slurmctld", "-D", "-i", "-f", str(cfg.slurm_conf)]), env=slurm_env(cfg))
    wait_for("slurmctld to answer", lambda: _run_ok(cfg, ["scontrol", "ping"], "UP"), 60, daemon)


def switch_preemption(cfg: StackConfig, preempt: str) -> StackConfig:
    """Run slurmctld with PreemptType=preempt/`preempt` (`partition_prio` or `qos`); jobs stay."""
    if cfg.preempt == preempt:
        return cfg
    cfg = dataclasses.replace(cfg, preempt=preempt)
    cfg.save()
    _run_slurm_with(cfg, slurm_conf(cfg))
    return cfg


# The KillWait line of the lab's slurm.conf (slurm_conf writes it so).
_KILL_WAIT_LINE = re.compile(r"(?m)^KillWait=(\d+)$")


def kill_wait(cfg: StackConfig) -> int | None:
    """KillWait as the lab's slurm.conf sets it; None before the lab's Slurm was first set up."""
    try:
        found = _KILL_WAIT_LINE.search(cfg.slurm_conf.read_text())
    except FileNotFoundError:
        return None
    return int(found.group(1)) if found else None


def set_kill_wait(cfg: StackConfig, seconds: int) -> None:
    """KillWait=`seconds` in slurm.conf, and slurmctld restarted to run with it; jobs stay. A test
    puts the lab's value back."""
    _run_slurm_with(cfg, _KILL_WAIT_LINE.sub(f"KillWait={seconds}", cfg.slurm_conf.read_text()))


@contextlib.contextmanager
def without_tandem_hooks(cfg: StackConfig) -> Iterator[None]:
    """Slurm with no Tandem prolog or epilog while inside, the lab's again after: slurmctld and
    every slurmd restart into each (slurmd reads its Prolog at start). Refused while any job is
    in the queue: one that started with the hooks would end without its epilog, its Node locked."""
    queued = queued_jobs(cfg)
    if queued:
        raise RuntimeError(f"Slurm still has jobs {', '.join(queued)}: no run without the hooks now")
    _run_slurm_with(cfg, slurm_conf(cfg, hooks=False), slurmds=True)
    try:
        yield
    finally:
        _run_slurm_with(cfg, slurm_conf(cfg), slurmds=True)


def _run_slurm_with(cfg: StackConfig, conf: str, slurmds: bool = False) -> None:
    """slurm.conf rewritten, and slurmctld (and with `slurmds` every slurmd) restarted to run with
    it. A restart, not `scontrol reconfigure`: that re-executes slurmctld under a new PID, and the
    stack knows its daemons by the PIDs it started. Jobs stay."""
    cfg.slurm_conf.write_text(conf)
    running = daemons(cfg)
    nodes = {n: running[f"slurmd-{n}"] for n in cfg.slurm_node_names()} if slurmds else {}
    for daemon in (running["slurmctld"], *nodes.values()):
        daemon.stop()
    start_slurmctld(cfg, running["slurmctld"])
    for node, daemon in nodes.items():
        start_slurmd(cfg, node, daemon)
    wait_for(
        f"{cfg.nodes} Slurm nodes up after the restart",
        lambda: nodes_up(cfg),
        120 if slurmds else 60,
        running["slurmctld"],
    )


def queued_jobs(cfg: StackConfig) -> list[str]:
    """Every job id in Slurm's queue, whatever its state; none when Slurm does not answer."""
    out = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_env(cfg), capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def start_slurmd(cfg: StackConfig, node: str, daemon: Daemon) -> None:
    # Reaped at once: a job's orphaned process left a zombie in its group, and slurmstepd held the
    # job COMPLETING ~4 s for it (devstack/reaper.py).
    daemon.start(
        _in_root(cfg, ["slurmd", "-D", "-N", node, "-f", str(cfg.slurm_conf)]),
        env=slurm_env(cfg),
        reap_orphans=True,
    )


def start_slurmrestd(cfg: StackConfig, daemon: Daemon) -> None:
    # slurmrestd refuses to run as root.
    env = {**slurm_env(cfg), "SLURM_JWT": "daemon"}
    daemon.start(
        _in_root(
            cfg,
            [
                "slurmrestd",
                "-f",
                str(cfg.slurm_conf),
                "-a",
                "rest_auth/jwt",
                "-t",
                "8",
                f"127.0.0.1:{cfg.ports.slurmrestd}",
                # With a real Node (DEPLOY=chart) its Pods reach slurmrestd on the node IP too.
                *([f"{config.REAL_NODE_IP}:{cfg.ports.slurmrestd}"] if cfg.real_node else []),
            ],
            user=(65534, 65534),
        ),
        env=env,
    )
    wait_for("slurmrestd ping", lambda: _rest_ping(cfg), 30, daemon)


def version(cfg: StackConfig) -> str:
    """The Debian version of the stack's Slurm, e.g. 24.11.5-4."""
    return slurm_root.installed_version(cfg.slurm_version)


def rest_api_version(cfg: StackConfig) -> str:
    """The data-parser version Tandem's client chose to speak to this slurmrestd."""
    client = admin_client(cfg)
    try:
        return client.dialect.version
    finally:
        client.close()


def admin_client(cfg: StackConfig, version: str = "auto") -> SlurmRestClient:
    """slurmrestd as the lab's Slurm administrator (root, tokens minted from slurmctld's key)."""
    tokens = TokenSource(key=paths(cfg)["jwt_key"].read_bytes())
    return SlurmRestClient(cfg.slurmrestd_url, REST_USER, tokens, version)


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
    jobs = queued_jobs(cfg)
    if not jobs:
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

    headers = {"X-SLURM-USER-NAME": REST_USER, "X-SLURM-USER-TOKEN": rest_token(cfg, lifespan=60)}
    r = httpx.get(f"{cfg.slurmrestd_url}/openapi/v3", headers=headers, timeout=5)
    return r.status_code == 200
