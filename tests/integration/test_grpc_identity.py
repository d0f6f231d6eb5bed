"""A gRPC caller is the identity in its certificate's URI SAN, from the lab's own CA (issue 39): a
certificate from that very CA with CN `tandem-hooks` but without the hooks SAN, as an issuer that
also signs for tenants would hand out, cannot drain or lock a node; one with the SAN and any CN is
the gateway."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import grpc
import pytest

from devstack import pki, services
from devstack.config import StackConfig
from tandem import mtls
from tandem.v1 import syncer_pb2, syncer_pb2_grpc
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]


def _issued(cfg: StackConfig, workdir: Path, name: str, subject: str, san: str) -> mtls.TlsFiles:
    """A client certificate signed by the lab's gRPC CA (the services trust nothing else)."""
    lab = pki.grpc_dir(cfg.pki_dir)
    for f in ("ca.crt", "ca.key"):
        shutil.copy2(lab / f, workdir / f)
    pki.ensure_cert(workdir, name, subject, san, "clientAuth")
    return mtls.TlsFiles(str(workdir / "ca.crt"), str(workdir / f"{name}.crt"), str(workdir / f"{name}.key"))


def _syncer(cfg: StackConfig, files: mtls.TlsFiles) -> tuple[grpc.Channel, syncer_pb2_grpc.SyncerServiceStub]:
    channel = grpc.secure_channel(
        services.grpc_addresses(cfg)["tandem-syncer"], mtls.channel_credentials(files)
    )
    return channel, syncer_pb2_grpc.SyncerServiceStub(channel)


def test_a_certificate_from_the_labs_ca_with_the_hooks_cn_but_not_its_san_is_refused(
    stack_cfg: StackConfig, tmp_path: Path
) -> None:
    node = stack_cfg.slurm_node_names()[-1]
    impostor = _issued(stack_cfg, tmp_path, "impostor", f"/CN={mtls.HOOKS}", "")
    channel, syncer = _syncer(stack_cfg, impostor)
    with channel:
        for call, request in (
            (syncer.DrainNode, syncer_pb2.DrainNodeRequest(slurm_node=node, reason="k8s: impostor")),
            (
                syncer.AcquireNodeLock,
                syncer_pb2.AcquireNodeLockRequest(slurm_node=node, job_id=4_000_000_004),
            ),
        ):
            with pytest.raises(grpc.RpcError) as e:
                call(request, timeout=10)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED, e.value.details()
            assert "names no Tandem identity" in (e.value.details() or "")
    time.sleep(1)
    state, reason = h.node_state(stack_cfg, node)
    assert "drain" not in state.lower() and "impostor" not in (reason or ""), (state, reason)


def test_the_hooks_san_names_the_gateway_whatever_the_cn(stack_cfg: StackConfig, tmp_path: Path) -> None:
    """The same CA, the SAN and a tenant's CN: the syncer serves it as the gateway (its call then
    fails on the node's credential it lacks, past the identity check)."""
    named = _issued(stack_cfg, tmp_path, "named", "/CN=tenant-a", f"URI:{mtls.identity_uri(mtls.HOOKS)}")
    channel, syncer = _syncer(stack_cfg, named)
    node = stack_cfg.slurm_node_names()[-1]
    with channel, pytest.raises(grpc.RpcError) as e:
        syncer.ReleaseNodeLock(
            syncer_pb2.ReleaseNodeLockRequest(slurm_node=node, job_id=4_000_000_005), timeout=10
        )
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED, e.value.details()
    assert "node's own credential" in (e.value.details() or "")
