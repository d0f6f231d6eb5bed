"""The scripts' one way to call the hooks API (common.sh's tandem_call), against a real socket:
an answer that never comes (a gateway killed mid-call, restarting, or a syncer unavailable behind
it) is asked again until the budget ends; an answer that says no is final."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem import scripts
from tests.unit.node_credentials import node_token

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
REFUSED = (
    b'HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{"error":"busy"}'
)
UNAVAILABLE = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}"
CUT = b""  # read the request, close without a word (the gateway died with the call in flight)
# The node's credential (tandem.nodetoken), as the prolog and epilog present it.
NODE_TOKEN = node_token("gpu-001", uid="uid-gpu-001")


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
                seen.append(_request(conn))
                if answer:
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    yield port, seen
    server.close()


# What a script does with a call: its status, and the reply it got (or why it got none).
CALL = (
    '. "{common}"; tandem_call {route} {budget} \'{{"job":1}}\'; '
    'rc=$?; printf "%s\\n" "$tandem_reply"; exit $rc'
)


def _request(conn: socket.socket) -> bytes:
    """The request's head and its Content-Length of body, however it was cut into segments."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [h.split(b":", 1)[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
    length = int(lengths[0]) if lengths else 0
    while len(body) < length and (chunk := conn.recv(65536)):
        body += chunk
    return head + b"\r\n\r\n" + body


def _call(port: int, budget: int = 8) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", CALL.format(common=scripts.DIR / "common.sh", route="lock", budget=budget)],
        env={
            "PATH": "/usr/bin:/bin",
            "TANDEM_HOOKS_ENV": "/nonexistent",
            "TANDEM_HOOKS_URL": f"http://127.0.0.1:{port}",
            "TANDEM_HOOKS_TOKEN": NODE_TOKEN,
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


def test_a_refusal_sent_before_the_body_is_read_is_final() -> None:
    """The gateway refuses a wrong token from the head alone, before the body (tandem.boundedhttp;
    bash writes a request a line at a time): the refusal is read and final, not taken for a lost
    call and asked again until the budget ends."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    calls = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
                    data += chunk
                calls.append(data)
                conn.sendall(b'HTTP/1.1 401 Unauthorized\r\nContent-Length: 14\r\n\r\n{"error":"no"}')
                # Lingering, as tandem.boundedhttp does: closing with the body unread would
                # reset the connection, and the answer with it.
                conn.shutdown(socket.SHUT_WR)
                while conn.recv(65536):
                    pass

    threading.Thread(target=serve, daemon=True).start()
    try:
        out = _call(port, budget=5)
    finally:
        server.close()
    assert out.returncode != 0
    assert '{"error":"no"}' in out.stdout
    assert len(calls) == 1


def test_no_gateway_at_all_gives_up_within_the_budget() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    out = _call(port, budget=3)
    assert out.returncode != 0
    assert "no answer" in out.stdout
    assert time.monotonic() - started < 5


def test_a_connect_that_hangs_is_cut_at_the_budget() -> None:
    """A route that drops packets leaves connect() waiting for minutes (the kernel's SYN retries);
    the call must still end by its budget. A listener whose accept queue is full drops SYNs."""
    server = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    try:
        started = time.monotonic()
        out = _call(port, budget=3)
        took = time.monotonic() - started
    finally:
        for c in fillers:
            c.close()
        server.close()
    assert out.returncode != 0
    assert took < 6, f"the call took {took:.1f} s on a 3 s budget"


@pytest.mark.parametrize("gateway", [(OK,)], indirect=True)
@pytest.mark.parametrize(
    ("env", "sent"),
    [
        ({"TANDEM_HOOKS_TOKEN": NODE_TOKEN}, [f"Authorization: Bearer {NODE_TOKEN}".encode()]),
        (
            {"TANDEM_JOB_TOKEN": "job-s3cret", "TANDEM_PLACEHOLDER": "tandem:t/ns/p/u"},
            [b"Authorization: Bearer job-s3cret", b"X-Tandem-Placeholder: tandem:t/ns/p/u"],
        ),
    ],
    ids=["node credential", "job token"],
)
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_credential_never_shows_in_a_command_line(
    gateway: tuple[int, list[bytes]], tmp_path: Any, env: dict[str, str], sent: list[bytes], scheme: str
) -> None:
    """Any user on a Slurm node can read every process's arguments (ps). Before: the token was a
    `curl -H` argument, so a Slurm user could read root's node credential, or a placeholder's token, off a
    running call. It now reaches curl on its stdin. (A node's credential is a bound token that
    dies with its slurmd Pod, but while it lives it locks and unlocks its node.)"""
    port, seen = gateway
    argv_log = tmp_path / "argv"
    argv_log.touch()
    spy = tmp_path / "bin" / "curl"
    spy.parent.mkdir()
    # curl, for a gateway behind TLS: this one logs its arguments and speaks plain HTTP.
    spy.write_text(
        f'#!/bin/bash\nprintf "%s\\n" "$@" >> "{argv_log}"\nexec /usr/bin/curl "${{@/https:/http:}}"\n'
    )
    spy.chmod(0o755)
    out = subprocess.run(
        ["bash", "-c", CALL.format(common=scripts.DIR / "common.sh", route="started", budget=8)],
        env={
            "PATH": f"{spy.parent}:/usr/bin:/bin",
            "TANDEM_HOOKS_ENV": "/nonexistent",
            "TANDEM_HOOKS_URL": f"{scheme}://127.0.0.1:{port}",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    argv = argv_log.read_text()
    assert NODE_TOKEN not in argv and "s3cret" not in argv
    # Plain HTTP goes over bash's own socket: no process at all.
    assert bool(argv_log.read_text()) == (scheme == "https")
    for header in sent:
        assert header in seen[0]


def test_sourcing_the_scripts_library_starts_no_process_and_a_sleep_still_waits(tmp_path: Path) -> None:
    """Issue 22: every prolog, epilog and placeholder sourced common.sh, which opened its sleeping
    pipe with `<(:)`, a fork each, though most never sleep. It is opened at the first sleep."""
    fds = tmp_path / "fds"
    script = (
        '. "{common}"; ls -l /proc/$$/fd > {fds}.before; t=$SECONDS; tandem_sleep 1; '
        "echo $((SECONDS - t)); ls -l /proc/$$/fd > {fds}.after"
    ).format(common=scripts.DIR / "common.sh", fds=fds)
    out = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": "/usr/bin:/bin", "TANDEM_HOOKS_ENV": "/nonexistent"},
        capture_output=True,
        text=True,
        timeout=10,
    ).stdout

    def pipes(listing: Path) -> int:  # beyond stdin, stdout and stderr
        rows = [line.split() for line in listing.read_text().splitlines() if "->" in line]
        return sum(1 for r in rows if int(r[r.index("->") - 1]) > 2 and r[-1].startswith("pipe:"))

    assert pipes(Path(f"{fds}.before")) == 0  # no pipe, so no `<(:)` process, for a script that never sleeps
    assert int(out) >= 1  # tandem_sleep waits all the same
    assert pipes(Path(f"{fds}.after")) == 1


def test_the_epilog_waits_for_a_dead_gateway_only_as_long_as_hooks_env_says() -> None:
    """TANDEM_UNLOCK_TIMEOUT (hooks.env) bounds the epilog's unlock; it exits 0 all the same, for
    the syncer releases the lock of an idle node on its own. (It was a fixed 20 s.)"""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    out = subprocess.run(
        ["bash", str(scripts.DIR / "epilog.sh")],
        env={
            "PATH": "/usr/bin:/bin",
            "TANDEM_HOOKS_ENV": "/nonexistent",
            "TANDEM_HOOKS_URL": f"http://127.0.0.1:{port}",
            "TANDEM_HOOKS_TOKEN": NODE_TOKEN,
            "TANDEM_UNLOCK_TIMEOUT": "2",
            "SLURMD_NODENAME": "gpu-001",
            "SLURM_JOB_ID": "7",
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    took = time.monotonic() - started
    assert out.returncode == 0
    assert "unlock of gpu-001 for job 7 failed" in out.stderr
    assert took < 5, f"the epilog took {took:.1f} s on a 2 s budget"
