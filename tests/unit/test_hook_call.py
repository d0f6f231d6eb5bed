"""The scripts' one way to call the hooks API (common.sh's tandem_call), against a real socket:
an answer that never comes (a gateway killed mid-call, restarting, or a syncer unavailable behind
it) is asked again until the budget ends; an answer that says no is final."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.hooks import scripts

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
REFUSED = (
    b'HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"error":"busy"}'
)
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}"
CUT = b""  # read the request, close without a word (the gateway died with the call in flight)


@pytest.fixture
def gateway(request: pytest.FixtureRequest) -> Iterator[tuple[int, list[bytes]]]:
    """A socket that answers each connection with the next scripted answer."""
    answers: list[bytes] = list(request.param)
    seen: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve() -> None:
        for answer in answers:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # the test is over before every answer was asked for
            with conn:
                seen.append(conn.recv(65536))
                if answer:
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    yield port, seen
    server.close()


def _call(port: int, budget: int = 8) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f'. "{scripts.DIR / "common.sh"}"; tandem_call lock {budget} \'{{"job":1}}\''],
        env={
            "PATH": "/usr/bin:/bin",
            "TANDEM_HOOKS_ENV": "/nonexistent",
            "TANDEM_HOOKS_URL": f"http://127.0.0.1:{port}",
            "TANDEM_HOOKS_TOKEN": "t",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("gateway", [(CUT, OK)], indirect=True)
def test_a_call_cut_off_mid_way_is_asked_again(gateway: tuple[int, list[bytes]]) -> None:
    """Before: curl's --retry does not retry an empty reply (exit 52): a prolog whose gateway was
    killed during its lock call failed, and Slurm drained the node "Prolog error" (seen in a soak)."""
    port, seen = gateway
    out = _call(port)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == '{"ok":true}'
    assert len(seen) == 2


@pytest.mark.parametrize("gateway", [(UNAVAILABLE, OK)], indirect=True)
def test_an_unavailable_syncer_is_asked_again(gateway: tuple[int, list[bytes]]) -> None:
    port, seen = gateway
    assert _call(port).returncode == 0 and len(seen) == 2


@pytest.mark.parametrize("gateway", [(REFUSED, OK)], indirect=True)
def test_a_refusal_is_final_and_its_words_are_printed(gateway: tuple[int, list[bytes]]) -> None:
    port, seen = gateway
    out = _call(port)
    assert out.returncode != 0
    assert '{"error":"busy"}' in out.stdout + out.stderr
    assert len(seen) == 1


def test_no_gateway_at_all_gives_up_within_the_budget() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = _call(port, budget=3)
    assert out.returncode != 0


@pytest.mark.parametrize("gateway", [(OK,)], indirect=True)
@pytest.mark.parametrize(
    ("env", "sent"),
    [
        ({"TANDEM_HOOKS_TOKEN": "root-s3cret"}, [b"Authorization: Bearer root-s3cret"]),
        (
            {"TANDEM_JOB_TOKEN": "job-s3cret", "TANDEM_PLACEHOLDER": "tandem:t/ns/p/u"},
            [b"Authorization: Bearer job-s3cret", b"X-Tandem-Placeholder: tandem:t/ns/p/u"],
        ),
    ],
    ids=["hooks token", "job token"],
)
def test_the_credential_never_shows_in_a_command_line(
    gateway: tuple[int, list[bytes]], tmp_path: Any, env: dict[str, str], sent: list[bytes]
) -> None:
    """Any user on a Slurm node can read every process's arguments (ps). Before: the token was a
    `curl -H` argument, so a Slurm user could read root's hooks token, or a placeholder's, off a
    running call. It now reaches curl on its stdin."""
    port, seen = gateway
    argv_log = tmp_path / "argv"
    spy = tmp_path / "bin" / "curl"
    spy.parent.mkdir()
    spy.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> "{argv_log}"\nexec /usr/bin/curl "$@"\n')
    spy.chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", f'. "{scripts.DIR / "common.sh"}"; tandem_call started 8 \'{{"job":1}}\''],
        env={
            "PATH": f"{spy.parent}:/usr/bin:/bin",
            "TANDEM_HOOKS_ENV": "/nonexistent",
            "TANDEM_HOOKS_URL": f"http://127.0.0.1:{port}",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    assert "s3cret" not in argv_log.read_text()
    for header in sent:
        assert header in seen[0]
