"""Fractions of a GPU across both schedulers (issue 54) on the lab's shard node, on each release
(marked `next_leg`: CI's second leg runs it on 26.05). First what Slurm itself does with
`gres/shard` (plain `sbatch` jobs); then a Pod's ResourceClaim for shares of a GPU (KEP-5075
consumable capacity) becoming a shard job, its claim naming the GPU Slurm chose."""

from __future__ import annotations

from collections.abc import Iterator

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

NODE = config.slurm_node_name(config.SHARD_NODE)
PER_GPU = config.SHARDS_PER_GPU


@pytest.fixture
def api(stack_cfg: StackConfig) -> Iterator[KubeClient]:
    yield from gs.claims_client(stack_cfg)


def _job(cfg: StackConfig, gres: str) -> int:
    return gs.sbatch_on(cfg, NODE, gres)


def claiming_pod(
    cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient, name: str, shares: int = 0, gpus: int = 0
) -> None:
    gs.claiming_pod(cfg, core, api, name, NODE, "shares", shares, gpus)


def given(api: KubeClient, claim: str) -> list[tuple[int, str]]:
    return gs.given(api, claim, "shares")


@pytest.mark.parallel
def test_the_node_counts_its_shards_typed_after_its_gpus(stack_cfg: StackConfig) -> None:
    shown = h.scontrol(stack_cfg, "show", "node", NODE)
    assert f"Gres=gpu:{TYPE}:{config.GPUS_PER_NODE},shard:{TYPE}:{PER_GPU * config.GPUS_PER_NODE}" in shown


def test_shard_jobs_share_one_gpu_and_never_overcommit_it(stack_cfg: StackConfig) -> None:
    first = _job(stack_cfg, "shard:3")
    h.wait_until("the first shard job running", lambda: running(stack_cfg, first), 30)
    gres = held(stack_cfg, first)
    assert (gres.name, gres.type, gres.count) == ("shard", TYPE, 3)
    assert [(s.used, s.total) for s in gres.shares][:2] == [(3, PER_GPU), (0, PER_GPU)]  # on GPU 0
    # Packed onto the GPU already shared while it has room; the next GPU once it has none.
    second = _job(stack_cfg, f"shard:{PER_GPU - 3}")
    h.wait_until("the second shard job running", lambda: running(stack_cfg, second), 30)
    assert on(held(stack_cfg, second)) == {0: PER_GPU - 3}
    third = _job(stack_cfg, "shard:1")
    h.wait_until("the third shard job running", lambda: running(stack_cfg, third), 30)
    assert on(held(stack_cfg, third)) == {1: 1}


def test_a_whole_gpu_job_never_takes_a_gpu_whose_shards_are_in_use_nor_the_reverse(
    stack_cfg: StackConfig,
) -> None:
    shard = _job(stack_cfg, "shard:1")
    h.wait_until("the shard job running", lambda: running(stack_cfg, shard), 30)
    every = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE}")
    h.wait_until("every GPU pending", lambda: state(stack_cfg, every) == ("PENDING", "Resources"), 30)
    h.scancel(stack_cfg, every)
    rest = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE - 1}")
    h.wait_until("the other GPUs running", lambda: running(stack_cfg, rest), 30)
    assert held(stack_cfg, rest).indices == tuple(range(1, config.GPUS_PER_NODE))  # not GPU 0
    # Every GPU but the shared one whole-allocated: a shard job fits only where shards already are.
    h.scancel(stack_cfg, shard)
    h.wait_until("GPU 0 free", lambda: not running(stack_cfg, shard), 30)
    more = _job(stack_cfg, "shard:2")
    h.wait_until("the new shard job running", lambda: running(stack_cfg, more), 30)
    assert on(held(stack_cfg, more)) == {0: 2}
    none_left = _job(stack_cfg, f"shard:{PER_GPU - 1}")  # GPU 0 has PER_GPU - 2 left; the rest whole
    h.wait_until("pending for room", lambda: state(stack_cfg, none_left) == ("PENDING", "Resources"), 30)


def test_more_shards_than_one_gpu_holds_pend_and_are_not_refused(stack_cfg: StackConfig) -> None:
    """One job's shards come from one GPU (Slurm's default; SelectTypeParameters=
    MULTIPLE_SHARING_GRES_PJ would spread them): more than a GPU holds waits for ever."""
    big = _job(stack_cfg, f"shard:{PER_GPU + 1}")
    h.wait_until("pending for room", lambda: state(stack_cfg, big) == ("PENDING", "Resources"), 30)


def test_pods_and_a_shard_job_share_one_gpu_and_the_next_pod_waits_for_room(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    """Two Pods of a quarter of a GPU and an `sbatch --gres=shard` of half fill GPU 0 (the other
    seven held whole by a training job); a Pod of half waits until the shard job ends, then gets
    the GPU's room. Each claim names the GPU Slurm chose, with the shares Slurm counted."""
    quarter, half = PER_GPU // 4, PER_GPU // 2
    first = h.unique("quarter")
    claiming_pod(stack_cfg, core, api, first, shares=quarter)
    h.wait_until(f"{first} bound", lambda: bound(core, first), 60)
    assert on(held(stack_cfg, job_of(core, first))) == {0: quarter}
    training = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE - 1}")
    h.wait_until("the training job running", lambda: running(stack_cfg, training), 30)
    second = h.unique("quarter")
    claiming_pod(stack_cfg, core, api, second, shares=quarter)
    h.wait_until(f"{second} bound", lambda: bound(core, second), 60)
    shard_job = _job(stack_cfg, f"shard:{half}")
    h.wait_until("the shard job running", lambda: running(stack_cfg, shard_job), 30)
    for name in (first, second):
        assert given(api, name) == [(0, str(quarter))], name
        assert on(held(stack_cfg, job_of(core, name))) == {0: quarter}
    assert on(held(stack_cfg, shard_job)) == {0: half}
    # GPU 0 is full, the others held whole: the next Pod's job waits for room, and the Pod with it.
    waiting = h.unique("half")
    claiming_pod(stack_cfg, core, api, waiting, shares=half)
    job = job_of(core, waiting)
    h.wait_until("its job pending", lambda: state(stack_cfg, job)[0] == "PENDING", 30)
    assert not bound(core, waiting) and not given(api, waiting)
    h.scancel(stack_cfg, shard_job)
    h.wait_until(f"{waiting} bound", lambda: bound(core, waiting), 60)
    assert given(api, waiting) == [(0, str(half))]


def test_a_whole_gpu_pod_never_takes_a_gpu_whose_shares_are_in_use(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    shared = h.unique("share")
    claiming_pod(stack_cfg, core, api, shared, shares=1)
    h.wait_until(f"{shared} bound", lambda: bound(core, shared), 60)
    whole = h.unique("whole")
    claiming_pod(stack_cfg, core, api, whole, gpus=config.GPUS_PER_NODE - 1)
    h.wait_until(f"{whole} bound", lambda: bound(core, whole), 60)
    # Every GPU but the shared one, each consuming all its shares as Slurm counts it taken.
    assert sorted(given(api, whole)) == [(i, str(PER_GPU)) for i in range(1, config.GPUS_PER_NODE)]
    assert given(api, shared) == [(0, "1")]


def test_more_shares_than_a_gpu_has_are_refused_with_one_event_and_no_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, api: KubeClient
) -> None:
    name = h.unique("too-many")
    claiming_pod(stack_cfg, core, api, name, shares=PER_GPU + 1)
    message = gs.one_refusal(stack_cfg, core, name)
    assert f"asks for {PER_GPU + 1} shares of one GPU; the most any GPU publishes is {PER_GPU}" in message
