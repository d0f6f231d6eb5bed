"""Issue 5: each service exposes Prometheus metrics with real values; with two schedulers under
leader election, killing the leader hands over and no Pod gets two jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client as k8s

from devstack import services
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]


def _metric(text: str, name: str, labels: str = "") -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (not labels or labels in line) and not line.startswith("#"):
            key = line.split(" ")[0]
            if key == name or key.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_metrics_show_what_happened(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("metrics")
    h.create(core, h.tandem_pod(stack_cfg, name))
    h.wait_until("pod running", lambda: (p := h.get_pod(core, name)) is not None and p.spec.node_name, 30)
    bad = h.unique("metrics-bad")
    h.create(core, h.tandem_pod(stack_cfg, bad, cpu=None))
    time.sleep(2)
    p = stack_cfg.ports
    scheduler = httpx.get(f"http://127.0.0.1:{p.scheduler_health}/metrics", timeout=5).text
    syncer = httpx.get(f"http://127.0.0.1:{p.syncer_health}/metrics", timeout=5).text
    hooks = httpx.get(f"{stack_cfg.hooks_url}/metrics", timeout=5).text
    assert _metric(scheduler, "tandem_jobs_submitted_total", 'result="ok"') >= 1
    assert _metric(scheduler, "tandem_pods_validated_total", 'result="valid"') >= 1
    assert _metric(scheduler, "tandem_pods_validated_total", 'result="invalid"') >= 1
    assert _metric(scheduler, "tandem_submit_seconds_count") >= 1
    assert _metric(scheduler, "tandem_bind_seconds_count") >= 1
    assert _metric(scheduler, "tandem_pod_create_to_bound_seconds_count") >= 1
    assert _metric(syncer, "tandem_lock_wait_seconds_count") >= 1
    assert _metric(syncer, "tandem_node_locks", 'state="locked_strict"') >= 1
    assert "tandem_slurm_api_seconds_count" in syncer
    assert _metric(hooks, "tandem_hook_calls_total", 'route="/v1/lock",code="200"') >= 1
    assert _metric(hooks, "tandem_hook_calls_total", 'route="/v1/started",code="200"') >= 1


@pytest.fixture
def two_schedulers(stack_cfg: StackConfig, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two replicas of a scheduler named ha-tandem, electing a leader on one Lease."""
    procs = []
    for i in range(2):
        argv = [
            a
            for a in services.argv(stack_cfg, "tandem-scheduler")
            if not a.startswith(("--scheduler-name", "--grpc-bind-address", "--health-probe-bind-address"))
        ]
        argv += [
            "--scheduler-name=ha-tandem",
            "--grpc-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
            "--leader-elect=true",
            "--leader-election-namespace=tandem",
            "--leader-election-id=ha-tandem",
        ]
        log = open(tmp_path / f"replica-{i}.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SLURM_CONF": str(stack_cfg.slurm_conf)},
            )
        )
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


def _leader_pid(core: k8s.CoreV1Api) -> int | None:
    lease = k8s.CoordinationV1Api(core.api_client).read_namespaced_lease("ha-tandem", "tandem")
    holder = lease.spec.holder_identity or ""
    m = re.match(r".*_(\d+)$", holder)
    return int(m.group(1)) if m else None


def test_killing_the_leader_hands_over_and_no_pod_gets_two_jobs(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, two_schedulers: list[subprocess.Popen[bytes]]
) -> None:
    pids = {p.pid for p in two_schedulers}
    leader = h.wait_until("a leader", lambda: (pid := _leader_pid(core)) in pids and pid, 30)
    first = h.unique("ha-a")
    pod = h.tandem_pod(stack_cfg, first)
    pod["spec"]["schedulerName"] = "ha-tandem"
    h.create(core, pod)
    h.wait_until(
        "first pod bound", lambda: (p := h.get_pod(core, first)) is not None and p.spec.node_name, 30
    )
    os.kill(leader, signal.SIGKILL)
    killed_at = time.monotonic()
    second = h.unique("ha-b")
    pod = h.tandem_pod(stack_cfg, second)
    pod["spec"]["schedulerName"] = "ha-tandem"
    h.create(core, pod)
    new_leader = h.wait_until(
        "the other replica leads", lambda: (pid := _leader_pid(core)) in pids - {leader} and pid, 40
    )
    handed_over = time.monotonic() - killed_at
    h.wait_until(
        "second pod bound", lambda: (p := h.get_pod(core, second)) is not None and p.spec.node_name, 40
    )
    print(f"\n[measure] leader killed -> new leader after {handed_over:.1f}s (lease 15s)")
    assert new_leader != leader
    assert handed_over <= 15 + 2 + 3  # lease duration + retry period + slack
    for name in (first, second):
        pod_obj = h.get_pod(core, name)
        assert pod_obj is not None
        out = subprocess.run(
            ["squeue", "-h", "-t", "all", "-o", "%i %j"],
            env=h.slurm_env(stack_cfg),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        jobs = [line for line in out.splitlines() if line.endswith(f"/{name}/{pod_obj.metadata.uid}")]
        assert len(jobs) == 1, jobs
