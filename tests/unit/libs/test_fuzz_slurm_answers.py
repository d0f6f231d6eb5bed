"""Fuzzed slurmrestd answers (hypothesis): garbled, truncated, empty, of the wrong shape or a 5xx,
for every call the services make. Each call either returns or raises one SlurmApiError that says
what went wrong; nothing escapes as a KeyError from deep inside a parser. A garbled answer is
transient (the caller asks again). `FUZZ_EXAMPLES` sets the size (bench/fuzz.py runs 10,000)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.slurm.models import JobSpec
from tandem.slurm.rest import MALFORMED, SlurmApiError, SlurmRestClient, TokenSource
from tests.unit import httpx_stand_in

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

GOOD_JOB = {
    "job_id": 12,
    "name": "tandem:x/default/p/uid",
    "job_state": ["PENDING"],
    "state_reason": "Resources",
    "nodes": "gpu-[000-001]",
    "partition": "gpu",
    "priority": {"set": True, "infinite": False, "number": 10},
    "start_time": {"set": True, "infinite": False, "number": 0},
}
GOOD = {
    "meta": {"slurm": {"release": "24.11.5"}},
    "errors": [],
    "warnings": [],
    "jobs": [GOOD_JOB],
    "nodes": [{"name": "gpu-000", "state": ["IDLE"]}],
    "job_id": 12,
    "pings": [{"responding": True, "pinged": "UP"}],
}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
# Slurm's own keys with values of any shape: the likeliest garbling (a field of the wrong type).
slurm_shaped = st.fixed_dictionaries(
    {},
    optional={k: json_values for k in ("jobs", "nodes", "job_id", "errors", "warnings", "meta", "pings")},
)
jobs_shaped = st.lists(
    st.fixed_dictionaries({}, optional={k: json_values for k in GOOD_JOB}), max_size=3
).map(lambda jobs: {"jobs": jobs, "nodes": jobs})
bodies = st.one_of(
    json_values.map(lambda v: json.dumps(v).encode()),
    slurm_shaped.map(lambda v: json.dumps(v).encode()),
    jobs_shaped.map(lambda v: json.dumps(v).encode()),
    st.integers(0, len(json.dumps(GOOD))).map(lambda n: json.dumps(GOOD).encode()[:n]),  # truncated
    st.binary(max_size=64),
)
answers = st.tuples(st.sampled_from([200, 200, 200, 304, 400, 404, 500, 502, 503]), bodies)

CALLS: dict[str, Callable[[SlurmRestClient], Any]] = {
    "submit": lambda c: c.submit_job(
        JobSpec(name="n", script="#!/bin/sh\n", environment={}, cpus=1, memory_mb=64)
    ),
    "get_job": lambda c: c.get_job(12),
    "list_jobs": lambda c: c.list_jobs(),
    "list_jobs_since": lambda c: c.list_jobs(changed_since=1_700_000_000),
    "list_nodes": lambda c: c.list_nodes(),
    "job_states": lambda c: c.job_states([12, 13]),
    "update_job": lambda c: c.update_job(12, extra="x"),
    "set_excluded_nodes": lambda c: c.set_excluded_nodes(12, "gpu-000"),
    "set_constraints": lambda c: c.set_constraints(12, "[l1-a-abcde|l1-b-fghij]"),
    "shrink_job": lambda c: c.shrink_job(12, ("cpu-001",)),
    "cancel": lambda c: c.cancel_job(12),
    "drain": lambda c: c.drain_node("gpu-000", "why"),
    "resume": lambda c: c.resume_node("gpu-000"),
}


def _client(version: str, status: int, body: bytes) -> SlurmRestClient:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": "application/json"})

    client = SlurmRestClient("http://slurmrestd", "slurm", TokenSource(token="t"), version=version)
    client._http.close()
    client._http = httpx_stand_in.client(client.base_url, respond)
    return client


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    call=st.sampled_from(sorted(CALLS)),
    version=st.sampled_from(["v0.0.40", "v0.0.42", "v0.0.45"]),
    answer=answers,
)
def test_any_answer_is_a_result_or_one_clear_error(
    call: str, version: str, answer: tuple[int, bytes]
) -> None:
    status, body = answer
    client = _client(version, status, body)
    try:
        CALLS[call](client)
    except SlurmApiError as e:
        assert str(e) and e.summary
        if status == 200 and e.status == MALFORMED:
            assert "malformed" in e.summary
    finally:
        client.close()


@settings(max_examples=max(50, EXAMPLES // 5), deadline=None)
@given(answer=answers)
def test_ping_is_only_ever_true_or_false(answer: tuple[int, bytes]) -> None:
    client = _client("v0.0.42", *answer)
    try:
        assert client.ping() in (True, False)
    finally:
        client.close()


def test_a_truncated_submit_answer_is_a_transient_error_not_a_crash() -> None:
    """Before: json.JSONDecodeError escaped submit_job, and the scheduler's retry path (which
    looks for SlurmApiError) never saw it."""
    client = _client("v0.0.42", 200, b'{"job_id": 1')
    try:
        client.submit_job(JobSpec(name="n", script="#!/bin/sh\n", environment={}, cpus=1, memory_mb=64))
    except SlurmApiError as e:
        assert e.status == MALFORMED
        assert e.summary == "slurmrestd's answer to POST job/submit is malformed"
    else:
        raise AssertionError("a truncated answer was taken for a job id")
    finally:
        client.close()
