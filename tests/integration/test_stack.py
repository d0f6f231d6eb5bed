"""The local stack is real: apiserver, kwok Nodes, slurmd Pods, Slurm nodes, slurmrestd, services."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from kubernetes import client as k8s

from devstack import config, kube, services, slurm
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


@pytest.mark.parallel
def test_apiserver_answers_with_its_version(stack_cfg: StackConfig) -> None:
    out = kube.kubectl(stack_cfg, "version", "-o", "json")
    assert f'"gitVersion": "{stack_cfg.kubernetes_version}"' in out


def test_every_node_is_ready_with_its_resources(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    nodes = {n.metadata.name: n for n in core.list_node().items}
    # Beside the kwok Nodes, DEPLOY=chart's one real Node.
    assert len(nodes) == stack_cfg.nodes + (1 if stack_cfg.real_node else 0)
    for i in range(stack_cfg.nodes):
        node = nodes[config.kube_node_name(i)]
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        if config.is_gpu_node(i):
            assert node.status.allocatable["nvidia.com/gpu"] == str(config.GPUS_PER_NODE)
            assert node.metadata.labels["gpu.nvidia.com/model"] == config.GPU_MODEL
        else:
            assert "nvidia.com/gpu" not in node.status.allocatable


@pytest.mark.parallel
def test_each_node_runs_one_slurmd_pod_named_after_its_slurm_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    key, value = config.SLURMD_POD_LABEL
    pods = core.list_namespaced_pod(config.SLURM_NAMESPACE, label_selector=f"{key}={value}").items
    assert sorted(p.metadata.name for p in pods) == sorted(stack_cfg.slurm_node_names())
    assert all(p.status.phase == "Running" for p in pods)
    by_node = {p.spec.node_name: p.metadata.name for p in pods}
    assert by_node == {config.kube_node_name(i): config.slurm_node_name(i) for i in range(stack_cfg.nodes)}


def sinfo_rows(stack_cfg: StackConfig) -> dict[str, list[str]]:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-p", "batch", "-o", "%N %t %G"],
        env=slurm.slurm_env(stack_cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()}


def test_sinfo_shows_every_node_idle_with_gpus_on_gpu_nodes(stack_cfg: StackConfig) -> None:
    # A job cancelled by the clean-up before this test may leave its node "plnd" (backfill's plan
    # for it) until the next backfill cycle, bf_interval 5 s later; a job still pending keeps it so.
    def all_idle() -> dict[str, list[str]] | None:
        rows = sinfo_rows(stack_cfg)
        return rows if all(v[0] == "idle" for v in rows.values()) else None

    rows = h.wait_until("every node idle", all_idle, 15, every=0.5)
    assert sorted(rows) == sorted(stack_cfg.slurm_node_names())
    for i, name in enumerate(stack_cfg.slurm_node_names()):
        state, gres = rows[name]
        assert state == "idle"
        # sinfo prints a node's GRES as configured: one MIG node has slices of its GPU 0.
        assert gres == (config.gres_string(i) or "(null)")


@pytest.mark.parallel
def test_a_job_submitted_through_slurmrestd_runs_on_a_node(stack_cfg: StackConfig) -> None:
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm.rest_token(stack_cfg, lifespan=300)}
    marker = stack_cfg.state_dir / "job-ran-marker"
    marker.unlink(missing_ok=True)
    body = {
        "script": f'#!/bin/sh\necho "$SLURMD_NODENAME" > {marker}\n',
        "job": {
            "name": "stack-smoke",
            "environment": ["PATH=/usr/bin:/bin"],
            "current_working_directory": "/tmp",
            "cpus_per_task": 1,
            "memory_per_node": {"set": True, "number": 100},
        },
    }
    url = f"{stack_cfg.slurmrestd_url}/slurm/{h.REST_VERSION}"
    r = httpx.post(f"{url}/job/submit", json=body, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    job_id = r.json()["job_id"]
    deadline = time.monotonic() + 30
    state = ""
    while time.monotonic() < deadline:
        job = h.rest_job(stack_cfg, job_id)
        state = job["job_state"]
        if state == "COMPLETED":
            break
        time.sleep(0.2)
    assert state == "COMPLETED"
    assert marker.read_text().strip() in stack_cfg.slurm_node_names()
    assert marker.read_text().strip() == job["nodes"]


@pytest.mark.parametrize("name", services.SERVICES)
@pytest.mark.parallel
def test_each_service_reports_serving(stack_cfg: StackConfig, name: str) -> None:
    assert services.serving(stack_cfg, name)


@pytest.mark.parallel
def test_hooks_gateway_refuses_calls_without_the_token(stack_cfg: StackConfig) -> None:
    assert httpx.get(f"{stack_cfg.hooks_url}/healthz", timeout=5).status_code == 200
    r = httpx.post(f"{stack_cfg.hooks_url}/v1/lock", json={}, timeout=5)
    assert r.status_code == 401
    r = httpx.post(
        f"{stack_cfg.hooks_url}/v1/lock", json={}, headers={"Authorization": "Bearer wrong"}, timeout=5
    )
    assert r.status_code == 401
