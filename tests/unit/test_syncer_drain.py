"""DrainNode on slurmrestd v0.0.38 (no node update) falls back to scontrol; without it, a clear error."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import grpc
import pytest

from tandem.slurm.rest import SlurmApiError
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2


class Aborted(Exception):
    pass


def _servicer() -> SyncerServicer:
    slurm = mock.Mock()
    slurm.drain_node.side_effect = SlurmApiError("POST node/cpu-001: HTTP 404", 404)
    servicer = SyncerServicer(mock.Mock(), mock.Mock(), slurm, mock.Mock(), 30.0)
    servicer.active = True
    return servicer


def _context() -> mock.Mock:
    context = mock.Mock()
    context.abort.side_effect = Aborted
    return context


def test_without_scontrol_the_caller_learns_why_the_node_is_not_drained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    context = _context()
    with pytest.raises(Aborted):
        _servicer().DrainNode(syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: test"), context)
    code, message = context.abort.call_args.args
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "cpu-001" in message and "scontrol" in message and "HTTP 404" in message


def test_with_scontrol_the_node_is_drained_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    scontrol = tmp_path / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" > {calls}\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    _servicer().DrainNode(syncer_pb2.DrainNodeRequest(slurm_node="cpu-001", reason="k8s: test"), _context())
    assert calls.read_text().split("\n")[0] == "update nodename=cpu-001 state=drain reason=k8s: test"
