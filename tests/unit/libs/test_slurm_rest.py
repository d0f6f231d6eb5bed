"""SlurmRestClient against an in-process slurmrestd stand-in (tests/unit/httpx_stand_in.py): no network."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tandem import settings
from tandem.metrics import REGISTRY
from tandem.settings import ClusterSettings
from tandem.slurm import jwt, listing, rest
from tandem.slurm.dialects import SUPPORTED_VERSIONS, Dialect, UnsupportedBySlurm
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import (
    SlurmApiError,
    SlurmRestClient,
    TokenFile,
    TokenFileError,
    TokenSource,
    waits_for_topology,
)
from tests.unit import httpx_stand_in

BASE = "http://slurmrestd.test:6820"
KEY = b"0123456789abcdef0123456789abcdef"

Respond = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A slurmrestd stand-in: remembers every request and answers with `respond`."""

    def __init__(self, respond: Respond) -> None:
        self.requests: list[httpx.Request] = []
        self._respond = respond

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self._respond(request)

    @property
    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]


MakeClient = Callable[..., tuple[SlurmRestClient, Recorder]]


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


def _ok(body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.Response(200, json={"meta": {}, "errors": [], "warnings": [], **(body or {})})


def _error(status: int, *errors: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json={"meta": {}, "errors": list(errors), "warnings": []})


def _signal_status(code: int, message: str, job_id: str = "12") -> dict[str, Any]:
    """A DELETE /job/{id} answer as v0.0.42-45 give it."""
    number = int(job_id) if code != 2017 else 0
    return {
        "status": [
            {
                "error": {"string": message, "code": code, "message": message},
                "step_id": job_id,
                "job_id": {"set": code != 2017, "infinite": False, "number": number},
                "federation": {"sibling": ""},
            }
        ],
        "errors": [],
        "warnings": [],
    }


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def _signed_with(token: str, key: bytes) -> bool:
    signing_input, signature = token.rsplit(".", 1)
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode() == signature


def _spec(**changes: Any) -> JobSpec:
    spec = JobSpec(
        name="tandem-pod-abc",
        script="#!/bin/sh\nexec sleep infinity\n",
        environment={"PATH": "/usr/bin:/bin"},
        cpus=4,
        memory_mb=8192,
        gpus=1,
        gpu_type="h100",
        partition="gpu",
        comment="tandem pod default/abc",
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


V40_JOB: dict[str, Any] = {
    "job_id": 12,
    "name": "placeholder",
    "job_state": ["PENDING"],
    "state_reason": "Resources",
    "nodes": "",
    "partition": "gpu",
    "comment": "",
    "extra": "",
    "user_id": 1001,
    "group_id": 1002,
    "flags": [],
    "time_limit": {"set": True, "infinite": False, "number": 60},
}


# --- version detection ---------------------------------------------------------------------------


def _serves(*versions: str) -> Respond:
    """A slurmrestd that serves these data-parser versions (24.11: v0.0.40-42; 26.05: v0.0.42-45)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path.split("/")[2] not in versions:
            return httpx.Response(404)
        return _ok({"jobs": [], "pings": [], "meta": {"slurm": {"release": "24.11.5"}}})

    return respond


@pytest.mark.parametrize(
    ("served", "chosen"),
    [
        (("v0.0.40", "v0.0.41", "v0.0.42"), "v0.0.42"),  # Slurm 24.11
        (("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"), "v0.0.45"),  # Slurm 26.05
        (("v0.0.40",), "v0.0.40"),  # Slurm 23.11
    ],
)
def test_the_newest_version_both_sides_speak_is_chosen_once(
    make_client: MakeClient, served: tuple[str, ...], chosen: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, slurm = make_client(_serves(*served), version="auto")
    with caplog.at_level("INFO", logger="tandem.slurm.rest"):
        client.list_jobs()
        client.list_jobs()
    assert client.dialect.version == chosen
    pings = [p for p in slurm.paths if p.endswith("/ping")]
    assert pings[-1] == f"/slurm/{chosen}/ping" and len(pings) == SUPPORTED_VERSIONS.index(chosen) + 1
    assert slurm.paths[-2:] == [f"/slurm/{chosen}/jobs", f"/slurm/{chosen}/jobs"]
    chose = [r for r in caplog.records if r.getMessage() == "slurmrestd data-parser version chosen"]
    assert len(chose) == 1 and chose[0].version == chosen  # type: ignore[attr-defined]


def test_detection_probes_carry_the_auth_headers(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok(), version="auto", user="root")
    assert client.dialect.version == "v0.0.45"
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "root"
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == "fixed-token"


@pytest.mark.parametrize("status", [401, 403])
def test_refused_token_during_detection(make_client: MakeClient, status: int) -> None:
    client, slurm = make_client(lambda request: httpx.Response(status), version="auto")
    with pytest.raises(SlurmApiError) as err:
        client.submit_job(_spec())
    assert err.value.status == status
    assert slurm.paths == ["/slurm/v0.0.45/ping"]  # no point asking the older versions


def test_401_behind_404s_still_refuses(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404 if "v0.0.45" in request.url.path else 401)

    client, _ = make_client(respond, version="auto")
    with pytest.raises(SlurmApiError) as err:
        client.list_jobs()
    assert err.value.status == 401


def test_an_error_while_choosing_chooses_nothing_and_the_next_call_asks_again(
    make_client: MakeClient,
) -> None:
    # A 5xx from the newest version must not make the client settle for an older one for good.
    answers = iter([httpx.Response(503), httpx.Response(200, json={"meta": {}})])

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/ping"):
            return next(answers)
        return _ok({"jobs": []})

    client, slurm = make_client(respond, version="auto")
    with pytest.raises(SlurmApiError, match=r"could not say whether it serves v0\.0\.45") as err:
        client.list_jobs()
    assert err.value.status == 503
    assert client.list_jobs() == []
    assert client.dialect.version == "v0.0.45"
    assert slurm.paths == ["/slurm/v0.0.45/ping", "/slurm/v0.0.45/ping", "/slurm/v0.0.45/jobs"]


def test_no_supported_version(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: httpx.Response(404), version="auto")
    with pytest.raises(SlurmApiError, match="serves none of"):
        client.list_nodes()
    assert len(slurm.requests) == len(SUPPORTED_VERSIONS)


def test_explicit_version_skips_detection(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"jobs": []}), version="v0.0.41")
    assert client.list_jobs() == []
    assert slurm.paths == ["/slurm/v0.0.41/jobs"]


def test_unknown_explicit_version_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        SlurmRestClient(BASE, "slurm", TokenSource(token="t"), version="v0.0.38")


def test_base_url_trailing_slash_is_dropped() -> None:
    client = SlurmRestClient(BASE + "/", "slurm", TokenSource(token="t"), version="v0.0.40")
    try:
        assert client.base_url == BASE
    finally:
        client.close()


# --- unreachable server --------------------------------------------------------------------------


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def test_unreachable_during_detection(make_client: MakeClient) -> None:
    client, _ = make_client(_refuse, version="auto")
    with pytest.raises(SlurmApiError, match="unreachable") as err:
        client.list_jobs()
    assert err.value.status == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.list_jobs(),
        lambda c: c.list_nodes(),
        lambda c: c.get_job(1),
        lambda c: c.cancel_job(1),
        lambda c: c.submit_job(_spec()),
        lambda c: c.drain_node("gpu-000", "r"),
    ],
    ids=["list_jobs", "list_nodes", "get_job", "cancel_job", "submit_job", "drain_node"],
)
def test_unreachable_server_is_status_0(
    make_client: MakeClient, call: Callable[[SlurmRestClient], object]
) -> None:
    client, _ = make_client(_refuse)
    with pytest.raises(SlurmApiError) as err:
        call(client)
    assert err.value.status == 0
    assert BASE in str(err.value)


def test_timeout_is_status_0(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    client, _ = make_client(respond)
    with pytest.raises(SlurmApiError) as err:
        client.list_jobs()
    assert err.value.status == 0


# GET /slurm/{version}/ping "pings" as the lab's 24.11.5 and 26.05.5 printed them.
_PING_UP = {
    "v0.0.40": [{"hostname": "vm", "pinged": "UP", "latency": 1281, "mode": "primary"}],
    "v0.0.41": [{"hostname": "vm", "pinged": "UP", "latency": 1472, "mode": "primary"}],
    "v0.0.42": [
        {
            "hostname": "vm",
            "pinged": "UP",
            "responding": True,
            "latency": 995,
            "mode": "primary",
            "primary": True,
        }
    ],
    "v0.0.43": [
        {
            "hostname": "vm",
            "pinged": "UP",
            "responding": True,
            "latency": 1034,
            "mode": "primary",
            "primary": True,
        }
    ],
    "v0.0.45": [
        {"hostname": "vm", "responding": True, "latency": 6612, "primary": True, "status": "No error"}
    ],
}
# The same, recorded with slurmctld stopped: slurmrestd still answers 200.
_PING_DOWN = {
    "v0.0.41": [{"hostname": "vm", "pinged": "DOWN", "latency": 137, "mode": "primary"}],
    "v0.0.42": [
        {
            "hostname": "vm",
            "pinged": "DOWN",
            "responding": False,
            "latency": 153,
            "mode": "primary",
            "primary": True,
        }
    ],
    "v0.0.45": [
        {
            "hostname": "vm",
            "responding": False,
            "latency": 98,
            "primary": True,
            "status": "Unable to contact slurm controller (connect failure)",
        }
    ],
}


@pytest.mark.parametrize(
    ("version", "pings", "up"),
    [(v, pings, True) for v, pings in _PING_UP.items()]
    + [(v, pings, False) for v, pings in _PING_DOWN.items()],
    ids=[f"{v}-up" for v in _PING_UP] + [f"{v}-down" for v in _PING_DOWN],
)
def test_ping_says_whether_slurmctld_answered(
    make_client: MakeClient, version: str, pings: list[dict[str, Any]], up: bool
) -> None:
    client, slurm = make_client(lambda request: _ok({"pings": pings}), version=version)
    assert client.ping() is up
    assert slurm.paths == [f"/slurm/{version}/ping"]


def test_ping_without_slurmrestd_is_false(make_client: MakeClient) -> None:
    down, _ = make_client(lambda request: _error(500, {"error": "Unable to contact slurm controller"}))
    assert down.ping() is False
    gone, _ = make_client(_refuse)
    assert gone.ping() is False


# --- auth headers --------------------------------------------------------------------------------


def test_every_call_carries_a_token_minted_for_the_clients_user(make_client: MakeClient) -> None:
    client, slurm = make_client(
        lambda request: _ok({"job_id": 42, "jobs": []}), tokens=TokenSource(key=KEY), user="root"
    )
    client.submit_job(_spec(user_id=1001, group_id=1001))
    client.list_jobs()
    for request in slurm.requests:
        assert request.headers["X-SLURM-USER-NAME"] == "root"
        assert _claims(request.headers["X-SLURM-USER-TOKEN"])["sun"] == "root"
        assert _signed_with(request.headers["X-SLURM-USER-TOKEN"], KEY)
    # The Pod's user rides in the body: root submits on its behalf.
    sent = json.loads(slurm.requests[0].content)["job"]
    assert (sent["user_id"], sent["group_id"]) == ("1001", "1001")


def test_fixed_token_is_sent_as_given(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"job_id": 1}), tokens=TokenSource(token="tok"))
    client.submit_job(_spec())
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == "tok"


# --- submit_job ----------------------------------------------------------------------------------


def test_submit_job_posts_the_dialect_body_and_returns_the_id(make_client: MakeClient) -> None:
    client, slurm = make_client(
        lambda request: _ok({"job_id": 42, "step_id": "batch", "job_submit_user_msg": ""})
    )
    spec = _spec(excluded_nodes="bad-001,bad-002")
    assert client.submit_job(spec) == 42
    (request,) = slurm.requests
    assert request.method == "POST"
    assert request.url.path == "/slurm/v0.0.40/job/submit"
    sent = json.loads(request.content)
    assert sent == Dialect("v0.0.40").submit_body(spec)
    assert sent["job"]["tres_per_node"] == "gres/gpu:h100:1"
    assert sent["job"]["excluded_nodes"] == ["bad-001", "bad-002"]


def test_submit_job_id_as_string_is_accepted(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: _ok({"job_id": "43"}))
    assert client.submit_job(_spec()) == 43


def test_submit_http_500_carries_slurms_description(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            500,
            {
                "description": "Batch job submission failed",
                "error_number": 2050,
                "error": "Requested node configuration is not available",
                "source": "slurm_submit_batch_job()",
            },
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.submit_job(_spec())
    assert err.value.status == 500
    # Both of Slurm's texts: the description says what failed, the error says why.
    assert "Batch job submission failed: Requested node configuration is not available" in str(err.value)


def test_a_submit_refused_for_the_topology_as_it_is_now_is_told_apart(make_client: MakeClient) -> None:
    """What the scheduler tries again (the topology changes) rather than refusing the Pod for good."""
    answers = {
        "topology": {"error_number": 2178, "error": "Requested topology configuration is not available"},
        "node": {"error_number": 2050, "error": "Requested node configuration is not available"},
    }
    for kind, error in answers.items():
        client, _ = make_client(lambda request, error=error: _error(500, error))
        with pytest.raises(SlurmApiError) as err:
            client.submit_job(_spec())
        assert err.value.errors == (error["error"],)
        assert waits_for_topology(err.value) == (kind == "topology")


def test_error_text_equal_to_the_description_is_not_repeated(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(500, {"description": "Invalid node name", "error": "Invalid node name"})
    )
    with pytest.raises(SlurmApiError) as err:
        client.drain_node("nope", "r")
    assert str(err.value).count("Invalid node name") == 1


def test_submit_error_without_description_carries_the_error_text(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            500, {"error_number": 2050, "error": "Requested node configuration is not available"}
        )
    )
    with pytest.raises(SlurmApiError, match="Requested node configuration is not available") as err:
        client.submit_job(_spec())
    assert err.value.status == 500


def test_submit_joins_several_errors(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            400,
            {"description": 'Unknown key "tres_per_node"', "source": "hsearch_r"},
            {"description": "unexpected failure parsing het job: 0"},
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.submit_job(_spec())
    assert err.value.status == 400
    assert 'Unknown key "tres_per_node"' in str(err.value)
    assert "unexpected failure parsing het job" in str(err.value)


def test_submit_error_with_a_non_json_body(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: httpx.Response(502, text="Bad Gateway from the proxy"))
    with pytest.raises(SlurmApiError, match="Bad Gateway from the proxy") as err:
        client.submit_job(_spec())
    assert err.value.status == 502


def test_submit_answered_without_a_job_id(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _ok({"errors": [{"error": "Job violates accounting/QOS policy"}]})
    )
    with pytest.raises(SlurmApiError, match="accounting/QOS policy"):
        client.submit_job(_spec())


def test_submit_refused_by_the_dialect_sends_nothing(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"job_id": 1}))
    with pytest.raises(UnsupportedBySlurm):
        client.submit_job(_spec(exclusive="sometimes"))
    assert slurm.requests == []


# --- list_jobs / list_nodes ----------------------------------------------------------------------


def test_list_jobs_sends_update_time_and_returns_none_on_304(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: httpx.Response(304))
    assert client.list_jobs(changed_since=1_700_000_000) is None
    (request,) = slurm.requests
    assert request.method == "GET"
    assert request.url.path == "/slurm/v0.0.40/jobs"
    assert request.url.params["update_time"] == "1700000000"


def test_list_jobs_changed_returns_parsed_jobs(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: _ok({"jobs": [V40_JOB, {**V40_JOB, "job_id": 13}]}))
    jobs = client.list_jobs(changed_since=1_700_000_000)
    assert jobs is not None
    assert [j.job_id for j in jobs] == [12, 13]
    assert jobs[0].state == "PENDING"
    assert jobs[0].state_reason == "Resources"


@pytest.mark.parametrize(("whole_up_to", "read_whole"), [(1 << 20, True), (100, False)])
def test_a_small_listing_is_decoded_whole_and_a_large_one_as_it_arrives(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch, whole_up_to: int, read_whole: bool
) -> None:
    used: list[str] = []

    class SeenWhole(listing.WholeListing):
        def __iter__(self) -> Iterator[Any]:
            used.append("whole")
            return super().__iter__()

    class SeenStreamed(listing.Listing):
        def __iter__(self) -> Iterator[Any]:
            used.append("streamed")
            return super().__iter__()

    monkeypatch.setattr(rest, "WHOLE_ANSWER_BYTES", whole_up_to)
    monkeypatch.setattr(rest, "WholeListing", SeenWhole)
    monkeypatch.setattr(rest, "Listing", SeenStreamed)
    client, _ = make_client(lambda request: _ok({"jobs": [V40_JOB, {**V40_JOB, "job_id": 13}]}))
    jobs = client.list_jobs(changed_since=1_700_000_000)
    assert [j.job_id for j in jobs or []] == [12, 13]
    assert used == ["whole" if read_whole else "streamed"]


def test_list_jobs_without_changed_since_asks_for_everything(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"jobs": []}))
    assert client.list_jobs() == []
    assert "update_time" not in slurm.requests[0].url.params


@pytest.mark.parametrize("changed_since", [None, 5], ids=["unfiltered", "filtered"])
def test_list_jobs_error_raises(make_client: MakeClient, changed_since: int | None) -> None:
    client, slurm = make_client(
        lambda request: _error(500, {"description": "Unable to query jobs", "error": "Socket timed out"})
    )
    with pytest.raises(SlurmApiError, match="Unable to query jobs: Socket timed out") as err:
        client.list_jobs(changed_since=changed_since)
    assert err.value.status == 500
    # A filtered query is retried once without the filter; an unfiltered one is not retried.
    assert [r.url.params.get("update_time") for r in slurm.requests] == (
        [None] if changed_since is None else ["5", None]
    )


class _Trickle(httpx.SyncByteStream):
    """A body that arrives a few bytes at a time, and may break off before its end."""

    def __init__(self, body: bytes, size: int, break_after: int | None = None) -> None:
        self._body, self._size, self._break_after = body, size, break_after

    def __iter__(self) -> Iterator[bytes]:
        for n, i in enumerate(range(0, len(self._body), self._size)):
            if self._break_after is not None and n == self._break_after:
                raise httpx.ReadError("connection reset by peer")
            yield self._body[i : i + self._size]


def _trickled(body: dict[str, Any], size: int, break_after: int | None = None) -> httpx.Response:
    text = json.dumps(
        {"meta": {}, "errors": [], "warnings": [], **body}, indent=2, ensure_ascii=False
    ).encode()
    return httpx.Response(200, stream=_Trickle(text, size, break_after))


def test_a_listing_that_arrives_in_pieces_is_read_whole(make_client: MakeClient) -> None:
    jobs = [{**V40_JOB, "job_id": 100 + i, "name": f"j\u00e9-{i}"} for i in range(50)]
    client, _ = make_client(lambda request: _trickled({"jobs": jobs}, size=7))
    listed = client.list_jobs()
    assert listed is not None
    assert [(j.job_id, j.name) for j in listed] == [(100 + i, f"j\u00e9-{i}") for i in range(50)]


def test_a_listing_broken_off_midway_is_an_error_not_part_of_the_jobs(make_client: MakeClient) -> None:
    jobs = [{**V40_JOB, "job_id": 100 + i} for i in range(50)]
    client, _ = make_client(lambda request: _trickled({"jobs": jobs}, size=512, break_after=20))
    with pytest.raises(SlurmApiError, match="broke off GET jobs"):
        client.list_jobs()


def test_a_listing_cut_short_is_a_malformed_answer(make_client: MakeClient) -> None:
    body = json.dumps({"jobs": [V40_JOB, V40_JOB]}).encode()[:-40]
    client, _ = make_client(lambda request: httpx.Response(200, content=body))
    with pytest.raises(SlurmApiError, match="malformed") as err:
        client.list_jobs()
    assert err.value.status == 502


def test_a_filtered_node_query_answered_500_falls_back_to_the_full_list(make_client: MakeClient) -> None:
    # Slurm 24.11.5 when nodes changed since update_time but partitions did not.
    def respond(request: httpx.Request) -> httpx.Response:
        if "update_time" in request.url.params:
            return _error(500, {"description": "Unable to query partitions", "error": "Unspecified error"})
        return _ok({"nodes": [{"name": "cpu-001", "state": ["IDLE"]}]})

    client, slurm = make_client(respond)
    nodes = client.list_nodes(changed_since=1_700_000_000)
    assert nodes is not None and [n.name for n in nodes] == ["cpu-001"]
    assert [r.url.params.get("update_time") for r in slurm.requests] == ["1700000000", None]


def _unchanged(what: str) -> httpx.Response:
    # slurmrestd v0.0.40+ (23.11): nothing changed since update_time is a 200 with a warning, not a 304.
    return httpx.Response(
        200,
        json={
            "meta": {},
            "errors": [],
            "warnings": [
                {
                    "description": f"No {what} changes since update_time[1700000000]=2023-11-14T22:13:20",
                    "source": f"_op_handler_{what}s",
                }
            ],
            f"{what}s": [],
            "last_update": {"set": True, "infinite": False, "number": 1_700_000_000},
        },
    )


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.41", "v0.0.42"])
def test_list_jobs_unchanged_on_v0040_is_none(make_client: MakeClient, version: str) -> None:
    client, slurm = make_client(lambda request: _unchanged("job"), version=version)
    assert client.list_jobs(changed_since=1_700_000_000) is None
    assert len(slurm.requests) == 1


def test_list_nodes_unchanged_on_v0040_is_none(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _unchanged("node"))
    assert client.list_nodes(changed_since=1_700_000_000) is None
    assert len(slurm.requests) == 1


def test_other_warnings_do_not_hide_the_list(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: httpx.Response(
            200,
            json={
                "errors": [],
                "warnings": [{"description": "Unable to resolve the job's user", "source": "x"}],
                "jobs": [V40_JOB],
            },
        )
    )
    jobs = client.list_jobs(changed_since=1_700_000_000)
    assert jobs is not None
    assert [j.job_id for j in jobs] == [12]


def test_list_nodes(make_client: MakeClient) -> None:
    nodes = [
        {"name": "gpu-000", "state": ["IDLE", "DRAIN"], "reason": "k8s: x", "reason_set_by_user": "tandem"},
        {"name": "gpu-001", "state": ["MIXED"], "reason": ""},
    ]
    client, slurm = make_client(lambda request: _ok({"nodes": nodes}))
    got = client.list_nodes(changed_since=77)
    assert got is not None
    assert [(n.name, n.drained, n.busy) for n in got] == [("gpu-000", True, False), ("gpu-001", False, True)]
    # Who drained: what tells Tandem's drains from anyone's worded alike.
    assert [n.reason_set_by for n in got] == ["tandem", ""]
    assert slurm.requests[0].url.path == "/slurm/v0.0.40/nodes"
    assert slurm.requests[0].url.params["update_time"] == "77"


def test_list_nodes_unchanged(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: httpx.Response(304))
    assert client.list_nodes(changed_since=77) is None


# --- get_job -------------------------------------------------------------------------------------


def test_get_job(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"jobs": [V40_JOB]}))
    job = client.get_job(12)
    assert job is not None
    assert job.job_id == 12
    assert job.partition == "gpu"
    assert slurm.requests[0].method == "GET"
    assert slurm.paths == ["/slurm/v0.0.40/job/12"]


def test_get_unknown_job_404_is_none(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            404,
            {
                "description": "Unable to query JobId=999",
                "error_number": 2017,
                "error": "Invalid job id specified",
                "source": "_handle_job_get",
            },
        )
    )
    assert client.get_job(999) is None


def test_get_job_with_no_jobs_in_the_answer_is_none(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: _ok({"jobs": []}))
    assert client.get_job(999) is None


def test_get_job_invalid_job_id_error_text_is_none(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(500, {"error_number": 2017, "error": "Invalid job id specified"})
    )
    assert client.get_job(999) is None


def test_get_job_other_errors_raise(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            500, {"description": "Unable to query JobId=5", "error": "Unable to contact slurm controller"}
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.get_job(5)
    assert err.value.status == 500


# --- cancel_job ----------------------------------------------------------------------------------


def test_cancel_job_sends_delete_with_the_signal(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok())
    client.cancel_job(12, signal="SIGTERM")
    client.cancel_job(13)
    first, second = slurm.requests
    assert (first.method, first.url.path, first.url.params.get("signal")) == (
        "DELETE",
        "/slurm/v0.0.40/job/12",
        "SIGTERM",
    )
    assert (second.method, second.url.path) == ("DELETE", "/slurm/v0.0.40/job/13")
    assert "signal" not in second.url.params


@pytest.mark.parametrize(
    "response",
    [
        # slurmrestd itself treats ESLURM_ALREADY_DONE as success, with a warning.
        httpx.Response(
            200,
            json={"errors": [], "warnings": [{"description": "Job was already sent signal Killed"}]},
        ),
        _error(
            404,
            {"description": "unable to send signal Killed to JobId=12", "error": "Invalid job id specified"},
        ),
        _error(500, {"error_number": 2021, "error": "Job/step already completing or completed"}),
        _error(500, {"description": "Job/step already completing or completed"}),
        _error(500, {"description": "job already completing"}),
        # Recorded from 24.11.5 (v0.0.42) and 26.05.5 (v0.0.45): 200, the job's own result in `status`.
        httpx.Response(200, json=_signal_status(2017, "Invalid job id specified", job_id="999999")),
        httpx.Response(200, json=_signal_status(2021, "Job/step already completing or completed")),
        # v0.0.40-41 on 24.11.5: no `status` at all, whether the job existed or not.
        httpx.Response(200, json={"status": None, "errors": [], "warnings": []}),
    ],
    ids=[
        "200-warning",
        "404",
        "500-error-done",
        "500-description-done",
        "500-lowercase",
        "200-status-2017",
        "200-status-2021",
        "200-no-status",
    ],
)
def test_cancel_job_tolerates_an_already_finished_job(
    make_client: MakeClient, response: httpx.Response
) -> None:
    client, slurm = make_client(lambda request: response)
    client.cancel_job(12)  # must not raise
    assert len(slurm.requests) == 1


def test_cancel_job_a_refusal_inside_a_200_raises_with_slurms_words(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: httpx.Response(200, json=_signal_status(1, "Operation not permitted"))
    )
    with pytest.raises(SlurmApiError, match="DELETE job/12: Operation not permitted"):
        client.cancel_job(12)


def test_cancel_job_that_slurm_signalled_is_done(make_client: MakeClient) -> None:
    # 26.05.5 (v0.0.45) cancelling a running job: an empty `status`.
    client, slurm = make_client(lambda request: _ok({"status": []}))
    client.cancel_job(12)
    assert slurm.paths == ["/slurm/v0.0.40/job/12"]


def test_cancel_job_other_errors_raise(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            500,
            {"description": "unable to send signal Killed to JobId=12", "error": "Access/permission denied"},
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.cancel_job(12)
    assert err.value.status == 500


def test_cancel_job_forbidden_raises(make_client: MakeClient) -> None:
    # 26.05.5 (v0.0.45) to a user who neither owns the job nor operates Slurm.
    client, _ = make_client(
        lambda request: _error(
            403,
            {
                "description": "Signal request failed",
                "error_number": 1,
                "error": "Operation not permitted",
                "source": "slurm_kill_jobs()",
            },
        )
    )
    with pytest.raises(SlurmApiError, match="Signal request failed: Operation not permitted") as err:
        client.cancel_job(12)
    assert err.value.status == 403


# --- drain_node ----------------------------------------------------------------------------------


def test_drain_node_posts_drain_state(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok())
    client.drain_node("gpu-000", "k8s: cordoned")
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/node/gpu-000")
    assert json.loads(request.content) == {"state": ["DRAIN"], "reason": "k8s: cordoned"}


def test_resume_node_posts_resume(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok())
    client.resume_node("cpu-001")
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/node/cpu-001")
    assert json.loads(request.content) == {"state": ["RESUME"]}


def test_job_states_ask_the_light_listing_for_exactly_those_jobs(make_client: MakeClient) -> None:
    # As 24.11.5 and 26.05.5 answer: ids as strings, unknown jobs left out; array tasks are
    # listed one by one with their own ids.
    answer = {
        "jobs": [
            {"job_id": "14", "state": ["RUNNING"]},
            {"job_id": "15", "state": ["CANCELLED", "COMPLETING"]},
            {"job_id": "16_2", "state": ["PENDING"]},
        ]
    }
    client, slurm = make_client(lambda request: _ok(answer))
    assert client.job_states([14, 15, 99]) == {14: ("RUNNING", ()), 15: ("CANCELLED", ("COMPLETING",))}
    (request,) = slurm.requests
    assert request.url.path == "/slurm/v0.0.40/jobs/state/"
    assert request.url.params.get_list("job_id") == ["14", "15", "99"]


def test_all_job_states_lists_every_job_by_its_own_id(make_client: MakeClient) -> None:
    answer = {
        "jobs": [
            {"job_id": "14", "state": ["RUNNING"]},
            {"job_id": "16_2", "state": ["PENDING"]},
            {"job_id": "18+1", "state": ["RUNNING", "CONFIGURING"]},
        ]
    }
    client, slurm = make_client(lambda request: _ok(answer))
    assert client.all_job_states() == {
        14: ("RUNNING", ()),
        16: ("PENDING", ()),
        18: ("RUNNING", ("CONFIGURING",)),
    }
    (request,) = slurm.requests
    assert request.url.path == "/slurm/v0.0.40/jobs/state/" and not request.url.params


def test_job_states_of_no_jobs_asks_nothing(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok())
    assert client.job_states([]) == {}
    assert slurm.requests == []


def test_drain_node_error_raises(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(
            500, {"description": "Failure to update node gpu-000", "error": "Invalid node name"}
        )
    )
    with pytest.raises(SlurmApiError, match="Failure to update node gpu-000"):
        client.drain_node("gpu-000", "r")


# --- TokenSource ---------------------------------------------------------------------------------


def test_token_source_needs_a_token_or_a_key() -> None:
    with pytest.raises(ValueError, match="token or a JWT key"):
        TokenSource()
    with pytest.raises(ValueError):
        TokenSource(token="")


def test_fixed_token_is_the_same_for_every_user() -> None:
    tokens = TokenSource(token="fixed")
    assert tokens.token("alice") == "fixed"
    assert tokens.token("bob") == "fixed"


def test_an_empty_key_still_mints() -> None:
    assert _claims(TokenSource(key=b"").token("alice"))["sun"] == "alice"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock(1_000_000.0)
    monkeypatch.setattr("time.time", c)
    return c


def test_minted_token_is_reused_until_near_expiry(clock: Clock) -> None:
    tokens = TokenSource(key=KEY, lifespan=3600)
    first = tokens.token("alice")
    assert _claims(first) == {"exp": 1_003_600, "iat": 1_000_000, "sun": "alice"}

    clock.now += 3500  # 100 s left: still good
    assert tokens.token("alice") == first

    clock.now += 41  # 59 s left: renew
    renewed = tokens.token("alice")
    assert renewed != first
    assert jwt.expires_at(renewed) == int(clock.now) + 3600
    assert _signed_with(renewed, KEY)

    clock.now += 10
    assert tokens.token("alice") == renewed


def test_tokens_are_cached_per_user(clock: Clock) -> None:
    tokens = TokenSource(key=KEY, lifespan=600)
    alice = tokens.token("alice")
    clock.now += 5
    bob = tokens.token("bob")
    assert _claims(alice)["sun"] == "alice"
    assert _claims(bob)["sun"] == "bob"
    assert tokens.token("alice") == alice
    assert tokens.token("bob") == bob


def test_lifespan_is_honoured(clock: Clock) -> None:
    token = TokenSource(key=KEY, lifespan=120).token("alice")
    assert jwt.expires_at(token) - _claims(token)["iat"] == 120


# --- TokenFile: a service's own token, never the key -------------------------------------------


def _token_file(tmp_path: Path, user: str = "tandem", lifespan: int = 3600, text: str = "") -> Path:
    path = tmp_path / "slurm.jwt"
    path.write_text(text or jwt.mint(KEY, user, lifespan) + "\n")
    return path


def test_a_token_file_is_sent_as_the_services_own_token(tmp_path: Path, make_client: MakeClient) -> None:
    path = _token_file(tmp_path)
    client, slurm = make_client(lambda request: _ok({"jobs": []}), tokens=TokenFile(str(path), "tandem"))
    client.list_jobs()
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "slurm"
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == path.read_text().strip()


def test_scontrols_own_words_are_taken(tmp_path: Path) -> None:
    token = jwt.mint(KEY, "tandem", 3600)
    path = _token_file(tmp_path, text=f"SLURM_JWT={token}\n")
    assert TokenFile(str(path), "tandem").token("tandem") == token


def test_a_renewed_token_is_read_without_a_restart(tmp_path: Path) -> None:
    path = _token_file(tmp_path, lifespan=600)
    tokens = TokenFile(str(path), "tandem")
    first = tokens.token("tandem")
    # A Secret's new version: the kubelet swaps the mounted file.
    renewed = jwt.mint(KEY, "tandem", 7200)
    new = tmp_path / "new.jwt"
    new.write_text(renewed)
    new.replace(path)
    assert renewed != first
    assert tokens.token("tandem") == renewed
    # What the chart's alert reads to say a token is about to expire.
    assert "\ntandem_slurm_token_expiry_timestamp_seconds " in REGISTRY.render()
    assert REGISTRY.sample("tandem_slurm_token_expiry_timestamp_seconds") == jwt.expires_at(renewed)


def test_a_bad_new_version_keeps_the_last_good_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _token_file(tmp_path)
    tokens = TokenFile(str(path), "tandem")
    good = tokens.token("tandem")
    path.write_text("not a token at all")
    assert tokens.token("tandem") == good
    assert "kept the last good Slurm token" in caplog.text
    path.unlink()
    assert tokens.token("tandem") == good


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no JWT"),
        ("eyJhbGciOiJIUzI1NiJ9.e30.sig", "holds no JWT"),  # no sun, no exp
        (jwt.mint(KEY, "root", 3600), "for Slurm user 'root', but this service acts as 'tandem'"),
        (jwt.mint(KEY, "tandem", 3600, now=1_000_000), "expired at 1970-01-12"),
    ],
)
def test_a_token_that_cannot_serve_stops_the_service_at_start_with_why(
    tmp_path: Path, text: str, says: str
) -> None:
    path = tmp_path / "slurm.jwt"
    path.write_text(text)
    with pytest.raises(TokenFileError, match=re.escape(says)):
        TokenFile(str(path), "tandem")


def test_a_missing_token_file_says_which(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match=r"gone\.jwt"):
        TokenFile(str(tmp_path / "gone.jwt"), "tandem")


def test_a_service_needs_its_token_file(tmp_path: Path) -> None:
    cfg = settings.load(ClusterSettings, ["--slurm-user=tandem"], {})
    with pytest.raises(SystemExit, match="scontrol token username=tandem"):
        SlurmRestClient.for_service(cfg)
    path = _token_file(tmp_path, user="root")
    plaintext = "--slurm-api-allow-plaintext=true"  # the default URL is http://
    cfg = settings.load(ClusterSettings, ["--slurm-user=tandem", f"--slurm-token-file={path}", plaintext], {})
    with pytest.raises(SystemExit, match="for Slurm user 'root'"):
        SlurmRestClient.for_service(cfg)
    path = _token_file(tmp_path, user="tandem")
    client = SlurmRestClient.for_service(cfg)
    try:
        assert client.user == "tandem"
    finally:
        client.close()


def test_an_infinite_number_in_an_answer_is_a_malformed_answer(make_client: MakeClient) -> None:
    """Found by the fuzz test: JSON's `Infinity` as a job id escaped as OverflowError, outside
    the callers' handling of Slurm errors. (It is not JSON: the decoder now refuses it itself.)"""
    client, _ = make_client(lambda _r: httpx.Response(200, text='{"jobs": [{"job_id": Infinity}]}'))
    malformed = r"GET job: slurmrestd's answer is malformed \((JSONDecode|Overflow)Error"
    with pytest.raises(SlurmApiError, match=malformed):
        client.get_job(7)


# --- GET /conf: Slurm's running configuration (KillWait) ----------------------------------------


def test_get_conf_answers_the_running_configuration(make_client: MakeClient) -> None:
    answer = {"slurm_conf": {"KillWait": 30, "UnkillableStepTimeout": 100}, "slurm_conf_meta": {}}
    client, slurm = make_client(lambda request: _ok(answer), version="v0.0.45")
    assert client.get_conf() == {"KillWait": 30, "UnkillableStepTimeout": 100}
    assert slurm.paths == ["/slurm/v0.0.45/conf"]
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "slurm"
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == "fixed-token"


@pytest.mark.parametrize("version", [v for v in SUPPORTED_VERSIONS if v != "v0.0.45"])
def test_get_conf_is_none_without_asking_where_the_parser_version_has_none(
    make_client: MakeClient, version: str
) -> None:
    client, slurm = make_client(lambda request: _ok({"slurm_conf": {"KillWait": 30}}), version=version)
    assert client.get_conf() is None
    assert slurm.paths == []


def test_get_conf_is_none_when_slurmrestd_does_not_serve_it(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: httpx.Response(404, text="Not Found"), version="v0.0.45")
    assert client.get_conf() is None


@pytest.mark.parametrize(
    ("why", "answer", "status"),
    [
        ("slurmctld down", _error(500, {"error": "Unable to contact slurm controller"}), 500),
        ("token refused", _error(401, {"error": "Authentication failure"}), 401),
        ("no slurm_conf", _ok({}), 502),
        ("slurm_conf not an object", _ok({"slurm_conf": [1]}), 502),
        ("errors in a 200", _ok({"errors": [{"error": "Unable to read configuration"}]}), 200),
    ],
)
def test_get_conf_raises_on_any_other_answer(
    make_client: MakeClient, why: str, answer: httpx.Response, status: int
) -> None:
    client, _ = make_client(lambda request: answer, version="v0.0.45")
    with pytest.raises(SlurmApiError) as raised:
        client.get_conf()
    assert raised.value.status == status, why


def test_get_conf_without_slurmrestd_raises_as_unreachable(make_client: MakeClient) -> None:
    client, _ = make_client(_refuse, version="v0.0.45")
    with pytest.raises(SlurmApiError) as raised:
        client.get_conf()
    assert raised.value.status == 0
