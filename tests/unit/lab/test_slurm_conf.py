"""The lab's slurm.conf: Tandem's prolog and epilog in it, and, for the benchmark's truly bare
Slurm (issue 55), the same file without them and nothing else changed; the main scheduler's pass
often enough that a requeued job starts when it may (issue 51)."""

from __future__ import annotations

from pathlib import Path

from devstack import slurm
from devstack.config import Ports, StackConfig


def _cfg(tmp_path: Path) -> StackConfig:
    return StackConfig(nodes=2, state_dir=tmp_path, ports=Ports.from_base(31000))


def test_the_lab_runs_tandems_prolog_and_epilog_on_every_job(tmp_path: Path) -> None:
    lines = slurm.slurm_conf(_cfg(tmp_path)).splitlines()
    hooks = slurm.paths(_cfg(tmp_path))
    assert f"Prolog={hooks['prolog']}" in lines and f"Epilog={hooks['epilog']}" in lines
    assert "PrologFlags=Alloc" in lines


def test_truly_bare_slurm_differs_only_by_the_hooks(tmp_path: Path) -> None:
    lab = slurm.slurm_conf(_cfg(tmp_path)).splitlines()
    bare = slurm.slurm_conf(_cfg(tmp_path), hooks=False).splitlines()
    assert [line for line in lab if line not in bare] == [
        f"Prolog={slurm.paths(_cfg(tmp_path))['prolog']}",
        f"Epilog={slurm.paths(_cfg(tmp_path))['epilog']}",
        "PrologFlags=Alloc",
    ]
    assert [line for line in bare if line not in lab] == []


def test_the_main_scheduler_passes_every_five_seconds(tmp_path: Path) -> None:
    (line,) = [
        x for x in slurm.slurm_conf(_cfg(tmp_path)).splitlines() if x.startswith("SchedulerParameters=")
    ]
    assert "sched_interval=5" in line.split("=", 1)[1].split(",")
