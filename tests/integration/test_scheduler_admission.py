"""What a stolen scheduler token could do (issue 39): RBAC lets the scheduler patch and delete Pods
(cluster-wide in the cluster scope), which would let it change any Pod's image. The chart's
ValidatingAdmissionPolicy holds those writes to Pods naming this scheduler, and on them to Tandem's
annotations, the lock toleration and the status fields scheduling writes. Tried with the
scheduler's own ServiceAccount token against the real apiserver.

Its ResourceClaim writes (issue 50) have a policy of their own: on a claim, only the delete-protection
finalizer; in its status, an allocation where there was none and one more Pod in reservedFor; a
create, only the claim of a Pod's nvidia.com/gpu; a delete (or the finalizer off), only of such a
claim that no other consumer holds. The claims here are allocated devices of a pool no Node
publishes, so nothing but these tests ever meets them."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, services
from devstack.config import StackConfig
from tandem import keys, reasons
from tandem.dra.allocation import FINALIZER, ClaimStatus, PodConsumer, claim_status_of
from tandem.dra.claims import ClaimRequest
from tandem.dra.extended import ContainerGpus, claim_manifest
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.kube import JSON, KubeClient, KubeError
from tandem.scheduler.claimwrites import ClaimApi, claim_path
from tandem.scheduler.gpuclaims import ClaimWrite
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

SLURMD_POD = f"/api/v1/namespaces/{config.SLURM_NAMESPACE}/pods/cpu-001"
GPU_CLASS = "gpu.nvidia.com"
# GPUs of a pool no Node publishes: a claim allocated them holds nothing a Pod or a Slurm job uses.
PAPER = NodeDevices(
    "no-such-node", GPU_CLASS, "no-such-pool", tuple(SlicedDevice(f"gpu-{i}", "gpu", "", i) for i in range(4))
)
FINALIZER_ONLY = "may change only a ResourceClaim's resource.kubernetes.io/delete-protection finalizer"
NOT_MADE = "deletes (and takes resource.kubernetes.io/delete-protection off) only a ResourceClaim it made"
HELD_BY_ANOTHER = "reserved for a consumer other than the Pod it was made for"
ONE_MORE_POD = "may only add a Pod to a ResourceClaim's reservedFor, one a write"


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


# The ResourceClaims the running test made by name (its Pods' claims are known by their owner).
made_claims: list[str] = []


def _made_by_test(claim: JSON) -> bool:
    pods = {name for ns, name in h.made.pods if ns == "default"}
    owners = {o.get("name") for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"}
    return claim["metadata"]["name"] in made_claims or bool(owners & pods)


@pytest.fixture
def admin(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    """The cluster admin; the ResourceClaims the test made go after it, their finalizers first
    (nothing else would take them off), and no other: its tests run beside others (issue 51)."""
    client = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    made_claims.clear()
    yield client
    for item in client.get(claim_path("default")).get("items") or []:
        if not _made_by_test(item):
            continue
        path = claim_path("default", item["metadata"]["name"])
        try:
            client.merge_patch(path, {"metadata": {"finalizers": None}})
            client.delete(path)
        except KubeError as e:
            if not e.not_found:
                raise
    client.close()


def _held(cfg: StackConfig, core: k8s.CoreV1Api, admin: KubeClient) -> JSON:
    """A Pod naming Tandem's scheduler that stays pending, as the apiserver holds it (its uid): a
    live consumer the ResourceClaim controller leaves in a claim's reservedFor."""
    name = h.unique("held")
    h.create(core, h.tandem_pod(cfg, name, {h.PREFIX + "required-nodes": "no-such-node"}))
    return admin.get(f"/api/v1/namespaces/default/pods/{name}")


def _consumer(pod: JSON) -> dict[str, str]:
    return PodConsumer(pod["metadata"]["name"], pod["metadata"]["uid"]).reference()


def _status(claim: JSON, pod: JSON, indices: tuple[int, ...], request: str) -> ClaimStatus:
    """The status the scheduler writes to give `claim`'s request the paper devices of `indices`
    and reserve it for `pod` (tandem.dra.allocation, as for a real placement)."""
    share = ClaimRequest(
        pod_claim=request,
        claim_name=claim["metadata"]["name"],
        request=request,
        device_class=GPU_CLASS,
        kind="gpu",
        count=len(indices),
        gres_type="",
    )
    status = claim_status_of(
        claim, ((share, indices),), PAPER, PodConsumer(pod["metadata"]["name"], pod["metadata"]["uid"])
    )
    assert not isinstance(status, str), status
    return status


def _allocate(
    as_scheduler: KubeClient, admin: KubeClient, path: str, pod: JSON, indices: tuple[int, ...], request: str
) -> JSON:
    """What the scheduler does before a bind (ClaimApi.allocate): the finalizer, then the status."""
    claim = admin.get(path)
    status = _status(claim, pod, indices, request)
    ClaimApi(as_scheduler).allocate(pod, (ClaimWrite(claim, status.status, status.devices),))
    return admin.get(path)


def _kept(claim: JSON) -> tuple[Any, ...]:
    """What a refused write must leave as it was."""
    meta = claim["metadata"]
    return (
        claim["spec"],
        claim.get("status") or {},
        meta.get("labels"),
        meta.get("annotations"),
        meta.get("finalizers"),
        meta.get("ownerReferences"),
        meta["uid"],
    )


@pytest.mark.parallel
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


@pytest.mark.parallel
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
    # DisruptionTarget only as Slurm's preemption of its job (issue 53), never as another's.
    disrupted = {"type": keys.DISRUPTION_TARGET, "status": "True", "message": "Slurm job 1 was preempted"}
    kube_says = _refused(
        lambda: as_scheduler.strategic_patch(
            f"{held_pod}/status",
            {"status": {"conditions": [{**disrupted, "reason": reasons.PREEMPTED_BY_SCHEDULER}]}},
        )
    )
    assert "may change only a Pod's PodScheduled condition" in kube_says.message
    as_scheduler.strategic_patch(
        f"{held_pod}/status",
        {"status": {"conditions": [{**disrupted, "reason": reasons.PREEMPTED_BY_SLURM}]}},
    )
    after = as_scheduler.get(held_pod)
    assert "owned" not in (after["metadata"].get("labels") or {})
    assert after["spec"]["containers"][0]["image"] == pod["spec"]["containers"][0]["image"]
    assert after["status"].get("phase") == "Pending"


@pytest.mark.parallel
def test_on_a_tenants_claim_the_scheduler_writes_only_its_finalizer_and_one_more_pod(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, admin: KubeClient, as_scheduler: KubeClient
) -> None:
    """RBAC grants patch on any claim and its status; the policy holds the scheduler to what an
    allocation writes: never another finalizer, a label, another consumer's reservation or the
    allocation a claim has, nor a delete of a claim it did not make."""
    pod, other = _held(stack_cfg, core, admin), _held(stack_cfg, core, admin)
    name = h.unique("claim")
    made_claims.append(name)
    path, status = claim_path("default", name), claim_path("default", name) + "/status"
    request = {"deviceClassName": GPU_CLASS, "count": 2}
    admin.post(
        claim_path("default"),
        {
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}},
        },
    )
    before = admin.get(path)
    # The spec: the apiserver keeps it immutable for anyone (422), before any admission policy.
    spec = _refused(
        lambda: as_scheduler.json_patch(
            path, [{"op": "replace", "path": "/spec/devices/requests/0/exactly/count", "value": 8}]
        )
    )
    assert spec.status == 422 and "immutable" in spec.message, spec
    finalizer = _refused(
        lambda: as_scheduler.json_patch(
            path, [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/keep"]}]
        )
    )
    assert finalizer.status == 403 and FINALIZER_ONLY in finalizer.message, finalizer
    label = _refused(lambda: as_scheduler.merge_patch(path, {"metadata": {"labels": {"owned": "yes"}}}))
    assert label.status == 403 and FINALIZER_ONLY in label.message, label
    deleted = _refused(lambda: as_scheduler.delete(path))
    assert deleted.status == 403 and NOT_MADE in deleted.message, deleted
    assert f"default/{name} is not one" in deleted.message
    assert _kept(admin.get(path)) == _kept(before)

    # What the scheduler writes before a bind: the finalizer, then the allocation and the Pod.
    allocated = _allocate(as_scheduler, admin, path, pod, (0, 1), "gpus")
    assert allocated["metadata"]["finalizers"] == [FINALIZER]
    assert allocated["status"]["reservedFor"] == [_consumer(pod)]
    # Other devices over that allocation: the apiserver keeps an allocation immutable too (422).
    elsewhere = _status({**allocated, "status": {}}, pod, (2, 3), "gpus").status["allocation"]
    moved = _refused(lambda: as_scheduler.merge_patch(status, {"status": {"allocation": elsewhere}}))
    assert moved.status == 422 and "cannot be modified once set" in moved.message, moved
    # The Pod's reservation taken off (its devices could then be freed under it), or swapped.
    dropped = _refused(lambda: as_scheduler.merge_patch(status, {"status": {"reservedFor": []}}))
    assert dropped.status == 403 and ONE_MORE_POD in dropped.message, dropped
    swapped = _refused(
        lambda: as_scheduler.merge_patch(status, {"status": {"reservedFor": [_consumer(other)]}})
    )
    assert swapped.status == 403 and ONE_MORE_POD in swapped.message, swapped
    # The finalizer off a claim the scheduler did not make: what lets it go while in use.
    unprotected = _refused(
        lambda: as_scheduler.json_patch(
            path, [{"op": "replace", "path": "/metadata/finalizers", "value": []}]
        )
    )
    assert unprotected.status == 403 and NOT_MADE in unprotected.message, unprotected
    assert _kept(admin.get(path)) == _kept(allocated)

    # A second Pod of a shared claim joins it, as the scheduler writes it: one more, the first kept.
    shared = _allocate(as_scheduler, admin, path, other, (0, 1), "gpus")
    assert shared["status"]["reservedFor"] == [_consumer(pod), _consumer(other)]
    assert shared["status"]["allocation"] == allocated["status"]["allocation"]

    # Allocated and reserved for no one (the admin took the Pods off): the scheduler may not free it.
    admin.merge_patch(status, {"status": {"reservedFor": None}})
    unreserved = admin.get(path)
    freed = _refused(lambda: as_scheduler.merge_patch(status, {"status": {"allocation": None}}))
    assert freed.status == 403, freed
    assert "may allocate only a ResourceClaim that has no allocation" in freed.message
    assert f"default/{name} is allocated already" in freed.message
    assert _kept(admin.get(path)) == _kept(unreserved)


@pytest.mark.parallel
def test_the_scheduler_makes_and_drops_only_the_claim_of_a_pods_gpus(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, admin: KubeClient, as_scheduler: KubeClient
) -> None:
    """The claim of a Pod's nvidia.com/gpu, as kube-scheduler makes it (tandem.dra.extended): made,
    allocated and dropped by the scheduler's own code; any other claim refused at create, and the
    drop refused while another consumer holds the claim."""
    pod, other = _held(stack_cfg, core, admin), _held(stack_cfg, core, admin)
    claims = ClaimApi(as_scheduler)
    request = "container-0-request-0"
    manifest = claim_manifest(pod, [ContainerGpus("main", request, 2)], GPU_CLASS)
    bare = copy.deepcopy(manifest)
    del bare["metadata"]["annotations"]
    made_bare = _refused(lambda: claims.make(pod, bare))
    assert made_bare.status == 403, made_bare
    assert "creates only the ResourceClaim for a Pod's nvidia.com/gpu" in made_bare.message
    # Devices picked by a selector of its own, not by Slurm: not that claim either.
    selected = copy.deepcopy(manifest)
    selected["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [{"cel": {"expression": "true"}}]
    made_selected = _refused(lambda: claims.make(pod, selected))
    assert made_selected.status == 403, made_selected
    assert "asks, container by container" in made_selected.message
    owners = [
        ref["uid"]
        for c in admin.get(claim_path("default")).get("items") or []
        for ref in c["metadata"].get("ownerReferences") or []
    ]
    assert pod["metadata"]["uid"] not in owners

    made = claims.make(pod, manifest)
    name = made["metadata"]["name"]
    path = claim_path("default", name)
    allocated = _allocate(as_scheduler, admin, path, pod, (0, 1), request)
    assert allocated["metadata"]["finalizers"] == [FINALIZER]
    assert allocated["status"]["reservedFor"] == [_consumer(pod)]

    # Another Pod reserved beside the one it was made for (the admin's write): no drop, no delete.
    admin.merge_patch(f"{path}/status", {"status": {"reservedFor": [_consumer(pod), _consumer(other)]}})
    shared = admin.get(path)
    dropped = _refused(lambda: claims.drop(shared, "a test"))
    assert dropped.status == 403 and HELD_BY_ANOTHER in dropped.message, dropped
    assert f"is reserved for pods/{other['metadata']['name']}" in dropped.message
    deleted = _refused(lambda: as_scheduler.delete(path))
    assert deleted.status == 403 and HELD_BY_ANOTHER in deleted.message, deleted
    assert _kept(admin.get(path)) == _kept(shared)

    # Its own Pod's alone again: dropped as the scheduler drops a stale claim.
    admin.merge_patch(f"{path}/status", {"status": {"reservedFor": [_consumer(pod)]}})
    claims.drop(admin.get(path), "a test")
    assert _refused(lambda: admin.get(path)).not_found
