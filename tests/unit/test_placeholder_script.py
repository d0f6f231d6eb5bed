"""The placeholder script's started marker, run by bash against stand-ins for scontrol and curl."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tandem.hooks import scripts


def _stand_ins(bin_dir: Path, log: Path, slurm_version: str) -> None:
    for name, extra in (
        ("scontrol", f'[ "$1" = --version ] && echo "slurm {slurm_version}"\n'),
        ("curl", ""),
    ):
        path = bin_dir / name
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n{extra}exit 0\n')
        path.chmod(0o755)


def _run_until_marked(tmp_path: Path, env_extra: dict[str, str], slurm_version: str) -> list[str]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    _stand_ins(bin_dir, log, slurm_version)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TANDEM_HOOKS_ENV": "/nonexistent",
        "TANDEM_HOOKS_URL": "http://127.0.0.1:9",
        "TANDEM_JOB_COMMENT": "eval",
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "cpu-001",
        **env_extra,
    }
    proc = subprocess.Popen(["bash", str(scripts.DIR / "placeholder.sh")], env=env)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if log.exists() and "update" in log.read_text():
                break
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
    return [line for line in log.read_text().splitlines() if line.startswith("scontrol")]


@pytest.mark.parametrize(
    ("field", "marked"),
    [
        ("comment", "scontrol update jobid=42 comment=eval: started"),
        ("extra", "scontrol update jobid=42 extra=: started"),
    ],
)
def test_told_the_field_the_script_marks_it_without_asking_slurm(
    tmp_path: Path, field: str, marked: str
) -> None:
    assert _run_until_marked(tmp_path, {"TANDEM_STARTED_FIELD": field}, "22.05.8") == [marked]


@pytest.mark.parametrize(
    ("version", "marked"),
    [
        ("22.05.8", "scontrol update jobid=42 comment=eval: started"),
        ("23.02.7", "scontrol update jobid=42 extra=: started"),
    ],
)
def test_not_told_the_script_asks_scontrol_for_the_version(tmp_path: Path, version: str, marked: str) -> None:
    assert _run_until_marked(tmp_path, {}, version) == ["scontrol --version", marked]


def test_with_a_trace_the_comment_is_given_back_to_the_pod_on_the_extra_field_too(tmp_path: Path) -> None:
    env = {"TANDEM_STARTED_FIELD": "extra", "TRACEPARENT": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    marked = "scontrol update jobid=42 extra=: started comment=eval"
    assert _run_until_marked(tmp_path, env, "23.02.7") == [marked]
