"""Issue 12: the tenant policy. A restricted namespace cannot ask Slurm for root, a foreign account
or a priority above its maximum; an allowed Pod runs as the policy's user; an edit applies at once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client as k8s

from devstack import config, kube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

RULES = {"userIds": ["1001", "2000-2999"], "accounts": ["k8s"], "maxPriority": 1000}


def _write_policy(core: k8s.CoreV1Api, namespace: str, rules: dict[str, object]) -> None:
    body = {
        "metadata": {"name": config.POLICY_CONFIGMAP},
        "data": {"policy.yaml": yaml.safe_dump({"default": {}, "namespaces": {namespace: rules}})},
    }
    try:
        core.replace_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE, body)
    except h.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(config.TANDEM_NAMESPACE, body)


@pytest.fixture
def team(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    name = h.unique("tenant")
    core.create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(core, name)
    _write_policy(core, name, RULES)
    yield name
    core.delete_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE)
    for pod in core.list_namespaced_pod(name).items:
        h.delete_pod(core, pod.metadata.name, name, grace=0)
    h.wait_until("no Slurm jobs", lambda: not h.squeue_ids(stack_cfg), 60)
    core.delete_namespace(name)


def _refusal(core: k8s.CoreV1Api, name: str, namespace: str) -> str | None:
    pod = h.get_pod(core, name, namespace)
    cond = h.scheduled_condition(pod) if pod is not None else None
    return cond.message if cond is not None and cond.reason == "ValidationFailed" else None


@pytest.mark.parametrize(
    ("annotation", "value", "says"),
    [
        (
            "user-id",
            "0",
            "sunk.coreweave.com/user-id: 0 is not allowed in namespace {ns} (allowed: 1001, 2000-2999)",
        ),
        (
            "priority",
            "4294967294",
            "sunk.coreweave.com/priority: 4294967294 is above the maximum 1000 in namespace {ns}",
        ),
        (
            "account",
            "root",
            "sunk.coreweave.com/account: root is not allowed in namespace {ns} (allowed: k8s)",
        ),
    ],
)
def test_a_restricted_namespace_refuses_what_it_may_not_ask(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, annotation: str, value: str, says: str
) -> None:
    name = h.unique("greedy")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + annotation: value}, namespace=team))
    message = h.wait_until("refused", lambda: _refusal(core, name, team), 20)
    assert says.format(ns=team) in message
    # The Event is posted after the condition is written (off the reconcile's path): wait for it.
    events = h.wait_until(
        "the FailedValidation Event",
        lambda: [e for e in h.events_for(core, name, team) if e.reason == "FailedValidation"] or None,
        10,
    )
    assert len(events) == 1 and says.format(ns=team) in events[0].message
    assert h.job_id_of(core, name, team) is None and not h.squeue_ids(stack_cfg)


def _running_as(stack_cfg: StackConfig, core: k8s.CoreV1Api, name: str, namespace: str) -> int:
    def bound() -> bool:
        pod = h.get_pod(core, name, namespace)
        return bool(pod is not None and pod.spec.node_name)

    h.wait_until("bound", bound, 40)
    job_id = h.job_id_of(core, name, namespace)
    assert job_id is not None
    return int(h.rest_job(stack_cfg, job_id)["user_id"])


def test_an_allowed_pod_runs_as_the_policys_user_and_an_edit_applies_at_once(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str
) -> None:
    name = h.unique("allowed")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "account": "k8s"}, namespace=team))
    assert _running_as(stack_cfg, core, name, team) == 1001  # the first allowed id: the default
    _write_policy(core, team, {**RULES, "userIds": ["0", "1001"]})
    root = h.unique("root-now")

    def accepted() -> bool:
        h.create(core, h.tandem_pod(stack_cfg, root, {h.PREFIX + "user-id": "0"}, namespace=team))
        refused = h.wait_until(
            "judged", lambda: _refusal(core, root, team) or h.job_id_of(core, root, team), 10
        )
        if isinstance(refused, str):
            h.delete_pod(core, root, team, grace=0)
            h.wait_until("deleted", lambda: h.get_pod(core, root, team) is None, 10)
            return False
        return True

    h.wait_until("uid 0 allowed after the edit", accepted, 20, every=0.5)
    assert _running_as(stack_cfg, core, root, team) == 0
