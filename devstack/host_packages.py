"""Debian packages the lab needs on the host itself, installed with apt-get when missing.

The lab builds and runs as root on Debian (README: Prerequisites); what it needs beyond the base
system (debootstrap, runc's libseccomp headers, kube-proxy's iptables) it installs itself, once,
rather than asking each machine's owner to.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from devstack import build_lock, config, progress


def missing(packages: Iterable[str]) -> list[str]:
    """The packages of `packages` dpkg does not have fully installed (unknown ones included)."""
    absent = []
    for name in packages:
        # `${db:Status-Status}` is exactly "installed" only when unpacked and configured; a package
        # dpkg never heard of makes dpkg-query fail, which also means "install it".
        out = subprocess.run(
            ["dpkg-query", "-W", "-f=${db:Status-Status}", name],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0 or out.stdout.strip() != "installed":
            absent.append(name)
    return absent


# Debian's way to forbid maintainer scripts to start services (invoke-rc.d asks it; 101: not now).
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def ensure(packages: Iterable[str], why: str, start_services: bool = True) -> None:
    """Install whichever of `packages` is missing; `why` says what needs them, for the log.
    `start_services=False`: a service a package ships is not started by its postinst (the lab runs
    the program as a Daemon of its own, on its own port)."""
    if not missing(dict.fromkeys(packages)):
        return
    # apt-get takes dpkg's lock and fails when another holds it: a background build waits its turn.
    with build_lock.held(config.cache_dir() / "apt-get", "Debian packages"):
        _install(packages, why, start_services)


def _install(packages: Iterable[str], why: str, start_services: bool) -> None:
    wanted = missing(dict.fromkeys(packages))
    if not wanted:
        return
    started = contextlib.nullcontext() if start_services else _no_service_starts()
    with progress.step(f"installing {' '.join(wanted)} (apt-get, for {why})"), started:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        for argv in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *wanted],
        ):
            out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
            if out.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(argv)} failed with exit code {out.returncode}:\n"
                    f"{out.stdout[-2000:]}{out.stderr[-2000:]}"
                )
    still = missing(wanted)
    if still:
        raise RuntimeError(f"apt-get install left {' '.join(still)} not installed")


@contextlib.contextmanager
def _no_service_starts() -> Iterator[None]:
    """A policy-rc.d refusing every start while apt-get runs; one already there is left alone."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# devstack: no service starts while it installs packages\nexit 101\n")
    POLICY_RC_D.chmod(0o755)
    try:
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)
