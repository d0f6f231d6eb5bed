"""Slurm shares whole GPUs out as `gres/shard` on the lab's shard node (issue 54, step 1): what Slurm
itself does with shards, on each release (marked `next_leg`: CI's second leg runs it on 26.05), before
Tandem maps a Pod's fraction of a GPU to them. Every job here is a plain `sbatch`."""

from __future__ import annotations

from typing import Any

import pytest

from devstack import config
from devstack.config import StackConfig
from tandem.dra.gres import Gres, parse_gres
from tests.integration import helpers as h

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.next_leg,
    pytest.mark.usefixtures("clean"),
]

NODE = config.slurm_node_name(config.SHARD_NODE)
PER_GPU = config.SHARDS_PER_GPU
TYPE = config.GPU_GRES_TYPE


def _job(cfg: StackConfig, gres: str) -> int:
    return h.sbatch(cfg, f"--nodelist={NODE}", "--mem=1G", f"--gres={gres}")


def _state(cfg: StackConfig, job_id: int) -> tuple[str, str]:
    job = h.rest_job(cfg, job_id)
    return str(job["job_state"]), str(job.get("state_reason") or "")


def _held(cfg: StackConfig, job_id: int) -> Gres:
    """The one GRES the running job holds on the node, as slurmrestd's gres_detail prints it."""
    detail: Any = h.rest_job(cfg, job_id).get("gres_detail")
    (gres,) = parse_gres(detail if isinstance(detail, str) else detail[0])
    return gres


def _running(cfg: StackConfig, job_id: int) -> bool:
    return _state(cfg, job_id)[0] == "RUNNING"


def _on(gres: Gres) -> dict[int, int]:
    """GPU index -> shards the job holds there."""
    return {s.index: s.used for s in gres.shares if s.used > 0}


def test_the_node_counts_its_shards_typed_after_its_gpus(stack_cfg: StackConfig) -> None:
    shown = h.scontrol(stack_cfg, "show", "node", NODE)
    assert f"Gres=gpu:{TYPE}:{config.GPUS_PER_NODE},shard:{TYPE}:{PER_GPU * config.GPUS_PER_NODE}" in shown


def test_shard_jobs_share_one_gpu_and_never_overcommit_it(stack_cfg: StackConfig) -> None:
    first = _job(stack_cfg, "shard:3")
    h.wait_until("the first shard job running", lambda: _running(stack_cfg, first), 30)
    held = _held(stack_cfg, first)
    assert (held.name, held.type, held.count) == ("shard", TYPE, 3)
    assert [(s.used, s.total) for s in held.shares][:2] == [(3, PER_GPU), (0, PER_GPU)]  # on GPU 0
    # Packed onto the GPU already shared while it has room; the next GPU once it has none.
    second = _job(stack_cfg, f"shard:{PER_GPU - 3}")
    h.wait_until("the second shard job running", lambda: _running(stack_cfg, second), 30)
    assert _on(_held(stack_cfg, second)) == {0: PER_GPU - 3}
    third = _job(stack_cfg, "shard:1")
    h.wait_until("the third shard job running", lambda: _running(stack_cfg, third), 30)
    assert _on(_held(stack_cfg, third)) == {1: 1}


def test_a_whole_gpu_job_never_takes_a_gpu_whose_shards_are_in_use_nor_the_reverse(
    stack_cfg: StackConfig,
) -> None:
    shard = _job(stack_cfg, "shard:1")
    h.wait_until("the shard job running", lambda: _running(stack_cfg, shard), 30)
    every = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE}")
    h.wait_until("every GPU pending", lambda: _state(stack_cfg, every) == ("PENDING", "Resources"), 30)
    h.scancel(stack_cfg, every)
    rest = _job(stack_cfg, f"gpu:{TYPE}:{config.GPUS_PER_NODE - 1}")
    h.wait_until("the other GPUs running", lambda: _running(stack_cfg, rest), 30)
    assert _held(stack_cfg, rest).indices == tuple(range(1, config.GPUS_PER_NODE))  # not GPU 0
    # Every GPU but the shared one whole-allocated: a shard job fits only where shards already are.
    h.scancel(stack_cfg, shard)
    h.wait_until("GPU 0 free", lambda: not _running(stack_cfg, shard), 30)
    more = _job(stack_cfg, "shard:2")
    h.wait_until("the new shard job running", lambda: _running(stack_cfg, more), 30)
    assert _on(_held(stack_cfg, more)) == {0: 2}
    none_left = _job(stack_cfg, f"shard:{PER_GPU - 1}")  # GPU 0 has PER_GPU - 2 left; the rest whole
    h.wait_until("pending for room", lambda: _state(stack_cfg, none_left) == ("PENDING", "Resources"), 30)


def test_more_shards_than_one_gpu_holds_pend_and_are_not_refused(stack_cfg: StackConfig) -> None:
    """One job's shards come from one GPU (Slurm's default; SelectTypeParameters=
    MULTIPLE_SHARING_GRES_PJ would spread them): more than a GPU holds waits for ever."""
    big = _job(stack_cfg, f"shard:{PER_GPU + 1}")
    h.wait_until("pending for room", lambda: _state(stack_cfg, big) == ("PENDING", "Resources"), 30)
