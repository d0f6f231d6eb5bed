"""The integration tests run in two phases against one stack: the `parallel` ones side by side,
then the rest alone, from a stack put back to nothing running (tests/integration/run.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import kube, stack
from devstack.config import StackConfig
from tests.integration import conftest
from tests.integration import run as integration_run


class _Stack:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def up_as_built(self, cfg: object) -> float:
        self.calls.append("up")
        return 0.0

    def down(self, cfg: object) -> list[str]:
        self.calls.append("down")
        return []


def _world(monkeypatch: pytest.MonkeyPatch, codes: dict[str, int]) -> tuple[_Stack, list[list[str]]]:
    stack = _Stack()
    sessions: list[list[str]] = []

    def session(args: list[str]) -> int:
        sessions.append(args)
        stack.calls.append("pytest")
        return codes.get(args[1], 0)

    monkeypatch.setattr(integration_run, "stack", stack)
    monkeypatch.setattr(integration_run, "pytest", session)
    monkeypatch.setattr(integration_run, "settle", lambda cfg: stack.calls.append("settle"))
    monkeypatch.setattr(integration_run, "running", lambda cfg: False)
    monkeypatch.setattr(integration_run, "lab_kill_wait", lambda cfg: stack.calls.append("killwait"))
    monkeypatch.setenv("SLURM_CONF", "unchanged")  # what main() sets is undone after the test
    monkeypatch.delenv("TANDEM_KEEP_STACK", raising=False)
    monkeypatch.delenv("TANDEM_INTEGRATION_WORKERS", raising=False)
    return stack, sessions


def test_the_parallel_tests_run_on_workers_then_the_rest_alone_on_a_settled_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack, sessions = _world(monkeypatch, {})
    assert integration_run.main(["--marks", "next_leg", "--durations=0"]) == 0
    assert sessions == [
        ["-m", "(next_leg) and parallel", "-n", "3", "--durations=0"],
        ["-m", "(next_leg) and not parallel", "--durations=0"],
    ]
    # A stack this run started, it stops; the serial tests start with nothing left running.
    assert stack.calls == ["up", "killwait", "pytest", "settle", "pytest", "down"]


def test_a_failure_in_either_phase_fails_the_run_and_the_other_phase_still_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack, sessions = _world(monkeypatch, {"parallel": 1})
    assert integration_run.main([]) == 1
    assert [s[1] for s in sessions] == ["parallel", "not parallel"]
    stack, sessions = _world(monkeypatch, {"not parallel": 2})
    assert integration_run.main([]) == 2
    assert stack.calls[-1] == "down"


def test_no_workers_is_one_session_of_everything_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    stack, sessions = _world(monkeypatch, {})
    monkeypatch.setenv("TANDEM_INTEGRATION_WORKERS", "0")
    assert integration_run.main(["-k", "gang"]) == 0
    assert sessions == [["-k", "gang"]] and stack.calls == ["pytest"]


@pytest.mark.parametrize("value", ["three", "-1", "9"])
def test_a_worker_count_that_is_not_one_is_refused_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    stack, sessions = _world(monkeypatch, {})
    monkeypatch.setenv("TANDEM_INTEGRATION_WORKERS", value)
    with pytest.raises(SystemExit, match="TANDEM_INTEGRATION_WORKERS must be"):
        integration_run.main([])
    assert stack.calls == [] and sessions == []


def test_a_kept_stack_and_one_that_was_up_are_left_running(monkeypatch: pytest.MonkeyPatch) -> None:
    stack, _ = _world(monkeypatch, {})
    monkeypatch.setenv("TANDEM_KEEP_STACK", "1")
    integration_run.main([])
    assert "down" not in stack.calls
    stack, _ = _world(monkeypatch, {})
    monkeypatch.setattr(integration_run, "running", lambda cfg: True)
    integration_run.main([])
    assert stack.calls == ["up", "killwait", "pytest", "settle", "pytest"]


@pytest.mark.parametrize(
    ("marks", "fixtures", "why"),
    [
        ({"parallel", "slurm"}, {"clean"}, []),
        ({"parallel", "short_kill_wait"}, set(), ["short_kill_wait"]),
        ({"parallel", "soak"}, set(), ["soak"]),
        ({"parallel"}, {"late_controllers"}, ["late_controllers"]),
        ({"short_kill_wait", "last"}, {"late_controllers"}, []),  # not beside others: nothing to say
    ],
)
def test_a_test_that_changes_what_is_shared_may_not_be_marked_parallel(
    marks: set[str], fixtures: set[str], why: list[str]
) -> None:
    assert conftest.runs_alone_for(marks, fixtures) == why


def test_the_suite_as_marked_collects_and_some_tests_run_side_by_side() -> None:
    """The real marks pass the check (a bad one is a usage error at collection)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration", "--collect-only", "-q", "-m", "parallel"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "test_the_time_limit_ends_the_pod" in out.stdout


def test_pytests_own_options_pass_through_even_where_they_look_like_ours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, sessions = _world(monkeypatch, {})
    monkeypatch.setenv("TANDEM_INTEGRATION_WORKERS", "0")
    integration_run.main(["--maxfail=1", "--ma", "x"])
    assert sessions == [["--maxfail=1", "--ma", "x"]]


def _running_stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dead: tuple[str, ...]) -> StackConfig:
    """A stack's state dir whose PID files name this process (alive) for every daemon but `dead`."""
    monkeypatch.setenv("TANDEM_STATE_DIR", str(tmp_path))
    for name in ("DEPLOY", "NODES", "SLURM_VERSION"):
        monkeypatch.delenv(name, raising=False)
    cfg = StackConfig.from_env()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    (cfg.state_dir / "stack.json").write_text("{}")
    me = f"{os.getpid()} {Path('/proc/self/stat').read_text().rsplit(')', 1)[1].split()[19]}\n"
    for name, daemon in stack.all_daemons(cfg).items():
        if name not in dead:
            daemon.run_dir.mkdir(parents=True, exist_ok=True)
            daemon.pid_file.write_text(me)
    return cfg


def test_a_stack_on_a_fresh_machine_is_up_before_kueue_and_lws_are_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Their controllers start once built, and the tests beside each other start before that: a
    worker that asked for them stopped at once (every worker: `node down: keyboard-interrupt`)."""
    cfg = _running_stack(tmp_path, monkeypatch, dead=kube.LATE_CONTROLLERS)
    assert stack.is_up(cfg) and integration_run.running(cfg)


def test_a_stack_missing_any_other_daemon_is_not_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not stack.is_up(_running_stack(tmp_path, monkeypatch, dead=("kube-apiserver",)))
    assert not stack.is_up(_running_stack(tmp_path / "b", monkeypatch, dead=("slurmctld",)))
