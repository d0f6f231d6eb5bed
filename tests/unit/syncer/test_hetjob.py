"""A heterogeneous job is one job to Tandem: the mirror keeps Slurm's components (each prolog locks
for its own id) and reads and publishes them as one, which the scheduler binds from."""

from __future__ import annotations

from unittest import mock

from tandem import placeholder
from tandem.slurm import hetjob
from tandem.slurm.models import HetComponent, Job, JobStatus, Node
from tandem.slurm.wire import job_from_proto, job_to_proto
from tandem.syncer.mirror import SlurmMirror
from tests.unit.syncer_world import take_now, whole_listing_slurm

NAME = placeholder.job_name(placeholder.PodRef("ns", "cpg:serve", "uid-1"), "tandem")


def _component(job_id: int, offset: int, nodes: tuple[str, ...], state: str = "RUNNING", **kw: object) -> Job:
    return Job(
        job_id,
        NAME,
        state,
        nodes=nodes,
        node_count=len(nodes) or 1,
        admin_comment=NAME,
        het_job_id=12,
        het_job_offset=offset,
        het_job_ids=(12, 13),
        **kw,  # type: ignore[arg-type]
    )


LEADER = _component(12, 0, ("cpu-001",), extra=": started")
WORKERS = _component(13, 1, ("cpu-003", "cpu-005"), extra=": started")


def test_the_components_merge_into_the_het_job_in_offset_order() -> None:
    whole = hetjob.merged([JobStatus(WORKERS), JobStatus(LEADER, started=True)])
    assert whole is not None
    assert whole.job_id == 12 and whole.started
    assert whole.job.nodes == ("cpu-001", "cpu-003", "cpu-005") and whole.job.node_count == 3
    assert whole.job.components == (
        HetComponent(12, 1, ("cpu-001",)),
        HetComponent(13, 2, ("cpu-003", "cpu-005")),
    )


def test_without_every_component_there_is_no_het_job_yet() -> None:
    # The first component alone would pass for a job of one node.
    assert hetjob.merged([JobStatus(WORKERS)]) is None
    assert hetjob.merged([JobStatus(LEADER)]) is None


def test_a_scheduler_is_not_sent_part_of_a_het_job() -> None:
    mirror = _mirror(LEADER)
    snapshot, _ = mirror.broker.subscribe("tandem")
    assert not [c for c in snapshot if isinstance(c, JobStatus)]


def test_the_whole_job_crosses_the_wire_with_its_components() -> None:
    whole = hetjob.merged([JobStatus(LEADER), JobStatus(WORKERS)])
    assert whole is not None
    back = job_from_proto(job_to_proto(whole))
    assert back.job.components == whole.job.components and back.job.nodes == whole.job.nodes


def _mirror(*jobs: Job) -> SlurmMirror:
    slurm = whole_listing_slurm()
    slurm.list_jobs.return_value = list(jobs)
    slurm.list_nodes.return_value = [Node("cpu-001", "ALLOCATED")]
    slurm.get_job_components.return_value = list(jobs)
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    return mirror


def test_the_mirror_reads_a_het_job_by_its_id_whole_and_a_component_by_its_own() -> None:
    mirror = _mirror(LEADER, WORKERS)
    whole = mirror.state.job(12)
    assert whole is not None and whole.job.nodes == ("cpu-001", "cpu-003", "cpu-005")
    component = mirror.state.job(13)
    assert component is not None and component.job.nodes == ("cpu-003", "cpu-005")
    # What a prolog on cpu-003 locks for: the component running there.
    assert [s.job_id for s in mirror.state.jobs_on("cpu-003")] == [13]


def test_a_scheduler_is_sent_the_het_job_once_whole_never_its_components() -> None:
    mirror = _mirror(LEADER, WORKERS)
    slurm: mock.Mock = mirror.slurm  # type: ignore[assignment]
    snapshot, sub = mirror.broker.subscribe("tandem")
    jobs = [c for c in snapshot if isinstance(c, JobStatus)]
    assert [(j.job_id, len(j.job.components)) for j in jobs] == [(12, 2)]
    # The second component ends: the change goes out as the whole job.
    slurm.list_jobs.return_value = [LEADER, _component(13, 1, ("cpu-003", "cpu-005"), "COMPLETING")]
    mirror.poll_once()
    batch = take_now(sub)
    assert batch is not None
    assert [(c.job_id, len(c.job.components)) for c, _ in batch if isinstance(c, JobStatus)] == [(12, 2)]


def test_the_started_push_for_a_het_job_answers_with_every_node() -> None:
    mirror = _mirror(_component(12, 0, ("cpu-001",)), _component(13, 1, ("cpu-003", "cpu-005")))
    status = mirror.job_started(12, "cpu-001")
    assert status.started and status.job.nodes == ("cpu-001", "cpu-003", "cpu-005")
