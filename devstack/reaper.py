"""Run one daemon below a process that reaps every orphan under it at once.

    python -I devstack/reaper.py ARGV...

Why (issue 51): this machine's PID 1 reaps the orphans it inherits about 1.5 s late. A cancelled
job's shell dies first now and then, its `sleep` is orphaned, and the zombie it leaves keeps the
job's process group alive in slurmstepd's eyes (proctrack/pgid), so slurmstepd waits 1 s, then
2 s more, and the job stays COMPLETING for ~4 s instead of ~0.2 s. A node run by systemd, or a
container with an init, reaps at once; so does the lab's slurmd under this (PR_SET_CHILD_SUBREAPER:
orphans below it come here, not to PID 1).

The daemon is this process's child: a signal sent here goes to it too, this process exits with its
status, and the daemon is sent SIGTERM if this process dies first (PR_SET_PDEATHSIG), so a PID file
naming this process speaks for the daemon. Standard library only, and no import of the project:
it starts once per slurmd, run with `-I`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def exit_status(status: int) -> int:
    """A shell's exit code for a wait status: the code, or 128 + the signal that ended it."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: reaper.py ARGV...", file=sys.stderr)
        return 2
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Blocked until the handlers are in place: a signal in between would otherwise be lost.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    reaper = os.getpid()
    child = os.fork()
    if child == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != reaper:  # it died before the line above: no signal will come
                os._exit(128 + signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
            os.execvp(argv[0], argv)
        except OSError as e:
            print(f"reaper: cannot run {argv[0]}: {e}", file=sys.stderr)
        os._exit(127)

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, sig)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == child:
            return exit_status(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
