"""`/readyz` says what a service still waits for, so `kubectl describe pod` shows why it is not
ready (before: only "not ready", and a scheduler refused its policy ConfigMap gave no reason)."""

from __future__ import annotations

import threading
import time
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


def test_every_source_the_workers_wait_for_is_named_with_its_last_error() -> None:
    """Before: the scheduler's workers waited for six caches but readiness named three, so a
    scheduler its RBAC kept from listing Nodes never scheduled and still said ready (issue 19)."""
    from unittest import mock

    from tandem.informer import Informer
    from tandem.kube import KubeError
    from tandem.sources import Source, Sources

    kube = mock.Mock()
    kube.get.side_effect = KubeError(403, "Forbidden", 'nodes is forbidden: User "tandem" cannot list')
    nodes = Informer(kube, ["/api/v1/nodes"], {})
    listed = mock.Mock(synced=True, trouble="")
    sources = Sources([Source.of("Pods", listed), Source.of("Nodes", nodes)])
    stop = threading.Event()
    nodes.start(stop)
    try:
        deadline = time.monotonic() + 5
        while not nodes.trouble and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not sources.synced()
        (line,) = sources.waiting_for()
        assert line.startswith("Nodes: not read yet (/api/v1/nodes: HTTP 403 Forbidden: nodes is forbidden")
    finally:
        stop.set()


def test_a_stop_ends_an_informers_backoff_at_once() -> None:
    """Before: a failing informer slept out its backoff (up to 10 s) after a stop."""
    from unittest import mock

    from tandem.informer import Informer
    from tandem.kube import KubeError

    kube = mock.Mock()
    kube.get.side_effect = KubeError(503, "ServiceUnavailable", "the API server is restarting")
    informer = Informer(kube, ["/api/v1/pods"], {})
    stop = threading.Event()
    informer.start(stop)
    time.sleep(1.6)  # failed three times: the backoff is 4 s now
    (thread,) = [t for t in threading.enumerate() if t.name == "informer-0"]
    began = time.monotonic()
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert time.monotonic() - began < 0.5
