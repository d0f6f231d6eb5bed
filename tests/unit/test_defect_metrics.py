"""A gauge computed when scraped reports its newest owner (a re-created lock manager, a restarted
runner), not the first object that ever registered it."""

from __future__ import annotations

from tandem.metrics import Registry


def test_a_computed_gauge_follows_its_newest_owner() -> None:
    registry = Registry()
    registry.gauge("locks", "by state", ["state"], collect=lambda: {("locked",): 1.0})
    registry.gauge("locks", "by state", ["state"], collect=lambda: {("locked",): 7.0})
    assert 'locks{state="locked"} 7' in registry.render()
