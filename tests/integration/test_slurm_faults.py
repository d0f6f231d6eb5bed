"""Issue 12: slurmrestd answers that are garbled, truncated, slow, dropped or 503 (a seeded
fault-injecting proxy in front of the real one) between a scheduler and Slurm. Every Pod still
runs, on exactly one job; a submit whose answer was lost does not leave a second job behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from devstack import identities
from devstack.config import StackConfig
from tests.integration import helpers as h
from tests.integration.faultproxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean"), pytest.mark.parallel]

FAULTY = identities.Release("faulty", values=("scheduler.name=faulty-tandem",))
SCHEDULER = "faulty-tandem"
PODS = 10


@pytest.fixture
def proxy(stack_cfg: StackConfig) -> Iterator[FaultProxy]:
    with FaultProxy(stack_cfg.slurmrestd_url, seed=12) as p:
        yield p


@pytest.fixture
def faulty_scheduler(stack_cfg: StackConfig, proxy: FaultProxy, tmp_path: Path) -> Iterator[Path]:
    """A scheduler of its own release whose every call to Slurm goes through the proxy (the
    syncer, which reads Slurm for everyone, does not)."""
    identities.ensure_release_rbac(stack_cfg, FAULTY)
    kubeconfig = identities.write_kubeconfig(stack_cfg, FAULTY, "scheduler", tmp_path / "kubeconfig")
    argv = [
        a if not a.startswith("--slurm-api-base=") else f"--slurm-api-base={proxy.url}"
        for a in h.service_argv(
            stack_cfg,
            "tandem-scheduler",
            FAULTY,
            kubeconfig,
            f"--scheduler-name={SCHEDULER}",
            "--grpc-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        )
    ]
    log_path = tmp_path / "faulty-scheduler.log"
    with h.service_process(stack_cfg, argv, log_path):
        yield log_path


def _jobs_named(cfg: StackConfig, pod: k8s.V1Pod) -> list[str]:
    out = h.squeue(cfg, "-h", "-o", "%i %j")
    return [line for line in out.splitlines() if line.endswith(f"/{pod.metadata.name}/{pod.metadata.uid}")]


def test_every_pod_runs_on_one_job_through_a_faulty_slurmrestd(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, proxy: FaultProxy, faulty_scheduler: Path
) -> None:
    names = [h.unique("faulty") for _ in range(PODS)]
    for name in names:
        pod = h.tandem_pod(stack_cfg, name, cpu="500m", memory="256Mi")
        pod["spec"]["schedulerName"] = SCHEDULER
        h.create(core, pod)

    def all_bound() -> bool:
        pods = [h.get_pod(core, n) for n in names]
        return all(p is not None and p.spec.node_name for p in pods)

    h.wait_until("every Pod bound despite the faults", all_bound, 180, every=1)

    def one_job_each() -> bool:
        return all(len(_jobs_named(stack_cfg, p)) == 1 for n in names if (p := h.get_pod(core, n)))

    # A submit dropped after Slurm took it leaves a second job until the scheduler sees and
    # cancels it (the job leaves squeue once its cancel completes).
    h.wait_until("one job per Pod", one_job_each, 60, every=1)
    print(f"\n[measure] faults injected: {dict(proxy.injected)}")
    for fault in ("unavailable", "garbled", "truncated", "dropped"):
        assert proxy.injected[fault] > 0, f"the seed injected no {fault} answer: {dict(proxy.injected)}"
    for name in names:
        seen = h.get_pod(core, name)
        assert seen is not None
        job = h.job_id_of(core, name)
        assert job is not None and [f"{job} "] == [
            line[: len(str(job)) + 1] for line in _jobs_named(stack_cfg, seen)
        ]
    drained = h.scontrol(stack_cfg, "show", "node", "-o")
    assert "faulty-" not in drained, "a cancelled duplicate job waited for the Pod and drained its node"
    log = faulty_scheduler.read_text()
    assert "Traceback" not in log, log[-3000:]
