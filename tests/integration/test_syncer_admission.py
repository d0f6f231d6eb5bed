"""What a stolen syncer token could do, beyond the lock (issue 18, least privilege): RBAC lets the
syncer patch the slurmd Pods and the Nodes; the chart's ValidatingAdmissionPolicy holds those
writes to the lock annotation, the drain annotation and the lock taint. Tried with the syncer's
own ServiceAccount token against the real apiserver."""

from __future__ import annotations

import pytest

from devstack import config, services
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient, KubeError

pytestmark = pytest.mark.integration

SLURM_NODE = "cpu-001"


@pytest.fixture
def as_syncer(stack_cfg: StackConfig) -> KubeClient:
    return KubeClient.from_kubeconfig(str(services.kubeconfig(stack_cfg, "tandem-syncer")))


def _refused(call: object) -> KubeError:
    with pytest.raises(KubeError) as e:
        call()  # type: ignore[operator]
    return e.value


def test_the_syncer_writes_a_slurmd_pods_annotations_and_nothing_else(as_syncer: KubeClient) -> None:
    path = f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods/{SLURM_NODE}"
    pod = as_syncer.get(path)
    lock = (pod["metadata"].get("annotations") or {}).get(keys.LOCK_KEY, "false")
    as_syncer.merge_patch(path, {"metadata": {"annotations": {keys.LOCK_KEY: lock}}})  # what locking does
    image = _refused(
        lambda: as_syncer.json_patch(
            path, [{"op": "replace", "path": "/spec/containers/0/image", "value": "evil"}]
        )
    )
    assert "may change only a slurmd Pod's annotations" in image.message
    label = _refused(lambda: as_syncer.merge_patch(path, {"metadata": {"labels": {"owned": "yes"}}}))
    assert "may change only a slurmd Pod's annotations" in label.message
    after = as_syncer.get(path)
    assert after["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]
    assert "owned" not in (after["metadata"].get("labels") or {})


def test_the_syncer_cannot_cordon_or_relabel_a_node(as_syncer: KubeClient) -> None:
    node = config.kube_node_name(1)
    path = f"/api/v1/nodes/{node}"
    cordon = _refused(lambda: as_syncer.merge_patch(path, {"spec": {"unschedulable": True}}))
    assert "may change only a Node's annotations" in cordon.message
    label = _refused(lambda: as_syncer.merge_patch(path, {"metadata": {"labels": {"gpu": "none"}}}))
    assert "may change only a Node's annotations" in label.message
    taints = [
        *(as_syncer.get(path)["spec"].get("taints") or []),
        {"key": "example.com/other", "effect": "NoSchedule"},
    ]
    other = _refused(lambda: as_syncer.merge_patch(path, {"spec": {"taints": taints}}))
    assert "may change only a Node's annotations" in other.message
    after = as_syncer.get(path)
    assert not after["spec"].get("unschedulable")
    assert all(t["key"] != "example.com/other" for t in after["spec"].get("taints") or [])
