"""A slurmrestd stand-in for SlurmRestClient (tests/unit/httpx_stand_in.py): no network; the answers
and job specs the tests of tandem.slurm.rest send and expect."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

import httpx

from tandem.slurm.models import JobSpec
from tandem.slurm.rest import (
    SlurmRestClient,
)

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


def answer_ok(body: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.Response(200, json={"meta": {}, "errors": [], "warnings": [], **(body or {})})


def answer_error(status: int, *errors: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json={"meta": {}, "errors": list(errors), "warnings": []})


def signal_status(code: int, message: str, job_id: str = "12") -> dict[str, Any]:
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


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    claims: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return claims


def signed_with(token: str, key: bytes) -> bool:
    signing_input, signature = token.rsplit(".", 1)
    mac = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode() == signature


def job_spec(**changes: Any) -> JobSpec:
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


def serves(*versions: str) -> Respond:
    """A slurmrestd that serves these data-parser versions (24.11: v0.0.40-42; 26.05: v0.0.42-45)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path.split("/")[2] not in versions:
            return httpx.Response(404)
        return answer_ok({"jobs": [], "pings": [], "meta": {"slurm": {"release": "24.11.5"}}})

    return respond
