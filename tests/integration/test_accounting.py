"""Slurm with accounting (slurmdbd + MariaDB): accounts and QOS from a Pod's annotations really
apply, a QOS Slurm refuses is a clear, final answer on the Pod, and QOS preemption works both ways."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import slurm
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]


def _job_fields(cfg: StackConfig, job: int, fields: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-j", str(job), "-o", fields],
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split("|") if out.strip() else []


def _state(cfg: StackConfig, job: int) -> str:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State"],
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0].split()[0] if out else ""


def _running(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name)
    return pod if pod and pod.spec.node_name and pod.status.phase == "Running" else None


@pytest.mark.parallel
def test_a_pods_account_and_qos_are_its_jobs(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("qos-high")
    h.create(
        core,
        h.tandem_pod(
            stack_cfg,
            name,
            {h.PREFIX + "account": "k8s", h.PREFIX + "qos": "high", h.PREFIX + "user-id": "1001"},
        ),
    )
    h.wait_until("pod running", lambda: _running(core, name), 40)
    job = h.job_id_of(core, name) or 0
    account, qos, user = _job_fields(stack_cfg, job, "%a|%q|%u")
    assert (account.strip(), qos.strip(), user.strip()) == ("k8s", "high", "tandem-pods")


@pytest.mark.parallel
def test_a_qos_slurm_refuses_is_one_clear_event_and_no_retry(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    name = h.unique("bad-qos")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "qos": "platinum"}))

    def refused() -> k8s.V1PodCondition | None:
        pod = h.get_pod(core, name)
        cond = h.scheduled_condition(pod) if pod else None
        return cond if cond and cond.reason == "SlurmSubmitFailed" else None

    cond = h.wait_until("PodScheduled=False SlurmSubmitFailed", refused, 30)
    assert cond.status == "False"
    assert "Invalid qos specification" in cond.message
    time.sleep(5)  # a retry would show as a second event or a job
    warnings = [e for e in h.events_for(core, name) if e.type == "Warning"]
    assert len(warnings) == 1 and (warnings[0].count or 1) == 1, [e.message for e in warnings]
    assert "Invalid qos specification" in warnings[0].message
    assert not h.own_jobs(stack_cfg)
    pod = h.get_pod(core, name)
    assert pod is not None and not pod.spec.node_name


@pytest.mark.parallel
def test_an_account_the_user_has_no_association_with_is_refused(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    name = h.unique("bad-account")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "account": "physics"}))

    def refused() -> str | None:
        pod = h.get_pod(core, name)
        cond = h.scheduled_condition(pod) if pod else None
        return cond.message if cond and cond.reason == "SlurmSubmitFailed" else None

    message = h.wait_until("PodScheduled=False SlurmSubmitFailed", refused, 30)
    assert "Invalid account" in message


@pytest.fixture
def qos_preemption(stack_cfg: StackConfig) -> Iterator[None]:
    """slurmctld with PreemptType=preempt/qos for the test, partition priority again after."""
    slurm.switch_preemption(stack_cfg, "qos")
    try:
        yield
    finally:
        slurm.switch_preemption(StackConfig.from_env(), stack_cfg.preempt)


@pytest.mark.usefixtures("qos_preemption")
def test_a_high_qos_slurm_job_preempts_a_normal_qos_pod(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    node = "cpu-005"
    name = h.unique("normal-pod")
    h.create(
        core,
        h.tandem_pod(
            stack_cfg,
            name,
            {h.PREFIX + "required-nodes": node, h.PREFIX + "exclusive": "none", h.PREFIX + "qos": "normal"},
        ),
    )
    h.wait_until("pod running", lambda: _running(core, name), 40)
    placeholder = h.job_id_of(core, name) or 0
    winner = h.sbatch(stack_cfg, "--qos=high", "--exclusive", f"--nodelist={node}")
    h.wait_until("preempted pod gone", lambda: h.get_pod(core, name) is None, 60)
    h.wait_until("high-QOS job running", lambda: _state(stack_cfg, winner) == "RUNNING", 60)
    assert _state(stack_cfg, placeholder) in ("PREEMPTED", "CANCELLED")


@pytest.mark.usefixtures("qos_preemption")
def test_a_high_qos_pod_preempts_a_normal_qos_slurm_job(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    node = "cpu-007"
    loser = h.sbatch(stack_cfg, "--qos=normal", "--exclusive", f"--nodelist={node}")
    h.wait_until("normal-QOS job running", lambda: _state(stack_cfg, loser) == "RUNNING", 30)
    name = h.unique("high-pod")
    h.create(
        core,
        h.tandem_pod(
            stack_cfg,
            name,
            {h.PREFIX + "required-nodes": node, h.PREFIX + "exclusive": "none", h.PREFIX + "qos": "high"},
        ),
    )
    pod = h.wait_until("high-QOS pod running", lambda: _running(core, name), 60)
    assert pod.spec.node_name == h.kube_node_of(node)
    assert _state(stack_cfg, loser) == "PREEMPTED"
