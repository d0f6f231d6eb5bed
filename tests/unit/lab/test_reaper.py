"""The lab's slurmd runs below devstack/reaper.py: a job's orphaned processes are reaped at once
(this machine's PID 1 took ~1.5 s, and slurmstepd held a cancelled job COMPLETING ~4 s for the
zombie), signals reach the daemon, and the PID file still speaks for it (issue 51)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from devstack import procs
from devstack.procs import Daemon


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return int(fields[1]), fields[0]


T = TypeVar("T")


def _wait(what: str, check: Callable[[], T | None], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_orphan_below_the_daemon_comes_to_the_reaper_and_is_reaped_at_once(tmp_path: Path) -> None:
    orphan_pid = tmp_path / "orphan"
    daemon = Daemon("d", tmp_path / "run", tmp_path / "log")
    # The subshell starts a sleep and exits at once: the sleep is orphaned, as a cancelled job's
    # `sleep` is when its shell dies first.
    script = f"(sleep 0.5 & echo $! > {orphan_pid}); exec sleep 30"
    reaper = daemon.start(["sh", "-c", script], reap_orphans=True)
    try:
        written = _wait(
            "the orphan's pid", lambda: orphan_pid.read_text().strip() if orphan_pid.exists() else None, 5
        )
        orphan = int(written)
        assert _wait("the orphan reparented", lambda: _ppid_and_state(orphan), 5)[0] == reaper
        # Gone from /proc (not a zombie) soon after its sleep ends.
        _wait("the orphan reaped", lambda: _ppid_and_state(orphan) is None, 0.5 + 1.5)
        assert daemon.alive()
        main = daemon.main_pid()
        assert main is not None and main != reaper
        assert Path(f"/proc/{main}/cmdline").read_bytes().split(b"\0")[:2] == [b"sleep", b"30"]
    finally:
        daemon.stop(timeout=5)
    assert not daemon.alive()


def test_a_signal_to_the_reaper_reaches_the_daemon_and_its_status_is_the_reapers(tmp_path: Path) -> None:
    script = "trap 'exit 7' TERM; while :; do sleep 0.05; done"
    proc = subprocess.Popen([sys.executable, "-I", str(procs.REAPER), "sh", "-c", script])
    try:
        child = _wait("the daemon", lambda: procs._children(proc.pid), 5)[0]
        time.sleep(0.2)  # the trap set
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(5) == 7
        state = _ppid_and_state(child)
        assert state is None or state[1] == "Z"
    finally:
        proc.kill()


def test_the_daemon_follows_a_reaper_killed_with_sigkill(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-I", str(procs.REAPER), "sleep", "30"])
    child = _wait("the daemon", lambda: procs._children(proc.pid), 5)[0]
    _wait("the daemon running", lambda: Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep"), 5)
    proc.kill()
    proc.wait(5)
    _wait("the daemon gone with its reaper", lambda: (s := _ppid_and_state(child)) is None or s[1] == "Z", 5)


def test_a_command_that_cannot_run_is_said_and_ends_the_reaper(tmp_path: Path) -> None:
    argv = [sys.executable, "-I", str(procs.REAPER), str(tmp_path / "no-such-daemon")]
    out = subprocess.run(argv, capture_output=True, text=True)
    assert out.returncode == 127 and "cannot run" in out.stderr
