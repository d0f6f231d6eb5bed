"""What a benchmark run ran on (issue 55), kept in its record beside its figures: the Kubernetes,
Slurm and Python releases, a hash of slurm.conf, the harness's commit and each running service's
(as its `tandem_build_info` metric says: a service started before the last commit runs older code
than the harness), and whether each tree had changes not committed.

A figure is only as good as the code it names: a record whose services' commit differs from the
harness's, or whose trees were dirty, says so instead of passing for the commit in its row.
"""

from __future__ import annotations

import hashlib
import platform
import re
from pathlib import Path
from typing import Any

import httpx

from devstack import services, slurm
from devstack.config import StackConfig
from tandem import buildinfo

_BUILD_INFO = re.compile(r"^tandem_build_info\{(?P<labels>[^}]*)\}\s+1(\.0)?\s*$", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')
# What a service that did not answer its /metrics is recorded as.
UNANSWERED = {"commit": "unanswered", "dirty": buildinfo.UNKNOWN}


def build_info(metrics: str) -> dict[str, str] | None:
    """The commit and dirty flag a process's /metrics text names (None when it names none)."""
    found = _BUILD_INFO.search(metrics)
    if found is None:
        return None
    labels = dict(_LABEL.findall(found.group("labels")))
    return {
        "commit": labels.get("commit", buildinfo.UNKNOWN),
        "dirty": labels.get("dirty", buildinfo.UNKNOWN),
    }


def services_build(cfg: StackConfig) -> dict[str, dict[str, str]]:
    """Each of the lab's Tandem services: the code it runs."""
    found: dict[str, dict[str, str]] = {}
    for name in services.SERVICES:
        url = services.metrics_url(cfg, name)
        try:
            text = httpx.get(url, timeout=5).text if url else ""
        except httpx.HTTPError:
            text = ""
        found[name] = build_info(text) or UNANSWERED
    return found


def slurm_release(cfg: StackConfig) -> str:
    """The Debian version of the Slurm the lab runs (24.11.5-4), or its series when unknown."""
    try:
        return slurm.version(cfg) or cfg.slurm_version
    except (OSError, ValueError, RuntimeError):
        return cfg.slurm_version


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def harness_build() -> dict[str, str]:
    """The code this process runs, as the services' own metric says theirs."""
    info = buildinfo.current()
    return {"commit": info.commit, "dirty": info.dirty}


def of(cfg: StackConfig) -> dict[str, Any]:
    return {
        "kubernetes": cfg.kubernetes_version,
        "slurm": slurm_release(cfg),
        "python": platform.python_version(),
        "slurm_conf_sha256": file_sha256(cfg.slurm_conf),
        "harness": harness_build(),
        "services": services_build(cfg),
    }


def caveats(manifest: dict[str, Any]) -> list[str]:
    """What makes a record's figures not the harness commit's own: a dirty tree, or a service
    running other code (empty when they are)."""
    said: list[str] = []
    harness = manifest.get("harness") or {}
    if harness.get("dirty") == "true":
        said.append("the harness's tree had changes")
    for name, build in sorted((manifest.get("services") or {}).items()):
        if build == UNANSWERED:
            said.append(f"{name} did not say which code it ran")
        elif build.get("commit") != harness.get("commit"):
            said.append(f"{name} ran {str(build.get('commit'))[:12]}")
        elif build.get("dirty") == "true":
            said.append(f"{name} ran a tree with changes")
    return said
