"""Which integration test ran which of Tandem's lines, measured in the services and the test process.

CI's second leg runs only the tests that reach code whose behaviour differs between the Slurm and
Kubernetes releases the lab runs (issue 51). Which tests those are is measured, not guessed: with
TANDEM_COVERAGE_DIR set, the stack starts each service under coverage.py, and every line a service
runs is labelled with the test the session was running then (the session writes the test's id to
a file the service reads four times a second). `devstack.next_leg_tests` compares two such runs.

    python -m devstack.coverage_by_test DIR EXECUTABLE ARG...   (what the stack starts)
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import coverage  # a dev dependency: only a measuring session imports it

ENV = "TANDEM_COVERAGE_DIR"
ROOT = Path(__file__).resolve().parent.parent
# The id of the test now running, written by the integration session (tests/integration/conftest.py).
CONTEXT_FILE = "test-now-running"
POLL_SECONDS = 0.25
# Each test phase's duration, a JSON [test id, seconds] per line: what the choice weighs.
DURATIONS_FILE = "durations.jsonl"
# The context of what a service runs while no test is (the stack starting, a session's end).
BETWEEN = "(between tests)"


def directory() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value).resolve() if value else None


def wrapped(argv: list[str]) -> list[str]:
    """`argv` as the stack starts it: under coverage when this session measures, else as it is."""
    where = directory()
    if where is None:
        return argv
    where.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "devstack.coverage_by_test", str(where), *argv]


def _measuring(where: Path) -> coverage.Coverage:
    import coverage

    return coverage.Coverage(
        data_file=str(where / ".coverage"),
        data_suffix=True,
        include=[f"{ROOT}/services/*", f"{ROOT}/libs/tandem/*"],
        omit=[f"{ROOT}/libs/tandem/v1/*"],
    )


# The session's own measurement: some tests run Tandem's code in the test process itself (its Slurm
# client, its checks), and that counts as much as what they make a service run.
_session: coverage.Coverage | None = None


def now_running(test_id: str) -> None:
    """Label what the services and this process run from now on with `test_id` (no-op when nothing
    measures)."""
    global _session
    where = directory()
    if where is None:
        return
    where.mkdir(parents=True, exist_ok=True)
    tmp = where / (CONTEXT_FILE + ".tmp")
    tmp.write_text(test_id)
    tmp.replace(where / CONTEXT_FILE)
    if _session is None:
        _session = _measuring(where)
        _session.start()
        atexit.register(_save, _session)
    _session.switch_context(test_id)


def took(test_id: str, seconds: float) -> None:
    """Record that a phase of `test_id` took `seconds` (no-op when nothing measures)."""
    where = directory()
    if where is None:
        return
    with open(where / DURATIONS_FILE, "a") as out:
        out.write(json.dumps([test_id, round(seconds, 3)]) + "\n")


def _save(cov: coverage.Coverage) -> None:
    cov.stop()
    cov.save()


def _follow_context(cov: coverage.Coverage, where: Path) -> None:
    """Switch the coverage context whenever the session names another test. Switching also
    flushes what was measured to the data file, so a service killed with SIGKILL loses at most
    the last quarter second."""
    while True:
        try:
            name = (where / CONTEXT_FILE).read_text().strip()
        except OSError:
            name = ""
        cov.switch_context(name or BETWEEN)
        time.sleep(POLL_SECONDS)


def main() -> None:
    where, executable, *args = sys.argv[1:]
    cov = _measuring(Path(where))
    cov.start()
    atexit.register(_save, cov)
    threading.Thread(target=_follow_context, args=(cov, Path(where)), daemon=True).start()
    name = Path(executable).name
    (script,) = entry_points(group="console_scripts", name=name)
    sys.argv = [executable, *args]
    code = script.load()()
    sys.exit(code)


if __name__ == "__main__":
    main()
