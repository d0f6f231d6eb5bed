"""Which code a process runs: the commit it was built from, and whether that tree had changes not
committed. A benchmark's manifest names it (issue 55) and an operator reads it on /metrics as
`tandem_build_info`.

A process running from a checkout (the lab's own processes, an editable install) asks git once;
one from a wheel (the image) reads what the wheel's build was told (hatch_build.py writes
`tandem/_build.json`); anything else says "unknown".
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "unknown"
BAKED = Path(__file__).with_name("_build.json")
_GIT_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class BuildInfo:
    commit: str
    dirty: str  # "true", "false" or "unknown"

    @property
    def labels(self) -> tuple[str, str, str]:
        return self.commit, self.dirty, platform.python_version()


def from_git(where: Path) -> BuildInfo | None:
    """HEAD of the work tree holding `where`, and whether a tracked file differs from it; None
    outside a work tree, when this module is not one of the tree's own files (a wheel installed
    into a virtualenv inside someone else's checkout), or when git cannot say."""

    def git(*args: str) -> str:
        return subprocess.run(
            # The tree may belong to another user than the process (a service as its own account).
            ["git", "-c", "safe.directory=*", "-C", str(where), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=_GIT_TIMEOUT_SECONDS,
        ).stdout.strip()

    try:
        git("ls-files", "--error-unmatch", "--", str(where / Path(__file__).name))
        commit = git("rev-parse", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return BuildInfo(commit, "true" if changed else "false") if commit else None


def from_file(path: Path) -> BuildInfo | None:
    """What a wheel's build wrote; None without the file or with one that does not read."""
    try:
        data = json.loads(path.read_text())
        return BuildInfo(str(data["commit"]) or UNKNOWN, str(data.get("dirty", UNKNOWN)))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def for_build(root: Path) -> BuildInfo:
    """What a build of `root` records: TANDEM_COMMIT and TANDEM_DIRTY when it is told (an image is
    built from a copy without .git), else git's answer; loaded by hatch_build.py from this file,
    so this module imports nothing of Tandem's."""
    if commit := os.environ.get("TANDEM_COMMIT", ""):
        return BuildInfo(commit, os.environ.get("TANDEM_DIRTY", UNKNOWN))
    return from_git(root) or BuildInfo(UNKNOWN, UNKNOWN)


def write(path: Path, info: BuildInfo) -> None:
    path.write_text(json.dumps({"commit": info.commit, "dirty": info.dirty}) + "\n")


@functools.cache
def current() -> BuildInfo:
    here = Path(__file__).resolve().parent
    return from_git(here) or from_file(BAKED) or BuildInfo(UNKNOWN, UNKNOWN)
