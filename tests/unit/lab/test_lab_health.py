"""The lab's health summary under load: a service that does not answer its health check in time
is reported as such, not a traceback in place of `make up`'s summary (seen at 1,000 nodes)."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from devstack import services
from devstack.config import Ports, StackConfig


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_service_that_does_not_answer_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(services, "operator_channel", lambda cfg, address: grpc.insecure_channel(address))
    monkeypatch.setattr(services, "_own_address", lambda cfg, name: address)
    cfg = StackConfig(nodes=2, state_dir=tmp_path, ports=Ports.from_base(31000))
    status = services.health_status(cfg, address)
    assert status.startswith(services.UNANSWERED) and "UNAVAILABLE" in status
    assert not services.serving(cfg, "tandem-scheduler")
