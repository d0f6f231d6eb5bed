"""Debian packages the lab needs on the host itself, installed with apt-get when missing.

The lab builds and runs as root on Debian (README: Prerequisites); what it needs beyond the base
system (debootstrap, runc's libseccomp headers, kube-proxy's iptables) it installs itself, once,
rather than asking each machine's owner to.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable

from devstack import progress


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


def ensure(packages: Iterable[str], why: str) -> None:
    """Install whichever of `packages` is missing; `why` says what needs them, for the log."""
    wanted = missing(dict.fromkeys(packages))
    if not wanted:
        return
    with progress.step(f"installing {' '.join(wanted)} (apt-get, for {why})"):
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
