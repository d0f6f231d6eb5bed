"""`/readyz` says what a service still waits for, so `kubectl describe pod` shows why it is not
ready (before: only "not ready", and a scheduler refused its policy ConfigMap gave no reason)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tandem import serving


@pytest.fixture
def waiting() -> Iterator[tuple[list[str], str]]:
    reasons: list[str] = []
    server = serving.HealthHttpServer("127.0.0.1:0", lambda: reasons, lambda: "")
    server.start()
    yield reasons, f"http://127.0.0.1:{server.port}/readyz"
    server.stop()


def test_a_service_that_waits_says_for_what(waiting: tuple[list[str], str]) -> None:
    reasons, url = waiting
    reasons.append("tenant policy: ConfigMap tandem/tandem-policy cannot be read (403 Forbidden)")
    r = httpx.get(url, timeout=5)
    assert r.status_code == 503
    assert (
        r.text == "not ready: tenant policy: ConfigMap tandem/tandem-policy cannot be read (403 Forbidden)\n"
    )


def test_a_ready_service_says_ok(waiting: tuple[list[str], str]) -> None:
    _, url = waiting
    r = httpx.get(url, timeout=5)
    assert (r.status_code, r.text) == (200, "ok\n")
