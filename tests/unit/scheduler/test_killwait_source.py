"""Slurm's KillWait as the scheduler reads it (tandem.scheduler.killwait_source): slurm.conf's
KillWait=, which source wins, and how a refresh keeps the last good value."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from tandem.scheduler.killwait_source import (
    FROM_DEFAULT,
    FROM_FLAG,
    FROM_SLURM,
    KillWait,
    KillWaitSource,
    SlurmConfError,
    from_file,
    parse_kill_wait,
)
from tandem.slurm.rest import SlurmApiError

# --- slurm.conf ----------------------------------------------------------------------------------

PARSE_ROWS = [
    ("the key as slurm.conf's man page writes it", "KillWait=45\n", 45),
    ("keys are case-insensitive", "killwait=45\nKILLWAIT=46\n", 46),
    ("absent: Slurm's default applies", "ClusterName=lab\nSlurmctldPort=6817\n", None),
    ("empty", "", None),
    ("a comment line", "# KillWait=99\nKillWait=45\n", 45),
    ("a comment after the value", "KillWait=45   # seconds\n", 45),
    ("only commented out", "#KillWait=45\n", None),
    ("the last one wins, as in slurmctld", "KillWait=45\nKillWait=60\n", 60),
    ("among other pairs on one line", "SlurmctldTimeout=120 KillWait=45 MinJobAge=300\n", 45),
    ("spaces around =", "KillWait = 45\n", 45),
    ("indented", "   KillWait=45\n", 45),
    ("a longer key ending the same is another key", "UnkillableKillWait=99\nKillWait=45\n", 45),
    ("Include lines are not read", "Include /etc/slurm/killwait.conf\nKillWait=45\n", 45),
    ("include in any case", "include /etc/slurm/KillWait=99\n", None),
    ("zero", "KillWait=0\n", 0),
    ("Windows line ends", "KillWait=45\r\nMinJobAge=300\r\n", 45),
]


@pytest.mark.parametrize(("why", "text", "seconds"), PARSE_ROWS, ids=[r[0] for r in PARSE_ROWS])
def test_slurm_conf_kill_wait(why: str, text: str, seconds: int | None) -> None:
    assert parse_kill_wait(text) == seconds, why


MALFORMED_ROWS = [
    ("a unit", "KillWait=30s\n", "line 1: KillWait=30s is not a whole number of seconds"),
    (
        "a fraction",
        "ClusterName=lab\nKillWait=1.5\n",
        "line 2: KillWait=1.5 is not a whole number of seconds",
    ),
    ("negative", "KillWait=-1\n", "line 1: KillWait=-1 is not a whole number of seconds"),
    ("nothing", "KillWait=\n", "line 1: KillWait= is not a whole number of seconds"),
    ("beyond a uint16", "KillWait=70000\n", "line 1: KillWait=70000 is out of range (0 to 65535 seconds)"),
    ("not ASCII digits", "KillWait=\u0663\u0660\n", "is not a whole number of seconds"),
]


@pytest.mark.parametrize(("why", "text", "message"), MALFORMED_ROWS, ids=[r[0] for r in MALFORMED_ROWS])
def test_a_malformed_kill_wait_is_a_clear_error(why: str, text: str, message: str) -> None:
    with pytest.raises(SlurmConfError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_kill_wait(text)


# --- which source ----------------------------------------------------------------------------------


class FakeSlurm:
    """slurmrestd's /conf: a configuration, None (not served), or an error raised."""

    def __init__(self, answer: dict[str, Any] | Exception | None) -> None:
        self.answer = answer
        self.calls = 0

    def get_conf(self) -> dict[str, Any] | None:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


SERVED = {"KillWait": 60, "UnkillableStepTimeout": 100}
DOWN = SlurmApiError("slurmrestd at http://slurm:6820 unreachable: refused")


def _conf(tmp_path: Path, text: str) -> str:
    path = tmp_path / "slurm.conf"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("why", "override", "slurm", "conf", "expected"),
    [
        ("the flag wins over Slurm", 20.0, SERVED, "KillWait=45\n", KillWait(20.0, FROM_FLAG)),
        ("the flag wins even with nothing else", 20.0, None, None, KillWait(20.0, FROM_FLAG)),
        ("Slurm's running configuration", None, SERVED, "KillWait=45\n", KillWait(60.0, FROM_SLURM)),
        ("/conf not served: the file", None, "not served", "KillWait=45\n", KillWait(45.0, "FILE")),
        ("no slurmrestd client: the file", None, None, "KillWait=45\n", KillWait(45.0, "FILE")),
        (
            "/conf not served, no file: Slurm's default",
            None,
            "not served",
            None,
            KillWait(30.0, FROM_DEFAULT),
        ),
        (
            "a file without KillWait= is Slurm's default",
            None,
            "not served",
            "ClusterName=lab\n",
            KillWait(30.0, f"{FROM_DEFAULT} (FILE sets none)"),
        ),
    ],
)
def test_where_kill_wait_comes_from(
    tmp_path: Path,
    why: str,
    override: float | None,
    slurm: dict[str, Any] | str | None,
    conf: str | None,
    expected: KillWait,
) -> None:
    path = _conf(tmp_path, conf) if conf is not None else ""
    reader = None if slurm is None else FakeSlurm(None if slurm == "not served" else slurm)  # type: ignore[arg-type]
    source = KillWaitSource(override, reader, path, clock=Clock())
    got = source.current()
    assert got == KillWait(expected.seconds, expected.source.replace("FILE", from_file(path))), why


def test_an_override_never_asks_slurm() -> None:
    slurm = FakeSlurm(SERVED)
    assert KillWaitSource(45.0, slurm).current() == KillWait(45.0, "--slurm-kill-wait")
    assert slurm.calls == 0


def test_the_phrases_a_refusal_cites() -> None:
    assert FROM_SLURM == "Slurm's running configuration"
    assert from_file("/etc/slurm/slurm.conf") == "slurm.conf at /etc/slurm/slurm.conf"
    assert FROM_FLAG == "--slurm-kill-wait"
    assert FROM_DEFAULT == "Slurm's default"


# --- refreshing ------------------------------------------------------------------------------------


def test_read_again_only_once_the_refresh_interval_passed() -> None:
    clock, slurm = Clock(), FakeSlurm(dict(SERVED))
    source = KillWaitSource(None, slurm, refresh_seconds=60, clock=clock)
    assert source.current() == KillWait(60.0, FROM_SLURM)
    slurm.answer = {"KillWait": 90}
    clock.now += 59
    assert source.current() == KillWait(60.0, FROM_SLURM)
    assert slurm.calls == 1
    clock.now += 1
    assert source.current() == KillWait(90.0, FROM_SLURM)  # followed without a restart
    assert slurm.calls == 2


def test_a_failed_refresh_keeps_the_last_good_value_and_logs_once_per_streak(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, slurm = Clock(), FakeSlurm(dict(SERVED))
    source = KillWaitSource(None, slurm, refresh_seconds=60, clock=clock)
    assert source.current() == KillWait(60.0, FROM_SLURM)
    slurm.answer = DOWN
    with caplog.at_level(logging.INFO, logger="tandem.scheduler.killwait_source"):
        for _ in range(3):
            clock.now += 60
            assert source.current() == KillWait(60.0, FROM_SLURM)
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1
        assert "unreachable" in errors[0].getMessage()
        assert "kept KillWait 60s from Slurm's running configuration" in errors[0].getMessage()
        slurm.answer = {"KillWait": 60}
        clock.now += 60
        assert source.current() == KillWait(60.0, FROM_SLURM)
        slurm.answer = DOWN
        clock.now += 60
        source.current()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2  # a new streak


def test_a_garbled_kill_wait_from_slurm_keeps_the_last_good_value() -> None:
    clock, slurm = Clock(), FakeSlurm(dict(SERVED))
    source = KillWaitSource(None, slurm, refresh_seconds=60, clock=clock)
    source.current()
    for garbled in ({"KillWait": "soon"}, {}, {"KillWait": True}, {"KillWait": -5}):
        slurm.answer = garbled
        clock.now += 60
        assert source.current() == KillWait(60.0, FROM_SLURM), garbled


def test_until_slurm_first_answers_there_is_no_value_not_a_guess(tmp_path: Path) -> None:
    """A Pod refused for a KillWait guessed wrong would stay refused: the controller waits."""
    clock, slurm = Clock(), FakeSlurm(DOWN)
    source = KillWaitSource(None, slurm, _conf(tmp_path, "KillWait=45\n"), refresh_seconds=60, clock=clock)
    assert source.current() is None
    clock.now += 60
    slurm.answer = None  # it answers: /conf is not served here, the file is read
    assert source.current() == KillWait(45.0, from_file(str(tmp_path / "slurm.conf")))


def test_a_slurm_conf_edit_is_followed(tmp_path: Path) -> None:
    clock = Clock()
    path = _conf(tmp_path, "KillWait=45\n")
    source = KillWaitSource(None, None, path, refresh_seconds=60, clock=clock)
    assert source.current() == KillWait(45.0, from_file(path))
    Path(path).write_text("KillWait=120\n")
    clock.now += 60
    assert source.current() == KillWait(120.0, from_file(path))


def test_a_malformed_slurm_conf_keeps_the_last_good_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    path = _conf(tmp_path, "KillWait=45\n")
    source = KillWaitSource(None, None, path, refresh_seconds=60, clock=clock)
    source.current()
    Path(path).write_text("KillWait=45s\n")
    clock.now += 60
    with caplog.at_level(logging.ERROR, logger="tandem.scheduler.killwait_source"):
        assert source.current() == KillWait(45.0, from_file(path))
    assert f"slurm.conf at {path}: line 1: KillWait=45s is not a whole number of seconds" in caplog.text


@pytest.mark.parametrize(
    ("why", "text"), [("malformed", "KillWait=soon\n"), ("missing", None)], ids=["malformed", "missing"]
)
def test_a_bad_slurm_conf_from_the_start_falls_back_to_slurms_default_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, why: str, text: str | None
) -> None:
    path = _conf(tmp_path, text) if text is not None else str(tmp_path / "absent.conf")
    with caplog.at_level(logging.ERROR, logger="tandem.scheduler.killwait_source"):
        got = KillWaitSource(None, None, path, clock=Clock()).current()
    assert got == KillWait(30.0, f"Slurm's default (slurm.conf at {path} unreadable)"), why
    assert f"slurm.conf at {path}" in caplog.text


def test_workers_asking_at_once_make_one_call_and_all_get_a_value() -> None:
    """While one caller reads (a slow slurmrestd), the others get the last value at once."""
    clock = Clock()
    started, release = threading.Event(), threading.Event()

    class SlowSlurm(FakeSlurm):
        def get_conf(self) -> dict[str, Any] | None:
            started.set()
            release.wait(5)
            return super().get_conf()

    slurm = SlowSlurm({"KillWait": 60})
    source = KillWaitSource(None, slurm, refresh_seconds=60, clock=clock)
    release.set()
    assert source.current() == KillWait(60.0, FROM_SLURM)
    release.clear()
    slurm.answer = {"KillWait": 90}
    clock.now += 60
    started.clear()
    reader = threading.Thread(target=source.current)
    reader.start()
    assert started.wait(5)
    others = [source.current() for _ in range(5)]
    release.set()
    reader.join(5)
    assert others == [KillWait(60.0, FROM_SLURM)] * 5
    assert slurm.calls == 2
    assert source.current() == KillWait(90.0, FROM_SLURM)
