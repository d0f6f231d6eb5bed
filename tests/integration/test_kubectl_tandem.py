"""Issue 13: `kubectl tandem get -A`, `describe` and `nodes` against the stack, with a running, a
pending (queued behind it), an invalid and a gang Pod: what a person reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import config, installed, services
from devstack import kube as devkube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

PIN = {h.PREFIX + "required-nodes": "cpu-001", h.PREFIX + "exclusive": "none"}


def kubectl_tandem(cfg: StackConfig, *args: str) -> str:
    """As a user runs it: kubectl finds the kubectl-tandem plugin on the PATH."""
    env = {
        **os.environ,
        **services.operator_tls_env(cfg),
        # As an operator's shell has it from .tandem/env: where the slurmd Pods are.
        "TANDEM_SLURMD_NAMESPACE": config.SLURM_NAMESPACE,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    out = subprocess.run(
        [str(cfg.bin_dir / "kubectl"), "tandem", f"--kubeconfig={cfg.kubeconfig}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def scene(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[dict[str, str]]:
    """A running Pod holding cpu-001, a Pod queued behind it, an invalid Pod, and a gang of which
    one member of three is missing."""
    custom = k8s.CustomObjectsApi(devkube.api(stack_cfg))
    names = {k: h.unique(k) for k in ("holder", "waiter", "invalid", "gang")}
    h.create(core, h.tandem_pod(stack_cfg, names["holder"], PIN))
    h.wait_until("holder running", lambda: (p := h.get_pod(core, names["holder"])) and p.spec.node_name, 30)
    h.create(core, h.tandem_pod(stack_cfg, names["waiter"], PIN))
    h.create(core, h.tandem_pod(stack_cfg, names["invalid"], {h.PREFIX + "exclusive": "sometimes"}))
    custom.create_namespaced_custom_object(
        *h.podgroups()[:2],
        "default",
        h.podgroups()[2],
        {
            "apiVersion": "/".join(h.podgroups()[:2]),
            "kind": "PodGroup",
            "metadata": {"name": names["gang"]},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
        },
    )
    for i in range(2):
        pod = h.tandem_pod(stack_cfg, f"{names['gang']}-{i}")
        pod["spec"]["schedulingGroup"] = {"podGroupName": names["gang"]}
        h.create(core, pod)

    def queued() -> bool:
        pod = h.get_pod(core, names["waiter"])
        cond = h.scheduled_condition(pod) if pod else None
        return cond is not None and "position 1 of 1" in (cond.message or "")

    h.wait_until("the waiter's place in the queue on its Pod", queued, 30)
    yield names
    try:
        custom.delete_namespaced_custom_object(*h.podgroups()[:2], "default", h.podgroups()[2], names["gang"])
    except ApiException as e:
        if e.status != 404:
            raise


def _line(table: str, name: str) -> list[str]:
    line = next(row for row in table.splitlines() if f" {name} " in f" {row} ")
    return line.split()


def test_get_shows_each_pod_as_a_person_asks_about_it(stack_cfg: StackConfig, scene: dict[str, str]) -> None:
    table = kubectl_tandem(stack_cfg, "get", "-A")
    print(table)
    header = table.splitlines()[0].split()
    assert header[:3] == ["NAMESPACE", "POD", "GROUP"]
    holder = _line(table, scene["holder"])
    assert "RUNNING" in holder and "cpu-001" in holder and "node-001" in holder
    assert any(lock.startswith("locked") for lock in holder)
    waiter = " ".join(_line(table, scene["waiter"]))
    assert "PENDING" in waiter and "1 of 1" in waiter
    assert any(reason in waiter for reason in ("Resources", "Priority", "ReqNodeNotAvail"))
    assert "ValidationFailed" in _line(table, scene["invalid"])
    member = _line(table, f"{scene['gang']}-0")
    assert f"pg:{scene['gang']}" in member and "WaitingForGroupMembers" in member
    rows = json.loads(kubectl_tandem(stack_cfg, "get", "-n", "default", "-o", "json"))
    assert {r["POD"] for r in rows} >= set(scene.values()) - {scene["gang"]}


def test_describe_tells_why_a_pod_waits_and_why_one_was_refused(
    stack_cfg: StackConfig, scene: dict[str, str]
) -> None:
    waiter = kubectl_tandem(stack_cfg, "describe", scene["waiter"], "-n", "default")
    print(waiter)
    assert "Validation:     passed" in waiter
    assert "queue position: 1 of 1" in waiter
    assert "required-nodes: cpu-001" in waiter
    invalid = kubectl_tandem(stack_cfg, "describe", scene["invalid"])
    assert "Validation:     refused:" in invalid and "exclusive" in invalid
    holder = kubectl_tandem(stack_cfg, "describe", scene["holder"])
    assert "slurm node:     cpu-001" in holder
    assert "NodeLocked: Locked (" in holder  # the lock history of its Node


def _block(text: str, heading: str) -> list[str]:
    """A describe section's lines: its heading's and those indented under it."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{heading}:"))
    under = next((i for i, line in enumerate(lines[at + 1 :]) if not line.startswith(" ")), len(lines))
    return lines[at : at + 1 + under]


def test_describe_shows_where_the_scheduler_placed_each_pod(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, scene: dict[str, str]
) -> None:
    """--scheduler-address: the scheduler's own word (GetPlacement) on the running holder, bound
    with its job on cpu-001, and on the refused Pod, invalid and why."""
    job = h.job_id_of(core, scene["holder"])
    scheduler = services.grpc_addresses(stack_cfg)["tandem-scheduler"]
    # DEPLOY=chart: the host dials the Service's ClusterIP, its certificate names the Service.
    name = installed.load(stack_cfg.state_dir).server_name(scheduler) if stack_cfg.deploy == "chart" else None
    flags = ["--scheduler-address", scheduler, *(["--scheduler-server-name", name] if name else [])]
    holder = kubectl_tandem(stack_cfg, *flags, "describe", scene["holder"], "-n", "default")
    print(holder)
    assert _block(holder, "Placement") == [
        "Placement:",
        "  state:          BOUND",
        f"  slurm job:      {job}",
        "  slurm node:     cpu-001",
        "  node:           node-001",
    ]
    refused = kubectl_tandem(stack_cfg, *flags, "describe", scene["invalid"], "-n", "default")
    invalid = _block(refused, "Placement")
    print("\n".join(invalid))
    assert invalid[1:3] == ["  state:          INVALID", "  slurm job:      (none)"]
    assert invalid[-1].startswith("  reason:") and "exclusive" in invalid[-1]


def test_nodes_maps_each_node_to_its_slurm_node_and_lock(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, scene: dict[str, str]
) -> None:
    job = h.job_id_of(core, scene["holder"])
    syncer = services.grpc_addresses(stack_cfg)["tandem-syncer"]
    table = kubectl_tandem(stack_cfg, "--syncer-address", syncer, "nodes")
    print(table)
    row = _line(table, "node-001")
    assert row[:2] == ["node-001", "cpu-001"]
    assert any(state.startswith(("ALLOCATED", "MIXED")) for state in row)
    # Counts by default (issue 41), the job ids and the Pods' names with -o wide.
    assert max(len(line) for line in table.splitlines()) <= 120, table
    wide = _line(kubectl_tandem(stack_cfg, "--syncer-address", syncer, "nodes", "-o", "wide"), "node-001")
    assert str(job) in " ".join(wide) and f"default/{scene['holder']}" in " ".join(wide)
    # Every Node is listed: the kwok ones, and DEPLOY=chart's real Node, which hosts no slurmd.
    rows = [r.split() for r in table.splitlines()[1:] if r.strip()]
    assert len([r for r in rows if r[0].startswith("node-")]) == stack_cfg.nodes
    assert [r[:2] for r in rows if not r[0].startswith("node-")] == (
        [["host-0", "<none>"]] if stack_cfg.real_node else []
    )


@pytest.mark.parallel
def test_an_unreachable_syncer_is_one_clear_line(stack_cfg: StackConfig) -> None:
    env = {
        **os.environ,
        **services.operator_tls_env(stack_cfg),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    out = subprocess.run(
        ["kubectl-tandem", f"--kubeconfig={stack_cfg.kubeconfig}", "--syncer-address=127.0.0.1:1", "nodes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error: cannot read Slurm from the syncer at 127.0.0.1:1: UNAVAILABLE")


@pytest.mark.parallel
def test_without_an_operator_certificate_the_cli_says_how_to_get_one(stack_cfg: StackConfig) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TANDEM_GRPC_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    syncer = services.grpc_addresses(stack_cfg)["tandem-syncer"]
    out = subprocess.run(
        ["kubectl-tandem", f"--kubeconfig={stack_cfg.kubeconfig}", f"--syncer-address={syncer}", "nodes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 1
    assert "answers only certified callers" in out.stderr and "TANDEM_GRPC_CERT" in out.stderr


@pytest.mark.chart
@pytest.mark.parallel
def test_nodes_reads_the_syncer_where_the_address_is_not_the_certificates_name(
    stack_cfg: StackConfig,
) -> None:
    """An operator dials the installed syncer by a port-forward or a ClusterIP, so the name its
    certificate carries is given apart; without it the CLI says which flag is missing."""
    syncer = services.grpc_addresses(stack_cfg)["tandem-syncer"]
    name = installed.load(stack_cfg.state_dir).server_name(syncer) if stack_cfg.deploy == "chart" else None
    if name is None:
        pytest.skip("the lab's own services are dialled by the names their certificates carry")
    table = kubectl_tandem(stack_cfg, "--syncer-address", syncer, "--syncer-server-name", name, "nodes")
    rows = {r.split()[1]: r.split() for r in table.splitlines()[1:] if r.strip()}
    assert all(rows[n][2] != "<none>" for n in stack_cfg.slurm_node_names()), table  # Slurm's states

    env = {
        **os.environ,
        **services.operator_tls_env(stack_cfg),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("TANDEM_SYNCER_SERVER_NAME", None)
    out = subprocess.run(
        ["kubectl-tandem", f"--kubeconfig={stack_cfg.kubeconfig}", f"--syncer-address={syncer}", "nodes"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert out.returncode == 1
    assert "--syncer-server-name" in out.stderr, out.stderr
