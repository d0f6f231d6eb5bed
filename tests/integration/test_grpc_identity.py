"""The lab's syncer and scheduler answer only Tandem's identities, each only for its own calls: an
attacker on the network (a Pod, a Slurm node) can neither drain, lock nor watch, and the attempt
changes nothing. An operator with the lab's client certificate reads with grpcurl. A caller is the
identity in its certificate's URI SAN (issue 39): one from the lab's very CA with CN `tandem-hooks`
but without the hooks SAN, as an issuer that also signs for tenants would hand out, is refused."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client as k8s

from devstack import pki, services
from devstack.config import StackConfig
from tandem import mtls
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc, syncer_pb2, syncer_pb2_grpc
from tests.integration import helpers as h

pytestmark = pytest.mark.integration

NODE = "gpu-000"


def _as(cfg: StackConfig, identity: str, address: str) -> grpc.Channel:
    return grpc.secure_channel(address, mtls.channel_credentials(services.grpc_tls(cfg, identity)))


def _refused(channel: grpc.Channel, call: Callable[[Any], Any]) -> grpc.StatusCode:
    with channel, pytest.raises(grpc.RpcError) as e:
        reply = call(channel)
        if hasattr(reply, "__iter__") and not hasattr(reply, "ListFields"):
            list(reply)  # a stream is refused on its first read
    return e.value.code()


def _drain(channel: grpc.Channel) -> Any:
    return syncer_pb2_grpc.SyncerServiceStub(channel).DrainNode(
        syncer_pb2.DrainNodeRequest(slurm_node=NODE, reason="attacker"), timeout=5
    )


def _lock(channel: grpc.Channel) -> Any:
    return syncer_pb2_grpc.SyncerServiceStub(channel).AcquireNodeLock(
        syncer_pb2.AcquireNodeLockRequest(slurm_node=NODE, job_id=999999, strict=True), timeout=5
    )


def _terminating(channel: grpc.Channel) -> Any:
    return syncer_pb2_grpc.SyncerServiceStub(channel).JobTerminating(
        syncer_pb2.JobTerminatingRequest(job_id=1, slurm_node=NODE), timeout=5
    )


def _watch(channel: grpc.Channel) -> Any:
    return syncer_pb2_grpc.SyncerServiceStub(channel).WatchSlurm(syncer_pb2.WatchSlurmRequest(), timeout=5)


def _placements(channel: grpc.Channel) -> Any:
    return scheduler_pb2_grpc.SchedulerServiceStub(channel).ListPlacements(
        scheduler_pb2.ListPlacementsRequest(), timeout=5
    )


def test_the_syncer_refuses_callers_that_are_not_tandem(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    syncer = services.grpc_addresses(stack_cfg)["tandem-syncer"]
    assert _refused(grpc.insecure_channel(syncer), _drain) == grpc.StatusCode.UNAVAILABLE
    assert _refused(grpc.insecure_channel(syncer), _lock) == grpc.StatusCode.UNAVAILABLE
    # Wrong identities, each with a valid certificate of Tandem's CA.
    assert _refused(_as(stack_cfg, mtls.OPERATOR, syncer), _drain) == grpc.StatusCode.PERMISSION_DENIED
    assert _refused(_as(stack_cfg, mtls.SCHEDULER, syncer), _lock) == grpc.StatusCode.PERMISSION_DENIED
    assert _refused(_as(stack_cfg, mtls.OPERATOR, syncer), _terminating) == grpc.StatusCode.PERMISSION_DENIED
    assert _refused(_as(stack_cfg, mtls.HOOKS, syncer), _watch) == grpc.StatusCode.PERMISSION_DENIED
    # Nothing moved: the node is not drained, its Node not locked.
    state, reason = h.node_state(stack_cfg, NODE)
    assert "DRAIN" not in state.upper(), (state, reason)
    assert h.lock_annotation(core, NODE) == "false"
    assert not h.node_has_lock_taint(core, h.kube_node_of(NODE))


@pytest.mark.parallel
def test_the_scheduler_refuses_callers_that_are_not_the_syncer_or_an_operator(stack_cfg: StackConfig) -> None:
    scheduler = services.grpc_addresses(stack_cfg)["tandem-scheduler"]
    assert _refused(grpc.insecure_channel(scheduler), _placements) == grpc.StatusCode.UNAVAILABLE
    assert _refused(_as(stack_cfg, mtls.HOOKS, scheduler), _placements) == grpc.StatusCode.PERMISSION_DENIED
    with _as(stack_cfg, mtls.OPERATOR, scheduler) as channel:
        _placements(channel)


@pytest.mark.parallel
def test_an_operator_lists_the_services_with_grpcurl(stack_cfg: StackConfig) -> None:
    env = services.operator_tls_env(stack_cfg)
    for address in services.grpc_addresses(stack_cfg).values():
        tls = [
            "-cacert",
            env["TANDEM_GRPC_CA"],
            "-cert",
            env["TANDEM_GRPC_CERT"],
            "-key",
            env["TANDEM_GRPC_KEY"],
        ]
        out = subprocess.run(
            [str(stack_cfg.bin_dir / "grpcurl"), *tls, address, "list"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert "grpc.health.v1.Health" in out.stdout
        plain = subprocess.run(
            # grpcurl would try a TLS server in plaintext for its default 10 s before it gives up.
            [str(stack_cfg.bin_dir / "grpcurl"), "-plaintext", "-connect-timeout", "2", address, "list"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert plain.returncode != 0, "reflection answered a caller without a certificate"


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


@pytest.mark.parallel
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


@pytest.mark.parallel
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
