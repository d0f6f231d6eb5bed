from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tandem.hooks.gateway import HooksGateway


@pytest.fixture
def gateway() -> Iterator[HooksGateway]:
    g = HooksGateway("127.0.0.1:0", "s3cret", None)
    g.start()
    yield g
    g.stop()


def test_no_token_wrong_token_and_wrong_scheme_are_refused(gateway: HooksGateway) -> None:
    url = f"http://127.0.0.1:{gateway.port}/v1/lock"
    assert httpx.post(url, json={}).status_code == 401
    assert httpx.post(url, json={}, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.post(url, json={}, headers={"Authorization": "Basic s3cret"}).status_code == 401


def test_anonymous_gateway_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="bearer token"):
        HooksGateway("127.0.0.1:0", "", None)
