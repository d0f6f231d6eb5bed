"""The chart's PKI hook (tandem-pki, issue 39): the certificates it makes name each identity in the
URI SAN the services go by and are served and accepted as that identity; it keeps what is still
good, renews what is near its end, and deletes only its own Secrets."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from tandem import grpcpki, mtls, pkijob, serving
from tandem.grpcpki import Identity
from tandem.kube import KubeError
from tandem.v1 import syncer_pb2, syncer_pb2_grpc

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
SYNCER_DNS = ("localhost", "t-tandem-syncer", "t-tandem-syncer.tandem.svc")
PLAN = [
    pkijob.Planned(Identity(mtls.SYNCER, SYNCER_DNS), "t-syncer-tls"),
    pkijob.Planned(Identity(mtls.HOOKS), "t-hooks-tls"),
    pkijob.Planned(Identity(mtls.OPERATOR), "t-operator-tls"),
]
CFG = pkijob.PkiSettings(namespace="tandem", instance="t", ca_secret="t-grpc-ca")


def _as_secret(write: pkijob.Write, version: str = "1") -> dict[str, Any]:
    body = pkijob._secret(CFG, write)
    body["metadata"]["resourceVersion"] = version
    return body


def _apply(observed: dict[str, Any], writes: list[pkijob.Write]) -> dict[str, Any]:
    return {**observed, **{w.secret: _as_secret(w) for w in writes}}


def _decide(observed: dict[str, Any], now: dt.datetime = NOW) -> list[pkijob.Write]:
    return pkijob.decide(observed, CFG.ca_secret, PLAN, CFG, now)


def test_a_first_run_writes_the_ca_and_every_certificate_and_a_second_run_nothing() -> None:
    first = _decide({})
    assert [w.secret for w in first] == ["t-grpc-ca", "t-syncer-tls", "t-hooks-tls", "t-operator-tls"]
    assert all(w.resource_version is None for w in first)
    assert _decide(_apply({}, first)) == []


def test_certificates_name_the_identity_in_a_uri_san_and_servers_their_dns_names() -> None:
    observed = _apply({}, _decide({}))
    ca = base64.b64decode(observed["t-grpc-ca"]["data"]["tls.crt"])
    for p in PLAN:
        cert = base64.b64decode(observed[p.secret]["data"]["tls.crt"])
        assert base64.b64decode(observed[p.secret]["data"]["ca.crt"]) == ca
        assert grpcpki.fresh(cert, ca, p.identity, dt.timedelta(days=30), NOW)
        assert not grpcpki.fresh(
            cert, ca, Identity("tandem-other", p.identity.dns_names), dt.timedelta(0), NOW
        )


def test_a_certificate_near_its_end_is_renewed_and_only_it() -> None:
    observed = _apply({}, _decide({}))
    later = NOW + dt.timedelta(days=CFG.cert_validity_days - CFG.renew_days + 1)
    renewed = _decide(observed, later)
    assert sorted(w.secret for w in renewed) == sorted(p.secret for p in PLAN)  # all issued together
    assert all(w.resource_version == "1" for w in renewed)  # replaced as read
    assert "t-grpc-ca" not in [w.secret for w in renewed]


def test_a_ca_near_its_end_is_replaced_and_every_certificate_issued_again() -> None:
    observed = _apply({}, _decide({}))
    later = NOW + dt.timedelta(days=CFG.ca_validity_days - CFG.renew_days + 1)
    assert [w.secret for w in _decide(observed, later)] == ["t-grpc-ca", *(p.secret for p in PLAN)]


def test_a_changed_dns_name_or_a_certificate_of_another_ca_is_issued_again() -> None:
    observed = _apply({}, _decide({}))
    moved = [pkijob.Planned(Identity(mtls.SYNCER, (*SYNCER_DNS, "extra.example")), "t-syncer-tls"), *PLAN[1:]]
    assert [w.secret for w in pkijob.decide(observed, CFG.ca_secret, moved, CFG, NOW)] == ["t-syncer-tls"]
    foreign = _apply({}, _decide({}))
    observed["t-hooks-tls"] = foreign["t-hooks-tls"]
    assert [w.secret for w in _decide(observed)] == ["t-hooks-tls"]


def test_an_older_charts_rsa_ca_is_replaced() -> None:
    """genCA made RSA keys and no URI SANs: the first run of the hook replaces all of it."""
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    ec_ca = grpcpki.new_ca("x", 10, NOW)
    assert not grpcpki.ca_fresh(grpcpki.KeyPair(ec_ca.cert, pem), dt.timedelta(0), NOW)
    assert grpcpki.ca_fresh(ec_ca, dt.timedelta(0), NOW)


def test_the_plan_is_checked() -> None:
    assert pkijob.parse_plan('[{"identity": "tandem-syncer", "secret": "s", "dnsNames": ["a"]}]') == [
        pkijob.Planned(Identity("tandem-syncer", ("a",)), "s")
    ]
    for bad in (
        "{",
        "{}",
        "[1]",
        '[{"identity": "x"}]',
        '[{"identity": "x", "secret": "s", "dnsNames": [1]}]',
    ):
        with pytest.raises(ValueError):
            pkijob.parse_plan(bad)


class FakeKube:
    def __init__(self, secrets: dict[str, Any]) -> None:
        self.secrets = secrets
        self.deleted: list[str] = []

    def get(self, path: str) -> Any:
        name = path.rsplit("/", 1)[1]
        if name not in self.secrets:
            raise KubeError(404, "NotFound", name)
        return self.secrets[name]

    def delete(self, path: str) -> Any:
        self.deleted.append(path.rsplit("/", 1)[1])
        return {}


def test_remove_deletes_only_this_releases_own_secrets() -> None:
    ours = _apply({}, _decide({}))
    theirs = dict(
        ours["t-hooks-tls"], metadata={"name": "t-hooks-tls", "labels": {"app.kubernetes.io/instance": "t"}}
    )
    other_release = dict(
        ours["t-operator-tls"],
        metadata={
            "name": "t-operator-tls",
            "labels": {**ours["t-operator-tls"]["metadata"]["labels"], "app.kubernetes.io/instance": "u"},
        },
    )
    kube = FakeKube({**ours, "t-hooks-tls": theirs, "t-operator-tls": other_release})
    cfg = pkijob.PkiSettings(
        namespace="tandem",
        instance="t",
        ca_secret="t-grpc-ca",
        plan=json.dumps(
            [
                {"identity": "tandem-syncer", "secret": "t-syncer-tls"},
                {"identity": "tandem-hooks", "secret": "t-hooks-tls"},
                {"identity": "tandem-operator", "secret": "t-operator-tls"},
                {"identity": "tandem-scheduler", "secret": "missing"},
            ]
        ),
    )
    assert pkijob.remove(kube, cfg) == ["t-grpc-ca", "t-syncer-tls"]  # type: ignore[arg-type]
    assert kube.deleted == ["t-grpc-ca", "t-syncer-tls"]


# -- what the services make of them --------------------------------------------------------------


def _files(d: Path, observed: dict[str, Any], secret: str) -> mtls.TlsFiles:
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (d / f"{secret}-{key}").write_bytes(base64.b64decode(observed[secret]["data"][key]))
    return mtls.TlsFiles(
        str(d / f"{secret}-ca.crt"), str(d / f"{secret}-tls.crt"), str(d / f"{secret}-tls.key")
    )


class Recorder(syncer_pb2_grpc.SyncerServiceServicer):
    def __init__(self) -> None:
        self.drained: list[str] = []

    def DrainNode(self, request: Any, context: Any) -> Any:
        self.drained.append(request.slurm_node)
        return syncer_pb2.DrainNodeResponse()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Recorder, dict[str, Any]]]:
    observed = _apply({}, pkijob.decide({}, CFG.ca_secret, PLAN, CFG, dt.datetime.now(dt.UTC)))
    recorder = Recorder()
    server = serving.GrpcServer(
        "127.0.0.1:0",
        [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(recorder, s)],
        ["tandem.v1.SyncerService"],
        _files(tmp_path, observed, "t-syncer-tls"),
    )
    server.start()
    yield f"localhost:{server.port}", recorder, observed
    server.stop(0)


def test_the_hooks_certificate_it_makes_is_the_gateway_to_the_syncer_and_the_operators_is_not(
    served: tuple[str, Recorder, dict[str, Any]], tmp_path: Path
) -> None:
    address, recorder, observed = served
    request = syncer_pb2.DrainNodeRequest(slurm_node="gpu-001", reason="x")
    with serving.channel(address, _files(tmp_path, observed, "t-hooks-tls")) as channel:
        syncer_pb2_grpc.SyncerServiceStub(channel).DrainNode(request, timeout=5)
    operator = _files(tmp_path, observed, "t-operator-tls")
    with serving.channel(address, operator) as channel, pytest.raises(grpc.RpcError) as e:
        syncer_pb2_grpc.SyncerServiceStub(channel).DrainNode(request, timeout=5)
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "tandem-operator may not call" in (e.value.details() or "")
    assert recorder.drained == ["gpu-001"]


def _created(secret: dict[str, Any], when: dt.datetime) -> dict[str, Any]:
    return {
        **secret,
        "metadata": {**secret["metadata"], "creationTimestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


def test_a_ca_planted_before_the_release_is_refused_unless_the_operator_trusts_it() -> None:
    """Issue 50: a CA Secret made before `helm install` (by whoever could create Secrets in the
    namespace) was trusted, and its maker held every Tandem identity's key. Labels are anyone's
    to write: what counts is whether it is older than Helm's first record of the release."""
    made = _apply({}, _decide({}))
    installed = NOW - dt.timedelta(days=1)
    planted = {**made, "t-grpc-ca": _created(made["t-grpc-ca"], installed - dt.timedelta(minutes=5))}
    with pytest.raises(pkijob.UntrustedCa, match="older than the release"):
        pkijob.decide(planted, CFG.ca_secret, PLAN, CFG, NOW, installed)
    trusting = replace(CFG, trust_existing_ca=True)
    assert pkijob.decide(planted, CFG.ca_secret, PLAN, trusting, NOW, installed) == []
    ours = {**made, "t-grpc-ca": _created(made["t-grpc-ca"], installed + dt.timedelta(seconds=2))}
    assert pkijob.decide(ours, CFG.ca_secret, PLAN, CFG, NOW, installed) == []
    # No record to read (another Helm storage driver): this hook's labels decide.
    unlabelled = {**made, "t-grpc-ca": {**made["t-grpc-ca"], "metadata": {"name": "t-grpc-ca"}}}
    with pytest.raises(pkijob.UntrustedCa, match="lacks its labels"):
        pkijob.decide(unlabelled, CFG.ca_secret, PLAN, CFG, NOW)
