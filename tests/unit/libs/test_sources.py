"""What readiness says of a source the workers wait for: what, and why not yet."""

from __future__ import annotations

from tandem.sources import Source


def test_a_source_not_read_yet_is_named_with_its_last_error() -> None:
    assert Source("Nodes", lambda: False, lambda: "HTTP 403 Forbidden").waiting() == (
        "Nodes: not read yet (HTTP 403 Forbidden)"
    )
    assert Source("the tenant policy", lambda: False).waiting() == "the tenant policy: not read yet"


def test_past_the_cache_sync_timeout_it_says_the_wait_timed_out() -> None:
    assert Source("Nodes", lambda: False, lambda: "HTTP 403 Forbidden").timed_out(60.0) == (
        "caches not synced after 60s: Nodes: HTTP 403 Forbidden"
    )
    silent = Source("Nodes", lambda: False)
    assert silent.timed_out(60.0) == "caches not synced after 60s: Nodes: no answer yet"
