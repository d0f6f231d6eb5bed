"""Where Tandem's own CPU goes: py-spy samples each Tandem service of the running stack while a
benchmark runs, then prints, per service, the functions that held the interpreter longest
(inclusive and self), without the frames of threads that only wait.

    NODES=64 make up && .venv/bin/python bench/profile.py -- .venv/bin/python bench/schedule.py --n 200

Only samples taken while a thread holds the GIL count (`py-spy --gil`): a thread blocked in a
socket read or a lock wait holds none, so what is left is Python's CPU. py-spy reads the processes
from outside (`--nonblocking`: it never stops them), so the benchmark's own figures hold. The
collapsed stacks are kept under --out (flame graphs: `flamegraph.pl` or speedscope.app read them).

Last line, JSON: per service, the samples and the top functions with their inclusive share.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from devstack.config import StackConfig
from devstack.procs import Daemon
from devstack.services import SERVICES

# Frames that only say which thread it is, or that hand work between threads.
_PLUMBING = re.compile(r"^(thread \(|process \d)|\((threading|concurrent/futures/thread)\.py\)$")
_LINE = re.compile(r":\d+\)$")


@dataclass
class Profile:
    samples: int = 0
    inclusive: Counter[str] = field(default_factory=Counter)
    own: Counter[str] = field(default_factory=Counter)

    def add(self, stack: list[str], count: int) -> None:
        frames = [_LINE.sub(")", f) for f in stack if not _PLUMBING.search(_LINE.sub(")", f))]
        if not frames:
            return
        self.samples += count
        for frame in set(frames):
            self.inclusive[frame] += count
        self.own[frames[-1]] += count

    def share(self, counter: Counter[str], top: int) -> list[tuple[str, float]]:
        return (
            [(f, round(100 * n / self.samples, 1)) for f, n in counter.most_common(top)]
            if self.samples
            else []
        )


def read_collapsed(path: Path) -> Profile:
    """py-spy's raw output: one line per stack, root first, `frame;frame;... count`."""
    profile = Profile()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            profile.add(stack.split(";"), int(count))
    return profile


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=int, default=100, help="samples per second")
    parser.add_argument("--top", type=int, default=15, help="functions shown per service")
    parser.add_argument("--out", type=Path, default=Path("bench-profiles"), help="where the stacks are kept")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the benchmark to run, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise SystemExit("give the benchmark to run after --")
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("py-spy is not installed: pip install -e '.[dev]'")
    cfg = StackConfig.from_env()
    args.out.mkdir(parents=True, exist_ok=True)
    recorders: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name in SERVICES:
        pid = Daemon(name, cfg.run_dir, cfg.log_dir).pid()
        if pid is None:
            raise SystemExit(f"{name} is not running: `make up` first")
        out = args.out / f"{name}.collapsed"
        sampler = [py_spy, "record", "--gil", "--nonblocking", "-f", "raw", "-r", str(args.rate)]
        recorder = subprocess.Popen(
            [*sampler, "-o", str(out), "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        recorders[name] = (recorder, out)
    try:
        ran = subprocess.run(command, check=False)
    finally:
        for recorder, _ in recorders.values():
            recorder.send_signal(signal.SIGINT)  # py-spy writes its samples on SIGINT
        for recorder, _ in recorders.values():
            recorder.wait(timeout=120)
    summary: dict[str, object] = {}
    for name, (_, out) in recorders.items():
        profile = read_collapsed(out) if out.exists() else Profile()
        print(f"\n{name}: {profile.samples} samples holding the GIL ({profile.samples / args.rate:.1f} s)")
        print(f"  {'inclusive %':>11}  function")
        for frame, pct in profile.share(profile.inclusive, args.top):
            print(f"  {pct:>11}  {frame}")
        print(f"  {'self %':>11}  function")
        for frame, pct in profile.share(profile.own, args.top):
            print(f"  {pct:>11}  {frame}")
        summary[name] = {"samples": profile.samples, "top": profile.share(profile.inclusive, args.top)}
    print(json.dumps({"command": command, "returncode": ran.returncode, "services": summary}))


if __name__ == "__main__":
    main()
