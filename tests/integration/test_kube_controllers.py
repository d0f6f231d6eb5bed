"""The lab's Kubernetes is a working cluster: its controllers, the default scheduler, PodDisruption-
Budgets, the Workload API and the LeaderWorkerSet controller all act, without Tandem in the way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import kube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ns(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    name = h.unique("lab")
    core.create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(core, name)
    yield name
    core.delete_namespace(name)


@pytest.fixture(scope="module")
def api(stack_cfg: StackConfig) -> k8s.ApiClient:
    return kube.api(stack_cfg)


def _pod_template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nginx",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            "terminationGracePeriodSeconds": 1,
            **spec,
        },
    }


def _running(core: k8s.CoreV1Api, ns: str, selector: str, count: int | None = None) -> list[k8s.V1Pod]:
    """The Running Pods of `selector`; none until there are `count` of them, when given."""
    pods = [
        p
        for p in core.list_namespaced_pod(ns, label_selector=selector).items
        if p.status.phase == "Running" and p.spec.node_name and not p.metadata.deletion_timestamp
    ]
    return pods if count is None or len(pods) == count else []


@pytest.mark.parallel
def test_a_deployment_is_placed_by_the_default_scheduler(
    core: k8s.CoreV1Api, api: k8s.ApiClient, ns: str
) -> None:
    apps = k8s.AppsV1Api(api)
    apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": _pod_template({"app": "web"}),
            },
        },
    )
    pods = h.wait_until(
        "2 replicas running",
        lambda: _running(core, ns, "app=web", 2),
        30,
    )
    for pod in pods:
        scheduled = [e for e in h.events_for(core, pod.metadata.name, ns) if e.reason == "Scheduled"]
        assert scheduled and scheduled[0].source.component in ("default-scheduler", None)
        assert pod.spec.scheduler_name == "default-scheduler"
    apps.delete_namespaced_deployment("web", ns)


def test_a_daemonset_runs_one_pod_per_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: k8s.ApiClient, ns: str
) -> None:
    apps = k8s.AppsV1Api(api)
    apps.create_namespaced_daemon_set(
        ns,
        {
            "metadata": {"name": "agent"},
            "spec": {
                "selector": {"matchLabels": {"app": "agent"}},
                "template": _pod_template({"app": "agent"}),
            },
        },
    )
    pods = h.wait_until(
        "one Pod per Node",
        lambda: _running(core, ns, "app=agent", stack_cfg.nodes),
        60,
    )
    assert len({p.spec.node_name for p in pods}) == stack_cfg.nodes
    apps.delete_namespaced_daemon_set("agent", ns)


def test_a_pod_disruption_budget_gets_a_status_and_refuses_evictions(
    core: k8s.CoreV1Api, api: k8s.ApiClient, ns: str
) -> None:
    policy = k8s.PolicyV1Api(api)
    pod = {"apiVersion": "v1", "kind": "Pod", **_pod_template({"app": "guarded"})}
    pod["metadata"]["name"] = "guarded"
    core.create_namespaced_pod(ns, pod)
    policy.create_namespaced_pod_disruption_budget(
        ns,
        {
            "metadata": {"name": "guarded"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    h.wait_until(
        "disruptionsAllowed 0 with 1 healthy",
        lambda: (
            (s := policy.read_namespaced_pod_disruption_budget("guarded", ns).status)
            and s.current_healthy == 1
            and s.disruptions_allowed == 0
        ),
        30,
    )
    with pytest.raises(h.ApiException) as refused:
        core.create_namespaced_pod_eviction(
            "guarded",
            ns,
            {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "guarded", "namespace": ns}},
        )
    assert refused.value.status == 429
    assert "disruption budget" in refused.value.body
    core.delete_namespaced_pod("guarded", ns, grace_period_seconds=0)


@pytest.mark.parallel
def test_an_indexed_job_gets_a_pod_group_from_the_job_controller(
    core: k8s.CoreV1Api, api: k8s.ApiClient, ns: str
) -> None:
    batch = k8s.BatchV1Api(api)
    custom = k8s.CustomObjectsApi(api)
    batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "train"},
            "spec": {
                "completionMode": "Indexed",
                "completions": 2,
                "parallelism": 2,
                **h.indexed_job_gang(2),
                "template": _pod_template({"job": "train"}, restartPolicy="Never"),
            },
        },
    )

    def groups() -> list[dict[str, Any]]:
        found = custom.list_namespaced_custom_object(*h.podgroups()[:2], ns, h.podgroups()[2])["items"]
        return [g for g in found if (g["spec"].get("schedulingPolicy") or {}).get("gang")]

    group = h.wait_until("a gang PodGroup", groups, 30)[0]
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    batch.delete_namespaced_job("train", ns, propagation_policy="Background")


@pytest.mark.usefixtures("late_controllers")
def test_a_leaderworkerset_creates_its_group(core: k8s.CoreV1Api, api: k8s.ApiClient, ns: str) -> None:
    custom = k8s.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(
        "leaderworkerset.x-k8s.io",
        "v1",
        ns,
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "infer"},
            "spec": {"replicas": 1, "leaderWorkerTemplate": {"size": 2, "workerTemplate": _pod_template({})}},
        },
    )
    pods = h.wait_until(
        "leader and worker running",
        lambda: _running(core, ns, "leaderworkerset.sigs.k8s.io/name=infer", 2),
        60,
    )
    assert sorted(p.metadata.name for p in pods) == ["infer-0", "infer-0-1"]
    custom.delete_namespaced_custom_object("leaderworkerset.x-k8s.io", "v1", ns, "leaderworkersets", "infer")
