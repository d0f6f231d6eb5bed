"""Issue 41: three real conditions on the lab, each seen as its alert firing in the lab's Prometheus
(devstack.prometheus: the chart's PrometheusRule, its `for` shortened to seconds by the chart's
monitoring.prometheusRule.forOverride, scraped and evaluated every 2 s). Each test says how long its
alert took to fire; each leaves the lab as it found it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client as k8s

from devstack import config, identities, kube, services, slurm, stack
from devstack.config import StackConfig
from devstack.procs import Daemon
from tandem import keys
from tandem.workqueue import BACKOFF_CAP
from tests.integration import helpers as h
from tests.integration import promapi

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.venv, pytest.mark.usefixtures("clean")]

# The shortened `for`, two scrapes and two evaluations, and slack for a 2-core machine.
FIRES_WITHIN = 45.0
STUCK_NODE = "cpu-005"
POLICY = "test-alerts-stuck-lock"


def _quiet(cfg: StackConfig, alert: str, **labels: str) -> None:
    """Prometheus scrapes Tandem, and `alert` does not fire yet for what the test provokes (its
    `labels`): an earlier test may have left it firing for another reason (a submit Slurm refused
    fires TandemSlurmApiErrors{status="500"} for the rule's 5-minute window)."""
    assert promapi.wait_scraped(cfg, 'up{namespace="tandem"} == 1'), "Prometheus scrapes no Tandem service"
    firing = [
        a for a in promapi.alerts(cfg, alert) if all(a["labels"].get(k) == v for k, v in labels.items())
    ]
    assert not firing, f"{alert} {labels} fires before the test provokes it"


def test_slurmrestd_down_fires_tandem_slurm_api_errors(stack_cfg: StackConfig) -> None:
    _quiet(stack_cfg, "TandemSlurmApiErrors", status="0")
    Daemon("slurmrestd", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    try:
        alert, seconds = promapi.wait_firing(stack_cfg, "TandemSlurmApiErrors", FIRES_WITHIN, status="0")
    finally:
        stack.up_as_built(stack_cfg)  # the same code as `make up`: starts slurmrestd again
    print(f"TandemSlurmApiErrors fired {seconds:.1f}s after slurmrestd stopped ({alert['labels']})")
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["namespace"] == config.TANDEM_NAMESPACE
    assert "status 0" in alert["annotations"]["summary"]


@pytest.fixture
def syncer_cannot_unlock(stack_cfg: StackConfig) -> Iterator[None]:
    """An admission policy refusing the syncer's writes to one slurmd Pod: a lock there outlives
    whatever held it, as when the syncer's RBAC or the apiserver refuses it (the alert's runbook)."""
    syncer = f"system:serviceaccount:{identities.MAIN.namespace}:{identities.MAIN.service_account('syncer')}"
    docs = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "matchConditions": [
                    {
                        "name": "the-syncer-on-one-node",
                        "expression": f"request.userInfo.username == '{syncer}' "
                        f"&& object.metadata.name == '{STUCK_NODE}'",
                    }
                ],
                "validations": [{"expression": "false", "message": "test_alerts: this lock stays"}],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY},
            "spec": {
                "policyName": POLICY,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": config.SLURM_NAMESPACE}
                    }
                },
            },
        },
    ]
    kube.kubectl(stack_cfg, "apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    time.sleep(2)  # the apiserver's policy informer takes the new policy
    try:
        yield
    finally:
        kube.kubectl(
            stack_cfg,
            "delete",
            "--ignore-not-found",
            f"validatingadmissionpolicybinding/{POLICY}",
            f"validatingadmissionpolicy/{POLICY}",
        )


def test_a_lock_held_past_its_budget_fires_tandem_node_locked_while_idle(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, syncer_cannot_unlock: None
) -> None:
    _quiet(stack_cfg, "TandemNodeLockedWhileIdle")
    # Locked as a prolog's hold leaves a node, with no job on it and no hold left (its budget spent).
    kube.kubectl(
        stack_cfg,
        "-n",
        config.SLURM_NAMESPACE,
        "annotate",
        "--overwrite",
        f"pod/{STUCK_NODE}",
        f"{keys.LOCK_KEY}=locked",
    )
    try:
        alert, seconds = promapi.wait_firing(stack_cfg, "TandemNodeLockedWhileIdle", FIRES_WITHIN)
        print(f"TandemNodeLockedWhileIdle fired {seconds:.1f}s after the lock stayed ({alert['labels']})")
        assert h.lock_annotation(core, STUCK_NODE) == "locked"  # the syncer could not release it
        assert alert["annotations"]["summary"] == "1 Node(s) locked for Slurm with no job running"
    finally:
        kube.kubectl(
            stack_cfg,
            "delete",
            f"validatingadmissionpolicybinding/{POLICY}",
            f"validatingadmissionpolicy/{POLICY}",
        )
    # Once it may, the syncer releases the lock on its own (the `clean` fixture waits for that): at
    # its next try, which its failures so far may have put up to the queue's backoff cap away.
    h.wait_until(
        "the lock released", lambda: h.lock_annotation(core, STUCK_NODE) == "false", BACKOFF_CAP + 15
    )


def test_a_slurm_token_about_to_expire_fires_tandem_slurm_token_expiring(stack_cfg: StackConfig) -> None:
    _quiet(stack_cfg, "TandemSlurmTokenExpiring")
    service = "tandem-syncer"
    token_file = services.slurm_token_file(stack_cfg, service)
    # What an operator's `scontrol token lifespan=...` left three days ago: three days to go.
    short = slurm.rest_token(stack_cfg, user=slurm.SERVICE_USERS[service], lifespan=3 * 86400)
    services.publish(token_file, short, mode=0o400)
    try:
        alert, seconds = promapi.wait_firing(stack_cfg, "TandemSlurmTokenExpiring", FIRES_WITHIN, pod=service)
        print(
            f"TandemSlurmTokenExpiring fired {seconds:.1f}s after the token was swapped ({alert['labels']})"
        )
        assert "expires in 2d 23h" in alert["annotations"]["summary"]
    finally:
        services.ensure_slurm_token(stack_cfg, service)  # a fresh 30-day token, read without a restart
    left = promapi.wait_scraped(
        stack_cfg, f'tandem_slurm_token_expiry_timestamp_seconds{{pod="{service}"}} - time() > 7 * 86400'
    )
    assert left, "the renewed token was not read"
