"""gRPC between Tandem's services: only a caller with a certificate from Tandem's CA gets an answer,
and only for the calls its identity may make; certificates rotate without a restart."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from devstack import pki
from tandem import mtls, serving
from tandem.v1 import syncer_pb2, syncer_pb2_grpc


def _files(d: Path, identity: str) -> mtls.TlsFiles:
    return mtls.TlsFiles(str(d / "ca.crt"), str(d / f"{identity}.crt"), str(d / f"{identity}.key"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    pki.ensure_grpc_pki(root)
    return pki.grpc_dir(root)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another CA's certificates with the very same names."""
    root = tmp_path_factory.mktemp("foreign")
    pki.ensure_grpc_pki(root)
    return pki.grpc_dir(root)


class Recorder(syncer_pb2_grpc.SyncerServiceServicer):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def DrainNode(self, request: Any, context: Any) -> Any:
        self.calls.append(f"drain {request.slurm_node}")
        return syncer_pb2.DrainNodeResponse()

    def ListNodeLocks(self, request: Any, context: Any) -> Any:
        self.calls.append("list")
        return syncer_pb2.ListNodeLocksResponse()

    def WatchSlurm(self, request: Any, context: Any) -> Any:
        self.calls.append("watch")
        yield syncer_pb2.WatchSlurmResponse(snapshot_done=True)


class WaitingRecorder(Recorder):
    """With a lock call that is a coroutine, as the syncer's."""

    async def AcquireNodeLock(self, request: Any, context: Any) -> Any:
        await asyncio.sleep(0)
        self.calls.append(f"lock {request.slurm_node}")
        return syncer_pb2.AcquireNodeLockResponse()


# Every service serves on one server (grpc.aio): each guarantee holds for a plain method (the
# scheduler's calls, the syncer's reads) and for a coroutine (the syncer's waiting calls).
RECORDERS: dict[str, type[Recorder]] = {"a plain method": Recorder, "a coroutine": WaitingRecorder}


@pytest.fixture(params=sorted(RECORDERS))
def syncer(
    ours: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[tuple[str, Recorder, Path]]:
    monkeypatch.setattr(mtls, "RELOAD_CHECK_SECONDS", 0.0)
    served = tmp_path / "served"
    shutil.copytree(ours, served)
    recorder = RECORDERS[request.param]()
    server = serving.GrpcServer(
        "127.0.0.1:0",
        [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(recorder, s)],
        ["tandem.v1.SyncerService"],
        _files(served, mtls.SYNCER),
    )
    server.start()
    yield f"127.0.0.1:{server.port}", recorder, served
    server.stop(0)


def _drain(channel: grpc.Channel) -> Any:
    return syncer_pb2_grpc.SyncerServiceStub(channel).DrainNode(
        syncer_pb2.DrainNodeRequest(slurm_node="gpu-010", reason="x"), timeout=5
    )


def test_a_caller_without_a_certificate_is_not_served(syncer: tuple[str, Recorder, Path], ours: Path) -> None:
    address, recorder, _ = syncer
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as e:
        _drain(channel)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # TLS that trusts the server, but presents no certificate of its own.
    server_only = grpc.ssl_channel_credentials((ours / "ca.crt").read_bytes())
    with grpc.secure_channel(address, server_only) as channel, pytest.raises(grpc.RpcError) as e:
        _drain(channel)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert recorder.calls == []


def test_a_certificate_from_another_ca_is_not_served(
    syncer: tuple[str, Recorder, Path], ours: Path, foreign: Path
) -> None:
    address, recorder, _ = syncer
    theirs = _files(foreign, mtls.HOOKS)
    # They trust our CA (it is public), but their certificate is signed by theirs.
    creds = grpc.ssl_channel_credentials(
        (ours / "ca.crt").read_bytes(), Path(theirs.key).read_bytes(), Path(theirs.cert).read_bytes()
    )
    with grpc.secure_channel(address, creds) as channel, pytest.raises(grpc.RpcError) as e:
        _drain(channel)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert recorder.calls == []


@pytest.mark.parametrize("identity", [mtls.SCHEDULER, mtls.OPERATOR, mtls.SYNCER])
def test_only_the_gateway_may_drain(syncer: tuple[str, Recorder, Path], ours: Path, identity: str) -> None:
    address, recorder, _ = syncer
    with serving.channel(address, _files(ours, identity)) as channel, pytest.raises(grpc.RpcError) as e:
        _drain(channel)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert f"{identity} may not call /tandem.v1.SyncerService/DrainNode" in (e.value.details() or "")
    assert recorder.calls == []
    with serving.channel(address, _files(ours, mtls.HOOKS)) as channel:
        _drain(channel)
    assert recorder.calls == ["drain gpu-010"]


def test_the_gateway_may_not_watch_slurm_and_an_operator_may(
    syncer: tuple[str, Recorder, Path], ours: Path
) -> None:
    address, recorder, _ = syncer
    with serving.channel(address, _files(ours, mtls.HOOKS)) as channel, pytest.raises(grpc.RpcError) as e:
        list(syncer_pb2_grpc.SyncerServiceStub(channel).WatchSlurm(syncer_pb2.WatchSlurmRequest(), timeout=5))
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert recorder.calls == []
    with serving.channel(address, _files(ours, mtls.OPERATOR)) as channel:
        replies = list(
            syncer_pb2_grpc.SyncerServiceStub(channel).WatchSlurm(syncer_pb2.WatchSlurmRequest(), timeout=5)
        )
    assert replies[-1].snapshot_done and recorder.calls == ["watch"]


def test_a_call_that_is_a_coroutine_is_checked_as_well(
    syncer: tuple[str, Recorder, Path], ours: Path
) -> None:
    address, recorder, _ = syncer
    if not isinstance(recorder, WaitingRecorder):
        pytest.skip("this recorder's calls are plain methods")
    request = syncer_pb2.AcquireNodeLockRequest(slurm_node="gpu-010", job_id=7)
    with serving.channel(address, _files(ours, mtls.SCHEDULER)) as channel, pytest.raises(grpc.RpcError) as e:
        syncer_pb2_grpc.SyncerServiceStub(channel).AcquireNodeLock(request, timeout=5)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "tandem-scheduler may not call /tandem.v1.SyncerService/AcquireNodeLock" in (
        e.value.details() or ""
    )
    assert recorder.calls == []
    with serving.channel(address, _files(ours, mtls.HOOKS)) as channel:
        # The call form the gateway uses (tandem.hooks.routes), through the rotating channel.
        syncer_pb2_grpc.SyncerServiceStub(channel).AcquireNodeLock.future(request, timeout=5).result()
    assert recorder.calls == ["lock gpu-010"]


def test_health_answers_any_tandem_identity(syncer: tuple[str, Recorder, Path], ours: Path) -> None:
    address, _, _ = syncer
    with serving.channel(address, _files(ours, mtls.OPERATOR)) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING  # answered, as it stands


def test_a_rotated_client_certificate_is_used_without_a_restart(
    syncer: tuple[str, Recorder, Path], ours: Path, tmp_path: Path
) -> None:
    address, recorder, _ = syncer
    mine = tmp_path / "client"
    mine.mkdir()
    for name in ("ca.crt", "me.crt", "me.key"):
        source = {"ca.crt": "ca.crt", "me.crt": f"{mtls.SCHEDULER}.crt", "me.key": f"{mtls.SCHEDULER}.key"}
        shutil.copy(ours / source[name], mine / name)
    with serving.channel(address, _files(mine, "me")) as channel:
        with pytest.raises(grpc.RpcError):
            _drain(channel)
        # The Secret now holds the gateway's certificate (as a mount swaps it: new files).
        for name, source_name in (("me.crt", f"{mtls.HOOKS}.crt"), ("me.key", f"{mtls.HOOKS}.key")):
            (mine / f".{name}").write_bytes((ours / source_name).read_bytes())
            (mine / f".{name}").replace(mine / name)
        _drain(channel)
    assert recorder.calls == ["drain gpu-010"]


def test_a_rotated_serving_certificate_is_served_to_new_connections(
    syncer: tuple[str, Recorder, Path], ours: Path, foreign: Path
) -> None:
    address, recorder, served = syncer
    # The operator now trusts only the new CA, whose certificates the server has not loaded yet.
    new_operator = _files(foreign, mtls.OPERATOR)
    with serving.channel(address, new_operator) as channel, pytest.raises(grpc.RpcError):
        syncer_pb2_grpc.SyncerServiceStub(channel).ListNodeLocks(syncer_pb2.ListNodeLocksRequest(), timeout=5)
    for name in ("ca.crt", f"{mtls.SYNCER}.crt", f"{mtls.SYNCER}.key"):
        (served / f".{name}").write_bytes((foreign / name).read_bytes())
        (served / f".{name}").replace(served / name)
    with serving.channel(address, new_operator) as channel:
        syncer_pb2_grpc.SyncerServiceStub(channel).ListNodeLocks(syncer_pb2.ListNodeLocksRequest(), timeout=5)
    assert recorder.calls == ["list"]


def test_a_service_without_its_certificate_does_not_start() -> None:
    with pytest.raises(SystemExit, match=r"--grpc-cert-file, --grpc-key-file required: .*mutual TLS only"):
        mtls.TlsFiles.required("/ca.crt", "", "", "tandem-syncer")


@pytest.mark.parametrize(
    ("method", "identity", "ok"),
    [
        ("/tandem.v1.SyncerService/AcquireNodeLock", mtls.HOOKS, True),
        ("/tandem.v1.SyncerService/AcquireNodeLock", mtls.SCHEDULER, False),
        ("/tandem.v1.SyncerService/JobTerminating", mtls.OPERATOR, False),
        ("/tandem.v1.SyncerService/PlaceholderSubmitted", mtls.SCHEDULER, True),
        ("/tandem.v1.SyncerService/PlaceholderSubmitted", mtls.HOOKS, False),
        ("/tandem.v1.SyncerService/ListNodeLocks", mtls.OPERATOR, True),
        ("/tandem.v1.SyncerService/ListNodeLocks", mtls.HOOKS, False),
        ("/tandem.v1.SchedulerService/ListPlacements", mtls.OPERATOR, True),
        ("/tandem.v1.SchedulerService/ListPlacements", mtls.HOOKS, False),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", mtls.HOOKS, True),
        ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "", False),
        ("/grpc.health.v1.Health/Check", "someone-else", False),
        ("/tandem.v1.SyncerService/NotYetWritten", mtls.OPERATOR, False),
    ],
)
def test_who_may_call_what(method: str, identity: str, ok: bool) -> None:
    assert mtls.allowed(method, identity) is ok


def _issued(d: Path, name: str, subject: str, san: str) -> mtls.TlsFiles:
    """A client certificate from the same CA as the services' (the CA key in `d`), as any issuer
    that signs for tenants too could hand one out."""
    pki.ensure_cert(d, name, subject, san, "clientAuth")
    return mtls.TlsFiles(str(d / "ca.crt"), str(d / f"{name}.crt"), str(d / f"{name}.key"))


# Issue 39: the caller is the URI SAN, never the CN. (name, subject, SANs, drains?)
SAN_CASES = [
    ("cn-only", "/CN=tandem-hooks", "", False),
    ("another-form", "/CN=tandem-hooks", "URI:https://tandem/tandem-hooks", False),
    ("another-identity", "/CN=tandem-hooks", "URI:spiffe://tandem/tenant-a", False),
    ("two-uris", "/CN=tandem-hooks", "URI:spiffe://tandem/tandem-hooks,URI:spiffe://tandem/x", False),
    ("dns-only", "/CN=tandem-hooks", "DNS:tandem-hooks", False),
    ("san-not-cn", "/CN=tenant-a", "URI:spiffe://tandem/tandem-hooks", True),
]


@pytest.mark.parametrize(("name", "subject", "san", "drains"), SAN_CASES)
def test_a_caller_is_named_by_its_uri_san_not_its_cn(
    syncer: tuple[str, Recorder, Path], name: str, subject: str, san: str, drains: bool
) -> None:
    address, recorder, served = syncer
    with serving.channel(address, _issued(served, name, subject, san)) as channel:
        if drains:
            _drain(channel)
        else:
            with pytest.raises(grpc.RpcError) as e:
                _drain(channel)
            assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "may not call /tandem.v1.SyncerService/DrainNode" in (e.value.details() or "")
    assert recorder.calls == (["drain gpu-010"] if drains else [])
