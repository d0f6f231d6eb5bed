"""Issue 51: CI builds the later legs' tools in the background while a leg runs; a leg that needs a
product still being built waits for that build and never builds it beside it; a stack can start
before Kueue's and LWS's controllers are built."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devstack import build_lock, image, tools


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("TANDEM_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_two_processes_wanting_one_tool_build_it_once_and_both_get_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tool = tools.Tool("kwok", "v0.0.1", go_install="sigs.k8s.io/kwok/cmd/kwok")
    builds: list[str] = []

    def slow_build(t: tools.Tool) -> None:
        builds.append(t.name)
        time.sleep(0.3)  # a build takes a while: the other caller looks meanwhile
        t.cached.parent.mkdir(parents=True, exist_ok=True)
        t.cached.write_text("binary")

    monkeypatch.setattr(tools, "_build", slow_build)
    # Threads stand in for the processes: each opens the lock file anew, so flock sets them apart.
    callers = [
        threading.Thread(target=tools.ensure_tools, args=(tmp_path / f"bin{i}", [tool])) for i in range(2)
    ]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)

    assert builds == ["kwok"]
    for i in range(2):
        assert (tmp_path / f"bin{i}" / "kwok").read_text() == "binary"


def test_a_caller_waits_for_the_process_holding_the_build_lock(cache: Path) -> None:
    product = cache / "bin" / "thing-v1"
    product.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(0.5); print('letting go', flush=True); "
            "fcntl.flock(f, fcntl.LOCK_UN); time.sleep(1)",
            str(build_lock.lock_path(product)),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    started = time.monotonic()

    with build_lock.held(product, "a thing"):
        waited = time.monotonic() - started
        assert holder.stdout.readline().strip() == "letting go"  # not before the other let go

    assert waited >= 0.2
    holder.wait(5)


def test_two_callers_linking_one_tool_at_once_both_leave_a_good_link(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tool = tools.Tool("etcd", "v0.0.1", module_dir="etcd", build_pkg=".")
    tool.cached.parent.mkdir(parents=True)
    tool.cached.write_text("etcd")
    old = tmp_path / "bin" / "etcd"
    old.parent.mkdir()
    old.symlink_to(tmp_path / "an-older-etcd")
    errors: list[BaseException] = []

    def link(i: int) -> None:
        staged = tmp_path / f"staged{i}"
        try:
            for _ in range(50):
                tools.ensure_tools(tmp_path / "bin", [tool])
                staged.symlink_to(tmp_path / "an-older-etcd")  # an older version linked again
                staged.replace(old)
        except BaseException as e:  # a racing link's error, reported below
            errors.append(e)

    racers = [threading.Thread(target=link, args=(i,)) for i in range(2)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)

    assert errors == []
    tools.ensure_tools(tmp_path / "bin", [tool])
    assert old.read_text() == "etcd"


def test_the_image_is_built_once_when_two_callers_want_it(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(image, "key", lambda: "k1")
    builds: list[str] = []

    def slow_build(image_key: str, out: Path) -> None:
        builds.append(image_key)
        time.sleep(0.3)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("oci")

    monkeypatch.setattr(image, "_build", slow_build)
    callers = [threading.Thread(target=image.ensure_image) for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(10)

    assert builds == ["k1"]


def test_a_stack_without_its_late_controllers_builds_neither_kueue_nor_lws() -> None:
    early = {t.name for t in tools.lab_tools(late=False)}
    everything = {t.name for t in tools.lab_tools()}

    assert everything - early == {"kueue-controller", "lws-controller"}
    assert {t.name for t in tools.late_controller_tools()} == set(tools.LATE_CONTROLLERS)
    assert {"kube-apiserver", "etcd", "kwok"} <= early
