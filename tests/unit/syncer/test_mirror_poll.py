"""The syncer's poll between two reads of every job: it lists every job's state (GET /jobs/state)
and reads only the jobs that listing shows changed, new, pending or not started yet. With 10,000
running jobs and one changed, slurmctld's update_time filter answered with all 10,000, thousands of
bytes each, every poll (issue 22)."""

from __future__ import annotations

from dataclasses import replace

from tandem import placeholder
from tandem.slurm.models import Job, JobStatus, Node
from tandem.slurm.rest import SlurmApiError
from tandem.syncer.broker import Subscription
from tandem.syncer.mirror import LIGHT_POLLS, SlurmMirror
from tests.unit.syncer_world import take_now

SCHEDULER = "tandem"


class FakeSlurm:
    """Slurm's jobs as slurmrestd serves them, counting what the mirror asked."""

    def __init__(self, jobs: list[Job]) -> None:
        self.jobs = {j.job_id: j for j in jobs}
        self.whole_reads = 0
        self.read_one: list[int] = []
        self.listing_served = True

    def list_jobs(self, changed_since: int | None = None) -> list[Job] | None:
        self.whole_reads += 1
        return list(self.jobs.values())

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None:
        return None

    def get_job_components(self, job_id: int) -> list[Job]:
        self.read_one.append(job_id)
        return [self.jobs[job_id]] if job_id in self.jobs else []

    def all_job_states(self) -> dict[int, tuple[str, tuple[str, ...]]]:
        if not self.listing_served:
            raise SlurmApiError("GET jobs/state: HTTP 404", 404)
        return {j.job_id: (j.state, j.flags) for j in self.jobs.values()}


def _placeholder(job_id: int, state: str = "RUNNING", started: bool = True) -> Job:
    name = placeholder.job_name(placeholder.PodRef("apps", f"pod-{job_id}", f"uid-{job_id}"), SCHEDULER)
    return Job(
        job_id,
        name,
        state,
        nodes=("cpu-001",) if state != "PENDING" else (),
        partition="gpu",
        admin_comment=name,
        extra=": started" if started else "",
    )


def _running(count: int) -> list[Job]:
    return [_placeholder(j) for j in range(1, count + 1)]


def _settled(slurm: FakeSlurm) -> tuple[SlurmMirror, Subscription]:
    """A mirror past its first two whole reads (the second compares with the first listing)."""
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()
    mirror.poll_once()
    slurm.whole_reads, slurm.read_one = 0, []
    _, sub = mirror.broker.subscribe(SCHEDULER)
    return mirror, sub


def _sent(sub: Subscription) -> list[JobStatus]:
    out: list[JobStatus] = []
    while not sub.queue.empty():
        batch = take_now(sub)
        assert batch is not None
        out.extend(change for change, _ in batch if isinstance(change, JobStatus))
    return out


def test_a_poll_where_nothing_changed_reads_no_job() -> None:
    slurm = FakeSlurm(_running(200))
    mirror, sub = _settled(slurm)
    mirror.poll_once()
    assert (slurm.whole_reads, slurm.read_one) == (0, [])
    assert _sent(sub) == []


def test_a_job_listed_in_another_state_is_read_alone_and_sent() -> None:
    slurm = FakeSlurm(_running(200))
    mirror, sub = _settled(slurm)
    slurm.jobs[7] = replace(slurm.jobs[7], state="COMPLETING")
    mirror.poll_once()
    assert (slurm.whole_reads, slurm.read_one) == (0, [7])
    assert [(s.job_id, s.job.state) for s in _sent(sub)] == [(7, "COMPLETING")]
    mirror.poll_once()
    assert slurm.read_one == [7]  # read once: the listing now matches


def test_a_job_slurm_no_longer_lists_is_sent_gone_then_forgotten() -> None:
    slurm = FakeSlurm(_running(50))
    mirror, sub = _settled(slurm)
    del slurm.jobs[3]
    mirror.poll_once()
    assert [(s.job_id, s.gone) for s in _sent(sub)] == [(3, True)]
    mirror.poll_once()
    assert mirror.state.job(3) is None


def test_pending_jobs_and_placeholders_not_started_are_read_each_poll() -> None:
    """Their reason, place in the queue and start marker change without their state changing."""
    jobs = [*_running(100), _placeholder(101, "PENDING", started=False), _placeholder(102, started=False)]
    slurm = FakeSlurm(jobs)
    mirror, sub = _settled(slurm)
    slurm.jobs[101] = replace(slurm.jobs[101], state_reason="Resources")
    slurm.jobs[102] = replace(slurm.jobs[102], extra=": started")  # the script's marker; no push came
    mirror.poll_once()
    assert (slurm.whole_reads, sorted(slurm.read_one)) == (0, [101, 102])
    assert {(s.job_id, s.job.state_reason, s.started) for s in _sent(sub)} == {
        (101, "Resources", False),
        (102, "", True),
    }
    mirror.poll_once()
    assert sorted(slurm.read_one) == [101, 101, 102]  # the started one is left alone from now on


def test_a_job_known_only_from_its_submit_is_read() -> None:
    slurm = FakeSlurm(_running(40))
    mirror, _ = _settled(slurm)
    job = _placeholder(41, "RUNNING", started=False)
    mirror.job_submitted(41, job.name)
    slurm.jobs[41] = job
    mirror.poll_once()
    assert slurm.read_one == [41]
    status = mirror.state.job(41)
    assert status is not None and status.job.nodes == ("cpu-001",)


def test_many_changed_jobs_are_read_in_one_listing_of_every_job() -> None:
    slurm = FakeSlurm(_running(200))
    mirror, sub = _settled(slurm)
    for job_id in range(1, 60):
        slurm.jobs[job_id] = replace(slurm.jobs[job_id], state="COMPLETING")
    mirror.poll_once()
    assert (slurm.whole_reads, slurm.read_one) == (1, [])
    assert len(_sent(sub)) == 59


def test_every_job_is_read_again_every_few_polls() -> None:
    """What the listing cannot show (a running job's reason, a changed comment) is read then."""
    slurm = FakeSlurm(_running(20))
    mirror, _ = _settled(slurm)
    for _ in range(LIGHT_POLLS + 1):
        mirror.poll_once()
    assert slurm.whole_reads == 1


def test_a_slurmrestd_without_the_listing_gets_whole_reads() -> None:
    slurm = FakeSlurm(_running(20))
    slurm.listing_served = False
    mirror = SlurmMirror(slurm, poll_interval=60)
    for _ in range(3):
        mirror.poll_once()
    assert slurm.whole_reads == 3


def test_a_job_ending_wakes_its_node_even_when_the_node_s_state_says_nothing() -> None:
    """Before: only a Slurm node's own state changing woke the node sync, so a node the poll had
    already seen idle, whose job's end the next poll read, kept its lock until the periodic resync
    (every 5 s, which at 1,000 nodes was 200 node passes a second). Now a job that comes to hold
    nodes, or stops holding them, wakes each of them."""
    slurm = FakeSlurm([_placeholder(1), _placeholder(2, state="PENDING")])
    mirror, _ = _settled(slurm)
    woken: list[str] = []
    mirror.state.on_node_changed(woken.append)
    slurm.jobs[1] = replace(slurm.jobs[1], state="COMPLETED")
    slurm.jobs[2] = replace(_placeholder(2), nodes=("cpu-002",))
    mirror.poll_once()
    assert sorted(woken) == ["cpu-001", "cpu-002"]
    woken.clear()
    mirror.poll_once()  # nothing changed
    assert woken == []


def test_a_job_first_seen_already_over_wakes_its_node() -> None:
    """A short job can start and end between two polls, so the mirror's first sight of it (or
    the first after pending) is its end. Its prolog's hold waited on that end: before, only a job
    seen holding its node woke it, and the node kept the lock until the resync (CI: 36 s, a lost
    epilog's test)."""
    slurm = FakeSlurm([_placeholder(1)])
    mirror, _ = _settled(slurm)
    woken: list[str] = []
    mirror.state.on_node_changed(woken.append)
    slurm.jobs[3] = replace(_placeholder(3, state="COMPLETED"), nodes=("cpu-003",))
    mirror.poll_once()
    assert woken == ["cpu-003"]
    woken.clear()
    slurm.jobs[4] = _placeholder(4, state="PENDING")  # new, on no node yet: nothing to wake
    mirror.poll_once()
    assert woken == []
    slurm.jobs[4] = replace(_placeholder(4, state="COMPLETED"), nodes=("cpu-004",))  # never seen running
    mirror.poll_once()
    assert woken == ["cpu-004"]


class NodesSlurm(FakeSlurm):
    """24.11's slurmrestd: a node listing filtered by update_time fails with HTTP 500 ("Unable to
    query partitions") whenever nodes changed and partitions did not (fixed in 26.05.3); the
    unfiltered listing answers."""

    def __init__(self, nodes: list[Node]) -> None:
        super().__init__([])
        self.nodes = nodes
        self.asked: list[int | None] = []
        self.partitions_changed = True

    def list_nodes(self, changed_since: int | None = None) -> list[Node] | None:
        self.asked.append(changed_since)
        if changed_since is not None and not self.partitions_changed:
            raise SlurmApiError("GET nodes: HTTP 500: Unable to query partitions", 500)
        return list(self.nodes)


def test_a_node_change_24_11_answers_500_to_a_filtered_listing_is_read_unfiltered() -> None:
    # A restart of slurmctld dropped the features the syncer gave a node; the partitions did not
    # change after. Before: every filtered listing failed, and the mirror kept the node as it was
    # until a partition changed (a gang asking its rack pended BadConstraints for minutes).
    racked = Node(name="cpu-001", state="IDLE", features=("cpu", "l1-rack-0"))
    slurm = NodesSlurm([racked])
    mirror = SlurmMirror(slurm, poll_interval=60)
    changed: list[str] = []
    mirror.state.on_node_changed(changed.append)
    mirror.poll_once()
    assert mirror.state.node("cpu-001") == racked
    slurm.nodes = [replace(racked, features=("cpu",))]
    slurm.partitions_changed = False
    changed.clear()
    mirror.poll_once()
    node = mirror.state.node("cpu-001")
    assert node is not None and node.features == ("cpu",)
    assert changed == ["cpu-001"]
    assert slurm.asked[-2] is not None and slurm.asked[-1] is None


def test_a_node_listing_that_fails_otherwise_is_not_asked_again_unfiltered() -> None:
    # slurmrestd down (no status) or refusing the syncer (401): the poll says so and tries next
    # round, not twice each round.
    slurm = NodesSlurm([Node(name="cpu-001", state="IDLE")])
    mirror = SlurmMirror(slurm, poll_interval=60)
    mirror.poll_once()

    def down(changed_since: int | None = None) -> list[Node] | None:
        slurm.asked.append(changed_since)
        raise SlurmApiError("GET nodes: connection refused", 0)

    slurm.list_nodes = down  # type: ignore[method-assign]
    before = len(slurm.asked)
    mirror.poll_once()
    assert len(slurm.asked) == before + 1
