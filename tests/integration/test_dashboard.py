"""Issue 41: every panel of the chart's Grafana dashboard has data. After a short workload on the lab
(Pods scheduled through Tandem and run on their placeholder jobs, a Pod Tandem rejects, a Pod a
lock evicts, a cordoned Node, a hook call with a wrong token, slurmrestd gone for a moment), each
panel's expressions run against the lab's Prometheus as Grafana would send them, and every panel
has a series with a value.

The Pods come in two waves, the second once Prometheus has scraped the first: a labelled histogram
is born with its first observation, and a rate (so a quantile) needs it to grow after a scrape."""

from __future__ import annotations

import functools
import json
import math
import time
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from devstack import config, stack
from devstack.config import StackConfig
from devstack.procs import Daemon
from tests.integration import helpers as h
from tests.integration import promapi

# Not `slurm`: the panels read Tandem's own series, the same on every Slurm release; one leg runs it.
pytestmark = [pytest.mark.integration, pytest.mark.venv, pytest.mark.usefixtures("clean")]

DASHBOARD = config.REPO_ROOT / "helm" / "tandem" / "files" / "dashboards" / "tandem.json"
# Grafana's $__rate_interval is four scrape intervals at least; the workload ends within this.
RATE_INTERVAL = "2m"
EVICTED_ON = "cpu-003"
CORDONED = "cpu-005"
# What the quantile panels read, each by the labels its histogram is born with.
HISTOGRAMS = (
    "tandem_pod_create_to_bound_seconds_count",
    "tandem_lock_wait_seconds_count",
    "tandem_hook_call_seconds_count",
)


def panels() -> list[tuple[str, list[str]]]:
    """Each panel's title and expressions, rows' nested panels included."""
    found = []
    todo = list(json.loads(DASHBOARD.read_text())["panels"])
    while todo:
        panel = todo.pop(0)
        todo.extend(panel.get("panels", []))
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        if exprs:
            found.append((str(panel["title"]), exprs))
    return found


def as_grafana_sends(expr: str) -> str:
    return expr.replace("$namespace", config.TANDEM_NAMESPACE).replace("$__rate_interval", RATE_INTERVAL)


def _has_a_value(answer: list[dict[str, Any]]) -> bool:
    return any(not math.isnan(float(series["value"][1])) for series in answer)


def _has_a_value_soon(cfg: StackConfig, expr: str, timeout: float = 10) -> bool:
    """Within a few scrapes: the last observations of the workload may not be scraped yet."""
    deadline = time.monotonic() + timeout
    while not _has_a_value(promapi.query(cfg, expr)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def _running(core: k8s.CoreV1Api, name: str) -> bool:
    pod = h.get_pod(core, name)
    return pod is not None and pod.status.phase == "Running" and not pod.metadata.deletion_timestamp


def _pods_through_tandem(cfg: StackConfig, core: k8s.CoreV1Api, count: int) -> None:
    names = [h.unique("dash") for _ in range(count)]
    for name in names:
        h.create(core, h.tandem_pod(cfg, name))
    for name in names:
        h.wait_until(f"{name} running", functools.partial(_running, core, name), 60)


@pytest.fixture
def workload(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    _pods_through_tandem(stack_cfg, core, 1)
    for histogram in HISTOGRAMS:
        assert promapi.wait_scraped(stack_cfg, f'{histogram}{{namespace="tandem"}}'), histogram
    # A Pod Tandem rejects (its priority is no integer).
    invalid = h.unique("dash-invalid")
    h.create(core, h.tandem_pod(stack_cfg, invalid, annotations={h.PREFIX + "priority": "1.5"}))
    h.wait_until(
        "FailedValidation",
        lambda: [e for e in h.events_for(core, invalid) if e.reason == "FailedValidation"],
        20,
    )
    # A Pod placed by someone else on a node a Slurm job then locks: evicted.
    plain = h.unique("dash-plain")
    h.create(
        core,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": plain, "namespace": "default"},
            "spec": {
                "nodeName": h.kube_node_of(EVICTED_ON),
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
    )
    h.wait_until(f"{plain} running", functools.partial(_running, core, plain), 15)
    job = h.sbatch(stack_cfg, f"--nodelist={EVICTED_ON}", script="#!/bin/sh\nsleep 3\n")
    h.wait_until("evicted by the lock", lambda: h.get_pod(core, plain) is None, 30)
    h.wait_until("the job done", lambda: job not in h.squeue_ids(stack_cfg), 30)
    # A cordoned Node: the syncer drains its Slurm node, and resumes it once uncordoned.
    node = h.kube_node_of(CORDONED)
    core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        h.wait_until("drained", lambda: "drain" in h.node_state(stack_cfg, CORDONED)[0], 15)
    finally:
        core.patch_node(node, {"spec": {"unschedulable": None}})
    h.wait_until("resumed", lambda: "drain" not in h.node_state(stack_cfg, CORDONED)[0], 15)
    # A prolog's call with a token the gateway refuses.
    refused = httpx.post(
        f"{stack_cfg.hooks_url}/v1/lock",
        json={"node": EVICTED_ON, "job": 4_000_000_003, "timeout": 1},
        headers={"Authorization": "Bearer not-a-node-token"},
        timeout=15,
    )
    assert refused.status_code == 401
    # slurmrestd gone until the services' calls fail and Prometheus has seen it.
    Daemon("slurmrestd", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    try:
        assert promapi.wait_scraped(stack_cfg, 'tandem_slurm_api_errors_total{status="0"}', 30)
    finally:
        stack.up_as_built(stack_cfg)
    _pods_through_tandem(stack_cfg, core, 2)


def test_every_dashboard_panel_has_data(stack_cfg: StackConfig, workload: None) -> None:
    found = panels()
    assert len(found) >= 15
    empty: dict[str, list[str]] = {}
    for title, exprs in found:
        without = [e for e in exprs if not _has_a_value_soon(stack_cfg, as_grafana_sends(e))]
        print(f"{title}: {len(exprs) - len(without)}/{len(exprs)} expressions with data")
        if len(without) == len(exprs):
            empty[title] = without
    assert empty == {}, f"panels with no data: {empty}"
