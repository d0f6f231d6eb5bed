"""SlurmRestClient against an in-process slurmrestd stand-in (httpx.MockTransport): no network."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tandem.slurm import jwt
from tandem.slurm.dialects import V0038, V0040, UnsupportedBySlurm
from tandem.slurm.models import JobSpec
from tandem.slurm.rest import SlurmApiError, SlurmRestClient, TokenSource

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
        tokens: TokenSource | None = None,
        user: str = "slurm",
    ) -> tuple[SlurmRestClient, Recorder]:
        recorder = Recorder(respond)
        client = SlurmRestClient(BASE, user, tokens or TokenSource(token="fixed-token"), version=version)
        client._http.close()
        client._http = httpx.Client(base_url=client.base_url, transport=httpx.MockTransport(recorder))
        clients.append(client)
        return client, recorder

    yield make
    for client in clients:
        client.close()


def _ok(body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.Response(200, json={"meta": {}, "errors": [], "warnings": [], **(body or {})})


def _error(status: int, *errors: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json={"meta": {}, "errors": list(errors), "warnings": []})


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


V38_JOB: dict[str, Any] = {
    "job_id": 7,
    "name": "wrap",
    "job_state": "RUNNING",
    "state_reason": "None",
    "nodes": "cpu-[001-002]",
    "partition": "batch",
    "comment": "x: started",
    "user_id": 1001,
    "group_id": 1002,
    "flags": ["TRES_STR_CALC"],
}

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


def test_detects_v0038_when_newer_versions_are_not_served(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slurm/v0.0.38/ping":
            return _ok({"pings": [{"hostname": "ctld", "ping": "UP"}]})
        if request.url.path == "/slurm/v0.0.38/jobs":
            return _ok({"jobs": [V38_JOB]})
        return httpx.Response(404, text="Unable to find requested URL")

    client, slurm = make_client(respond, version="auto")
    jobs = client.list_jobs()

    assert slurm.paths == [
        "/slurm/v0.0.42/ping",
        "/slurm/v0.0.41/ping",
        "/slurm/v0.0.40/ping",
        "/slurm/v0.0.38/ping",
        "/slurm/v0.0.38/jobs",
    ]
    assert client.dialect.version == "v0.0.38"
    assert isinstance(client.dialect, V0038)
    # Parsed with the 22.05 shapes: a plain-string state, the comment marker.
    assert jobs is not None and len(jobs) == 1
    assert jobs[0].state == "RUNNING"
    assert jobs[0].nodes == ("cpu-001", "cpu-002")
    assert jobs[0].script_started


def test_detection_happens_once(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/ping") and "v0.0.38" not in request.url.path:
            return httpx.Response(404)
        return _ok({"jobs": [], "pings": []})

    client, slurm = make_client(respond, version="auto")
    client.list_jobs()
    client.list_jobs()
    assert slurm.paths.count("/slurm/v0.0.38/ping") == 1
    assert slurm.paths[-2:] == ["/slurm/v0.0.38/jobs", "/slurm/v0.0.38/jobs"]


def test_newest_served_version_wins(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"pings": []}), version="auto")
    assert client.dialect.version == "v0.0.42"
    assert isinstance(client.dialect, V0040)
    assert slurm.paths == ["/slurm/v0.0.42/ping"]


def test_detection_probes_carry_the_auth_headers(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok(), version="auto", user="root")
    assert client.dialect.version == "v0.0.42"
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "root"
    assert slurm.requests[0].headers["X-SLURM-USER-TOKEN"] == "fixed-token"


@pytest.mark.parametrize("status", [401, 403])
def test_refused_token_during_detection(make_client: MakeClient, status: int) -> None:
    client, slurm = make_client(lambda request: httpx.Response(status), version="auto")
    with pytest.raises(SlurmApiError) as err:
        client.submit_job(_spec())
    assert err.value.status == status
    assert slurm.paths == ["/slurm/v0.0.42/ping"]  # no point asking the older versions


def test_401_behind_404s_still_refuses(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404 if "v0.0.42" in request.url.path else 401)

    client, _ = make_client(respond, version="auto")
    with pytest.raises(SlurmApiError) as err:
        client.list_jobs()
    assert err.value.status == 401


def test_no_supported_version(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: httpx.Response(404), version="auto")
    with pytest.raises(SlurmApiError, match="serves none of"):
        client.list_nodes()
    assert len(slurm.requests) == 4


def test_explicit_version_skips_detection(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"jobs": []}), version="v0.0.41")
    assert client.list_jobs() == []
    assert slurm.paths == ["/slurm/v0.0.41/jobs"]


def test_unknown_explicit_version_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        SlurmRestClient(BASE, "slurm", TokenSource(token="t"), version="v0.0.39")


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


def test_ping(make_client: MakeClient) -> None:
    up, slurm = make_client(lambda request: _ok({"pings": [{"ping": "UP"}]}))
    assert up.ping() is True
    assert slurm.paths == ["/slurm/v0.0.40/ping"]
    down, _ = make_client(lambda request: _error(500, {"error": "Unable to contact slurm controller"}))
    assert down.ping() is False
    gone, _ = make_client(_refuse)
    assert gone.ping() is False


# --- auth headers --------------------------------------------------------------------------------


def test_minted_token_is_for_the_requested_user(make_client: MakeClient) -> None:
    client, slurm = make_client(
        lambda request: _ok({"job_id": 42, "jobs": []}), tokens=TokenSource(key=KEY), user="slurm"
    )
    client.submit_job(_spec(), user="alice")
    client.list_jobs()

    as_alice, as_default = slurm.requests
    assert as_alice.headers["X-SLURM-USER-NAME"] == "alice"
    assert _claims(as_alice.headers["X-SLURM-USER-TOKEN"])["sun"] == "alice"
    assert _signed_with(as_alice.headers["X-SLURM-USER-TOKEN"], KEY)
    assert as_default.headers["X-SLURM-USER-NAME"] == "slurm"
    assert _claims(as_default.headers["X-SLURM-USER-TOKEN"])["sun"] == "slurm"


def test_fixed_token_is_sent_whoever_is_named(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"job_id": 1}), tokens=TokenSource(token="tok"))
    client.submit_job(_spec(), user="alice")
    assert slurm.requests[0].headers["X-SLURM-USER-NAME"] == "alice"
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
    assert sent == V0040().submit_body(spec)
    assert sent["job"]["tres_per_node"] == "gres/gpu:h100:1"
    assert sent["job"]["excluded_nodes"] == ["bad-001", "bad-002"]


def test_submit_job_on_v0038_posts_the_v0038_body(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok({"job_id": 9, "step_id": "BATCH"}), version="v0.0.38")
    spec = _spec(excluded_nodes="bad-001,bad-[003-004]")
    assert client.submit_job(spec) == 9
    assert slurm.paths == ["/slurm/v0.0.38/job/submit"]
    sent = json.loads(slurm.requests[0].content)
    assert sent == V0038().submit_body(spec)
    assert sent["job"]["environment"] == {"PATH": "/usr/bin:/bin"}
    # 22.05 knows neither tres_per_node nor excluded_nodes on submit.
    assert sent["job"]["gres"] == "gpu:h100:1"
    assert sent["job"]["exclude_nodes"] == "bad-001,bad-[003-004]"
    assert "tres_per_node" not in sent["job"]
    assert "excluded_nodes" not in sent["job"]


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


def test_error_text_equal_to_the_description_is_not_repeated(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: _error(500, {"description": "Invalid node name", "error": "Invalid node name"})
    )
    with pytest.raises(SlurmApiError) as err:
        client.drain_node("nope", "r")
    assert str(err.value).count("Invalid node name") == 1


def test_submit_error_without_description_carries_the_error_text(make_client: MakeClient) -> None:
    # 22.05's job/submit handler reports only {"error_code", "error"}.
    client, _ = make_client(
        lambda request: _error(
            500, {"error_code": 2050, "error": "Requested node configuration is not available"}
        ),
        version="v0.0.38",
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
        ),
        version="v0.0.38",
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
    client, slurm = make_client(lambda request: _ok({"job_id": 1}), version="v0.0.38")
    with pytest.raises(UnsupportedBySlurm):
        client.submit_job(_spec(exclusive="topo"))
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


def _fail_when_filtered(full: dict[str, Any]) -> Respond:
    """Slurm 22.05 at times: a query with update_time fails with 500, the same query without works."""

    def respond(request: httpx.Request) -> httpx.Response:
        if "update_time" in request.url.params:
            return _error(500, {"error_number": 1, "error": "Unspecified error"})
        return _ok(full)

    return respond


def test_list_nodes_filtered_500_falls_back_to_the_full_list(make_client: MakeClient) -> None:
    nodes = [
        {"name": "cpu-001", "state": "idle", "state_flags": ["DRAIN"], "reason": "k8s: x"},
        {"name": "cpu-002", "state": "allocated", "reason": ""},
    ]
    client, slurm = make_client(_fail_when_filtered({"nodes": nodes}), version="v0.0.38")
    got = client.list_nodes(changed_since=1_700_000_000)
    assert got is not None
    assert [(n.name, n.drained, n.busy) for n in got] == [("cpu-001", True, False), ("cpu-002", False, True)]
    assert [(r.url.path, r.url.params.get("update_time")) for r in slurm.requests] == [
        ("/slurm/v0.0.38/nodes", "1700000000"),
        ("/slurm/v0.0.38/nodes", None),
    ]


def test_list_jobs_filtered_500_falls_back_to_the_full_list(make_client: MakeClient) -> None:
    client, slurm = make_client(_fail_when_filtered({"jobs": [V38_JOB]}), version="v0.0.38")
    jobs = client.list_jobs(changed_since=1_700_000_000)
    assert jobs is not None
    assert [j.job_id for j in jobs] == [7]
    assert len(slurm.requests) == 2
    assert "update_time" not in slurm.requests[1].url.params


@pytest.mark.parametrize("status", [400, 401, 502, 503])
def test_list_filtered_errors_other_than_500_are_not_retried(make_client: MakeClient, status: int) -> None:
    client, slurm = make_client(lambda request: _error(status, {"error": "nope"}))
    with pytest.raises(SlurmApiError) as err:
        client.list_nodes(changed_since=77)
    assert err.value.status == status
    assert len(slurm.requests) == 1


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
        {"name": "gpu-000", "state": ["IDLE", "DRAIN"], "reason": "k8s: x"},
        {"name": "gpu-001", "state": ["MIXED"], "reason": ""},
    ]
    client, slurm = make_client(lambda request: _ok({"nodes": nodes}))
    got = client.list_nodes(changed_since=77)
    assert got is not None
    assert [(n.name, n.drained, n.busy) for n in got] == [("gpu-000", True, False), ("gpu-001", False, True)]
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


def test_get_unknown_job_on_v0038_is_none(make_client: MakeClient) -> None:
    # 22.05 answers an unknown job with HTTP 500; only the error field says "Invalid job id".
    client, _ = make_client(
        lambda request: _error(
            500,
            {
                "description": "Unable to find JobId=999",
                "error_number": 2017,
                "error": "Invalid job id specified",
                "source": "slurm_load_job",
            },
        ),
        version="v0.0.38",
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
        # 22.05 puts slurm_strerror() in the description.
        _error(
            500,
            {
                "description": "unable to kill JobId=12 with signal 9: Invalid job id specified",
                "error_number": 2017,
                "error": "Invalid job id specified",
            },
        ),
    ],
    ids=[
        "200-warning",
        "404",
        "500-error-done",
        "500-description-done",
        "500-lowercase",
        "v0.0.38-500-invalid",
    ],
)
def test_cancel_job_tolerates_an_already_finished_job(
    make_client: MakeClient, response: httpx.Response
) -> None:
    client, slurm = make_client(lambda request: response)
    client.cancel_job(12)  # must not raise
    assert len(slurm.requests) == 1


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


# --- drain_node ----------------------------------------------------------------------------------


def test_drain_node_posts_drain_state(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok())
    client.drain_node("gpu-000", "k8s: cordoned")
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/node/gpu-000")
    assert json.loads(request.content) == {"state": ["DRAIN"], "reason": "k8s: cordoned"}


def test_drain_node_is_impossible_on_v0038(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: _ok(), version="v0.0.38")
    with pytest.raises(SlurmApiError, match="cannot drain"):
        client.drain_node("gpu-000", "k8s: cordoned")
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


def test_fixed_token_cannot_impersonate() -> None:
    tokens = TokenSource(token="fixed")
    assert tokens.token("alice") == "fixed"
    assert tokens.token("bob") == "fixed"
    assert not tokens.can_impersonate


def test_an_empty_key_still_mints() -> None:
    tokens = TokenSource(key=b"")
    assert tokens.can_impersonate
    assert _claims(tokens.token("alice"))["sun"] == "alice"


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


def test_from_settings_with_a_key_file(tmp_path: Path) -> None:
    key_file = tmp_path / "jwt_hs256.key"
    key_file.write_bytes(KEY)
    client = SlurmRestClient.from_settings(BASE, "slurm", "", str(key_file), version="v0.0.40")
    try:
        assert client.tokens.can_impersonate
        assert _signed_with(client.tokens.token("alice"), KEY)
    finally:
        client.close()


def test_from_settings_with_a_token_only() -> None:
    client = SlurmRestClient.from_settings(BASE, "slurm", "tok", "", version="v0.0.40")
    try:
        assert not client.tokens.can_impersonate
        assert client.tokens.token("alice") == "tok"
    finally:
        client.close()


def test_from_settings_with_neither() -> None:
    with pytest.raises(ValueError):
        SlurmRestClient.from_settings(BASE, "slurm", "", "")


@pytest.mark.parametrize(
    ("version", "meta", "expected"),
    [
        (
            "v0.0.38",
            {"Slurm": {"version": {"major": 22, "minor": 5, "micro": 8}, "release": "22.05.8"}},
            (22, 5),
        ),
        ("v0.0.40", {"slurm": {"version": {"major": "23", "minor": "11", "micro": "4"}}}, (23, 11)),
        ("v0.0.40", {}, None),
    ],
)
def test_slurm_version_comes_from_the_answers_meta_and_is_asked_once(
    make_client: MakeClient, version: str, meta: dict[str, Any], expected: tuple[int, int] | None
) -> None:
    client, slurm = make_client(
        lambda request: httpx.Response(200, json={"meta": meta, "errors": [], "pings": []}), version=version
    )
    assert client.slurm_version == expected
    assert client.slurm_version == expected
    assert slurm.paths == [f"/slurm/{version}/ping"]


def test_version_detection_also_learns_the_slurm_version(make_client: MakeClient) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/slurm/v0.0.38/ping":
            return httpx.Response(200, json={"meta": {"Slurm": {"version": {"major": 22, "minor": 5}}}})
        return _error(404)

    client, slurm = make_client(respond, version="auto")
    assert client.slurm_version == (22, 5)
    assert slurm.paths[-1] == "/slurm/v0.0.38/ping" and slurm.paths.count("/slurm/v0.0.38/ping") == 1
