"""A gauge computed when scraped reports its newest owner (a re-created lock manager, a restarted
runner), not the first object that ever registered it."""

from __future__ import annotations

from tandem.metrics import Registry


def test_a_computed_gauge_follows_its_newest_owner() -> None:
    registry = Registry()
    registry.gauge("locks", "by state", ["state"], collect=lambda: {("locked",): 1.0})
    registry.gauge("locks", "by state", ["state"], collect=lambda: {("locked",): 7.0})
    assert 'locks{state="locked"} 7.0' in registry.render()


def test_the_leader_gauge_follows_the_lease() -> None:
    """Summed over a component's replicas, 0 means nobody leads (the TandemLeaderMissing alert;
    a replica without election says 1: test_manager)."""
    import threading
    from unittest import mock

    from tandem import leader
    from tandem.metrics import REGISTRY

    stop = threading.Event()
    elector = leader.LeaderElector(mock.Mock(), "tandem", "ha-lease")
    assert 'tandem_leader{lease="ha-lease"} 0.0' in REGISTRY.render()
    with mock.patch.object(elector, "_try_acquire_or_renew", side_effect=[True, False, False, False]):
        elector.renew_seconds, elector.retry_seconds = 0.0, 0.01
        lost = threading.Event()
        elector.run(stop, lambda: None, lost.set)
    assert lost.is_set()
    assert 'tandem_leader{lease="ha-lease"} 0.0' in REGISTRY.render()


def test_every_controllers_queue_depth_is_reported() -> None:
    """The syncer runs two controllers (node-sync, topology): a gauge callback per runner replaced
    the one before, and node-sync's depth went unreported."""
    from tandem.metrics import REGISTRY
    from tandem.runner import Runner
    from tandem.workqueue import WorkQueue

    first, second = WorkQueue(name="test-depth-a"), WorkQueue(name="test-depth-b")
    first.add("x")
    second.add("y")
    second.add("z")
    Runner("test-depth-a", first, lambda key: None)
    Runner("test-depth-b", second, lambda key: None)
    rendered = REGISTRY.render()
    assert 'tandem_workqueue_depth{controller="test-depth-a"} 1.0\n' in rendered
    assert 'tandem_workqueue_depth{controller="test-depth-b"} 2.0\n' in rendered
