"""Start and stop the stack's daemons by PID file; nothing is ever found or killed by name."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REAPER = Path(__file__).with_name("reaper.py")
REAPED = "reaped"  # the PID file's mark of a daemon below REAPER


@dataclass(frozen=True)
class Daemon:
    """One process of the stack, known by the name of its PID file."""

    name: str
    run_dir: Path
    log_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.run_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None

    def main_pid(self) -> int | None:
        """The daemon's own process: its reaper's first child when it runs below one."""
        pid = self.pid()
        try:
            reaped = self.pid_file.read_text().split()[2:] == [REAPED]
        except FileNotFoundError:
            return None
        if pid is None or not reaped:
            return pid
        children = [(int(fields[19]), child) for child in _children(pid) if (fields := _stat(child))]
        return min(children)[1] if children else None

    def alive(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        # The PID file also records the process start time, so a recycled PID is not mistaken
        # for ours.
        try:
            recorded = self.pid_file.read_text().split()[1]
        except IndexError:
            return False
        # A daemon this very process started and that died stays a zombie until reaped: dead.
        _reap(pid)
        return _start_time(pid) == recorded and _exists(pid)

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        reap_orphans: bool = False,
    ) -> int:
        """Start `argv`; with `reap_orphans`, below devstack/reaper.py (the PID file names it), so
        the processes orphaned under the daemon are reaped at once, not by this machine's PID 1."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if reap_orphans:
            argv = [sys.executable, "-I", str(REAPER), *argv]
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # its own process group, so stop() reaches its children
            )
        started = _start_time(proc.pid) or ""
        self.pid_file.write_text(f"{proc.pid} {started}{' ' + REAPED if reap_orphans else ''}\n")
        return proc.pid

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM the process group, SIGKILL after `timeout`. True if something was stopped."""
        pid = self.pid()
        if pid is None or not self.alive():
            self.pid_file.unlink(missing_ok=True)
            return False
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _exists(pid):
            _reap(pid)
            time.sleep(0.05)
        if _exists(pid):
            _signal_group(pid, signal.SIGKILL)
            time.sleep(0.2)
        # Children that outlived their leader in the same group.
        _signal_group(pid, signal.SIGKILL)
        _reap(pid)
        self.pid_file.unlink(missing_ok=True)
        return True

    def rss_kib(self) -> int:
        pid = self.pid()
        if pid is None or not self.alive():
            return 0
        return sum(_rss_kib(p) for p in [pid, *_descendants(pid)])

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def wait_for(what: str, check: Callable[[], bool], timeout: float, daemon: Daemon | None = None) -> None:
    """Poll `check` until it is true; fail with the daemon's log if it died or time ran out."""
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            if check():
                return
            last_error = ""
        except Exception as e:
            last_error = f"{type(e).__name__}: {e}"[:500]
        if daemon is not None and not daemon.alive():
            raise RuntimeError(f"{daemon.name} exited while waiting for {what}; log:\n{daemon.tail()}")
        if time.monotonic() > deadline:
            # The cause first: a CI log shows only its tail, and the daemon's log is long.
            why = f" (the last check raised {last_error})" if last_error else ""
            tail = f"; {daemon.name}'s log:\n{daemon.tail()}" if daemon else ""
            raise RuntimeError(
                f"timed out after {timeout:.0f}s waiting for {what}{why}{tail}\n=> {what}: timed out{why}"
            )
        time.sleep(0.1)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the parenthesised command name (field 3 onwards), or
    None when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields else None  # field 22: starttime


def _exists(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"  # field 3: state


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used; 0 once it is gone."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        return sorted({int(c) for t in tasks for c in (t / "children").read_text().split()})
    except (FileNotFoundError, ProcessLookupError):
        return []


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
