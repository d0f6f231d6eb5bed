"""Issue 20: `helm upgrade` with a changed value rolls every release Pod and keeps what is running:
the placeholder job, the bound Pod, its node's lock and the generated certificates. The new Pods
then carry the flows on: deleting the Pod cancels its job and the lock goes. Runs on a DEPLOY=chart
stack; puts the lab's values back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import chart, config, realnode
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.real_node]

RELEASE_PODS = "app.kubernetes.io/part-of=tandem"


@pytest.fixture
def cleanup(core: k8s.CoreV1Api) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        h.delete_pod(core, name)


@pytest.fixture
def image_tag(stack_cfg: StackConfig) -> Iterator[str]:
    tag = realnode.tandem_image(stack_cfg).rsplit(":", 1)[1]
    yield tag
    chart.install(stack_cfg, tag)  # the lab's values again


def _release_pods(core: k8s.CoreV1Api) -> dict[str, k8s.V1Pod]:
    pods = core.list_namespaced_pod(config.TANDEM_NAMESPACE, label_selector=RELEASE_PODS).items
    return {p.metadata.uid: p for p in pods if p.metadata.deletion_timestamp is None}


def _secret_data(core: k8s.CoreV1Api, name: str) -> dict[str, str]:
    return dict(core.read_namespaced_secret(name, config.TANDEM_NAMESPACE).data or {})


def test_helm_upgrade_rolls_the_pods_and_keeps_jobs_locks_and_credentials(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, image_tag: str, cleanup: list[str]
) -> None:
    full = chart.RELEASE.fullname
    name = h.unique("upgrade")
    h.create(core, h.tandem_pod(stack_cfg, name))
    cleanup.append(name)
    pod = h.wait_until("the Pod bound", lambda: (p := h.get_pod(core, name)) and p.spec.node_name and p, 60)
    job = h.wait_until("the Pod's job", lambda: h.job_id_of(core, name), 30)
    node = pod.spec.node_name
    slurm_node = h.rest_job(stack_cfg, job)["nodes"]
    assert h.node_has_lock_taint(core, node)
    before = _release_pods(core)
    credentials = {s: _secret_data(core, s) for s in (f"{full}-operator-tls",)}

    chart.install(stack_cfg, image_tag, extra=["global.logLevel=debug"])

    def rolled() -> dict[str, k8s.V1Pod] | None:
        now = _release_pods(core)
        return now if now and not set(now) & set(before) and len(now) == len(before) else None

    after = h.wait_until("every release Pod replaced", rolled, 120)
    for p in after.values():
        args = [a for c in p.spec.containers for a in (c.args or []) + (c.command or [])]
        assert "--log-level=debug" in args, (p.metadata.name, args)
    kept = h.get_pod(core, name)
    assert kept is not None and kept.metadata.uid == pod.metadata.uid and kept.spec.node_name == node
    assert h.job_id_of(core, name) == job
    assert h.rest_job(stack_cfg, job)["job_state"] == "RUNNING"
    assert h.node_has_lock_taint(core, node)
    assert h.lock_annotation(core, slurm_node) != "false"
    assert {s: _secret_data(core, s) for s in credentials} == credentials

    # The new Pods carry the flows on: the deletion reaches Slurm and the lock goes.
    h.delete_pod(core, name)
    h.wait_until("the placeholder cancelled", lambda: job not in h.squeue_ids(stack_cfg), 60)
    h.wait_until("the lock released", lambda: not h.node_has_lock_taint(core, node), 60)
    assert h.lock_annotation(core, slurm_node) == "false"
