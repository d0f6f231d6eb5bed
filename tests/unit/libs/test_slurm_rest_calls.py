"""SlurmRestClient's calls against an in-process slurmrestd stand-in: submit, list, get, cancel and
the light state listing of jobs; list, drain and resume of nodes; each error in Slurm's words."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tandem.slurm import listing, rest
from tandem.slurm.dialects import Dialect, UnsupportedBySlurm
from tandem.slurm.rest import (
    SlurmApiError,
    waits_for_topology,
)
from tests.unit.libs.slurm_rest_world import (
    V40_JOB,
    MakeClient,
    answer_error,
    answer_ok,
    job_spec,
    signal_status,
)

# --- submit_job ----------------------------------------------------------------------------------


def test_submit_job_posts_the_dialect_body_and_returns_the_id(make_client: MakeClient) -> None:
    client, slurm = make_client(
        lambda request: answer_ok({"job_id": 42, "step_id": "batch", "job_submit_user_msg": ""})
    )
    spec = job_spec(excluded_nodes="bad-001,bad-002")
    assert client.submit_job(spec) == 42
    (request,) = slurm.requests
    assert request.method == "POST"
    assert request.url.path == "/slurm/v0.0.40/job/submit"
    sent = json.loads(request.content)
    assert sent == Dialect("v0.0.40").submit_body(spec)
    assert sent["job"]["tres_per_node"] == "gres/gpu:h100:1"
    assert sent["job"]["excluded_nodes"] == ["bad-001", "bad-002"]


def test_submit_job_id_as_string_is_accepted(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: answer_ok({"job_id": "43"}))
    assert client.submit_job(job_spec()) == 43


def test_submit_http_500_carries_slurms_description(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
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
        client.submit_job(job_spec())
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
        client, _ = make_client(lambda request, error=error: answer_error(500, error))
        with pytest.raises(SlurmApiError) as err:
            client.submit_job(job_spec())
        assert err.value.errors == (error["error"],)
        assert waits_for_topology(err.value) == (kind == "topology")


def test_error_text_equal_to_the_description_is_not_repeated(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(500, {"description": "Invalid node name", "error": "Invalid node name"})
    )
    with pytest.raises(SlurmApiError) as err:
        client.drain_node("nope", "r")
    assert str(err.value).count("Invalid node name") == 1


def test_submit_error_without_description_carries_the_error_text(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
            500, {"error_number": 2050, "error": "Requested node configuration is not available"}
        )
    )
    with pytest.raises(SlurmApiError, match="Requested node configuration is not available") as err:
        client.submit_job(job_spec())
    assert err.value.status == 500


def test_submit_joins_several_errors(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
            400,
            {"description": 'Unknown key "tres_per_node"', "source": "hsearch_r"},
            {"description": "unexpected failure parsing het job: 0"},
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.submit_job(job_spec())
    assert err.value.status == 400
    assert 'Unknown key "tres_per_node"' in str(err.value)
    assert "unexpected failure parsing het job" in str(err.value)


def test_submit_error_with_a_non_json_body(make_client: MakeClient) -> None:
    client, _ = make_client(lambda request: httpx.Response(502, text="Bad Gateway from the proxy"))
    with pytest.raises(SlurmApiError, match="Bad Gateway from the proxy") as err:
        client.submit_job(job_spec())
    assert err.value.status == 502


def test_submit_answered_without_a_job_id(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_ok({"errors": [{"error": "Job violates accounting/QOS policy"}]})
    )
    with pytest.raises(SlurmApiError, match="accounting/QOS policy"):
        client.submit_job(job_spec())


def test_submit_refused_by_the_dialect_sends_nothing(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: answer_ok({"job_id": 1}))
    with pytest.raises(UnsupportedBySlurm):
        client.submit_job(job_spec(exclusive="sometimes"))
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
    client, _ = make_client(lambda request: answer_ok({"jobs": [V40_JOB, {**V40_JOB, "job_id": 13}]}))
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
    client, _ = make_client(lambda request: answer_ok({"jobs": [V40_JOB, {**V40_JOB, "job_id": 13}]}))
    jobs = client.list_jobs(changed_since=1_700_000_000)
    assert [j.job_id for j in jobs or []] == [12, 13]
    assert used == ["whole" if read_whole else "streamed"]


def test_list_jobs_without_changed_since_asks_for_everything(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: answer_ok({"jobs": []}))
    assert client.list_jobs() == []
    assert "update_time" not in slurm.requests[0].url.params


@pytest.mark.parametrize("changed_since", [None, 5], ids=["unfiltered", "filtered"])
def test_list_jobs_error_raises(make_client: MakeClient, changed_since: int | None) -> None:
    client, slurm = make_client(
        lambda request: answer_error(
            500, {"description": "Unable to query jobs", "error": "Socket timed out"}
        )
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
            return answer_error(
                500, {"description": "Unable to query partitions", "error": "Unspecified error"}
            )
        return answer_ok({"nodes": [{"name": "cpu-001", "state": ["IDLE"]}]})

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
    client, slurm = make_client(lambda request: answer_ok({"nodes": nodes}))
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
    client, slurm = make_client(lambda request: answer_ok({"jobs": [V40_JOB]}))
    job = client.get_job(12)
    assert job is not None
    assert job.job_id == 12
    assert job.partition == "gpu"
    assert slurm.requests[0].method == "GET"
    assert slurm.paths == ["/slurm/v0.0.40/job/12"]


def test_get_unknown_job_404_is_none(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
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
    client, _ = make_client(lambda request: answer_ok({"jobs": []}))
    assert client.get_job(999) is None


def test_get_job_invalid_job_id_error_text_is_none(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(500, {"error_number": 2017, "error": "Invalid job id specified"})
    )
    assert client.get_job(999) is None


def test_get_job_other_errors_raise(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
            500, {"description": "Unable to query JobId=5", "error": "Unable to contact slurm controller"}
        )
    )
    with pytest.raises(SlurmApiError) as err:
        client.get_job(5)
    assert err.value.status == 500


# --- cancel_job ----------------------------------------------------------------------------------


def test_cancel_job_sends_delete_with_the_signal(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: answer_ok())
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
        answer_error(
            404,
            {"description": "unable to send signal Killed to JobId=12", "error": "Invalid job id specified"},
        ),
        answer_error(500, {"error_number": 2021, "error": "Job/step already completing or completed"}),
        answer_error(500, {"description": "Job/step already completing or completed"}),
        answer_error(500, {"description": "job already completing"}),
        # Recorded from 24.11.5 (v0.0.42) and 26.05.5 (v0.0.45): 200, the job's own result in `status`.
        httpx.Response(200, json=signal_status(2017, "Invalid job id specified", job_id="999999")),
        httpx.Response(200, json=signal_status(2021, "Job/step already completing or completed")),
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
        lambda request: httpx.Response(200, json=signal_status(1, "Operation not permitted"))
    )
    with pytest.raises(SlurmApiError, match="DELETE job/12: Operation not permitted"):
        client.cancel_job(12)


def test_cancel_job_that_slurm_signalled_is_done(make_client: MakeClient) -> None:
    # 26.05.5 (v0.0.45) cancelling a running job: an empty `status`.
    client, slurm = make_client(lambda request: answer_ok({"status": []}))
    client.cancel_job(12)
    assert slurm.paths == ["/slurm/v0.0.40/job/12"]


def test_cancel_job_other_errors_raise(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
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
        lambda request: answer_error(
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
    client, slurm = make_client(lambda request: answer_ok())
    client.drain_node("gpu-000", "k8s: cordoned")
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/node/gpu-000")
    assert json.loads(request.content) == {"state": ["DRAIN"], "reason": "k8s: cordoned"}


def test_resume_node_posts_resume(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: answer_ok())
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
    client, slurm = make_client(lambda request: answer_ok(answer))
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
    client, slurm = make_client(lambda request: answer_ok(answer))
    assert client.all_job_states() == {
        14: ("RUNNING", ()),
        16: ("PENDING", ()),
        18: ("RUNNING", ("CONFIGURING",)),
    }
    (request,) = slurm.requests
    assert request.url.path == "/slurm/v0.0.40/jobs/state/" and not request.url.params


def test_job_states_of_no_jobs_asks_nothing(make_client: MakeClient) -> None:
    client, slurm = make_client(lambda request: answer_ok())
    assert client.job_states([]) == {}
    assert slurm.requests == []


def test_drain_node_error_raises(make_client: MakeClient) -> None:
    client, _ = make_client(
        lambda request: answer_error(
            500, {"description": "Failure to update node gpu-000", "error": "Invalid node name"}
        )
    )
    with pytest.raises(SlurmApiError, match="Failure to update node gpu-000"):
        client.drain_node("gpu-000", "r")


# --- shrink_job ----------------------------------------------------------------------------------


def test_a_running_job_is_shrunk_to_the_nodes_named(make_client: MakeClient) -> None:
    """scontrol update JobId=12 NodeList=cpu-001 as slurmrestd takes it: the nodes to keep."""
    client, slurm = make_client(lambda request: answer_ok())
    client.shrink_job(12, ("cpu-001", "cpu-003"))
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/job/12")
    assert json.loads(request.content) == {"required_nodes": ["cpu-001", "cpu-003"]}


# --- set_constraints -----------------------------------------------------------------------------


def test_a_pending_jobs_constraint_is_posted_and_a_refusal_keeps_slurms_words(
    make_client: MakeClient,
) -> None:
    """As the lab's Slurm 24.11 answered (v0.0.42): the new features, or error 2029."""
    client, slurm = make_client(lambda request: answer_ok())
    client.set_constraints(12, "[l1-a-abcde|l1-b-fghij]")
    (request,) = slurm.requests
    assert (request.method, request.url.path) == ("POST", "/slurm/v0.0.40/job/12")
    assert json.loads(request.content) == {"constraints": "[l1-a-abcde|l1-b-fghij]"}
    refused = {
        "description": "Job update requested failed",
        "error_number": 2029,
        "error": "Invalid feature specification",
    }
    client, _ = make_client(lambda request: answer_error(500, refused))
    with pytest.raises(SlurmApiError) as err:
        client.set_constraints(12, "[nosuch-a|nosuch-b]")
    assert "Invalid feature specification" in str(err.value)
