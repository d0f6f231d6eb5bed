"""MPS shares of a GPU across both schedulers (issue 54, step 3) on the lab's MPS node, on each
release (marked `next_leg`: CI's second leg runs it on 26.05): a Pod's ResourceClaim for
`capacity.requests.mps: N` of one GPU is a `gres/mps:N` job, its claim naming the GPU Slurm chose
and carrying, as its device configuration, the MPS active thread percentage its container gets.
The lab's GPUs are files, not GPUs: no MPS daemon runs, so what is shown is the accounting and the
limit handed to the driver, not a limit enforced on a kernel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config
from devstack.config import StackConfig
from tandem.kube import KubeClient
from tests.integration import gpu_sharing as gs
from tests.integration import helpers as h
from tests.integration.gpu_sharing import TYPE, bound, held, job_of, on, running, state

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.next_leg,
    pytest.mark.usefixtures("clean"),
]

assert config.MPS_NODE is not None, "the lab shares a GPU node by MPS"
NODE = config.slurm_node_name(config.MPS_NODE)
PER_GPU = config.MPS_PER_GPU


@pytest.fixture
def api(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    yield from gs.claims_client(stack_cfg)


def _job(cfg: StackConfig, gres: str) -> int:
    return gs.sbatch_on(cfg, NODE, gres)


def _pod(
    cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient, name: str, mps: int = 0, gpus: int = 0
) -> None:
    gs.claiming_pod(cfg, core, api, name, NODE, "mps", mps, gpus)


def _percentages(api: KubeClient, claim: str) -> list[tuple[list[str], int]]:
    """(requests, active thread percentage) of each MPS configuration in the claim's allocation,
    in the order the API server keeps them (NVIDIA's kubelet plugin applies the last naming a
    request)."""
    found = []
    for c in gs.allocation(api, claim).get("config") or []:
        params: dict[str, Any] = (c.get("opaque") or {}).get("parameters") or {}
        sharing = params.get("sharing") or {}
        if sharing.get("strategy") == "MPS":
            percentage = sharing["mpsConfig"]["defaultActiveThreadPercentage"]
            found.append((list(c.get("requests") or []), int(percentage)))
    return found


@pytest.mark.parallel
def test_the_node_counts_its_mps_typed_after_its_gpus(stack_cfg: StackConfig) -> None:
    shown = h.scontrol(stack_cfg, "show", "node", NODE)
    assert f"Gres=gpu:{TYPE}:{config.GPUS_PER_NODE},mps:{TYPE}:{PER_GPU * config.GPUS_PER_NODE}" in shown


def test_a_pod_and_an_mps_job_share_one_gpu_and_the_next_pod_waits_for_room(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """A Pod of 30 % of a GPU and an `sbatch --gres=mps:50` share GPU 0 (the other seven held whole
    by a training job); a Pod of 60 % waits until the MPS job ends, then gets the GPU. Each claim
    names the GPU Slurm chose, consumes what Slurm counted, and says its container's percentage."""
    first = h.unique("mps30")
    _pod(stack_cfg, core, api, first, mps=30)
    h.wait_until(f"{first} bound", lambda: bound(core, first), 60)
    gres = held(stack_cfg, job_of(core, first))
    assert (gres.name, on(gres)) == ("mps", {0: 30})
    assert gs.given(api, first, "mps") == [(0, "30")]
    assert _percentages(api, first) == [(["gpus"], 30)]
    training = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE - 1}")
    h.wait_until("the training job running", lambda: running(stack_cfg, training), 30)
    assert held(stack_cfg, training).indices == tuple(range(1, config.GPUS_PER_NODE))  # not GPU 0
    mps_job = _job(stack_cfg, "mps:50")
    h.wait_until("the MPS job running", lambda: running(stack_cfg, mps_job), 30)
    assert on(held(stack_cfg, mps_job)) == {0: 50}
    # GPU 0 has 20 left, the others are held whole: the next Pod's job waits, and the Pod with it.
    waiting = h.unique("mps60")
    _pod(stack_cfg, core, api, waiting, mps=60)
    job = job_of(core, waiting)
    h.wait_until("its job pending", lambda: state(stack_cfg, job)[0] == "PENDING", 30)
    assert not bound(core, waiting) and not gs.given(api, waiting, "mps")
    h.scancel(stack_cfg, mps_job)
    h.wait_until(f"{waiting} bound", lambda: bound(core, waiting), 60)
    assert gs.given(api, waiting, "mps") == [(0, "60")]
    assert _percentages(api, waiting) == [(["gpus"], 60)]
    assert on(held(stack_cfg, job)) == {0: 60}


def test_a_whole_gpu_pod_never_takes_the_gpu_whose_mps_is_in_use(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    shared = h.unique("mps10")
    _pod(stack_cfg, core, api, shared, mps=10)
    h.wait_until(f"{shared} bound", lambda: bound(core, shared), 60)
    whole = h.unique("whole")
    _pod(stack_cfg, core, api, whole, gpus=config.GPUS_PER_NODE - 1)
    h.wait_until(f"{whole} bound", lambda: bound(core, whole), 60)
    # Every GPU but the shared one, each consuming all its MPS, and no MPS limit on whole GPUs.
    assert sorted(gs.given(api, whole, "mps")) == [(i, str(PER_GPU)) for i in range(1, config.GPUS_PER_NODE)]
    assert _percentages(api, whole) == []
    assert gs.given(api, shared, "mps") == [(0, "10")]


def test_more_mps_than_a_gpu_has_is_refused_with_one_event_and_no_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    name = h.unique("mps101")
    _pod(stack_cfg, core, api, name, mps=PER_GPU + 1)
    message = gs.one_refusal(stack_cfg, core, name)
    assert f"asks for {PER_GPU + 1} mps of one GPU; the most any GPU publishes is {PER_GPU}" in message


def test_shares_asked_of_the_mps_node_are_refused_by_slurm_once_and_leave_no_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """A Pod pinned to the MPS node asking the shard node's kind of share: other GPUs publish
    shares, so the claim is valid, and Slurm refuses the job (no shard on that node): one Event
    saying so, and no job."""
    name = h.unique("shares-here")
    gs.claiming_pod(stack_cfg, core, api, name, NODE, "shares", 4)
    message = gs.one_refusal(stack_cfg, core, name, reason="FailedScheduling")
    assert "Slurm refused the placeholder job" in message
    assert "Requested node configuration is not available" in message, message
