"""Where the machine's CPU time went during a benchmark phase: each daemon of the stack (by its PID
file), the benchmark itself, and the rest (short-lived processes: slurmstepd, prolog and epilog
scripts, their curl calls)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _process_seconds(pid: int) -> float:
    """User + system CPU seconds of one live process, or 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / TICKS


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / TICKS


def _group(daemon: str) -> str:
    return "slurmd (all)" if daemon.startswith("slurmd-") else daemon


@dataclass
class CpuSample:
    machine: float
    by_group: dict[str, float]


def sample(run_dir: Path) -> CpuSample:
    by_group: dict[str, float] = {"benchmark": _process_seconds(os.getpid())}
    for pid_file in sorted(run_dir.glob("*.pid")):
        try:
            pid = int(pid_file.read_text().split()[0])  # "<pid> <start time>"
        except (OSError, ValueError, IndexError):
            continue
        group = _group(pid_file.stem)
        by_group[group] = by_group.get(group, 0.0) + _process_seconds(pid)
    return CpuSample(_machine_busy_seconds(), by_group)


def used_between(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per group between two samples, with `other` the machine's unexplained rest."""
    used = {g: after.by_group.get(g, 0.0) - before.by_group.get(g, 0.0) for g in after.by_group}
    machine = after.machine - before.machine
    used["other (slurmstepd, prolog/epilog)"] = max(0.0, machine - sum(used.values()))
    used["whole machine"] = machine
    return used
