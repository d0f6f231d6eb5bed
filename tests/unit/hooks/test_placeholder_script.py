"""The placeholder script, run by bash against a stand-in gateway (a real socket) and a stand-in
scontrol: its started marker, its sleep, and what it does at KillWait."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tandem import scripts


class Gateway:
    """Answers each route with a status and body (200 `{}` unless told), and logs the routes."""

    def __init__(self) -> None:
        self.routes: list[str] = []
        self.answers: dict[str, tuple[int, str] | None] = {}
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                route = self.path.rsplit("/", 1)[-1]
                gateway.routes.append(route)
                answer = gateway.answers.get(route, (200, "{}"))
                if answer is None:  # no answer: close without a word
                    self.close_connection = True
                    return
                status, body = answer
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    g = Gateway()
    yield g
    g.close()


def _start(
    tmp_path: Path, gateway: Gateway, env_extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], Path]:
    """The script as a job's batch step, with a stand-in scontrol that logs its calls."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/bash\necho "scontrol $*" >> {log}\nexit 0\n')
    scontrol.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "TANDEM_HOOKS_ENV": "/nonexistent",
        "TANDEM_HOOKS_URL": gateway.url,
        "SLURM_JOB_ID": "42",
        "SLURMD_NODENAME": "cpu-001",
        **(env_extra or {}),
    }
    return subprocess.Popen(["bash", str(scripts.DIR / "placeholder.sh")], env=env), log


def _wait_marked(log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if log.exists() and "update jobid" in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError("the script never marked its job started")


def _run_until_marked(tmp_path: Path, gateway: Gateway, env_extra: dict[str, str]) -> list[str]:
    proc, log = _start(tmp_path, gateway, env_extra)
    try:
        _wait_marked(log)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
    return [line for line in log.read_text().splitlines() if line.startswith("scontrol")]


@pytest.mark.parametrize(
    ("extra", "marked"),
    [
        ("", "scontrol update jobid=42 extra=: started"),
        ("traceparent=00-1-2-01", "scontrol update jobid=42 extra=traceparent=00-1-2-01: started"),
    ],
)
def test_the_script_appends_its_marker_to_the_extra_it_was_given(
    tmp_path: Path, gateway: Gateway, extra: str, marked: str
) -> None:
    # One scontrol call, nothing asked of Slurm first: the batch environment has no SLURM_JOB_EXTRA.
    env = {"TANDEM_JOB_EXTRA": extra, "SLURM_JOB_EXTRA": "ignored"}
    assert _run_until_marked(tmp_path, gateway, env) == [marked]
    assert gateway.routes[0] == "started"


@pytest.mark.parametrize(
    ("answer", "runs_scontrol"),
    [
        ('{"job": 42, "started": true, "marked": true}', False),
        ('{"job": 42, "started": true, "marked": false}', True),
        ('{"error": "marked": true"}', True),  # not a 2xx answer (below): never taken as marked
    ],
)
def test_the_script_leaves_the_marker_to_tandem_when_tandem_wrote_it(
    tmp_path: Path, gateway: Gateway, answer: str, runs_scontrol: bool
) -> None:
    """Issue 22: the script's `scontrol update` was ~5 ms of CPU a Pod; Tandem writes the marker
    when the started call reaches it and the script only when Tandem did not say it did."""
    gateway.answers["started"] = (500 if "error" in answer else 200, answer)
    proc, log = _start(tmp_path, gateway)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (log.exists() or "started" in gateway.routes):
            time.sleep(0.05)
        if runs_scontrol:
            _wait_marked(log)
        else:
            # The script would have run scontrol right after the call; give it that long.
            time.sleep(1.0)
            assert not log.exists()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(10)
    assert gateway.routes[0] == "started"


def test_on_sigterm_the_script_leaves_no_sleep_behind(tmp_path: Path, gateway: Gateway) -> None:
    """Its `sleep &` would otherwise be reparented out of the job and outlive it."""
    proc, _ = _start(tmp_path, gateway)  # `terminating` answers 200: the Pod is gone
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")

    def sleeping_child() -> str | None:
        for pid in children.read_text().split():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"):
                    return pid
            except FileNotFoundError:
                continue
        return None

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and sleeping_child() is None:
        time.sleep(0.05)
    sleeper = sleeping_child()
    assert sleeper is not None
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 0
    assert gateway.routes == ["started", "terminating"]
    time.sleep(0.2)
    state = Path(f"/proc/{sleeper}/stat")
    assert not state.exists() or state.read_text().split(")")[1].split()[0] == "Z"


@pytest.mark.parametrize(
    ("terminating_answer", "drains_itself"),
    [
        # Tandem answered 408 after draining the nodes a Pod of the job still runs on.
        ((408, json.dumps({"pod_gone": False, "drained_slurm_nodes": ["cpu-002"]})), False),
        # No answer (the gateway closes every `terminating` call): the script drains its own node.
        (None, True),
    ],
)
def test_at_killwait_the_script_drains_only_when_tandem_could_not(
    tmp_path: Path, gateway: Gateway, terminating_answer: tuple[int, str] | None, drains_itself: bool
) -> None:
    proc, log = _start(tmp_path, gateway, {"TANDEM_KILL_WAIT": "5"})
    # Unanswered, the script asks again until its budget (5 - 3 s of margin) is spent.
    gateway.answers["terminating"] = terminating_answer
    _wait_marked(log)
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 1
    assert ("drain" in gateway.routes) == drains_itself
    assert not any("state=drain" in line for line in log.read_text().splitlines())


def test_a_started_call_nobody_answers_still_marks_the_job(tmp_path: Path) -> None:
    """No gateway at all (nothing listens): the call gives up after its 10 s budget at most and
    the marker, which survives restarts and lost calls, is still written."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    dead = Gateway()
    dead.url = closed
    started = time.monotonic()
    proc, log = _start(tmp_path, dead)
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (log.exists() and "update jobid" in log.read_text()):
            time.sleep(0.1)
        assert "update jobid=42" in log.read_text()
        assert 9 <= time.monotonic() - started < 14
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        dead.close()
