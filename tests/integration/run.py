"""Run the integration tests against one stack: those marked `parallel` side by side on a few
pytest-xdist workers, then the rest one at a time (issue 51).

A `parallel` test makes only its own objects, asserts only about them and changes nothing shared
(no restart, no Slurm or policy setting, no label, taint, drain or reservation), so it may run
beside any other such test; its `clean` takes away only what it made. Everything else runs alone,
as before, after the stack is put back to no Pod, no job and no lock.

    python -m tests.integration.run [--marks EXPR] [pytest args ...]

The stack is the one running (`make up`), or one this run starts and stops, as a plain pytest
session would. TANDEM_INTEGRATION_WORKERS sets the workers (default 3; 0 runs everything in one
session, as under coverage measurement).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from devstack import config, slurm, stack
from devstack.config import StackConfig

# Measured on 2 cores: the work is mostly waiting on the API server and Slurm (issue 51).
DEFAULT_WORKERS = 3
NO_TESTS_COLLECTED = 5


def workers() -> int:
    value = os.environ.get("TANDEM_INTEGRATION_WORKERS", str(DEFAULT_WORKERS))
    try:
        n = int(value)
    except ValueError:
        raise SystemExit(f"TANDEM_INTEGRATION_WORKERS must be a whole number, not {value!r}") from None
    if not 0 <= n <= 8:
        raise SystemExit(f"TANDEM_INTEGRATION_WORKERS must be between 0 and 8, not {n}")
    return n


def marks(expression: str | None, phase: str) -> str:
    return f"({expression}) and {phase}" if expression else phase


def pytest(args: list[str]) -> int:
    print(f"+ pytest {' '.join(args)}", flush=True)
    code = subprocess.run([sys.executable, "-m", "pytest", "tests/integration", *args]).returncode
    return 0 if code == NO_TESTS_COLLECTED else code


def running(cfg: StackConfig) -> bool:
    return stack.is_up(cfg)


def lab_kill_wait(cfg: StackConfig) -> None:
    """The lab's KillWait before the tests beside each other start (a session stopped early may
    have left a shortened one): none of them may restart slurmctld under the others."""
    if slurm.kill_wait(cfg) not in (None, config.KILL_WAIT_SECONDS):
        slurm.set_kill_wait(cfg, config.KILL_WAIT_SECONDS)


def settle(cfg: StackConfig) -> None:
    """The serial tests start as they always did: no test Pod, no job, no reservation, no lock."""
    from kubernetes import client as k8s

    from devstack import kube
    from tests.integration import helpers

    helpers.clean_all(cfg, k8s.CoreV1Api(kube.api(cfg)))


def main(argv: list[str]) -> int:
    # No abbreviations: the rest are pytest's (`--ma` is not `--marks`).
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--marks", help="a pytest -m expression both phases are limited to")
    known, rest = parser.parse_known_args(argv)
    n = workers()
    if n == 0:
        return pytest([*(["-m", known.marks] if known.marks else []), *rest])
    cfg = StackConfig.from_env()
    was_up = running(cfg)
    # Every session below finds the stack up and leaves it: this run starts and stops it.
    try:
        stack.up_as_built(cfg)
        os.environ["SLURM_CONF"] = str(cfg.slurm_conf)
        lab_kill_wait(cfg)
        started = time.monotonic()
        side_by_side = pytest(["-m", marks(known.marks, "parallel"), "-n", str(n), *rest])
        print(f"the parallel tests took {time.monotonic() - started:.0f}s on {n} workers", flush=True)
        settle(cfg)
        alone = pytest(["-m", marks(known.marks, "not parallel"), *rest])
    finally:
        if not was_up and os.environ.get("TANDEM_KEEP_STACK") != "1":
            stack.down(cfg)
    return side_by_side or alone


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
