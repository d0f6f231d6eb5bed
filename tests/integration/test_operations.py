"""Issue 5: each service exposes Prometheus metrics with real values; with two schedulers under
leader election, killing the leader hands over and no Pod gets two jobs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from kubernetes import client as k8s

from devstack import config, demo, identities, services
from devstack.config import StackConfig
from tandem.v1 import syncer_pb2, syncer_pb2_grpc
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]


def _metric(text: str, name: str, labels: str = "") -> float:
    """The sum of `name`'s samples that have each of `labels` (`a="x",b="y"`, in any order: the
    exposition sorts them)."""
    total = 0.0
    wanted = [label for label in labels.split(",") if label]
    for line in text.splitlines():
        if line.startswith(name) and all(w in line for w in wanted) and not line.startswith("#"):
            key = line.split(" ")[0]
            if key == name or key.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parallel
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
    # Which code answered: the lab's processes run this checkout (a benchmark's manifest reads it).
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=config.REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    for text in (scheduler, syncer, hooks):
        assert f'tandem_build_info{{commit="{head}",' in text


# Counters that are rightly zero after a demo where nothing went wrong.
MAY_BE_ZERO = {"tandem_evictions_total", "tandem_slurm_api_errors_total"}


@pytest.mark.parallel
def test_after_make_demo_each_service_shows_its_metrics(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    try:
        assert demo.run(stack_cfg) == 0
        scraped = {service: demo.scrape(stack_cfg, service) for service in demo.WATCHED_METRICS}
    finally:
        for pod in core.list_namespaced_pod(demo.NAMESPACE).items:
            h.delete_pod(core, pod.metadata.name, demo.NAMESPACE, grace=0)
        h.wait_until("demo Pods gone", lambda: not core.list_namespaced_pod(demo.NAMESPACE).items, 30)
    for service, names in demo.WATCHED_METRICS.items():
        for name in set(names) - MAY_BE_ZERO:
            assert sum(v for _, v in scraped[service].get(name, [])) > 0, f"{service}: {name} is zero"
    validated = scraped["tandem-scheduler"]["tandem_pods_validated_total"]
    assert any('result="invalid"' in labels and v > 0 for labels, v in validated)
    locks = scraped["tandem-syncer"]["tandem_node_locks"]
    assert any('state="locked_strict"' in labels and v > 0 for labels, v in locks)
    hooks = scraped["tandem-hooks"]["tandem_hook_calls_total"]
    assert any('route="/v1/started"' in labels and v > 0 for labels, v in hooks)


# A second install, "ha" (its own ServiceAccounts, RBAC and Leases), with two replicas of a service.
HA = identities.Release("ha", values=("scheduler.name=ha-tandem",))


def _replicas(
    cfg: StackConfig, service: str, tmp_path: Path, args: Callable[[int], list[str]]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two replicas of a service of the HA install, electing a leader on its Lease; `args(i)` are
    replica i's own flags (names, addresses)."""
    component = service.removeprefix("tandem-")
    identities.ensure_release_rbac(cfg, HA)
    kubeconfig = identities.write_kubeconfig(cfg, HA, component, tmp_path / f"kubeconfig-{component}")
    procs = []
    for i in range(2):
        argv = h.service_argv(
            cfg,
            service,
            HA,
            kubeconfig,
            "--leader-elect=true",
            "--leader-election-namespace=tandem",
            f"--leader-election-id={HA.service_account(component)}",
            *args(i),
        )
        log = open(tmp_path / f"{component}-{i}.log", "wb")  # noqa: SIM115
        procs.append(
            subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SLURM_CONF": str(cfg.slurm_conf)},
            )
        )
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


@pytest.fixture
def two_schedulers(stack_cfg: StackConfig, tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from _replicas(
        stack_cfg,
        "tandem-scheduler",
        tmp_path,
        lambda i: [
            "--scheduler-name=ha-tandem",
            "--grpc-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ],
    )


def _leader_pid(core: k8s.CoreV1Api) -> int | None:
    lease = k8s.CoordinationV1Api(core.api_client).read_namespaced_lease(
        HA.service_account("scheduler"), "tandem"
    )
    holder = lease.spec.holder_identity or ""
    m = re.match(r".*_(\d+)$", holder)
    return int(m.group(1)) if m else None


@pytest.mark.parallel
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


@pytest.fixture
def two_syncers(
    stack_cfg: StackConfig, tmp_path: Path
) -> Iterator[list[tuple[subprocess.Popen[bytes], str]]]:
    addresses = [f"127.0.0.1:{h.free_port()}" for _ in range(2)]
    for procs in _replicas(
        stack_cfg,
        "tandem-syncer",
        tmp_path,
        lambda i: [
            f"--grpc-bind-address={addresses[i]}",
            "--health-probe-bind-address=127.0.0.1:0",
            "--scheduler-name=ha-tandem",
        ],
    ):
        yield list(zip(procs, addresses, strict=True))


def _answers(cfg: StackConfig, address: str) -> bool:
    """The replica serves the syncer API (a standby answers UNAVAILABLE)."""
    with services.operator_channel(cfg, address) as channel:
        try:
            syncer_pb2_grpc.SyncerServiceStub(channel).ListNodeLocks(
                syncer_pb2.ListNodeLocksRequest(), timeout=2
            )
            return True
        except grpc.RpcError:
            return False


def test_killing_the_leading_syncer_hands_over_within_the_lease(
    stack_cfg: StackConfig, two_syncers: list[tuple[subprocess.Popen[bytes], str]]
) -> None:
    leader = h.wait_until(
        "one syncer leads", lambda: next((r for r in two_syncers if _answers(stack_cfg, r[1])), None), 40
    )
    standby = next(r for r in two_syncers if r is not leader)
    assert not _answers(stack_cfg, standby[1]), "both replicas serve: two syncers would race on the locks"
    leader[0].send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    h.wait_until("the standby serves", lambda: _answers(stack_cfg, standby[1]), 40)
    handed_over = time.monotonic() - killed_at
    print(f"\n[measure] syncer leader killed -> standby serves after {handed_over:.1f}s (lease 15s)")
    assert handed_over <= 15 + 2 + 5  # lease + retry period + the new leader's first Slurm sync
    with services.operator_channel(stack_cfg, standby[1]) as channel:
        locks = syncer_pb2_grpc.SyncerServiceStub(channel).ListNodeLocks(
            syncer_pb2.ListNodeLocksRequest(), timeout=5
        )
    assert len(locks.locks) == stack_cfg.nodes
