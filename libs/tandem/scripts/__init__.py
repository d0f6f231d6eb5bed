"""The shell scripts Slurm runs: prolog, epilog and the placeholder job (mounted on slurmd Pods)."""

from __future__ import annotations

from pathlib import Path

DIR = Path(__file__).resolve().parent


def placeholder_batch_script() -> str:
    """The placeholder job's batch script, self-contained: common.sh, then placeholder.sh."""
    common = (DIR / "common.sh").read_text()
    body = (DIR / "placeholder.sh").read_text().split("\n", 1)[1]
    return f"#!/bin/bash\n{common}\n{body}"
