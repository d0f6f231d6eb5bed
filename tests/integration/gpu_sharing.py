"""What the tests of a GPU shared by parts (issue 54: `gres/shard`, `gres/mps`) read on the lab:
a Slurm job's share of the node's GPUs, and a Pod whose ResourceClaim asks for part of one GPU
(KEP-5075 consumable capacity) with what its claim was given."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client as k8s

from devstack import config, resourceslices
from devstack.config import StackConfig
from tandem.dra.gres import Gres, parse_gres
from tandem.kube import KubeClient, KubeError
from tests.integration import helpers as h

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
TYPE = config.GPU_GRES_TYPE


def sbatch_on(cfg: StackConfig, node: str, gres: str) -> int:
    return h.sbatch(cfg, f"--nodelist={node}", "--mem=1G", f"--gres={gres}")


def state(cfg: StackConfig, job_id: int) -> tuple[str, str]:
    job = h.rest_job(cfg, job_id)
    return str(job["job_state"]), str(job.get("state_reason") or "")


def running(cfg: StackConfig, job_id: int) -> bool:
    return state(cfg, job_id)[0] == "RUNNING"


def held(cfg: StackConfig, job_id: int) -> Gres:
    """The one shared GRES the running job holds on the node, as slurmrestd's gres_detail prints it."""
    detail: Any = h.rest_job(cfg, job_id).get("gres_detail")
    (gres,) = parse_gres(detail if isinstance(detail, str) else detail[0])
    return gres


def on(gres: Gres) -> dict[int, int]:
    """GPU index -> the part of it the job holds (shards, or MPS)."""
    return {s.index: s.used for s in gres.shares if s.used > 0}


def claims_client(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    """A client for the claims (a test module's fixture); the test's claims are deleted after it."""
    client = KubeClient.from_kubeconfig(str(stack_cfg.kubeconfig))
    yield client
    for item in client.get(CLAIMS).get("items") or []:
        try:
            client.delete(f"{CLAIMS}/{item['metadata']['name']}")
        except KubeError as e:
            if not e.not_found:
                raise
    client.close()


def claiming_pod(
    cfg: StackConfig,
    core: k8s.CoreV1Api,
    api: KubeClient,
    name: str,
    node: str,
    capacity: str = "",
    amount: int = 0,
    gpus: int = 0,
) -> None:
    """A Pod on `node` whose one claim asks `amount` of a GPU's `capacity` (or `gpus` whole GPUs)."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com", "count": gpus or 1}
    if amount:
        exactly["capacity"] = {"requests": {capacity: str(amount)}}
    request = {"name": "gpus", "exactly": exactly}
    api.post(CLAIMS, {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}})
    pod = h.tandem_pod(cfg, name, {h.PREFIX + "required-nodes": node})
    pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": name}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    h.create(core, pod)


def bound(core: k8s.CoreV1Api, name: str) -> bool:
    pod = h.get_pod(core, name)
    return pod is not None and bool(pod.spec.node_name)


def allocation(api: KubeClient, claim: str) -> dict[str, Any]:
    """The claim's status.allocation.devices as the API server keeps it ({} while unallocated)."""
    status = api.get(f"{CLAIMS}/{claim}").get("status") or {}
    devices: dict[str, Any] = (status.get("allocation") or {}).get("devices") or {}
    return devices


def given(api: KubeClient, claim: str, capacity: str) -> list[tuple[int, str]]:
    """(GPU index, `capacity` consumed) of each device the claim was given, by the Node's slice."""
    given = []
    for r in allocation(api, claim).get("results") or []:
        devices = api.get(f"/apis/resource.k8s.io/v1/resourceslices/{r['pool']}-{resourceslices.DRIVER}")
        (index,) = [
            d["attributes"]["index"]["int"] for d in devices["spec"]["devices"] if d["name"] == r["device"]
        ]
        given.append((index, str((r.get("consumedCapacity") or {}).get(capacity, ""))))
    return given


def job_of(core: k8s.CoreV1Api, name: str) -> int:
    return h.wait_until(f"{name}'s job", lambda: h.job_id_of(core, name), 30)


def one_refusal(cfg: StackConfig, core: k8s.CoreV1Api, name: str, reason: str = "FailedValidation") -> str:
    """The message of the one `reason` Event a refused Pod gets; it got no job."""
    h.wait_until(
        f"a {reason} Event",
        lambda: any(e.reason == reason for e in h.events_for(core, name)),
        30,
    )
    (event,) = [e for e in h.events_for(core, name) if e.reason == reason]
    assert (event.count or 1) == 1, event
    assert h.job_id_of(core, name) is None and not h.squeue_ids(cfg)
    return str(event.message)
