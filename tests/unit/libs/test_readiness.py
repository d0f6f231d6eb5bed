"""`/readyz` says what a service still waits for, so `kubectl describe pod` shows why it is not
ready (before: only "not ready", and a scheduler refused its policy ConfigMap gave no reason)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any
from unittest import mock

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
    from tandem.informer import Informer
    from tandem.kube import KubeError
    from tandem.manager import Election, Manager

    kube = mock.Mock()
    kube.get.side_effect = KubeError(403, "Forbidden", 'nodes is forbidden: User "tandem" cannot list')
    nodes = Informer(kube, ["/api/v1/nodes"], {})
    manager = Manager(kube, Election(False, "", "test-readiness-sources"))
    manager.add_source("Pods", mock.Mock(synced=True, trouble=""), lambda stop: None)
    manager.add_source("Nodes", nodes, nodes.run)
    manager.start()
    try:
        deadline = time.monotonic() + 5
        while not nodes.trouble and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not manager.synced()
        (line,) = manager.waiting_for()
        assert line.startswith("Nodes: not read yet (/api/v1/nodes: HTTP 403 Forbidden: nodes is forbidden")
    finally:
        manager.stop()


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


def _failing_source(trouble: str) -> Any:
    return mock.Mock(synced=False, trouble=trouble)


def test_a_scheduler_whose_policy_is_refused_says_so_once_the_cache_sync_timeout_passed() -> None:
    """Before: such a scheduler said only that it had not read the policy yet, for ever; now
    /readyz says the wait timed out, and why (issue 19)."""
    from tandem.manager import Election, Manager
    from tandem.scheduler import main as scheduler_main

    manager = Manager(mock.Mock(), Election(False, "", "test-readiness"), cache_sync_timeout=1.0)
    trouble = "tenant policy ConfigMap tandem/p cannot be read (HTTP 403 Forbidden)"
    manager.add_source("the tenant policy", _failing_source(trouble), lambda stop: None)
    jobs = mock.Mock(synced=True, connected=True)
    server = serving.HealthHttpServer("127.0.0.1:0", scheduler_main.readiness(manager, jobs), lambda: "")
    server.start()
    manager.start()
    try:
        url = f"http://127.0.0.1:{server.port}/readyz"
        assert httpx.get(url, timeout=5).text == f"not ready: the tenant policy: not read yet ({trouble})\n"
        time.sleep(1.05)
        r = httpx.get(url, timeout=5)
        assert (r.status_code, r.text) == (
            503,
            f"not ready: caches not synced after 1s: the tenant policy: {trouble}\n",
        )
    finally:
        manager.stop()
        server.stop()


def test_a_syncer_leader_that_has_not_read_slurm_is_not_ready_and_a_standby_is() -> None:
    """Before: an elected syncer that could not read Slurm said ready while it could not serve a
    lock (issue 19). A standby stays ready: the Service routes only to the labelled leader."""
    from tandem.manager import Election, Manager
    from tandem.syncer import main as syncer_main

    kube = mock.Mock()
    manager = Manager(kube, Election(False, "", "test-readiness-syncer"))
    manager.add_source("Slurm (slurmrestd)", _failing_source("slurmrestd is unreachable"), lambda stop: None)
    waiting_for = syncer_main.readiness(kube, manager)
    assert waiting_for() == []  # not leading yet
    manager.start()
    try:
        assert manager.leading.wait(2)
        assert waiting_for() == ["leading, and Slurm (slurmrestd): not read yet (slurmrestd is unreachable)"]
        kube.reachable.return_value = False
        assert waiting_for() == ["the Kubernetes API is unreachable"]
    finally:
        manager.stop()
