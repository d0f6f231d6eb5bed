"""The SlurmRestClients a test makes against the stand-in (slurm_rest_world), closed after it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tandem.slurm.rest import (
    SlurmRestClient,
    TokenFile,
    TokenSource,
)
from tests.unit import httpx_stand_in
from tests.unit.libs.slurm_rest_world import BASE, MakeClient, Recorder, Respond


@pytest.fixture
def make_client() -> Iterator[MakeClient]:
    clients: list[SlurmRestClient] = []

    def make(
        respond: Respond,
        *,
        version: str = "v0.0.40",
        tokens: TokenSource | TokenFile | None = None,
        user: str = "slurm",
    ) -> tuple[SlurmRestClient, Recorder]:
        recorder = Recorder(respond)
        client = SlurmRestClient(BASE, user, tokens or TokenSource(token="fixed-token"), version=version)
        client._http.close()
        client._http = httpx_stand_in.client(client.base_url, recorder)
        clients.append(client)
        return client, recorder

    yield make
    for client in clients:
        client.close()
