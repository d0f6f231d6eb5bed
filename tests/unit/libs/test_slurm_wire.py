"""Jobs and nodes on the syncer's stream (tandem.slurm.wire): what the syncer writes is what the
scheduler reads back."""

from __future__ import annotations

import pytest

from tandem.slurm import wire
from tandem.slurm.models import Job, JobStatus, Node
from tandem.v1 import slurm_pb2

# Every field the stream carries set (Extra and flags stay in the syncer: the started marker
# travels as script_started).
JOB = Job(
    job_id=12,
    name="tandem:tandem-test/default/pg:train/pg-uid",
    state="PENDING",
    state_reason="Resources",
    nodes=(),
    partition="batch",
    comment="a Kubernetes job",
    admin_comment="tandem:tandem-test/default/pg:train/pg-uid",
    user_id=1001,
    group_id=1002,
    excluded_nodes=("cpu-003", "cpu-004"),
    priority=4242,
    expected_start=1795430530,
    node_count=3,
    features="(cpu)&[l1-a-abcde|l1-b-fghij]",
)


@pytest.mark.parametrize(
    "status",
    [
        JobStatus(JOB, queue_position=2, queue_length=5),
        JobStatus(
            Job(job_id=12, name=JOB.name, state="RUNNING", nodes=("cpu-001", "cpu-002"), node_count=2),
            started=True,
            terminating=True,
        ),
        JobStatus(Job(job_id=13, name="probe", state="RUNNING")),  # node_count not known: 0
    ],
    ids=["pending", "running", "pushed, never polled"],
)
def test_a_job_comes_back_as_it_was_sent(status: JobStatus) -> None:
    msg = wire.job_to_proto(status)
    again = slurm_pb2.SlurmJob.FromString(msg.SerializeToString())
    assert wire.job_from_proto(again) == status


def test_the_node_count_travels_with_the_job() -> None:
    """The scheduler compares a group's minCount with the nodes its job asks for (issue 21)."""
    assert wire.job_to_proto(JobStatus(JOB)).node_count == 3
    assert wire.job_from_proto(slurm_pb2.SlurmJob(job_id=12, node_count=5)).job.node_count == 5
    assert wire.job_from_proto(slurm_pb2.SlurmJob(job_id=12)).job.node_count == 0


def test_a_gone_job_keeps_what_was_known_of_it() -> None:
    status = JobStatus(JOB, gone=True)
    back = wire.job_from_proto(wire.job_to_proto(status))
    assert back.gone and back.ended and back.job.node_count == 3 and back.state_name == "GONE"


def test_a_node_comes_back_with_its_kube_node() -> None:
    node = Node(name="cpu-001", state="IDLE", flags=("DRAIN",), reason="k8s: cordoned")
    assert wire.node_from_proto(wire.node_to_proto(node, "node-001")) == (node, "node-001")
