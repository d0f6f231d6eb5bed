"""The lab with two replicas (REPLICAS=2): a second scheduler and syncer electing leaders on the
chart's Lease names, each on its own ports, and everyone dialling the syncer through the router
that stands in for its Service. One replica is the stack as it always was."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack import services
from devstack.config import StackConfig


def _cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, replicas: str | None) -> StackConfig:
    monkeypatch.setenv("TANDEM_STATE_DIR", str(tmp_path))
    if replicas is None:
        monkeypatch.delenv("REPLICAS", raising=False)
    else:
        monkeypatch.setenv("REPLICAS", replicas)
    return StackConfig.from_env()


def test_one_replica_is_the_stack_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg(tmp_path, monkeypatch, None)
    assert services.names(cfg) == services.SERVICES
    assert not any("leader" in a for n in services.SERVICES for a in services.argv(cfg, n))


def test_two_replicas_elect_and_dial_the_syncer_through_the_router(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg(tmp_path, monkeypatch, "2")
    names = services.names(cfg)
    assert names.index(services.SYNCER_ROUTER) > names.index("tandem-syncer-b")
    argv = {n: services.argv(cfg, n) for n in names}
    for n in ("tandem-syncer", "tandem-syncer-b", "tandem-scheduler", "tandem-scheduler-b"):
        assert "--leader-elect=true" in argv[n]
    own = {
        n: next(a for a in argv[n] if a.startswith("--grpc-bind-address=")) for n in argv if "tandem-s" in n
    }
    assert len(set(own.values())) == 4  # every replica on its own port
    routed = f"127.0.0.1:{cfg.ports.syncer_grpc}"
    assert f"--listen={routed}" in argv[services.SYNCER_ROUTER]
    for n in ("tandem-scheduler", "tandem-scheduler-b", "tandem-hooks"):
        assert f"--syncer-address={routed}" in argv[n]
    # The choice is saved with the stack: a later command without REPLICAS agrees.
    cfg.save()
    assert _cfg(tmp_path, monkeypatch, None).replicas == 2
    with pytest.raises(SystemExit, match="run `make down` before asking for REPLICAS=1"):
        _cfg(tmp_path, monkeypatch, "1")
