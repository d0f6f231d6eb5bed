"""bench/cpu.py takes a Tandem service's CPU time from its /metrics, as the service's own
HealthHttpServer serves it, and leaves /proc for the other daemons."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from bench import cpu
from devstack import services
from devstack.config import StackConfig
from devstack.procs import cpu_seconds
from tandem.metrics import REGISTRY
from tandem.serving import HealthHttpServer


@pytest.fixture
def metrics_url() -> Iterator[str]:
    server = HealthHttpServer("127.0.0.1:0", lambda: [], REGISTRY.render)
    server.start()
    yield f"http://127.0.0.1:{server.port}/metrics"
    server.stop()


def test_a_tandem_service_reports_its_own_cpu_time_and_memory(metrics_url: str) -> None:
    process = cpu.process_metrics(metrics_url)
    # This process is the "service": the same CPU time /proc shows for it, give or take the scrape.
    own = cpu_seconds(os.getpid())
    assert 0 < process["process_cpu_seconds_total"] <= own + 0.5
    assert process["process_resident_memory_bytes"] > 1e6


def test_a_daemon_of_a_tandem_group_is_read_from_metrics_not_proc(metrics_url: str) -> None:
    scheduler, slurmctld = mock.Mock(), mock.Mock()
    slurmctld.main_pid.return_value = os.getpid()
    sampled = cpu.sample(
        {"tandem-scheduler": scheduler, "slurmctld": slurmctld}, {"tandem-scheduler": [metrics_url]}
    )
    scheduler.main_pid.assert_not_called()
    assert sampled.by_group["tandem-scheduler"] > 0
    assert sampled.by_group["slurmctld"] > 0


def test_a_service_that_does_not_answer_counts_as_nothing() -> None:
    sampled = cpu.sample({}, {"tandem-hooks": ["http://127.0.0.1:1/metrics"]})
    assert sampled.by_group["tandem-hooks"] == 0.0


def test_each_lab_replica_is_scraped_on_the_port_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("REPLICAS", "2")
    monkeypatch.delenv("DEPLOY", raising=False)
    cfg = StackConfig.from_env()
    urls = cpu.tandem_metrics(cfg)
    assert services.SYNCER_ROUTER not in urls
    assert urls["tandem-hooks"] == [f"{cfg.hooks_url}/metrics"]
    for name in ("tandem-syncer", "tandem-syncer-b", "tandem-scheduler", "tandem-scheduler-b"):
        bind = next(a for a in services.argv(cfg, name) if a.startswith("--health-probe-bind-address="))
        assert urls[name] == [f"http://{bind.split('=', 1)[1]}/metrics"]
