"""What a stolen scheduler token could do (issue 39): RBAC lets the scheduler patch and delete Pods
(cluster-wide in the cluster scope), which would let it change any Pod's image. The chart's
ValidatingAdmissionPolicy holds those writes to Pods naming this scheduler, and on them to Tandem's
annotations, the lock toleration and the status fields scheduling writes. Tried with the
scheduler's own ServiceAccount token against the real apiserver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import config, services
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient, KubeError
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

SLURMD_POD = f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods/cpu-001"


@pytest.fixture
def as_scheduler(stack_cfg: StackConfig) -> KubeClient:
    return KubeClient.from_kubeconfig(str(services.kubeconfig(stack_cfg, "tandem-scheduler")))


@pytest.fixture
def held_pod(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    """A Pod naming Tandem's scheduler that stays pending (it requires a node Slurm does not have)."""
    name = h.unique("held")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "required-nodes": "no-such-node"}))
    yield f"/api/v1/namespaces/default/pods/{name}"


def _refused(call: object) -> KubeError:
    with pytest.raises(KubeError) as e:
        call()  # type: ignore[operator]
    return e.value


def test_the_scheduler_token_cannot_touch_a_pod_of_another_scheduler(as_scheduler: KubeClient) -> None:
    """RBAC grants the patch (cluster scope); the policy refuses it: a slurmd Pod names no Tandem
    scheduler."""
    before = as_scheduler.get(SLURMD_POD)
    image = _refused(
        lambda: as_scheduler.json_patch(
            SLURMD_POD, [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil"}]
        )
    )
    assert image.status == 403 and "writes only Pods whose spec.schedulerName is" in image.message, image
    annotation = _refused(
        lambda: as_scheduler.merge_patch(SLURMD_POD, {"metadata": {"annotations": {keys.LOCK_KEY: "false"}}})
    )
    assert "writes only Pods whose spec.schedulerName is" in annotation.message
    deleted = _refused(lambda: as_scheduler.delete(SLURMD_POD))
    assert "writes only Pods whose spec.schedulerName is" in deleted.message
    after = as_scheduler.get(SLURMD_POD)
    assert after["spec"]["containers"][0]["image"] == before["spec"]["containers"][0]["image"]
    assert after["metadata"]["uid"] == before["metadata"]["uid"]


def test_on_its_own_pods_the_scheduler_writes_only_what_scheduling_needs(
    as_scheduler: KubeClient, held_pod: str
) -> None:
    # What recording a job does: Tandem's annotation and the lock toleration.
    pod = as_scheduler.get(held_pod)
    tolerations = [*(pod["spec"].get("tolerations") or []), {"key": keys.LOCK_KEY, "operator": "Exists"}]
    as_scheduler.merge_patch(
        held_pod,
        {"metadata": {"annotations": {keys.PREFIX + "probe": "1"}}, "spec": {"tolerations": tolerations}},
    )
    image = _refused(
        lambda: as_scheduler.json_patch(
            held_pod, [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil"}]
        )
    )
    assert "may change only a Pod's" in image.message, image
    label = _refused(lambda: as_scheduler.merge_patch(held_pod, {"metadata": {"labels": {"owned": "yes"}}}))
    assert "may change only a Pod's" in label.message
    other = _refused(
        lambda: as_scheduler.merge_patch(held_pod, {"metadata": {"annotations": {"example.com/x": "1"}}})
    )
    assert "may change only a Pod's" in other.message
    finalizer = _refused(
        lambda: as_scheduler.merge_patch(held_pod, {"metadata": {"finalizers": ["example.com/keep"]}})
    )
    assert "may change only a Pod's" in finalizer.message
    toleration = _refused(
        lambda: as_scheduler.merge_patch(
            held_pod,
            {
                "spec": {
                    "tolerations": [
                        *tolerations,
                        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
                    ]
                }
            },
        )
    )
    assert "may change only a Pod's" in toleration.message
    # Its status: PodScheduled and nominatedNodeName, never another condition or the phase.
    as_scheduler.strategic_patch(f"{held_pod}/status", {"status": {"nominatedNodeName": None}})
    ready = _refused(
        lambda: as_scheduler.strategic_patch(
            f"{held_pod}/status", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
        )
    )
    assert "may change only a Pod's PodScheduled condition" in ready.message, ready
    phase = _refused(
        lambda: as_scheduler.strategic_patch(f"{held_pod}/status", {"status": {"phase": "Running"}})
    )
    assert "may change only a Pod's PodScheduled condition" in phase.message
    after = as_scheduler.get(held_pod)
    assert "owned" not in (after["metadata"].get("labels") or {})
    assert after["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]
    assert after["status"].get("phase") == "Pending"
