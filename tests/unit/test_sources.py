"""What a controller waits for before acting, and what readiness says of it: one list."""

from __future__ import annotations

from tandem.sources import Source, Sources


def test_only_what_has_not_synced_is_named_with_why() -> None:
    sources = Sources(
        [
            Source("Pods", lambda: True),
            Source("Nodes", lambda: False, lambda: "HTTP 403 Forbidden"),
            Source("the tenant policy", lambda: False),
        ]
    )
    assert not sources.synced()
    assert sources.waiting_for() == [
        "Nodes: not read yet (HTTP 403 Forbidden)",
        "the tenant policy: not read yet",
    ]
    assert Sources([Source("Pods", lambda: True)]).synced()
