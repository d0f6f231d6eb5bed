"""The gateway checks a node credential's signature against the API server's published keys
(issue 50): a forged token is refused before the syncer spends a TokenReview on it, and a flood of
them costs the API server at most one JWKS read per interval."""

from __future__ import annotations

import base64
import json
import threading
import time
from typing import Any

import httpx
import pytest

from tandem.hooks.gateway import HooksGateway
from tandem.sakeys import ServiceAccountKeys, Verdict, parse_jwks
from tests.unit.future_stub import FutureStub
from tests.unit.hooks.test_gateway_limits import Syncer
from tests.unit.node_credentials import SigningKey, node_token


class Jwks:
    """The API server's /openid/v1/jwks, counting reads."""

    def __init__(self, *keys: SigningKey) -> None:
        self.keys = list(keys)
        self.reads = 0

    def __call__(self) -> bytes:
        self.reads += 1
        docs = [json.loads(k.jwks())["keys"][0] for k in self.keys]
        return json.dumps({"keys": docs}).encode()


@pytest.fixture(scope="module")
def signer() -> SigningKey:
    return SigningKey("k1")


def _wait_refreshed(keys: ServiceAccountKeys) -> None:
    deadline = time.monotonic() + 5
    while any(t.name == "sa-keys" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_token_signed_by_a_published_key_is_signed_and_one_re_signed_by_nobody_is_forged(
    signer: SigningKey,
) -> None:
    jwks = Jwks(signer)
    keys = ServiceAccountKeys(jwks)
    assert keys.refresh()
    good = signer.sign(node_token("gpu-001"))
    assert keys.verdict(good) is Verdict.SIGNED
    head, claims, sig = good.split(".")
    forged_claims = (
        base64.urlsafe_b64encode(b'{"aud":["tandem-hooks"],"exp":9999999999}').decode().rstrip("=")
    )
    assert keys.verdict(f"{head}.{forged_claims}.{sig}") is Verdict.FORGED  # a signature of other claims
    assert keys.verdict(f"{head}.{claims}.c2lnbmF0dXJl") is Verdict.FORGED
    none_alg = base64.urlsafe_b64encode(b'{"alg":"none","kid":"k1"}').decode().rstrip("=")
    assert keys.verdict(f"{none_alg}.{claims}.") is Verdict.FORGED
    assert keys.verdict("not a jwt") is Verdict.FORGED
    assert jwks.reads == 1


def test_an_unknown_key_id_reads_the_keys_again_once_per_interval(signer: SigningKey) -> None:
    rotated = SigningKey("k2")
    jwks = Jwks(signer)
    now = [100.0]
    keys = ServiceAccountKeys(jwks, min_refresh=10.0, clock=lambda: now[0])
    keys.refresh()
    token = rotated.sign(node_token("gpu-001"))
    jwks.keys.append(rotated)  # the API server's signing key rotated
    now[0] += 11
    assert keys.verdict(token) is Verdict.UNKNOWN  # being read again: ask again
    _wait_refreshed(keys)
    assert keys.verdict(token) is Verdict.SIGNED
    assert jwks.reads == 2
    # A flood of made-up key ids: refused, with no read of the keys within the interval.
    for i in range(200):
        fake = SigningKey.__new__(SigningKey)
        fake.kid, fake.key = f"made-up-{i}", signer.key
        assert keys.verdict(fake.sign(node_token("gpu-001"))) is Verdict.FORGED
    assert jwks.reads == 2


def test_a_bad_jwks_keeps_the_keys_it_had(signer: SigningKey) -> None:
    answers = [Jwks(signer)(), b"<html>oops</html>"]
    keys = ServiceAccountKeys(lambda: answers.pop(0))
    assert keys.refresh() and not keys.refresh()
    assert keys.verdict(signer.sign(node_token("gpu-001"))) is Verdict.SIGNED
    with pytest.raises(ValueError):
        parse_jwks(b'{"no": "keys"}')


def _gateway(syncer: Syncer, keys: ServiceAccountKeys) -> HooksGateway:
    g = HooksGateway("127.0.0.1:0", FutureStub(syncer), 5, node_keys=keys)  # type: ignore[arg-type]
    g.start()
    return g


def test_the_gateway_refuses_a_forged_node_credential_before_the_syncer(signer: SigningKey) -> None:
    jwks = Jwks(signer)
    # The clock stands still: the flood is all within one refresh interval however slowly the
    # machine serves it (at 11 s on a loaded CI machine a real clock let a second read start, and
    # the forgeries sent during it were rightly told to ask again).
    keys = ServiceAccountKeys(jwks, clock=lambda: 0.0)
    keys.refresh()
    syncer = Syncer()
    gateway = _gateway(syncer, keys)
    try:
        url = f"http://127.0.0.1:{gateway.port}/v1/unlock"
        body: dict[str, Any] = {"node": "gpu-001", "job": 7}
        forged = node_token("gpu-001")  # the right form, signed by nobody
        with httpx.Client(timeout=5) as http:
            answers = [
                http.post(url, json=body, headers={"Authorization": f"Bearer {forged}"}) for _ in range(50)
            ]
            assert {r.status_code for r in answers} == {401}
            assert syncer.calls == []  # no TokenReview: the syncer never heard of them
            good = signer.sign(node_token("gpu-001"))
            ok = http.post(url, json=body, headers={"Authorization": f"Bearer {good}"})
        assert ok.status_code == 200, ok.text
        assert [name for name, _ in syncer.calls] == ["unlock"]
        assert jwks.reads == 1
    finally:
        gateway.stop()


def test_keys_never_read_make_a_node_ask_again_not_fail(signer: SigningKey) -> None:
    """The lab's first run: the API server answered 406 to the JWKS read, and every prolog got 401
    and drained its node. Keys that could not be read are no forgery: the scripts ask again (503)."""

    def unreadable() -> bytes:
        raise RuntimeError("HTTP 406 NotAcceptable")

    keys = ServiceAccountKeys(unreadable, min_refresh=3600.0)
    assert not keys.refresh()
    assert keys.verdict(signer.sign(node_token("gpu-001"))) is Verdict.UNKNOWN
