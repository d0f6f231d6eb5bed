"""GPU health across both schedulers, one GPU at a time (issue 37). A GPU tainted in Kubernetes (a
DeviceTaintRule, as an admin or a health controller writes it) is given out by Slurm no more: the
syncer drains its Slurm node naming the GPU (24.11 and 26.05 cannot take one GRES index out of a
live node), a job asking for every GPU of the node pends, and the node is whole again when the
taint goes. A Slurm drain whose reason names GPUs taints those devices in Kubernetes until Slurm
resumes the node. DeviceTaintRules are GA in Kubernetes 1.37: these run on the 1.37 leg."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from bench import soak
from devstack import config
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient, KubeError
from tests.integration import gpu_sharing as gs
from tests.integration import helpers as h
from tests.integration.test_gpu_claims import _delete
from tests.integration.test_kubectl_tandem import kubectl_tandem

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

RULES = f"/apis/{keys.DRA_GROUP}/v1/{keys.DEVICE_TAINT_RULES}"


@pytest.fixture
def api(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    try:
        client.get(RULES)
    except KubeError as e:
        client.close()
        pytest.skip(f"this Kubernetes serves no {RULES}: {e}")
    yield client
    for rule in client.get(RULES).get("items") or []:
        name = rule["metadata"]["name"]
        if not name.startswith("tandem-slurm-"):
            _delete(client, f"{RULES}/{name}")
    client.close()


def _rule(name: str, kube_node: str, device: str, effect: str) -> dict[str, Any]:
    return soak.taint_rule(name, kube_node, device, key="example.com/xid", value="79", effect=effect)


def _drained(cfg: StackConfig, slurm_node: str) -> str | None:
    """The Slurm node's drain reason while drained (sinfo), else None."""
    state, reason = h.node_state(cfg, slurm_node)
    return reason if "drain" in state else None


def _node_events(core: k8s.CoreV1Api, kube_node: str, reason: str) -> list[k8s.CoreV1Event]:
    selector = f"involvedObject.kind=Node,involvedObject.name={kube_node},reason={reason}"
    return list(core.list_event_for_all_namespaces(field_selector=selector).items)


def _state(cfg: StackConfig, job: int) -> str:
    return h.squeue(cfg, "-j", str(job), "-h", "-o", "%T").strip()


def test_a_gpu_tainted_in_kubernetes_is_not_given_by_slurm_until_the_taint_goes(
    stack_cfg: StackConfig, api: KubeClient
) -> None:
    index = 2
    slurm_node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    name = h.unique("xid")
    api.post(RULES, _rule(name, kube_node, "gpu-3", "NoSchedule"))
    reason = f"k8s: Node {kube_node} has GPU 3 tainted: gpu-3 example.com/xid=79:NoSchedule"
    h.wait_until("the Slurm node drained naming GPU 3", lambda: _drained(stack_cfg, slurm_node) == reason, 30)
    assert " 3:k8s " in _nodes_row(stack_cfg, kube_node)
    # The next job asking for all of the node's GPUs pends while the GPU is tainted.
    everything = f"--gres=gpu:{config.GPU_GRES_TYPE}:{config.GPUS_PER_NODE}"
    job = h.sbatch(stack_cfg, everything, f"--nodelist={slurm_node}", "--cpus-per-task=1", "--mem=1G")
    h.wait_until("the job pending", lambda: _state(stack_cfg, job) == "PENDING", 15)
    _delete(api, f"{RULES}/{name}")
    h.wait_until("the job running once the taint went", lambda: _state(stack_cfg, job) == "RUNNING", 60)
    assert _drained(stack_cfg, slurm_node) is None


def test_a_slurm_job_on_a_gpu_tainted_no_execute_is_cancelled(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    index = 2
    slurm_node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    everything = f"--gres=gpu:{config.GPU_GRES_TYPE}:{config.GPUS_PER_NODE}"
    job = h.sbatch(stack_cfg, everything, f"--nodelist={slurm_node}", "--cpus-per-task=1", "--mem=1G")
    h.wait_until("the job running", lambda: _state(stack_cfg, job) == "RUNNING", 60)
    name = h.unique("ecc")
    api.post(RULES, _rule(name, kube_node, "gpu-5", "NoExecute"))
    h.wait_until("the job cancelled", lambda: _state(stack_cfg, job) in ("", "COMPLETING"), 30)
    events = h.wait_until("the Node's Event", lambda: _node_events(core, kube_node, "SlurmJobEvicted"), 15)
    assert any(f"Slurm job {job} held GPU 5" in str(e.message) for e in events), events
    _delete(api, f"{RULES}/{name}")
    h.wait_until("the node resumed", lambda: _drained(stack_cfg, slurm_node) is None, 30)


def test_a_slurm_drain_naming_a_gpu_taints_its_device_until_slurm_resumes(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    index = 4
    slurm_node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    h.scontrol(stack_cfg, "update", f"nodename={slurm_node}", "state=drain", "reason=xid 79 on GPU 3")
    try:
        rule_name = f"tandem-slurm-{kube_node}-gpu-3"
        rule = h.wait_until("the device tainted", functools.partial(_get, api, f"{RULES}/{rule_name}"), 30)
        assert rule["spec"]["deviceSelector"] == {
            "driver": "gpu.nvidia.com",
            "pool": kube_node,
            "device": "gpu-3",
        }
        assert rule["spec"]["taint"]["key"] == keys.SLURM_GPU_TAINT_KEY
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert rule["metadata"]["annotations"][keys.SLURM_GPU_RULE_REASON] == "xid 79 on GPU 3"
        events = h.wait_until(
            "the Node's Event", lambda: _node_events(core, kube_node, "SlurmDrainedGpus"), 15
        )
        assert "gpu-3" in str(events[-1].message)
        # The mirror is Slurm's drain already: it drains nothing more; the reason stays the admin's.
        assert _drained(stack_cfg, slurm_node) == "xid 79 on GPU 3"
        assert " 3:slurm " in _nodes_row(stack_cfg, kube_node)
    finally:
        h.scontrol(stack_cfg, "update", f"nodename={slurm_node}", "state=resume")
    h.wait_until("the taint gone", lambda: _get(api, f"{RULES}/{rule_name}") is None, 30)


def _nodes_row(cfg: StackConfig, kube_node: str) -> str:
    """The Node's row of `kubectl tandem nodes -o wide` (the unhealthy GPUs by index), as an
    operator reads it."""
    rows = [
        r for r in kubectl_tandem(cfg, "nodes", "-o", "wide").splitlines() if r.startswith(f"{kube_node} ")
    ]
    assert len(rows) == 1, rows
    return rows[0] + " "


def _get(api: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        return api.get(path)
    except KubeError as e:
        if e.not_found:
            return None
        raise


def test_a_gpu_the_kubelet_reports_unhealthy_drains_its_slurm_node_while_reported(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """KEP-4680: a Pod holding a GPU says in its status that the device is Unhealthy (as the kubelet
    writes it from the DRA driver's health stream): Slurm gives that GPU out no more until the report
    goes (here: with the Pod)."""
    index = 2
    slurm_node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    name = h.unique("sick")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": kube_node,
            # Not the lock's NoExecute: a tenant's Pod may not tolerate it (issue 50).
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": f"{name}-gpus"}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}],
        },
    }
    h.create(core, pod)
    h.wait_until("the Pod running", lambda: (p := h.get_pod(core, name)) and p.status.phase == "Running", 30)
    report = {
        "name": "c",
        "allocatedResourcesStatus": [
            {
                "name": "claim:gpus",
                "resources": [{"resourceID": f"gpu.nvidia.com/{kube_node}/gpu-3", "health": "Unhealthy"}],
            }
        ],
    }
    status = api.get(f"/api/v1/namespaces/default/pods/{name}")["status"]
    containers = [{**c, **report} if c["name"] == "c" else c for c in status.get("containerStatuses") or []]
    api.merge_patch(
        f"/api/v1/namespaces/default/pods/{name}/status", {"status": {"containerStatuses": containers}}
    )
    reason = f"k8s: Node {kube_node} has GPU 3 tainted: gpu-3 kubelet/device-health=Unhealthy:NoSchedule"
    h.wait_until("the Slurm node drained naming GPU 3", lambda: _drained(stack_cfg, slurm_node) == reason, 30)
    h.delete_pod(core, name, grace=0)
    h.wait_until("the node resumed", lambda: _drained(stack_cfg, slurm_node) is None, 30)


def test_a_tainted_gpus_shares_are_drained_in_slurm_and_a_share_pod_waits_for_them(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """Issue 54: the shard node's GPU 0 tainted; Slurm gives out no shard of the node (drained
    naming the GPU), so a Pod asking a share of a GPU waits unbound, its claim unallocated, and
    runs once the taint goes."""
    slurm_node, kube_node = (
        config.slurm_node_name(config.SHARD_NODE),
        config.kube_node_name(config.SHARD_NODE),
    )
    rule = h.unique("xid")
    api.post(RULES, _rule(rule, kube_node, "gpu-0", "NoSchedule"))
    name = h.unique("share")
    try:
        h.wait_until(
            "the Slurm node drained naming GPU 0",
            lambda: "GPU 0" in (_drained(stack_cfg, slurm_node) or ""),
            30,
        )
        gs.claiming_pod(stack_cfg, core, api, name, slurm_node, "shares", 2)
        job = h.wait_until(f"{name}'s job", lambda: h.job_id_of(core, name), 30)
        h.wait_until("its job pending", lambda: _state(stack_cfg, job) == "PENDING", 15)
        assert not (p := h.get_pod(core, name)) or not p.spec.node_name
        assert not gs.given(api, name, "shares")
        _delete(api, f"{RULES}/{rule}")
        h.wait_until(f"{name} bound once the taint went", lambda: gs.bound(core, name), 60)
        assert [shares for _, shares in gs.given(api, name, "shares")] == ["2"]
    finally:
        _delete(api, f"{RULES}/{rule}")
        _delete(api, f"{gs.CLAIMS}/{name}")
