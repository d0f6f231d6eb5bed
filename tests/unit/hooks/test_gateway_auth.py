"""The gateway serves a node route only to a node's credential (tandem.nodetoken): a JWT for the
audience tandem-hooks, not expired. It checks the form alone (the syncer has the API server review
the token); anything else is refused from the head, before any syncer call."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tandem.hooks.gateway import HooksGateway
from tests.unit.node_credentials import node_token


@pytest.fixture
def gateway() -> Iterator[HooksGateway]:
    g = HooksGateway("127.0.0.1:0", None)
    g.start()
    yield g
    g.stop()


def _post(gateway: HooksGateway, headers: dict[str, str]) -> httpx.Response:
    url = f"http://127.0.0.1:{gateway.port}/v1/lock"
    return httpx.post(url, json={"node": "gpu-000", "job": 1}, headers=headers, timeout=5)


def test_a_call_without_an_authorization_header_is_refused(gateway: HooksGateway) -> None:
    """No shared token to build the gateway with any more, and nothing anonymous served: a call
    with no credential gets 401 and the realm to present one for."""
    r = _post(gateway, {})
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="tandem-hooks"'
    assert "bearer token" in r.json()["error"]


@pytest.mark.parametrize(
    "authorization",
    [
        "Bearer nope",  # not a JWT
        "Bearer s3cret",  # a shared secret of old: no longer a credential
        f"Bearer {node_token(expires_in=-10)}",  # expired
        f"Bearer {node_token(audience='kubernetes')}",  # a token for another audience
        f"Basic {node_token()}",  # the right token under another scheme
        "Bearer",  # the scheme, no token
        node_token(),  # no scheme at all
    ],
    ids=["not a jwt", "shared secret", "expired", "other audience", "basic", "empty", "no scheme"],
)
def test_a_token_that_is_not_a_node_credential_is_refused(gateway: HooksGateway, authorization: str) -> None:
    assert _post(gateway, {"Authorization": authorization}).status_code == 401


def test_a_node_credential_passes_the_screen(gateway: HooksGateway) -> None:
    """Past the credential (this gateway has no syncer, so the call then fails as a bad request):
    what makes the refusals above refusals of the token, not of everything."""
    r = _post(gateway, {"Authorization": f"Bearer {node_token()}"})
    assert r.status_code == 400 and "no syncer configured" in r.json()["error"], r.text
    r = _post(gateway, {"Authorization": f"bearer {node_token()}"})  # the scheme in any case
    assert r.status_code == 400, r.text
