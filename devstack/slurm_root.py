"""Current Slurm from Debian's archive, in a debootstrapped root cached by the version it holds.

The host's own Debian (bookworm) only has Slurm 22.05; trixie has 24.11 and sid 26.05. Each
lives in its own root under the cache, built once per machine; a stack runs its daemons in it
with `chroot`, with its state directory bound onto the same path inside, so state, logs, hook
scripts and job output have one path inside and out (lab/SLURM.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack import build_lock, config, host_packages, progress

MIRROR = "http://deb.debian.org/debian"
PACKAGES = [
    "slurmctld",
    "slurmd",
    "slurmrestd",
    "slurm-client",
    "slurmdbd",
    "slurm-wlm-jwt-plugin",
    "munge",
    "mariadb-server",
    "mariadb-client",
    # What the prolog, epilog and placeholder scripts run inside the root.
    "bash",
    "curl",
    "ca-certificates",
]
# The Slurm commands the host runs through the root (its own 22.05 CLI cannot talk to 24.11+).
COMMANDS = [
    "sinfo",
    "squeue",
    "scontrol",
    "sbatch",
    "scancel",
    "sacct",
    "sacctmgr",
    "srun",
    "sprio",
    "sshare",
]


@dataclass(frozen=True)
class Release:
    """A Slurm major release and the Debian suite that carries it."""

    major: str
    suite: str
    # slurmdbd fatals with libmariadb3 11.8.9 (error 5027 in _check_mysql_concat_is_sane): sid had
    # it first, then trixie as a stable update (11.8.9-0+deb13u1, November 2026) under 24.11 too.
    # Bookworm's 10.11 (Connector/C 3.3) works with both. Taken from this suite when set.
    mariadb_client_from: str = ""


RELEASES = {
    "24.11": Release("24.11", "trixie", mariadb_client_from="bookworm"),
    "26.05": Release("26.05", "sid", mariadb_client_from="bookworm"),
}
# Where a release's compat libmariadb3 is unpacked inside its root (on slurmdbd's LD_LIBRARY_PATH).
COMPAT_LIB_DIR = "/opt/tandem/libmariadb"


def release(major: str) -> Release:
    try:
        return RELEASES[major]
    except KeyError:
        raise SystemExit(
            f"SLURM_VERSION={major} is not one Tandem's lab installs; use one of {', '.join(RELEASES)}"
        ) from None


def home(major: str) -> Path:
    return config.cache_dir() / "slurm" / major


def root_dir(major: str) -> Path:
    return home(major) / "root"


def installed_version(major: str) -> str:
    """The Debian version of the Slurm in the cached root, e.g. `24.11.5-1`; "" if not built."""
    marker = home(major) / "complete"
    return marker.read_text().strip() if marker.exists() else ""


def ensure_root(major: str) -> Path:
    """The root of Slurm `major`, built on first use (about two minutes, most of it downloads)."""
    rel = release(major)
    root = root_dir(major)
    build_lock.once(
        root,
        f"the Slurm {major} root",
        lambda: _build_root(major, rel, root),
        built=lambda: bool(installed_version(major)),
    )
    if rel.mariadb_client_from and _compat_from(root) != rel.mariadb_client_from:
        _unpack_compat_libmariadb(root, rel.mariadb_client_from)  # a root cached before a change
    return root


def _build_root(major: str, rel: Release, root: Path) -> None:
    ensure_debootstrap()
    building = home(major) / "root.partial"
    _unmount_under(building)
    shutil.rmtree(building, ignore_errors=True)
    building.parent.mkdir(parents=True, exist_ok=True)
    with progress.step(f"debootstrapping Debian {rel.suite} for Slurm {major} (once per machine)"):
        _run(["debootstrap", "--variant=minbase", rel.suite, str(building), MIRROR], quiet=True)
    _configure_apt(building)
    with progress.step(f"installing Slurm {major} and MariaDB into the {rel.suite} root"):
        _apt(building, "update")
        _apt(building, "install", "-y", "--no-install-recommends", *PACKAGES)
        if rel.mariadb_client_from:
            _unpack_compat_libmariadb(building, rel.mariadb_client_from)
        _apt(building, "clean")
    version = _chroot_out(building, "dpkg-query", "-W", "-f=${Version}", "slurmctld")
    if not version.startswith(major + "."):
        raise SystemExit(
            f"Debian {rel.suite} now carries Slurm {version}, not {major}: the archive keeps only each "
            f"suite's current version. Pin a release Debian still has (devstack/slurm_root.py RELEASES)."
        )
    shutil.rmtree(root, ignore_errors=True)
    building.rename(root)
    (home(major) / "complete").write_text(version + "\n")
    print(f"  Slurm {version} installed in {root}", flush=True)


def ensure_users(root: Path, users: list[tuple[str, int, int]], groups: list[tuple[str, int]]) -> None:
    """Jobs run inside the root as their uid: it needs the users and groups they run as."""
    for name, gid in groups:
        if subprocess.run(["chroot", str(root), "getent", "group", str(gid)], capture_output=True).returncode:
            _run(["chroot", str(root), "groupadd", "-g", str(gid), name])
    for name, uid, gid in users:
        if subprocess.run(
            ["chroot", str(root), "getent", "passwd", str(uid)], capture_output=True
        ).returncode:
            _run(
                [
                    "chroot",
                    str(root),
                    "useradd",
                    "-u",
                    str(uid),
                    "-g",
                    str(gid),
                    "-M",
                    "-s",
                    "/bin/bash",
                    name,
                ]
            )


def add_supplementary_group(root: Path, user: str, group: str) -> None:
    _run(["chroot", str(root), "usermod", "-a", "-G", group, user])


def mount(root: Path, state_dir: Path) -> None:
    """proc (daemons die with `readlink failed` without it) and the stack's state directory,
    bound onto its own path inside the root."""
    inside = root / str(state_dir).lstrip("/")
    if not _mounted(root / "proc"):
        _run(["mount", "-t", "proc", "proc", str(root / "proc")])
    if not _mounted(inside):
        inside.mkdir(parents=True, exist_ok=True)
        _run(["mount", "--bind", str(state_dir), str(inside)])


def unmount(root: Path, state_dir: Path) -> None:
    """Undo `mount` for this stack; proc stays while another stack still uses the root."""
    inside = root / str(state_dir).lstrip("/")
    if _mounted(inside):
        busy = subprocess.run(["umount", str(inside)], capture_output=True, text=True)
        if busy.returncode != 0:
            # A process of some job still has a file open under it: detach now, freed when it ends.
            print(f"{inside} is still in use ({busy.stderr.strip()}); detaching it lazily", flush=True)
            _run(["umount", "--lazy", str(inside)])
    others = [m for m in _mounts_under(root) if m != root / "proc"]
    if not others and _mounted(root / "proc"):
        _run(["umount", str(root / "proc")])


def write_command_wrappers(root: Path, bin_dir: Path, slurm_conf: Path) -> None:
    """`sinfo`, `squeue`, ... on the stack's PATH, each running the root's own command in the
    caller's directory (sbatch takes relative paths and its default --chdir from there)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for command in COMMANDS:
        path = bin_dir / command
        path.write_text(
            "#!/bin/sh\n"
            f"# Slurm's {command} from {root} (generated by devstack/slurm_root.py)\n"
            f': "${{SLURM_CONF:={slurm_conf}}}"\nexport SLURM_CONF\n'
            f"exec chroot '{root}' /bin/sh -c 'cd \"$0\" 2>/dev/null || cd /; exec \"$@\"' "
            f'"$PWD" /usr/bin/{command} "$@"\n'
        )
        path.chmod(0o755)


def chroot_argv(root: Path, argv: list[str], user: tuple[int, int] | None = None) -> list[str]:
    """`argv` run inside the root; chroot execs it, so the PID is the daemon's own."""
    userspec = [f"--userspec={user[0]}:{user[1]}"] if user else []
    return ["chroot", *userspec, str(root), *argv]


def ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    host_packages.ensure(["debootstrap"], "making Debian roots")


def _configure_apt(root: Path) -> None:
    # sid's Release file may read as expired; nothing in a root may start a service on install.
    (root / "etc/apt/apt.conf.d/99tandem").write_text(
        'Acquire::Check-Valid-Until "false";\nAPT::Install-Recommends "false";\n'
    )
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost {config.hostname()}\n")


def _unpack_compat_libmariadb(root: Path, suite: str) -> None:
    """Unpack `suite`'s libmariadb3 under COMPAT_LIB_DIR (slurmdbd's LD_LIBRARY_PATH), leaving
    the root's own packages as they are."""
    extra = root / "etc/apt/sources.list.d/tandem-compat.list"
    extra.write_text(f"deb {MIRROR} {suite} main\n")
    try:
        _apt(root, "update")
        _run(["chroot", str(root), "sh", "-c", f"cd /tmp && apt-get download -q libmariadb3/{suite}"])
        debs = sorted((root / "tmp").glob("libmariadb3_*.deb"))
        if not debs:
            raise SystemExit(f"apt-get download libmariadb3/{suite} left no package in {root}/tmp")
        unpacked = root / "tmp/libmariadb3"
        _run(["dpkg-deb", "-x", str(debs[-1]), str(unpacked)])
        target = root / COMPAT_LIB_DIR.lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        for lib in (unpacked / "usr/lib/x86_64-linux-gnu").glob("libmariadb.so*"):
            (target / lib.name).unlink(missing_ok=True)
            shutil.copy2(lib, target / lib.name, follow_symlinks=False)
        (target / COMPAT_FROM).write_text(suite + "\n")
        shutil.rmtree(unpacked)
        for deb in debs:
            deb.unlink()
    finally:
        extra.unlink(missing_ok=True)
        _apt(root, "update")


COMPAT_FROM = "FROM"  # the suite the compat library came from, beside it


def _compat_from(root: Path) -> str:
    marker = root / COMPAT_LIB_DIR.lstrip("/") / COMPAT_FROM
    return marker.read_text().strip() if marker.exists() else ""


def _apt(root: Path, *args: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    _run(["chroot", str(root), "apt-get", "-q", *args], env=env, quiet=True)


def _chroot_out(root: Path, *argv: str) -> str:
    return subprocess.run(
        ["chroot", str(root), *argv], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _run(argv: list[str], env: dict[str, str] | None = None, quiet: bool = False) -> None:
    out = subprocess.run(argv, env=env, capture_output=quiet, text=True)
    if out.returncode != 0:
        detail = f":\n{(out.stdout or '')[-2000:]}{(out.stderr or '')[-2000:]}" if quiet else ""
        raise RuntimeError(f"{' '.join(argv)} failed with exit code {out.returncode}{detail}")


def _mounts_under(root: Path) -> list[Path]:
    prefix = str(root.resolve()) + "/"
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if target.startswith(prefix):
            found.append(Path(target))
    return found


def _mounted(path: Path) -> bool:
    return path.resolve() in _mounts_under(path.resolve().parent) if path.exists() else False


def _unmount_under(root: Path) -> None:
    """A half-built root left by an interrupted build may still have mounts: never rm -rf into them."""
    if root.exists():
        for target in sorted(_mounts_under(root), key=lambda p: len(str(p)), reverse=True):
            subprocess.run(["umount", "-l", str(target)], check=False)
