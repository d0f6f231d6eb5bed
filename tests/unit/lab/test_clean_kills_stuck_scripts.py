"""The integration tests' clean-up kills a cancelled job's script that outlived its SIGTERM, and
only that job's (issue 51: such a job held the clean-up for KillWait)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from devstack.config import Ports, StackConfig
from tests.integration import helpers


def _script(cfg: StackConfig, job: int) -> subprocess.Popen[bytes]:
    """A job's batch script as slurmd starts it: its own process group, deaf to SIGTERM."""
    path = cfg.slurm_dir / "spool" / "cpu-001" / f"job{job:05d}" / "slurm_script"
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\ntrap '' TERM\nsleep 300\n")
    path.chmod(0o755)
    return subprocess.Popen(["/bin/sh", str(path)], start_new_session=True)


def test_a_named_jobs_script_and_its_children_are_killed_and_another_jobs_are_not(tmp_path: Path) -> None:
    cfg = StackConfig(nodes=2, state_dir=tmp_path, ports=Ports.from_base(31000))
    stuck, other = _script(cfg, 42), _script(cfg, 420)
    try:
        killed = helpers.kill_job_scripts(cfg, {42, 7})
        assert killed == {42: stuck.pid}
        assert stuck.wait(timeout=10) == -9
        helpers.wait_until("the script's sleep gone too", lambda: not _group_alive(stuck.pid), 10)
        assert other.poll() is None and _group_alive(other.pid)
    finally:
        for p in (stuck, other):
            if _group_alive(p.pid):
                os.killpg(p.pid, 9)
            p.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_nothing_is_killed_when_no_named_job_has_a_script_here(tmp_path: Path) -> None:
    cfg = StackConfig(nodes=2, state_dir=tmp_path, ports=Ports.from_base(31000))
    assert helpers.kill_job_scripts(cfg, {1, 2}) == {}
