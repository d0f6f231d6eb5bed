"""Where the machine's CPU time went during a benchmark phase: each daemon of the stack, the
benchmark itself, and the rest (short-lived processes: slurmstepd, prolog and epilog scripts, their
curl calls)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from devstack.procs import Daemon, cpu_seconds


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _group(daemon: str) -> str:
    return "slurmd (all)" if daemon.startswith("slurmd-") else daemon


@dataclass
class CpuSample:
    machine: float
    by_group: dict[str, float]


def sample(daemons: Mapping[str, Daemon]) -> CpuSample:
    by_group: dict[str, float] = {"benchmark": cpu_seconds(os.getpid())}
    for name, daemon in daemons.items():
        pid = daemon.pid()
        group = _group(name)
        by_group[group] = by_group.get(group, 0.0) + (cpu_seconds(pid) if pid is not None else 0.0)
    return CpuSample(_machine_busy_seconds(), by_group)


def used_between(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per group between two samples, with `other` the machine's unexplained rest."""
    used = {g: after.by_group.get(g, 0.0) - before.by_group.get(g, 0.0) for g in after.by_group}
    machine = after.machine - before.machine
    used["other (slurmstepd, prolog/epilog)"] = max(0.0, machine - sum(used.values()))
    used["whole machine"] = machine
    return used
