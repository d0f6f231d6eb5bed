from __future__ import annotations

import pytest

from tandem.assume import AssumeCache, caught_up


@pytest.mark.parametrize(
    ("seen", "written", "expected"),
    [
        ("41", "42", False),  # the cache's copy is older than our write
        ("42", "42", True),
        ("100", "42", True),  # newer: someone wrote after us, and our write is in it
        ("9", "10", False),  # compared as numbers, not strings ("9" > "10" as text)
        (None, "42", False),  # not in the cache yet
        ("", "42", False),
        ("abc", "abc", True),  # opaque versions: equality only
        ("abd", "abc", False),
        ("42", "", False),  # an unversioned write is never seen by a version
    ],
)
def test_caught_up(seen: str | None, written: str, expected: bool) -> None:
    assert caught_up(seen, written) is expected


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_write_is_assumed_until_the_cache_shows_its_version() -> None:
    c: AssumeCache[int] = AssumeCache()
    c.assume("pod-a", 7, version="42")
    assert c.get("pod-a", seen="41") == 7
    assert c.get("pod-a", seen="42") is None
    assert c.get("pod-a", seen="41") is None  # dropped once seen: an older copy no longer brings it back


def test_an_unversioned_write_stays_until_forgotten_or_expired() -> None:
    clock = Clock()
    c: AssumeCache[int] = AssumeCache(ttl=10.0, clock=clock)
    c.assume("group", 3)
    assert c.get("group", seen="999") == 3
    c.forget("group")
    assert c.get("group") is None
    c.assume("group", 4)
    clock.now = 10.5
    assert c.get("group") is None


def test_the_oldest_entries_go_past_the_limit() -> None:
    c: AssumeCache[int] = AssumeCache(limit=2)
    for i, key in enumerate("abc"):
        c.assume(key, i)
    assert len(c) == 2
    assert c.get("a") is None
    assert (c.get("b"), c.get("c")) == (1, 2)
