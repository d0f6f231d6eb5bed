"""The integration suite's stack: the same code as `make up`, brought up once per session.

If a stack is already up (from `make up`), it is reused and left running; otherwise the session
starts one and takes it down at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import config, coverage_by_test, kube, next_leg_tests, slurm, stack
from devstack.config import StackConfig


@pytest.fixture(scope="session")
def stack_cfg() -> Iterator[StackConfig]:
    cfg = StackConfig.from_env()
    was_up = stack.is_up(cfg)
    if was_up and coverage_by_test.directory() is not None:
        pytest.exit(f"{coverage_by_test.ENV} measures the services a session starts: `make down` first")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # A worker beside others (tests/integration/run.py started the stack): none starts or stops it.
        if not was_up:
            pytest.exit(
                f"the stack in {cfg.state_dir} is not up: run the tests through tests/integration/run.py"
            )
        os.environ["SLURM_CONF"] = str(cfg.slurm_conf)
        yield cfg
        return
    try:
        # On a fresh machine the session starts before Kueue and LWS are built (CI builds them in
        # the background); the tests that use them ask for `late_controllers` and run last.
        stack.up_as_built(cfg)
    except BaseException:
        # A half-started stack would hold its ports and mounts against the next run.
        if not was_up:
            stack.down(cfg)
        raise
    os.environ["SLURM_CONF"] = str(cfg.slurm_conf)
    yield cfg
    if not was_up and os.environ.get("TANDEM_KEEP_STACK") != "1":
        stack.down(cfg)


@pytest.fixture(scope="session")
def late_controllers(stack_cfg: StackConfig) -> None:
    """Kueue's and LWS's controllers running, waiting for their build if it is still going."""
    stack.start_late_controllers(stack_cfg)


@pytest.fixture(scope="session")
def core(stack_cfg: StackConfig) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(kube.api(stack_cfg))


@pytest.fixture(autouse=True)
def made_by_test() -> None:
    """Each test starts having made nothing (what helpers.create and helpers.sbatch record)."""
    from tests.integration import helpers

    helpers.made.pods.clear()
    helpers.made.jobs.clear()


@pytest.fixture
def clean(request: pytest.FixtureRequest, stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[None]:
    """Each scheduling test ends leaving no test Pod, no Slurm job and no lock; one marked
    `parallel` runs beside others, so it takes away only the Pods and jobs it made."""
    yield
    from tests.integration import helpers

    if request.node.get_closest_marker("parallel") is not None:
        helpers.clean_own(stack_cfg, core)
    else:
        helpers.clean_all(stack_cfg, core)


@pytest.fixture(scope="session")
def lab_kill_wait_at_end(stack_cfg: StackConfig) -> Iterator[None]:
    """A stack that outlives the session runs the lab's KillWait again, whichever test ran last."""
    yield
    if slurm.kill_wait(stack_cfg) != config.KILL_WAIT_SECONDS:
        slurm.set_kill_wait(stack_cfg, config.KILL_WAIT_SECONDS)


@pytest.fixture(autouse=True)
def kill_wait(request: pytest.FixtureRequest) -> None:
    """Slurm's KillWait as this test needs it: the lab's 30 s, or SHORT_KILL_WAIT for a test marked
    `short_kill_wait` (one that waits a KillWait out: what it shows does not depend on the length,
    issue 51). slurmctld restarts only when the value changes; such tests run one after another
    (pytest_collection_modifyitems), so a session changes it twice at most."""
    from tests.integration import helpers

    short = request.node.get_closest_marker("short_kill_wait") is not None
    want = helpers.SHORT_KILL_WAIT if short else config.KILL_WAIT_SECONDS
    if short:
        request.getfixturevalue("lab_kill_wait_at_end")  # a stack to shorten it on, and put back
    now = slurm.kill_wait(StackConfig.from_env())
    if now is None or now == want:
        return
    if request.node.get_closest_marker("parallel") is not None:
        # A restart of slurmctld would pull Slurm from under the tests beside it.
        pytest.fail(f"Slurm runs KillWait {now}s, not {want}s: tests/integration/run.py puts it back first")
    cfg: StackConfig = request.getfixturevalue("stack_cfg")
    slurm.set_kill_wait(cfg, want)
    helpers.wait_for_kill_wait(cfg, request.getfixturevalue("core"), want)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tests of the real Node itself run only on a DEPLOY=chart stack (the running one, or the
    one the session would start); every other stack has no kubelet to run their Pods."""
    coverage_by_test.now_running(item.nodeid)
    if item.get_closest_marker("real_node") is not None and not StackConfig.from_env().real_node:
        pytest.skip("needs a DEPLOY=chart stack (its real Node)")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    coverage_by_test.took(report.nodeid, report.duration)


# Marks whose tests change what is shared, or rely on their place in the order: never `parallel`;
# nor a test that starts the late controllers (each worker would start its own).
ALONE_MARKS = ("soak", "last", "short_kill_wait")
ALONE_FIXTURES = ("late_controllers",)


def runs_alone_for(marks: set[str], fixtures: set[str]) -> list[str]:
    """Why a test marked `parallel` may not run beside others (nothing: it may, or it is not marked)."""
    if "parallel" not in marks:
        return []
    return [m for m in ALONE_MARKS if m in marks] + [f for f in ALONE_FIXTURES if f in fixtures]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak kills and restarts the stack's daemons: it runs after every other test, so none
    starts on a stack that is still coming back; so does a test marked `last` (it uninstalls).
    On a stack where the chart installed Tandem (DEPLOY=chart) only the tests marked `chart` run,
    none marked `venv` or `first_leg`. The tests devstack.next_leg_tests chose are marked `next_leg`.
    The tests that use Kueue or LWS come after the others of their group: on a fresh machine their
    controllers are still being built while the first tests run."""
    if StackConfig.from_env().deploy == "chart":

        def runs(item: pytest.Item) -> bool:
            return bool(item.get_closest_marker("chart")) and not (
                item.get_closest_marker("venv") or item.get_closest_marker("first_leg")
            )

        config.hook.pytest_deselected(items=[i for i in items if not runs(i)])
        items[:] = [i for i in items if runs(i)]
    # What a test beside others may not do: change the KillWait, start controllers, take the stack
    # away, or rely on being sorted after the others.
    for item in items:
        marks = {m.name for m in item.iter_markers()}
        if alone := runs_alone_for(marks, set(getattr(item, "fixturenames", ()))):
            raise pytest.UsageError(f"{item.nodeid} is marked parallel and {', '.join(alone)}: it runs alone")
    # CI's second leg runs the tests that reach release-specific code, as measured (issue 51).
    second_leg = next_leg_tests.listed()
    for item in items:
        if item.nodeid in second_leg:
            item.add_marker("next_leg")
    items.sort(
        key=lambda item: (
            item.get_closest_marker("soak") is not None,
            item.get_closest_marker("last") is not None,
            item.get_closest_marker("short_kill_wait") is not None,
            "late_controllers" in getattr(item, "fixturenames", ()),
            # Beside others, the tests that wait a Slurm timer out start first, the rest around them.
            item.get_closest_marker("parallel") is not None
            and item.get_closest_marker("slurm_timer") is None,
        )
    )
