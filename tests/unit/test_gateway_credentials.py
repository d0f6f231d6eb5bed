"""Each hook caller speaks only for what its credential names (issue 18): the hooks token (root on
a Slurm node: prolog, epilog) locks and unlocks; a placeholder's own token says started,
terminating or drain for its own job, which the syncer then checks against Slurm. A Slurm user
who has neither, or one for another job, changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tandem import jobtoken
from tandem.hooks.gateway import HooksGateway
from tandem.hooks.tokens import BearerTokens
from tests.unit.test_gateway_limits import Syncer

TOKEN = "root-on-the-node"
KEY = b"k" * 32
MINE = "tandem:tandem/team-a/web/uid-1"
THEIRS = "tandem:tandem/team-b/db/uid-2"


def _as_placeholder(reference: str, signed_for: str | None = None, key: bytes = KEY) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {jobtoken.token(key, signed_for or reference)}",
        jobtoken.PLACEHOLDER_HEADER: reference,
    }


ROOT = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def gateway() -> Iterator[tuple[HooksGateway, Syncer]]:
    syncer = Syncer()
    g = HooksGateway("127.0.0.1:0", TOKEN, syncer, 5, job_keys=BearerTokens(KEY.decode()))  # type: ignore[arg-type]
    g.start()
    yield g, syncer
    g.stop()


def _post(g: HooksGateway, route: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    payload = {"node": "gpu-001", "job": 42, **body}
    return httpx.post(f"http://127.0.0.1:{g.port}/v1/{route}", json=payload, headers=headers, timeout=5)


@pytest.mark.parametrize("route", ["started", "terminating", "drain"])
def test_the_hooks_token_cannot_speak_for_a_placeholder(
    gateway: tuple[HooksGateway, Syncer], route: str
) -> None:
    g, syncer = gateway
    r = _post(g, route, ROOT)
    assert r.status_code == 403
    assert "the hooks token (prolog, epilog) speaks for /v1/lock, /v1/unlock only" in r.json()["error"]
    assert syncer.calls == []


@pytest.mark.parametrize("route", ["lock", "unlock"])
def test_a_placeholder_cannot_lock_or_unlock(gateway: tuple[HooksGateway, Syncer], route: str) -> None:
    g, syncer = gateway
    r = _post(g, route, _as_placeholder(MINE))
    assert r.status_code == 403
    assert "a placeholder's credential speaks for" in r.json()["error"]
    assert syncer.calls == []


@pytest.mark.parametrize(
    "headers",
    [
        _as_placeholder(THEIRS, signed_for=MINE),  # my token, their placeholder
        _as_placeholder(MINE, key=b"x" * 32),  # a key Tandem does not hold
        _as_placeholder("../job/5", signed_for="../job/5"),  # no placeholder reference
        {"Authorization": f"Bearer {TOKEN}", jobtoken.PLACEHOLDER_HEADER: MINE},  # root's token, as mine
        {jobtoken.PLACEHOLDER_HEADER: MINE},
    ],
    ids=["another job's", "unknown key", "not a reference", "hooks token", "no token"],
)
def test_a_credential_for_another_job_or_none_is_refused(
    gateway: tuple[HooksGateway, Syncer], headers: dict[str, str]
) -> None:
    g, syncer = gateway
    for route in ("started", "terminating", "drain"):
        assert _post(g, route, headers).status_code == 401
    assert syncer.calls == []


def test_a_placeholders_call_carries_the_placeholder_it_proved(gateway: tuple[HooksGateway, Syncer]) -> None:
    g, syncer = gateway
    for route in ("started", "terminating", "drain"):
        assert _post(g, route, _as_placeholder(MINE), reason="ignored").status_code == 200
    assert [(name, request.placeholder, request.job_id) for name, request in syncer.calls] == [
        ("started", MINE, 42),
        ("terminating", MINE, 42),
        ("drain", MINE, 42),
    ]
    assert syncer.calls[2][1].reason == ""  # the syncer writes the reason of a KillWait drain


def test_the_prolog_still_locks(gateway: tuple[HooksGateway, Syncer]) -> None:
    g, syncer = gateway
    assert _post(g, "lock", ROOT).status_code == 200
    assert [name for name, _ in syncer.calls] == ["lock"]


def test_a_token_is_bound_to_its_reference_and_key() -> None:
    assert jobtoken.token(KEY, MINE) == jobtoken.token(KEY, MINE)
    assert jobtoken.token(KEY, MINE) != jobtoken.token(KEY, THEIRS)
    assert jobtoken.verifies([b"old" * 8, KEY], MINE, jobtoken.token(KEY, MINE))
    assert not jobtoken.verifies([KEY], MINE, jobtoken.token(b"old" * 8, MINE))


def test_a_service_without_a_job_key_does_not_start(tmp_path: Any) -> None:
    with pytest.raises(SystemExit, match="--job-key-file is required"):
        jobtoken.read_key("")
    short = tmp_path / "k"
    short.write_text("abc")
    with pytest.raises(SystemExit, match="hold fewer than 16 bytes"):
        jobtoken.read_key(str(short))
