"""A Node a Slurm job holds is that job's alone, whatever a tenant writes on its own Pod (issue 50).

Each attack is made as a tenant would, in its own namespace, against a real lock: a Pod placed
straight on the held Node tolerating the lock taint; the same Pod posing as a DaemonSet's; a
toleration added after the Pod was bound; and a Pod that holds out with a PodDisruptionBudget. The
chart's admission policy refuses the tolerations (who may share a held Node is an administrator's
decision, lock.sharingNamespaces), and a Pod without one is evicted by the taint whatever its
budget says, so the Slurm job runs where Slurm put it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import config, kube
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient, KubeError
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.usefixtures("clean")]

TENANT = "default"
REFUSED = "may not tolerate the lock taint"
LOCK_TOLERATIONS: dict[str, dict[str, Any]] = {
    "the lock's key": {"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"},
    "a blanket Exists": {"operator": "Exists"},
    "its value, for an hour": {
        "key": keys.LOCK_KEY,
        "operator": "Equal",
        "value": "true",
        "effect": "NoExecute",
        "tolerationSeconds": 3600,
    },
}


def _squatter(name: str, kube_node: str, tolerations: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANT, "labels": {"app": name}, **meta},
        "spec": {
            "nodeName": kube_node,
            "tolerations": tolerations,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


def _refused(core: k8s.CoreV1Api, pod: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as refused:
        h.create(core, pod)
    assert refused.value.status in (403, 422), refused.value
    return str(refused.value.body)


@pytest.fixture
def held(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[tuple[str, str]]:
    """A Slurm node an `sbatch --exclusive` job holds (lock `locked`); its Node."""
    slurm_node = "cpu-003"
    job = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={slurm_node}")
    h.wait_until("the node locked", lambda: h.lock_annotation(core, slurm_node) == "locked", 30)
    yield slurm_node, h.kube_node_of(slurm_node)
    h.scancel(stack_cfg, job)


def _on(core: k8s.CoreV1Api, kube_node: str) -> list[str]:
    """The tenant's Pods on the Node that are not on their way out."""
    return [
        p.metadata.name
        for p in core.list_namespaced_pod(TENANT, field_selector=f"spec.nodeName={kube_node}").items
        if not p.metadata.deletion_timestamp
    ]


@pytest.mark.parametrize("toleration", list(LOCK_TOLERATIONS), ids=list(LOCK_TOLERATIONS))
def test_a_tenant_pod_tolerating_the_lock_is_refused_beside_a_slurm_job(
    core: k8s.CoreV1Api, held: tuple[str, str], toleration: str
) -> None:
    """Attack 1: placed straight on the held Node, tolerating the lock."""
    slurm_node, kube_node = held
    body = _refused(core, _squatter(h.unique("squat"), kube_node, [LOCK_TOLERATIONS[toleration]]))
    assert REFUSED in body and "lock.sharing" not in body, body
    assert _on(core, kube_node) == []
    assert h.lock_annotation(core, slurm_node) == "locked"


def test_a_tenant_pod_posing_as_a_daemonsets_gets_no_pass(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, held: tuple[str, str]
) -> None:
    """Attack 2: an owner reference naming a DaemonSet the tenant made (selecting no Node). With
    the toleration it is refused; without it, the lock's taint evicts it."""
    _, kube_node = held
    apps = k8s.AppsV1Api(kube.api(stack_cfg))
    name = h.unique("fake-agent")
    ds = apps.create_namespaced_daemon_set(
        TENANT,
        {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"tandem.test/nowhere": "true"},
                        "containers": [{"name": "c", "image": "busybox"}],
                    },
                },
            },
        },
    )
    try:
        owner = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": name,
            "uid": ds.metadata.uid,
            "controller": True,
        }
        tolerating = _squatter(
            h.unique("squat"), kube_node, [LOCK_TOLERATIONS["the lock's key"]], ownerReferences=[owner]
        )
        assert REFUSED in _refused(core, tolerating)
        plain = _squatter(h.unique("squat"), kube_node, [], ownerReferences=[owner])
        h.create(core, plain)
        h.wait_until("the posing Pod evicted", lambda: _on(core, kube_node) == [], 30)
    finally:
        apps.delete_namespaced_daemon_set(name, TENANT)


def test_a_toleration_added_to_a_bound_pod_is_refused(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    """A tenant's Pod bound to a free Node may not add the toleration before a job comes."""
    kube_node = h.kube_node_of("cpu-007")
    name = h.unique("later")
    h.create(core, _squatter(name, kube_node, []))
    api = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    try:
        with pytest.raises(KubeError) as refused:  # appended to the tolerations the API server added
            api.json_patch(
                f"/api/v1/namespaces/{TENANT}/pods/{name}",
                [{"op": "add", "path": "/spec/tolerations/-", "value": LOCK_TOLERATIONS["a blanket Exists"]}],
            )
    finally:
        api.close()
    assert REFUSED in refused.value.message, refused.value
    pod = h.get_pod(core, name)
    assert pod is not None
    assert not [t for t in pod.spec.tolerations or [] if t.key == keys.LOCK_KEY or not t.key], pod.spec


@pytest.mark.parallel
def test_an_unbound_pod_naming_tandems_scheduler_may_tolerate_the_lock(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Tandem binds it only where its own job runs: a blanket toleration in a user's template is
    no reason to refuse it. Created with nodeName, the same Pod is refused."""
    name = h.unique("tolerant")
    pod = h.tandem_pod(stack_cfg, name)
    pod["spec"]["tolerations"] = [LOCK_TOLERATIONS["a blanket Exists"]]
    h.create(core, pod)
    h.wait_until("bound by Tandem", lambda: (p := h.get_pod(core, name)) is not None and p.spec.node_name, 40)
    pinned = h.tandem_pod(stack_cfg, h.unique("pinned"))
    pinned["spec"]["tolerations"] = [LOCK_TOLERATIONS["a blanket Exists"]]
    pinned["spec"]["nodeName"] = h.kube_node_of("cpu-007")
    assert REFUSED in _refused(core, pinned)


def test_a_namespace_the_administrator_allows_may_share(core: k8s.CoreV1Api) -> None:
    name = h.unique("agent")
    pod = _squatter(name, h.kube_node_of("cpu-007"), [LOCK_TOLERATIONS["the lock's key"]])
    pod["metadata"]["namespace"] = config.OPS_NAMESPACE
    h.create(core, pod)
    assert h.get_pod(core, name, config.OPS_NAMESPACE) is not None


def test_a_budget_does_not_hold_a_node_against_a_slurm_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Attack 2's variant: a tenant's Pod with a PodDisruptionBudget of maxUnavailable 0 on the
    Node a Slurm job asks for. It cannot tolerate the lock, so the taint evicts it whatever its
    budget says: the Pod is gone, the node is not drained, and the job runs there."""
    slurm_node = "cpu-005"
    kube_node = h.kube_node_of(slurm_node)
    name = h.unique("holdout")
    policy = k8s.PolicyV1Api(kube.api(stack_cfg))
    h.create(core, _squatter(name, kube_node, []))
    policy.create_namespaced_pod_disruption_budget(
        TENANT,
        {
            "metadata": {"name": name},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": name}}},
        },
    )
    job = 0
    try:
        h.wait_until(
            "the Pod running",
            lambda: (p := h.get_pod(core, name)) is not None and p.status.phase == "Running",
            30,
        )
        job = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={slurm_node}")
        h.wait_until("the node locked", lambda: h.lock_annotation(core, slurm_node) == "locked", 60)
        h.wait_until(
            "the job past its prolog",
            lambda: (
                (j := h.rest_job(stack_cfg, job))["job_state"] == "RUNNING" and j["state_reason"] != "Prolog"
            ),
            30,
        )
        assert h.rest_job(stack_cfg, job)["nodes"] == slurm_node
        assert _on(core, kube_node) == []
        state, reason = h.node_state(stack_cfg, slurm_node)
        assert "drain" not in state.lower(), (state, reason)
    finally:
        policy.delete_namespaced_pod_disruption_budget(name, TENANT)
        if job:
            h.scancel(stack_cfg, job)
        h.resume_if_drained(stack_cfg, slurm_node)
