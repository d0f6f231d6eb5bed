"""Which GPUs a job holds travels from slurmrestd to the scheduler (issue 23): a claim is given the
devices of exactly these indices, so they are read from Slurm, never guessed from a push."""

from __future__ import annotations

from unittest import mock

from tandem import placeholder
from tandem.slurm import hetjob
from tandem.slurm.dialects import Dialect
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.wire import job_from_proto, job_to_proto
from tandem.syncer.mirror import SlurmMirror
from tests.unit.syncer_world import whole_listing_slurm

NAME = placeholder.job_name(placeholder.PodRef("ns", "infer-0", "uid-1"), "tandem")


def test_slurmrestd_s_gres_detail_is_read_per_node() -> None:
    # As Slurm 24.11's slurmrestd answered in the lab for `tres_per_node: gres/gpu:h100:3`.
    raw = {
        "job_id": 7,
        "name": NAME,
        "job_state": ["RUNNING"],
        "nodes": "gpu-000",
        "tres_per_node": "gres/gpu:h100:3",
        "gres_detail": ["gpu:h100:3(IDX:0-2)"],
    }
    job = Dialect("v0.0.41").parse_job(raw)
    assert job.asks_gres and job.tres_per_node == "gres/gpu:h100:3"
    assert job.gres_detail == ("gpu:h100:3(IDX:0-2)",)


def test_a_gres_detail_of_the_wrong_kind_reads_as_none() -> None:
    for wrong in ("gpu:h100:3(IDX:0-2)", 3, None, [1, None]):
        raw = {"job_id": 7, "name": "x", "job_state": ["RUNNING"], "gres_detail": wrong}
        assert Dialect("v0.0.41").parse_job(raw).gres_detail == ()


def test_the_allocation_crosses_the_wire() -> None:
    status = JobStatus(
        Job(
            7,
            NAME,
            "RUNNING",
            nodes=("gpu-000",),
            tres_per_node="gres/gpu:2",
            gres_detail=("gpu:h100:2(IDX:4-5)",),
        )
    )
    assert job_from_proto(job_to_proto(status)) == status


def test_a_het_job_s_gres_stay_aligned_with_its_nodes() -> None:
    """A leader without GPUs and workers with: the merged list has one entry per node."""
    common = {"admin_comment": NAME, "het_job_id": 12, "het_job_ids": (12, 13), "node_count": 1}
    leader = Job(12, NAME, "RUNNING", nodes=("cpu-001",), het_job_offset=0, **common)  # type: ignore[arg-type]
    workers = Job(
        13,
        NAME,
        "RUNNING",
        nodes=("gpu-000", "gpu-002"),
        het_job_offset=1,
        tres_per_node="gres/gpu:1",
        gres_detail=("gpu:h100:1(IDX:3)", "gpu:h100:1(IDX:0)"),
        **common,  # type: ignore[arg-type]
    )
    whole = hetjob.merged([JobStatus(leader), JobStatus(workers)])
    assert whole is not None
    assert whole.job.nodes == ("cpu-001", "gpu-000", "gpu-002")
    assert whole.job.gres_detail == ("", "gpu:h100:1(IDX:3)", "gpu:h100:1(IDX:0)")


def _mirror(polled: Job, fetched: Job) -> tuple[SlurmMirror, mock.Mock]:
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = [polled]
    slurm.list_nodes.return_value = [Node("gpu-000", "ALLOCATED")]
    slurm.get_job_components.return_value = [fetched]
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    return mirror, slurm


def test_a_started_push_for_a_gpu_job_reads_its_indices_from_slurm() -> None:
    """The poll saw the job pending; the script's push says it runs. Which GPUs it holds only
    Slurm knows: the mirror asks before it publishes the job as running."""
    pending = Job(7, NAME, "PENDING", admin_comment=NAME, tres_per_node="gres/gpu:2")
    running = Job(
        7,
        NAME,
        "RUNNING",
        nodes=("gpu-000",),
        admin_comment=NAME,
        tres_per_node="gres/gpu:2",
        gres_detail=("gpu:h100:2(IDX:4-5)",),
    )
    mirror, slurm = _mirror(pending, running)
    status = mirror.job_started(7, "gpu-000")
    slurm.get_job_components.assert_called_once_with(7)
    assert status.started and status.job.gres_detail == ("gpu:h100:2(IDX:4-5)",)


def test_a_started_push_for_a_job_without_gres_asks_slurm_nothing() -> None:
    pending = Job(7, NAME, "PENDING", admin_comment=NAME)
    mirror, slurm = _mirror(pending, pending)
    status = mirror.job_started(7, "cpu-001")
    slurm.get_job_components.assert_not_called()
    assert status.started and status.job.nodes == ("cpu-001",)
