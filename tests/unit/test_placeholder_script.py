"""The placeholder script's started marker, run by bash against stand-ins for scontrol and curl."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tandem.hooks import scripts


def _stand_ins(bin_dir: Path, log: Path) -> None:
    for name in ("scontrol", "curl"):
        path = bin_dir / name
        # curl as the scripts run it (-w '\n%{http_code}'): an empty 200.
        answer = "printf '\\n200'\n" if name == "curl" else ""
        path.write_text(f'#!/bin/bash\necho "{name} $*" >> {log}\n{answer}exit 0\n')
        path.chmod(0o755)


def _start(tmp_path: Path, env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """The script as a job's batch step, with stand-ins that log their calls (and succeed)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    _stand_ins(bin_dir, log)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TANDEM_HOOKS_ENV": "/nonexistent",
        "TANDEM_HOOKS_URL": "http://127.0.0.1:9",
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "cpu-001",
        **(env_extra or {}),
    }
    return subprocess.Popen(["bash", str(scripts.DIR / "placeholder.sh")], env=env), log


def _run_until_marked(tmp_path: Path, env_extra: dict[str, str]) -> list[str]:
    proc, log = _start(tmp_path, env_extra)
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
    ("extra", "marked"),
    [
        ("", "scontrol update jobid=42 extra=: started"),
        ("traceparent=00-1-2-01", "scontrol update jobid=42 extra=traceparent=00-1-2-01: started"),
    ],
)
def test_the_script_appends_its_marker_to_the_extra_it_was_given(
    tmp_path: Path, extra: str, marked: str
) -> None:
    # One scontrol call, nothing asked of Slurm first: the batch environment has no SLURM_JOB_EXTRA.
    assert _run_until_marked(tmp_path, {"TANDEM_JOB_EXTRA": extra, "SLURM_JOB_EXTRA": "ignored"}) == [marked]


def test_on_sigterm_the_script_leaves_no_sleep_behind(tmp_path: Path) -> None:
    """Its `sleep &` would otherwise be reparented out of the job and outlive it."""
    proc, _ = _start(tmp_path)  # curl succeeds: the `terminating` call says the Pod is gone
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")

    def sleeping_child() -> str | None:
        for pid in children.read_text().split():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                    return pid
            except FileNotFoundError:
                continue
        return None

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sleeping_child() is None:
        time.sleep(0.05)
    sleeper = sleeping_child()
    assert sleeper is not None
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 0
    time.sleep(0.2)
    state = Path(f"/proc/{sleeper}/stat")
    assert not state.exists() or state.read_text().split(")")[1].split()[0] == "Z"


@pytest.mark.parametrize(
    ("terminating_reply", "drains_itself"),
    [
        # Tandem answered 408 after draining the nodes a Pod of the job still runs on.
        ('{"pod_gone": false, "drained_slurm_nodes": ["cpu-002"]}', False),
        # No answer (gateway unreachable): the script drains its own node.
        ("", True),
    ],
)
def test_at_killwait_the_script_drains_only_when_tandem_could_not(
    tmp_path: Path, terminating_reply: str, drains_itself: bool
) -> None:
    proc, log = _start(tmp_path, {"TANDEM_KILL_WAIT": "5"})
    # From now on `terminating` is answered 408 with this reply, or not at all (nothing listens:
    # curl exits 7, and the script asks again until its budget, 2 s here, is spent).
    answer = f"printf '%s\\n408' '{terminating_reply}'; exit 0" if terminating_reply else "exit 7"
    (tmp_path / "bin" / "curl").write_text(
        f'#!/bin/bash\necho "curl $*" >> {log}\n'
        f'case "$*" in *"/v1/terminating"*) {answer} ;; esac\nprintf \'\\n200\'\nexit 0\n'
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (log.exists() and "update" in log.read_text()):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 1
    drains = [line for line in log.read_text().splitlines() if "/v1/drain" in line]
    assert bool(drains) == drains_itself
