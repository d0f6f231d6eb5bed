"""tandem.httpwire against a real HTTP/1.1 server on 127.0.0.1: kept-alive connections, a
connection the server closed, timeouts, streamed bodies, and no retry of a POST."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tandem import httpwire


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.connections = 0
        self.requests: list[tuple[str, str, bytes]] = []
        self.delay = 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self, status: int, body: bytes) -> None:
        time.sleep(self.server.delay)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.server.requests.append(("GET", self.path, b""))
        if self.path.startswith("/lines"):
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for n in range(5):
                data = json.dumps({"n": n}).encode() + b"\n"
                # A line cut across chunks, as a watch's events are.
                for part in (data[:3], data[3:]):
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        if self.path.startswith("/short"):  # a body that stops before its Content-Length
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b'{"cut": ')
            self.close_connection = True
            return
        self._answer(
            404 if self.path.startswith("/missing") else 200, json.dumps({"path": self.path}).encode()
        )

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.requests.append(("POST", self.path, body))
        self._answer(201, body)


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.shutdown()
    s.server_close()


def _client(server: Server, **kwargs: float) -> httpwire.Client:
    return httpwire.Client(f"http://127.0.0.1:{server.server_address[1]}", **kwargs)  # type: ignore[arg-type]


def test_calls_share_one_kept_alive_connection(server: Server) -> None:
    client = _client(server)
    for _ in range(5):
        assert client.request("GET", "/x", params={"a": "1", "b": ["2", "3"]}).json() == {
            "path": "/x?a=1&b=2&b=3"
        }
    assert server.connections == 1


def test_a_json_body_is_sent_and_the_status_read(server: Server) -> None:
    answer = _client(server).request("POST", "/things", json={"k": "v"})
    assert answer.status_code == 201 and answer.json() == {"k": "v"}
    assert server.requests == [("POST", "/things", b'{"k": "v"}')]
    missing = _client(server).request("GET", "/missing")
    assert missing.status_code == 404 and "missing" in missing.text


def test_a_connection_the_server_closed_while_idle_is_not_used(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Handler, "timeout", 0.05)  # the server drops a connection idle this long
    client = _client(server)
    for _ in range(3):
        assert client.request("POST", "/p", json={}).status_code == 201
        time.sleep(0.3)
    assert server.connections == 3
    assert len(server.requests) == 3  # each POST sent once, none on a closed connection


def test_a_post_on_a_connection_closed_under_it_fails_and_is_not_sent_again() -> None:
    # A server that reads a request, then closes without answering: a POST may have been carried
    # out, so it is not tried again.
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            seen.append(conn.recv(65536))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = httpwire.Client(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout=5)
    with pytest.raises(httpwire.HttpError):
        client.request("POST", "/p", json={"once": True})
    time.sleep(0.1)
    assert len(seen) == 1
    listener.close()


def test_no_answer_in_time_is_an_error_and_frees_its_connection(server: Server) -> None:
    server.delay = 0.5
    client = _client(server, timeout=0.1)
    with pytest.raises(httpwire.HttpError, match="timed out"):
        client.request("GET", "/slow")
    server.delay = 0.0
    assert client.request("GET", "/fast", timeout=5).status_code == 200


def test_nothing_listening_is_an_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(httpwire.HttpError):
        httpwire.Client(f"http://127.0.0.1:{port}", timeout=2).request("GET", "/")


def test_a_streamed_body_comes_in_lines_and_its_connection_is_kept(server: Server) -> None:
    client = _client(server)
    with client.request("GET", "/lines", stream=True) as answer:
        assert [json.loads(line) for line in answer.iter_lines()] == [{"n": n} for n in range(5)]
    assert client.request("GET", "/after").status_code == 200
    assert server.connections == 1


def test_a_streamed_body_of_known_length_read_to_its_end_keeps_its_connection(server: Server) -> None:
    client = _client(server)
    for n in range(3):
        with client.request("GET", f"/sized/{n}", stream=True) as answer:
            assert json.loads(b"".join(answer.iter_bytes())) == {"path": f"/sized/{n}"}
    assert client.request("GET", "/after").json() == {"path": "/after"}
    assert server.connections == 1


def test_a_stream_closed_early_gives_its_slot_back(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(httpwire, "MAX_CONNECTIONS", 1)
    client = _client(server, timeout=1)
    for _ in range(3):  # with one slot, a slot not given back would block the second call
        answer = client.request("GET", "/lines", stream=True)
        next(answer.iter_lines())
        answer.close()
    assert client.request("GET", "/x").status_code == 200


def test_a_stand_in_transport_sees_the_request_and_answers() -> None:
    seen: list[httpwire.Request] = []

    def transport(request: httpwire.Request) -> httpwire.Response:
        seen.append(request)
        return httpwire.Response(200, json={"ok": True})

    client = httpwire.Client("https://example.invalid/base", transport=transport, headers={"Accept": "x"})
    assert client.request("PUT", "/a", params={"q": "1"}, content=b"body").json() == {"ok": True}
    assert seen == [httpwire.Request("PUT", "/base/a?q=1", {"Accept": "x"}, b"body")]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_body_cut_short_of_its_length_is_an_error(server: Server, stream: bool) -> None:
    client = _client(server)
    with pytest.raises(httpwire.HttpError, match="broke off"):
        client.request("GET", "/short", stream=stream).read()
    assert client.request("GET", "/after").status_code == 200
