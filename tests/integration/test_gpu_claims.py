"""GPUs shared by device (issue 23): a Pod that claims GPUs with a ResourceClaim gets exactly the
devices Slurm allocated its placeholder job, so Pods and Slurm jobs share one 8-GPU node without
two of them ever holding the same GPU. The lab publishes each GPU node's ResourceSlice from the
facts its gres.conf is written from (devstack.resourceslices), as NVIDIA's DRA driver would."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, resourceslices
from devstack.config import StackConfig
from tandem import keys
from tandem.kube import KubeClient, KubeError
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

BASE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{BASE}/namespaces/default/resourceclaims"
TEMPLATES = f"{BASE}/namespaces/default/resourceclaimtemplates"
PRODUCT = f'device.attributes["gpu.nvidia.com"].productName == "{config.GPU_PRODUCT_NAME}"'


# The ResourceClaims and templates the running test made (post): it deletes only those, so the
# tests of this module that share no node with others run beside them (issue 51).
made: list[str] = []


@pytest.fixture
def api(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    client = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    made.clear()
    yield client
    for path in made:
        _delete(client, path)
    client.close()


def post(api: KubeClient, collection: str, body: dict[str, Any]) -> None:
    made.append(f"{collection}/{body['metadata']['name']}")
    api.post(collection, body)


def _delete(api: KubeClient, path: str) -> None:
    try:
        api.delete(path)
    except KubeError as e:
        if not e.not_found:
            raise


def _request(count: int, selector: str = PRODUCT, device_class: str = "gpu.nvidia.com") -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}


def claim(api: KubeClient, name: str, count: int, **kw: Any) -> None:
    post(api, CLAIMS, {"metadata": {"name": name}, "spec": _request(count, **kw)})


def claiming_pod(
    cfg: StackConfig, name: str, node: str, claim_name: str = "", template: str = ""
) -> dict[str, Any]:
    pinned = {h.PREFIX + "required-nodes": node} if node else {}
    pod = h.tandem_pod(cfg, name, pinned, cpu="1", memory="1Gi")
    source = {"resourceClaimName": claim_name} if claim_name else {"resourceClaimTemplateName": template}
    pod["spec"]["resourceClaims"] = [{"name": "gpus", **source}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return pod


def running(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name)
    return pod if pod is not None and pod.spec.node_name and pod.status.phase == "Running" else None


def slurm_indices(cfg: StackConfig, job_id: int, gres_type: str = "") -> set[int]:
    """The GPU indices Slurm allocated the job (of one GRES type, or all), from `scontrol show job
    -d`: `GRES=gpu:h100:2(IDX:4-5)`, or on a node of several types one record each, those it
    holds none of empty (`GRES=gpu:1g.10gb:0(IDX:),gpu:h100:2(IDX:9-10)`)."""
    shown = h.scontrol(cfg, "show", "job", "-d", str(job_id))
    found = re.search(r" GRES=(\S+)", shown)
    assert found, shown
    records = re.findall(r"gpu:([^:(,]+):(\d+)\(IDX:([0-9,\-]*)\)", found.group(1))
    assert records, shown
    indices: set[int] = set()
    for typed, count, listed in records:
        if gres_type and typed != gres_type:
            continue
        held: set[int] = set()
        for part in filter(None, listed.split(",")):
            first, _, last = part.partition("-")
            held.update(range(int(first), int(last or first) + 1))
        assert len(held) == int(count), shown
        indices |= held
    return indices


def allocated(api: KubeClient, claim_name: str) -> tuple[set[int], list[dict[str, Any]]] | None:
    """The claim's allocated devices as the `index` their Node's slice gives them, and reservedFor."""
    status = api.get(f"{CLAIMS}/{claim_name}").get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    if not results:
        return None
    indices = set()
    for r in results:
        devices = api.get(f"{BASE}/resourceslices/{r['pool']}-{resourceslices.DRIVER}")["spec"]["devices"]
        indices |= {d["attributes"]["index"]["int"] for d in devices if d["name"] == r["device"]}
    assert len(indices) == len(results), results
    return indices, status.get("reservedFor") or []


def test_two_pods_and_a_slurm_job_share_one_node_gpu_by_gpu(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    node = config.slurm_node_name(0)  # a GPU node: 8 GPUs
    pods = [h.unique("infer"), h.unique("infer")]
    for name in pods:
        claim(api, f"{name}-gpus", 2)
        h.create(core, claiming_pod(stack_cfg, name, node, claim_name=f"{name}-gpus"))
    training = h.sbatch(stack_cfg, "--gres=gpu:h100:4", f"--nodelist={node}", "--cpus-per-task=1", "--mem=1G")
    for name in pods:
        h.wait_until(f"{name} running", functools.partial(running, core, name), 60)
    h.wait_until(
        "the Slurm job running",
        lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(training), "-h", "-o", "%T"),
        60,
    )

    taken: list[set[int]] = []
    for name in pods:
        got = allocated(api, f"{name}-gpus")
        assert got is not None, f"{name}'s claim has no allocation"
        devices, reserved = got
        pod = h.get_pod(core, name)
        assert pod is not None
        assert [r["uid"] for r in reserved] == [pod.metadata.uid]
        # Exactly the indices Slurm gave the Pod's placeholder job.
        assert devices == slurm_indices(stack_cfg, h.job_id_of(core, name) or 0)
        taken.append(devices)
        scheduled = [e.message for e in h.events_for(core, name) if e.reason == "Scheduled"]
        assert any(f"{name}-gpus: gpu-" in m for m in scheduled), scheduled
    taken.append(slurm_indices(stack_cfg, training))
    assert [len(t) for t in taken] == [2, 2, 4]
    assert set().union(*taken) == set(range(8)), f"GPUs given twice: {taken}"


@pytest.mark.parallel
def test_a_claim_made_from_a_template_gets_slurm_s_devices(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    name = h.unique("templated")
    post(api, TEMPLATES, {"metadata": {"name": f"{name}-gpu"}, "spec": {"spec": _request(1, selector="")}})
    h.create(core, claiming_pod(stack_cfg, name, config.slurm_node_name(2), template=f"{name}-gpu"))
    pod = h.wait_until(f"{name} running", lambda: running(core, name), 60)
    made = pod.status.resource_claim_statuses[0].resource_claim_name
    got = allocated(api, made)
    assert got is not None and got[0] == slurm_indices(stack_cfg, h.job_id_of(core, name) or 0)


@pytest.mark.parallel
def test_a_claim_slurm_cannot_allocate_is_refused_with_the_field(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    name = h.unique("all-gpus")
    post(
        api,
        CLAIMS,
        {
            "metadata": {"name": f"{name}-gpus"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
                        }
                    ]
                }
            },
        },
    )
    h.create(core, claiming_pod(stack_cfg, name, config.slurm_node_name(0), claim_name=f"{name}-gpus"))
    event = h.wait_until(
        "a FailedValidation Event",
        lambda: next((e for e in h.events_for(core, name) if e.reason == "FailedValidation"), None),
        30,
    )
    assert "allocationMode" in event.message and "Slurm allocates an exact count" in event.message
    assert h.job_id_of(core, name) is None


def test_a_node_whose_slice_disagrees_with_slurm_is_refused_until_they_agree(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """The node's slice publishes 6 of its 8 GPUs: a claim could be given a device other than the
    one Slurm chose. The syncer says so on the Node, Pods claiming GPUs are not offered it (no
    job, kube-scheduler's words), and once the slice is whole again the Pod runs there."""
    index = 4
    kube_node = config.kube_node_name(index)
    path = f"{BASE}/resourceslices/{kube_node}-{resourceslices.DRIVER}"
    _replace(api, path, resourceslices.lab_slice(index, gpus=6))
    try:
        shown = h.wait_until("the Node's SlurmGpuMismatch", lambda: _mismatch(core, kube_node), 30)
        assert (
            shown
            == f"Slurm has {config.GPUS_PER_NODE} gpu:h100, the ResourceSlice has 6 devices of that type"
        )
        name = h.unique("mismatch")
        claim(api, f"{name}-gpus", 2)
        # Pinned by its Node (required-nodes would name a Slurm node Tandem then excludes).
        pod = claiming_pod(stack_cfg, name, "", claim_name=f"{name}-gpus")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": kube_node}
        h.create(core, pod)
        condition = h.wait_until(
            "the Pod unschedulable",
            lambda: (
                (p := h.get_pod(core, name)) is not None
                and (c := h.scheduled_condition(p)) is not None
                and c.reason == "Unschedulable"
                and c
            ),
            30,
        )
        assert "1 node(s) had GPU devices that disagree with Slurm's GRES" in condition.message
        assert h.job_id_of(core, name) is None and not h.squeue_ids(stack_cfg)
        # A Pod asking for nvidia.com/gpu is not the claim's concern: it still goes there.
        plain = h.unique("plain-gpu")
        h.create(
            core,
            h.tandem_pod(
                stack_cfg, plain, {h.PREFIX + "required-nodes": config.slurm_node_name(index)}, gpus=1
            ),
        )
        h.wait_until(f"{plain} running", functools.partial(running, core, plain), 60)
    finally:
        _replace(api, path, resourceslices.lab_slice(index))
    h.wait_until("the condition cleared", lambda: _mismatch(core, kube_node) is None and True, 30)
    h.wait_until(f"{name} running", functools.partial(running, core, name), 60)


def _mismatch(core: k8s.CoreV1Api, kube_node: str) -> str | None:
    node = core.read_node(kube_node)
    found = [
        c
        for c in node.status.conditions or []
        if c.type == keys.GPU_MISMATCH_CONDITION and c.status == "True"
    ]
    return found[0].message if found else None


def _replace(api: KubeClient, path: str, new: dict[str, Any]) -> None:
    version = api.get(path)["metadata"]["resourceVersion"]
    api.request("PUT", path, body={**new, "metadata": {**new["metadata"], "resourceVersion": version}})


@pytest.mark.parallel
def test_a_pod_and_a_slurm_job_share_one_gpu_slice_by_slice(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """The MIG node's GPU 0 is 7 slices of 1g.10gb: a Pod claims one through DeviceClass
    mig.nvidia.com, a Slurm job takes two, both run at once, on different slices of that GPU."""
    node = config.slurm_node_name(config.MIG_NODE)
    name = h.unique("mig")
    profile = f'device.attributes["gpu.nvidia.com"].profile == "{config.MIG_PROFILE}"'
    post(
        api,
        CLAIMS,
        {"metadata": {"name": f"{name}-slice"}, "spec": _request(1, profile, device_class="mig.nvidia.com")},
    )
    h.create(core, claiming_pod(stack_cfg, name, node, claim_name=f"{name}-slice"))
    training = h.sbatch(
        stack_cfg, f"--gres=gpu:{config.MIG_PROFILE}:2", f"--nodelist={node}", "--cpus-per-task=1", "--mem=1G"
    )
    h.wait_until(f"{name} running", functools.partial(running, core, name), 60)
    h.wait_until(
        "the Slurm job running",
        lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(training), "-h", "-o", "%T"),
        60,
    )
    job = h.rest_job(stack_cfg, h.job_id_of(core, name) or 0)
    assert f"gpu:{config.MIG_PROFILE}:1" in job["tres_per_node"]
    got = allocated(api, f"{name}-slice")
    assert got is not None
    pod_slices, training_slices = got[0], slurm_indices(stack_cfg, training)
    assert pod_slices == slurm_indices(stack_cfg, h.job_id_of(core, name) or 0)
    assert len(pod_slices) == 1 and len(training_slices) == 2 and not pod_slices & training_slices
    # Slurm's indices 0-6 are GPU 0's slices (config.gpu_gres): one physical GPU, shared.
    assert pod_slices | training_slices <= set(range(config.MIG_SLICES))


@pytest.mark.parallel
def test_a_claim_is_freed_when_its_pod_goes_and_serves_the_next_pod(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """Nothing stays allocated: once the Pod is deleted, Kubernetes' ResourceClaim controller takes
    it out of reservedFor, clears the allocation Tandem wrote and removes the finalizer (as for a
    claim kube-scheduler allocated), and a new Pod naming the claim gets Slurm's devices anew."""
    node = config.slurm_node_name(2)
    first = h.unique("first")
    claim(api, f"{first}-gpus", 2)
    h.create(core, claiming_pod(stack_cfg, first, node, claim_name=f"{first}-gpus"))
    h.wait_until(f"{first} running", functools.partial(running, core, first), 60)
    h.delete_pod(core, first, grace=0)
    h.wait_until("the Pod gone", lambda: h.get_pod(core, first) is None, 60)

    def freed() -> bool:
        c = api.get(f"{CLAIMS}/{first}-gpus")
        status = c.get("status") or {}
        return (
            not status.get("reservedFor")
            and not status.get("allocation")
            and not c["metadata"].get("finalizers")
        )

    h.wait_until("the claim freed", freed, 60)
    second = h.unique("second")
    h.create(core, claiming_pod(stack_cfg, second, node, claim_name=f"{first}-gpus"))
    h.wait_until(f"{second} running", functools.partial(running, core, second), 60)
    got = allocated(api, f"{first}-gpus")
    assert got is not None and got[0] == slurm_indices(stack_cfg, h.job_id_of(core, second) or 0)


def _refusal(core: k8s.CoreV1Api, name: str) -> k8s.CoreV1Event | None:
    refused = [e for e in h.events_for(core, name) if "cannot be given" in e.message]
    return next((e for e in refused if e.reason == "FailedScheduling"), None)


def _job_running(cfg: StackConfig, job: int) -> bool:
    return "RUNNING" in h.squeue(cfg, "-j", str(job), "-h", "-o", "%T")


def _on_node(pod: dict[str, Any], kube_node: str) -> dict[str, Any]:
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": kube_node}
    return pod


def test_whole_gpus_and_mig_slices_share_the_mixed_node_with_slurm_jobs(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """Issue 37, as a new user tried it: on the mixed node (GPU 0 as 7 slices of 1g.10gb, 7 whole
    H100s), two Pods each claim 2 whole GPUs of any product from a template, a Slurm job takes 3
    whole GPUs, a Pod claims one slice and a Slurm job another, all at once. Before: the whole-GPU
    Pods' jobs asked untyped `gres/gpu:2`, Slurm gave them slices, and each was cancelled."""
    index = config.MIG_NODE
    node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    template = h.unique("whole")
    post(api, TEMPLATES, {"metadata": {"name": template}, "spec": {"spec": _request(2, selector="")}})
    whole = [h.unique("whole"), h.unique("whole")]
    for name in whole:
        h.create(core, _on_node(claiming_pod(stack_cfg, name, "", template=template), kube_node))
    mig = h.unique("slice")
    profile = f'device.attributes["gpu.nvidia.com"].profile == "{config.MIG_PROFILE}"'
    post(
        api,
        CLAIMS,
        {"metadata": {"name": f"{mig}-slice"}, "spec": _request(1, profile, device_class="mig.nvidia.com")},
    )
    h.create(core, _on_node(claiming_pod(stack_cfg, mig, "", claim_name=f"{mig}-slice"), kube_node))
    training = h.sbatch(stack_cfg, "--gres=gpu:h100:3", f"--nodelist={node}", "--cpus-per-task=1", "--mem=1G")
    sliced = h.sbatch(
        stack_cfg, f"--gres=gpu:{config.MIG_PROFILE}:1", f"--nodelist={node}", "--cpus-per-task=1", "--mem=1G"
    )
    for name in (*whole, mig):
        h.wait_until(f"{name} running", functools.partial(running, core, name), 90)
    for job in (training, sliced):
        h.wait_until(f"Slurm job {job} running", functools.partial(_job_running, stack_cfg, job), 60)
    held: dict[str, set[int]] = {}
    for name in (*whole, mig):
        pod = h.get_pod(core, name)
        assert pod is not None and pod.spec.node_name == kube_node
        made = pod.status.resource_claim_statuses[0].resource_claim_name if name != mig else f"{mig}-slice"
        got = allocated(api, made)
        assert got is not None, f"{name}'s claim has no allocation"
        job_id = h.job_id_of(core, name) or 0
        # Exactly the indices Slurm gave the Pod's placeholder job, of the type its claim asks.
        assert got[0] == slurm_indices(stack_cfg, job_id), name
        wanted = config.MIG_PROFILE if name == mig else config.GPU_GRES_TYPE
        assert f"gpu:{wanted}:" in h.rest_job(stack_cfg, job_id)["tres_per_node"]
        held[name] = got[0]
    held["training"] = slurm_indices(stack_cfg, training, config.GPU_GRES_TYPE)
    held["sliced"] = slurm_indices(stack_cfg, sliced, config.MIG_PROFILE)
    assert sorted(len(v) for v in held.values()) == [1, 1, 2, 2, 3]
    taken = [i for v in held.values() for i in v]
    assert len(taken) == len(set(taken)), f"a GPU given twice: {held}"
    slices = set(range(config.MIG_SLICES))
    assert held[mig] <= slices and held["sliced"] <= slices
    assert not (held[whole[0]] | held[whole[1]] | held["training"]) & slices


def test_a_claim_whose_gpus_cannot_be_mapped_is_refused_once_and_drains_no_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """Every device of the node's slice carries the taint the syncer mirrors a Slurm drain with
    (as between an admin's resume and the syncer removing it): the syncer drains nothing for its
    own taint, but no GPU Slurm picks can be given to the claim. The Pod is refused with an Event
    naming the device, its job cancelled once and not submitted again, and its node is not
    drained. Before: the Pod that never ran kept its job's end waiting until KillWait, then drained
    the node ('still running at KillWait')."""
    index = 4
    node, kube_node = config.slurm_node_name(index), config.kube_node_name(index)
    path = f"{BASE}/resourceslices/{kube_node}-{resourceslices.DRIVER}"
    tainted = resourceslices.lab_slice(index)
    for device in tainted["spec"]["devices"]:
        taint = {"key": keys.SLURM_GPU_TAINT_KEY, "value": device["name"], "effect": "NoSchedule"}
        device["taints"] = [taint]
    _replace(api, path, tainted)
    try:
        if not any(d.get("taints") for d in api.get(path)["spec"]["devices"]):
            pytest.skip("this Kubernetes drops ResourceSlice device taints (DRADeviceTaints off)")
        name = h.unique("unmapped")
        claim(api, f"{name}-gpus", 1)
        h.create(core, claiming_pod(stack_cfg, name, node, claim_name=f"{name}-gpus"))
        event = h.wait_until("the refusal's Event", functools.partial(_refusal, core, name), 60)
        assert "is tainted" in event.message, event.message
        condition = h.scheduled_condition(h.get_pod(core, name))
        assert condition is not None and condition.reason == "GpuAllocationMismatch"
        job = int(re.search(r"job (\d+)", event.message).group(1))  # type: ignore[union-attr]
        # Its job ends at once: nothing of it ran, nothing waits until KillWait.
        h.wait_until(
            "the job ended",
            lambda: not h.squeue(stack_cfg, "-j", str(job), "-h", "-o", "%T").strip(),
            config.KILL_WAIT_SECONDS - 10,
        )
        state = h.scontrol(stack_cfg, "show", "node", node)
        assert "DRAIN" not in state, state
        # Refused once: no new job follows, and one Event says so.
        time.sleep(5)
        assert h.job_id_of(core, name) in (None, job)
        assert not [j for j in h.squeue_ids(stack_cfg) if j != job]
        refused = [e for e in h.events_for(core, name) if "cannot be given" in (e.message or "")]
        assert sum(e.count or 1 for e in refused) == 1
        assert "DRAIN" not in h.scontrol(stack_cfg, "show", "node", node)
    finally:
        _replace(api, path, resourceslices.lab_slice(index))
