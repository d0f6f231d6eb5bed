"""The manager both services run: readiness names what has not synced and, past the cache-sync
timeout, says so with the last error; a stop ends every backoff and wait at once; leader-only work
runs only while this replica holds the Lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from unittest import mock

import pytest

from tandem import leader
from tandem.informer import Informer
from tandem.kube import KubeError, rfc3339
from tandem.manager import Election, Manager
from tandem.runner import Runner
from tandem.workqueue import WorkQueue
from tests.unit.syncer.test_defect_leader import FakeLeaseApi

SOLO = Election(enabled=False, namespace="", lease="test-manager")


class Stream:
    """A source like the scheduler's Slurm stream: fails, then backs off for `backoff` seconds
    (ended by a stop), until `answers` is set."""

    def __init__(self, backoff: float = 10.0) -> None:
        self.backoff = backoff
        self.synced = False
        self.trouble = ""
        self.answers = threading.Event()
        self.in_backoff = threading.Event()

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.answers.is_set():
                self.synced, self.trouble = True, ""
                stop.wait()
                return
            self.trouble = "UNAVAILABLE: connection refused"
            self.in_backoff.set()
            stop.wait(self.backoff)


def wait(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def managers() -> Iterator[list[Manager]]:
    """Managers a test made, stopped after it."""
    made: list[Manager] = []
    yield made
    for manager in made:
        manager.stop()


def test_readiness_names_a_source_that_has_not_synced_then_says_the_timeout_passed(
    managers: list[Manager],
) -> None:
    policy = Stream()
    pods = mock.Mock(synced=True, trouble="")
    manager = Manager(mock.Mock(), SOLO, cache_sync_timeout=1.0)
    manager.add_source("Pods", pods, lambda stop: None)
    manager.add_source("the tenant policy", policy, policy.run)
    managers.append(manager)
    manager.start()
    assert policy.in_backoff.wait(2)
    assert manager.waiting_for() == ["the tenant policy: not read yet (UNAVAILABLE: connection refused)"]
    assert wait(lambda: manager.waiting_for()[0].startswith("caches"))
    assert manager.waiting_for() == [
        "caches not synced after 1s: the tenant policy: UNAVAILABLE: connection refused"
    ]
    policy.synced = True
    assert manager.waiting_for() == []


def test_workers_start_only_once_every_source_has_synced_even_after_the_timeout(
    managers: list[Manager],
) -> None:
    nodes = Stream(backoff=0.05)
    reconciled: list[str] = []
    queue = WorkQueue()
    queue.add("default/a")
    manager = Manager(mock.Mock(), SOLO, cache_sync_timeout=0.1)
    manager.add_source("Nodes", nodes, nodes.run)
    manager.add_controller(Runner("test-manager", queue, lambda key: reconciled.append(key)))
    managers.append(manager)
    manager.start()
    time.sleep(0.4)  # past the timeout: the workers still wait ("not cached" is not "gone")
    assert reconciled == []
    nodes.answers.set()
    assert wait(lambda: reconciled == ["default/a"])


def test_a_stop_ends_a_sources_backoff_and_the_wait_for_the_caches_at_once(managers: list[Manager]) -> None:
    """No sleep a stop cannot end: a source 10 s into its backoff, an informer in its own, and
    the controller waiting for both end within half a second."""
    stream = Stream(backoff=10.0)
    kube = mock.Mock()
    kube.get.side_effect = KubeError(503, "ServiceUnavailable", "the API server is restarting")
    nodes = Informer(kube, ["/api/v1/nodes"], {})
    manager = Manager(kube, SOLO)
    manager.add_source("Slurm jobs", stream, stream.run)
    manager.add_source("Nodes", nodes, nodes.run)
    manager.add_controller(Runner("test-manager-stop", WorkQueue(), lambda key: None))
    managers.append(manager)
    manager.start()
    assert stream.in_backoff.wait(2)
    assert wait(lambda: bool(nodes.trouble))
    manager.stop()
    assert manager.join(0.5), "something the manager started still runs half a second after a stop"


class Lease:
    """The Lease as another replica holds it, until `release`."""

    def __init__(self) -> None:
        self.api = FakeLeaseApi()
        self.api.lease = {
            "metadata": {"name": "tandem", "resourceVersion": "1"},
            "spec": {
                "holderIdentity": "other",
                "leaseDurationSeconds": 600,
                "renewTime": rfc3339(micro=True),
            },
        }

    def release(self) -> None:
        with self.api.lock:
            assert self.api.lease is not None
            self.api.lease["spec"]["holderIdentity"] = None

    def elector(self) -> leader.LeaderElector:
        return leader.LeaderElector(
            self.api,  # type: ignore[arg-type]
            "ns",
            "tandem",
            identity="me",
            lease_seconds=2,
            renew_seconds=0.3,
            retry_seconds=0.05,
        )


def test_leader_only_work_starts_on_leadership_and_stops_when_it_is_lost(managers: list[Manager]) -> None:
    lease = Lease()
    steps: list[str] = []
    running = threading.Event()
    reconciled: list[str] = []
    queue = WorkQueue()

    def lock_reconcile(leader_stop: threading.Event) -> None:
        running.set()
        leader_stop.wait()
        steps.append("runnable stopped")
        running.clear()

    slurm = Stream()
    slurm.answers.set()
    manager = Manager(mock.Mock(), Election(True, "ns", "tandem"), elector=lease.elector)
    managers.append(manager)
    manager.add_source("Slurm", slurm, slurm.run, leader_only=True)
    manager.add_controller(Runner("test-manager-lease", queue, lambda key: reconciled.append(key)))
    manager.add_runnable("lock-reconcile", lock_reconcile, on_lost=lambda: steps.append("on_lost"))
    manager.start()
    queue.add("a")
    time.sleep(0.3)
    assert not running.is_set() and not manager.leading.is_set() and reconciled == []
    assert not slurm.synced, "a leader-only source ran on a standby"
    assert manager.waiting_for() == []

    lease.release()
    assert running.wait(2)
    assert manager.leading.is_set() and slurm.synced
    assert wait(lambda: reconciled == ["a"])

    lease.api.fail = True  # renewals fail: the lease is lost after renew_seconds
    assert manager.lost.wait(3)
    assert "on_lost" in steps
    assert wait(lambda: not running.is_set())
    assert sorted(steps) == ["on_lost", "runnable stopped"]
    assert not manager.leading.is_set()
    queue.add("b")
    time.sleep(0.1)
    assert reconciled == ["a"], "a replica that lost its lease still reconciles"


def test_without_election_this_replica_leads_at_once_and_says_so(managers: list[Manager]) -> None:
    """Summed over a component's replicas, 0 means nobody leads (the TandemLeaderMissing alert)."""
    from tandem.metrics import REGISTRY

    started = threading.Event()
    manager = Manager(mock.Mock(), Election(False, "", "solo-lease"))
    manager.add_runnable("work", lambda leader_stop: started.set())
    managers.append(manager)
    manager.start()
    assert started.wait(2)
    assert 'tandem_leader{lease="solo-lease"} 1.0' in REGISTRY.render()


def test_a_lost_lease_closes_everything_in_order_and_ends_the_process_with_an_error() -> None:
    import signal

    closed: list[str] = []
    manager = Manager(mock.Mock(), SOLO)
    manager.lost.set()
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit, match="lost the leader lease"):
            manager.run_until_signal(lambda: closed.append("grpc"), lambda: closed.append("kube"))
    finally:
        signal.signal(signal.SIGTERM, handlers[0])
        signal.signal(signal.SIGINT, handlers[1])
    assert closed == ["grpc", "kube"]
    assert manager.stopping.is_set()
