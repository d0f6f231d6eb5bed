"""What a stolen syncer token could do, beyond the lock (issue 18, least privilege): RBAC lets the
syncer patch the slurmd Pods and the Nodes; the chart's ValidatingAdmissionPolicy holds those
writes to the lock annotation, the drain annotation and the lock taint. Tried with the syncer's
own ServiceAccount token against the real apiserver."""

from __future__ import annotations

import time
from typing import Any

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


@pytest.mark.parallel
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


def test_the_syncer_taints_devices_only_as_a_slurm_drain_s_mirror(
    stack_cfg: StackConfig, as_syncer: KubeClient
) -> None:
    """Issue 37: RBAC lets the syncer create and delete DeviceTaintRules (a Slurm drain naming GPUs
    taints their devices). A stolen token must not evict every DRA Pod with a NoExecute rule, nor
    delete an admin's rule; the policy holds it to NoSchedule rules of its own."""
    rules = f"/apis/{keys.DRA_GROUP}/v1/{keys.DEVICE_TAINT_RULES}"
    admin = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    try:
        admin.get(rules)
    except KubeError as e:
        pytest.skip(f"this Kubernetes serves no {rules}: {e}")

    def rule(name: str, effect: str, key: str = keys.SLURM_GPU_TAINT_KEY) -> dict[str, Any]:
        return {
            "apiVersion": f"{keys.DRA_GROUP}/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": {keys.MANAGED_BY_LABEL: keys.SYNCER_MANAGER}},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com"}, "taint": {"key": key, "effect": effect}},
        }

    evict = _refused(lambda: as_syncer.post(rules, rule("tandem-slurm-evil", "NoExecute")))
    assert "may only create DeviceTaintRules named tandem-slurm-*" in evict.message
    other_key = _refused(
        lambda: as_syncer.post(rules, rule("tandem-slurm-evil", "NoSchedule", "example.com/x"))
    )
    assert "may only create DeviceTaintRules" in other_key.message
    admins = {**rule("admin-rule", "None", "example.com/x"), "metadata": {"name": "admin-rule"}}
    admin.post(rules, admins)
    try:
        deleted = _refused(lambda: as_syncer.delete(f"{rules}/admin-rule"))
        assert "may only create DeviceTaintRules" in deleted.message
        assert admin.get(f"{rules}/admin-rule")["metadata"]["name"] == "admin-rule"
    finally:
        admin.delete(f"{rules}/admin-rule")
        admin.close()
    assert not [r for r in admin_rules(stack_cfg, rules) if r["metadata"]["name"] == "tandem-slurm-evil"]


def test_a_stolen_syncer_token_writes_only_tandems_annotations_and_the_lock_taint_as_it_is(
    stack_cfg: StackConfig, as_syncer: KubeClient
) -> None:
    """Issue 50: the policy let the syncer write any annotation, and the lock taint with any value
    or effect, on any Node; and a DeviceTaintRule selecting every GPU."""
    node_path = f"/api/v1/nodes/{config.kube_node_name(2)}"
    pod_path = f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods/{config.slurm_node_name(2)}"
    before = as_syncer.get(node_path)
    node_note = _refused(
        lambda: as_syncer.merge_patch(node_path, {"metadata": {"annotations": {"example.com/owner": "me"}}})
    )
    assert "only Tandem's own annotations" in node_note.message and "example.com/owner" in node_note.message
    pod_note = _refused(
        lambda: as_syncer.merge_patch(pod_path, {"metadata": {"annotations": {keys.PREFIX + "account": "x"}}})
    )
    assert f"only the {keys.LOCK_KEY} annotation of a slurmd Pod" in pod_note.message
    for taint in (
        {"key": keys.LOCK_KEY, "value": "true", "effect": "NoSchedule"},
        {"key": keys.LOCK_KEY, "value": "forever", "effect": "NoExecute"},
    ):
        taints = [*(before["spec"].get("taints") or []), taint]
        bad = _refused(lambda taints=taints: as_syncer.merge_patch(node_path, {"spec": {"taints": taints}}))
        assert "lock taint is" in bad.message, bad
    after = as_syncer.get(node_path)
    assert after["spec"].get("taints") == before["spec"].get("taints")
    assert "example.com/owner" not in (after["metadata"].get("annotations") or {})
    rules = f"/apis/{keys.DRA_GROUP}/v1/{keys.DEVICE_TAINT_RULES}"
    every_gpu = {
        "apiVersion": f"{keys.DRA_GROUP}/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": "tandem-slurm-every-gpu",
            "labels": {keys.MANAGED_BY_LABEL: keys.SYNCER_MANAGER},
        },
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com"},
            "taint": {"key": keys.SLURM_GPU_TAINT_KEY, "effect": "NoSchedule"},
        },
    }
    if not _serves(stack_cfg, rules):
        pytest.skip(f"this Kubernetes serves no {rules}")
    broad = _refused(lambda: as_syncer.post(rules, every_gpu))
    assert "each naming one pool and one device" in broad.message, broad


LOCK_TAINT = {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"}


def test_a_stolen_syncer_token_cannot_lock_a_node_that_hosts_no_slurm_node(
    stack_cfg: StackConfig, as_syncer: KubeClient
) -> None:
    """Issue 50: the syncer could put the lock taint and its annotations on any Node, one that
    runs no Slurm included (the lab's real Node, a tenant's). A Node without the labels of a Slurm
    node's host (syncer.slurmNodeLabels) may only have them taken off."""
    admin = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    name = f"no-slurm-{time.monotonic_ns() % 10**6}"
    path = f"/api/v1/nodes/{name}"
    admin.post("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    try:
        others = as_syncer.get(path)["spec"].get("taints") or []  # the node controller's not-ready
        taint = _refused(lambda: as_syncer.merge_patch(path, {"spec": {"taints": [*others, LOCK_TAINT]}}))
        assert taint.status == 403 and "does not host a Slurm node" in taint.message, taint
        drain = _refused(
            lambda: as_syncer.merge_patch(path, {"metadata": {"annotations": {keys.DRAIN_ANNOTATION: "x"}}})
        )
        assert "does not host a Slurm node" in drain.message, drain
        assert not _locked(as_syncer.get(path))
        # Left there by someone (an old release, a move): the syncer may take them off.
        others = admin.get(path)["spec"].get("taints") or []
        admin.merge_patch(
            path,
            {
                "metadata": {"annotations": {keys.DRAIN_ANNOTATION: "x"}},
                "spec": {"taints": [*others, LOCK_TAINT]},
            },
        )
        as_syncer.merge_patch(path, {"metadata": {"annotations": {keys.DRAIN_ANNOTATION: None}}})
        taints = [t for t in as_syncer.get(path)["spec"].get("taints") or [] if t["key"] != keys.LOCK_KEY]
        as_syncer.merge_patch(path, {"spec": {"taints": taints}})
        assert not _locked(as_syncer.get(path))
    finally:
        admin.delete(path)
        admin.close()


def _locked(node: dict[str, Any]) -> bool:
    """Whether the Node carries the lock taint or Tandem's drain annotation."""
    taints = node["spec"].get("taints") or []
    return any(t["key"] == keys.LOCK_KEY for t in taints) or keys.DRAIN_ANNOTATION in (
        node["metadata"].get("annotations") or {}
    )


def _serves(cfg: StackConfig, path: str) -> bool:
    client = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        client.get(path)
        return True
    except KubeError:
        return False
    finally:
        client.close()


def admin_rules(cfg: StackConfig, rules: str) -> list[dict[str, Any]]:
    client = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    try:
        return list(client.get(rules).get("items") or [])
    finally:
        client.close()


@pytest.mark.parallel
def test_the_syncer_cannot_rewrite_a_nodes_status_or_owners(as_syncer: KubeClient) -> None:
    """Issue 39: RBAC lets the syncer patch nodes/status (its SlurmCordon condition); the policy
    holds it to its own conditions, and to no finalizer or owner on a Node or a slurmd Pod."""
    node = config.kube_node_name(1)
    path = f"/api/v1/nodes/{node}"
    before = as_syncer.get(path)
    addresses = _refused(
        lambda: as_syncer.strategic_patch(
            f"{path}/status",
            {"status": {"addresses": [{"type": "InternalIP", "address": "10.66.66.66"}]}},
        )
    )
    assert addresses.status == 403 and "only its own conditions" in addresses.message, addresses
    ready = _refused(
        lambda: as_syncer.strategic_patch(
            f"{path}/status",
            {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "x"}]}},
        )
    )
    assert "only its own conditions" in ready.message
    allocatable = _refused(
        lambda: as_syncer.strategic_patch(f"{path}/status", {"status": {"allocatable": {"cpu": "1000"}}})
    )
    assert "only its own conditions" in allocatable.message
    finalizer = _refused(
        lambda: as_syncer.merge_patch(path, {"metadata": {"finalizers": ["example.com/keep"]}})
    )
    assert "finalizers or ownerReferences" in finalizer.message
    pod = f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods/{SLURM_NODE}"
    owner = _refused(
        lambda: as_syncer.merge_patch(
            pod,
            {
                "metadata": {
                    "ownerReferences": [
                        {"apiVersion": "v1", "kind": "Node", "name": node, "uid": before["metadata"]["uid"]}
                    ]
                }
            },
        )
    )
    assert "finalizers or ownerReferences" in owner.message
    after = as_syncer.get(path)
    assert after["status"]["addresses"] == before["status"]["addresses"]
    assert after["status"].get("allocatable") == before["status"].get("allocatable")
    assert not after["metadata"].get("finalizers")
