"""A server stand-in written against httpx's request/response types (their URL and stream helpers
make tests short), plugged into tandem.httpwire as its transport: what the client sends reaches
`respond` as an httpx.Request; its httpx.Response (or error) comes back as httpwire's."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx

from tandem import httpwire

Respond = Callable[[httpx.Request], httpx.Response]


def client(base_url: str, respond: Respond) -> httpwire.Client:
    def transport(request: httpwire.Request) -> httpwire.Response:
        asked = httpx.Request(
            request.method, base_url + request.path, headers=dict(request.headers), content=request.content
        )
        try:
            answer = respond(asked)
        except httpx.HTTPError as e:
            raise httpwire.HttpError(str(e)) from e
        return httpwire.Response(answer.status_code, headers=dict(answer.headers), chunks=_body(answer))

    return httpwire.Client(base_url, transport=transport)


def _body(answer: httpx.Response) -> Iterator[bytes]:
    try:
        yield from answer.iter_bytes()
    except httpx.HTTPError as e:
        raise OSError(str(e)) from e  # what a broken connection raises under httpwire
