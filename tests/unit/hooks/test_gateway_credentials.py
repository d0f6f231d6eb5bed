"""Each hook caller speaks only for what its credential names (issue 18): a node's credential (root
on a Slurm node: prolog, epilog; the bound token of its slurmd Pod, tandem.nodetoken) locks and
unlocks, and the syncer learns from the API server which node it speaks for; a placeholder's own
token says started, terminating or drain for its own job, which the syncer then checks against
Slurm. A Slurm user who has neither, or one for another job, changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest

from tandem import jobtoken
from tandem.hooks.gateway import HooksGateway
from tests.unit.future_stub import FutureStub
from tests.unit.hooks.test_gateway_limits import Refusal, Syncer
from tests.unit.node_credentials import node_token

TOKEN = node_token("gpu-001", uid="uid-gpu-001")
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
    g = HooksGateway("127.0.0.1:0", FutureStub(syncer), 5)  # type: ignore[arg-type]
    g.start()
    yield g, syncer
    g.stop()


def _post(g: HooksGateway, route: str, headers: dict[str, str], **body: Any) -> httpx.Response:
    payload = {"node": "gpu-001", "job": 42, **body}
    return httpx.post(f"http://127.0.0.1:{g.port}/v1/{route}", json=payload, headers=headers, timeout=5)


@pytest.mark.parametrize("route", ["started", "terminating", "drain"])
def test_a_node_credential_cannot_speak_for_a_placeholder(
    gateway: tuple[HooksGateway, Syncer], route: str
) -> None:
    g, syncer = gateway
    r = _post(g, route, ROOT)
    assert r.status_code == 403
    assert "a node's credential (prolog, epilog) speaks for /v1/lock, /v1/unlock only" in r.json()["error"]
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
        _as_placeholder("../job/5", signed_for="../job/5"),  # no placeholder reference
        {"Authorization": f"Bearer {TOKEN}", jobtoken.PLACEHOLDER_HEADER: MINE},  # root's token, as mine
        {"Authorization": "Bearer guessed", jobtoken.PLACEHOLDER_HEADER: MINE},  # not a job token's form
        {jobtoken.PLACEHOLDER_HEADER: MINE},
    ],
    ids=["not a reference", "node credential", "not a token's form", "no token"],
)
def test_a_credential_of_no_placeholders_form_or_none_is_refused(
    gateway: tuple[HooksGateway, Syncer], headers: dict[str, str]
) -> None:
    g, syncer = gateway
    for route in ("started", "terminating", "drain"):
        assert _post(g, route, headers).status_code == 401
    assert syncer.calls == []


def test_the_gateway_holds_no_job_key_and_the_syncer_is_the_one_to_verify(
    gateway: tuple[HooksGateway, Syncer],
) -> None:
    """Issue 50: the gateway held the job key ring, so whoever took it could mint any placeholder's
    token. It screens the form only; a token of the right form under another job's reference or
    an unknown key reaches the syncer, which verifies it (tests/unit/syncer/test_job_tokens.py) and
    answers 403."""
    g, syncer = gateway
    syncer.refusal = Refusal(grpc.StatusCode.PERMISSION_DENIED, "not one of placeholder")
    for headers in (_as_placeholder(THEIRS, signed_for=MINE), _as_placeholder(MINE, key=b"x" * 32)):
        assert _post(g, "started", headers).status_code == 403
    assert [request.job_token for _, request in syncer.calls] == [
        jobtoken.token(KEY, MINE),
        jobtoken.token(b"x" * 32, MINE),
    ]


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
    # The job token too: the syncer checks it again against the job Slurm has.
    assert {request.job_token for _, request in syncer.calls} == {jobtoken.token(KEY, MINE)}


def test_the_prolog_and_epilog_hand_the_syncer_the_node_credential_they_presented(
    gateway: tuple[HooksGateway, Syncer],
) -> None:
    """The gateway cannot check a token's signature (it holds no Kubernetes credential): the
    syncer reviews it, so it must get the very token, for lock and unlock alike."""
    g, syncer = gateway
    assert _post(g, "lock", ROOT).status_code == 200
    assert _post(g, "unlock", ROOT).status_code == 200
    assert [(name, request.slurm_node, request.job_id) for name, request in syncer.calls] == [
        ("lock", "gpu-001", 42),
        ("unlock", "gpu-001", 42),
    ]
    assert [request.node_token for _, request in syncer.calls] == [TOKEN, TOKEN]


def test_which_node_a_credential_speaks_for_is_the_syncers_to_say(
    gateway: tuple[HooksGateway, Syncer],
) -> None:
    """gpu-000's token for gpu-001: the gateway reads no node out of the unsigned claims; the
    syncer, which had the token reviewed, refuses it (and says so: 403, final)."""
    g, syncer = gateway
    theirs = node_token("gpu-000")
    syncer.refusal = Refusal(grpc.StatusCode.PERMISSION_DENIED, "speaks for Slurm node gpu-000")
    r = _post(g, "lock", {"Authorization": f"Bearer {theirs}"})
    assert r.status_code == 403 and "gpu-000" in r.json()["error"]
    assert [(request.slurm_node, request.node_token) for _, request in syncer.calls] == [("gpu-001", theirs)]


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, 401),  # the review refused it: expired, its Pod gone
        (grpc.StatusCode.PERMISSION_DENIED, 403),  # another node's
        (grpc.StatusCode.UNAVAILABLE, 503),  # the API server did not answer the review
    ],
)
@pytest.mark.parametrize("route", ["lock", "unlock"])
def test_the_syncers_verdict_on_a_node_credential_becomes_the_http_status(
    gateway: tuple[HooksGateway, Syncer], route: str, code: grpc.StatusCode, status: int
) -> None:
    g, syncer = gateway
    syncer.refusal = Refusal(code, "the node credential was refused")
    r = _post(g, route, ROOT)
    assert r.status_code == status, r.text
    assert r.json() == {"error": "the node credential was refused", "syncer_status": code.name}


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
