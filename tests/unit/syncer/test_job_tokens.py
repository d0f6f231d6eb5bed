"""A placeholder's token is bound to its job (issue 39): a binding made per submit, in the job's
AdminComment, under a key ring that rotation keeps on disk; the syncer checks it again against
Slurm, and refuses it on the placeholder's next job and once its job ended."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import pytest

from tandem import jobtoken, placeholder
from tandem.metrics import REGISTRY
from tandem.slurm.models import Job, JobStatus
from tandem.syncer.service import SyncerServicer
from tandem.v1 import syncer_pb2

KEY, OLD = b"n" * 32, b"o" * 32
REF = placeholder.job_name(placeholder.PodRef("apps", "web", "uid-1"), "tandem")


def test_a_token_names_its_binding_and_verifies_only_with_it() -> None:
    binding = jobtoken.new_binding()
    token = jobtoken.token(KEY, REF, binding)
    assert jobtoken.binding_of(token) == binding
    assert jobtoken.verifies([OLD, KEY], REF, token)
    other = jobtoken.new_binding()
    forged = f"{other}.{token.partition('.')[2]}"  # the mac of one binding under another
    assert not jobtoken.verifies([KEY], REF, forged)
    assert not jobtoken.verifies([KEY], REF.replace("web", "db"), token)
    assert jobtoken.binding_of(jobtoken.token(KEY, REF)) == ""  # version 1: none


def test_the_admin_comment_carries_the_reference_and_the_binding() -> None:
    comment = placeholder.admin_comment(REF, "ab" * 16)
    assert placeholder.reference_of(comment) == REF and placeholder.binding_of(comment) == "ab" * 16
    job = Job(1, REF, "RUNNING", admin_comment=comment)
    assert placeholder.pod_of(job) == placeholder.PodRef("apps", "web", "uid-1")
    assert placeholder.binding_of(REF) == "" and placeholder.admin_comment(REF, "") == REF


def test_the_ring_is_read_again_as_it_rotates_and_a_torn_write_keeps_the_last(tmp_path: Path) -> None:
    path = tmp_path / "job-key"
    path.write_bytes(OLD + b"\n")
    ring = jobtoken.KeyRing(str(path))
    assert ring.values() == [OLD]
    tmp = tmp_path / "new"
    tmp.write_bytes(KEY + b"\n" + OLD + b"\n")
    os.replace(tmp, path)  # as a Secret's mount swaps the file
    assert ring.values() == [KEY, OLD]
    path.write_bytes(b"short\n")
    assert ring.values() == [KEY, OLD]  # not a ring: the last one read stays
    with pytest.raises(SystemExit, match="fewer than 16 bytes"):
        jobtoken.read_keys(str(path))


def _unreadable() -> float:
    line = next(
        x for x in REGISTRY.render().splitlines() if x.startswith("tandem_job_key_ring_unreadable_total ")
    )
    return float(line.split()[1])


def test_a_ring_that_does_not_read_is_logged_and_counted_once_per_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 50: a rotation that wrote a bad file was ignored without a word."""
    path = tmp_path / "job-key"
    path.write_bytes(KEY + b"\n")
    ring = jobtoken.KeyRing(str(path))
    before = _unreadable()
    path.write_bytes(b"short\n")
    with caplog.at_level("WARNING", logger="tandem.jobtoken"):
        assert ring.values() == [KEY] and ring.values() == [KEY]
    assert _unreadable() == before + 1
    assert [r.getMessage() for r in caplog.records] == [
        "the job key ring's new version is refused; the last one read stays"
    ]
    path.write_bytes(OLD + b"\n" + KEY + b"\n")  # put right: read at once
    assert ring.values() == [OLD, KEY]


def _servicer(job: Job) -> SyncerServicer:
    mirror = mock.MagicMock()  # the call batches what it changes: `with mirror.broker.batch()`
    mirror.refresh_job.return_value = JobStatus(job)
    mirror.job_started.return_value = JobStatus(job)
    slurm = mock.Mock()
    servicer = SyncerServicer(mirror, mock.Mock(), slurm, mock.Mock(), 30.0, job_keys=lambda: [KEY, OLD])
    servicer.active = True
    return servicer


def _started(servicer: SyncerServicer, token: str) -> tuple[Any, str]:
    context = mock.Mock()
    context.abort.side_effect = RuntimeError("aborted")
    try:
        servicer.JobStarted(
            syncer_pb2.JobStartedRequest(job_id=7, slurm_node="cpu-001", placeholder=REF, job_token=token),
            context,
        )
    except RuntimeError:
        code, message = context.abort.call_args.args
        return code, message
    return grpc.StatusCode.OK, ""


@pytest.mark.parametrize(
    ("state", "flags", "signed_with", "same_binding", "refused"),
    [
        ("RUNNING", (), KEY, True, ""),
        ("RUNNING", (), OLD, True, ""),  # a key rotated out of first place still verifies
        ("CANCELLED", ("COMPLETING",), KEY, True, ""),  # its script at KillWait
        ("RUNNING", (), KEY, False, "not Slurm job 7's own"),  # the previous job's token
        ("RUNNING", (), b"x" * 32, True, "no job key made it"),  # not under the ring
        ("COMPLETED", (), KEY, True, "its credential ended with it"),
        ("CANCELLED", (), KEY, True, "its credential ended with it"),
    ],
    ids=["running", "older key", "completing", "replayed", "forged", "completed", "cancelled"],
)
def test_the_syncer_checks_the_token_against_the_job_slurm_has(
    state: str, flags: tuple[str, ...], signed_with: bytes, same_binding: bool, refused: str
) -> None:
    binding = jobtoken.new_binding()
    job = Job(
        7, REF, state, nodes=("cpu-001",), admin_comment=placeholder.admin_comment(REF, binding), flags=flags
    )
    token = jobtoken.token(signed_with, REF, binding if same_binding else jobtoken.new_binding())
    code, message = _started(_servicer(job), token)
    if refused:
        assert code == grpc.StatusCode.PERMISSION_DENIED and refused in message, message
    else:
        assert code == grpc.StatusCode.OK, message


def test_a_revoked_binding_refuses_the_token() -> None:
    """`scontrol update JobId=7 AdminComment=<reference>`: the binding gone, the token with it."""
    binding = jobtoken.new_binding()
    job = Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=REF)
    code, message = _started(_servicer(job), jobtoken.token(KEY, REF, binding))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "not Slurm job 7's own" in message


def _servicer_reading(job: Job, **kw: Any) -> tuple[SyncerServicer, mock.Mock]:
    mirror = mock.MagicMock()
    mirror.refresh_job.return_value = JobStatus(job)
    mirror.job_started.return_value = JobStatus(job)
    servicer = SyncerServicer(
        mirror, mock.Mock(), mock.Mock(), mock.Mock(), 30.0, job_keys=lambda: [KEY], **kw
    )
    servicer.active = True
    return servicer, mirror


def test_a_forged_token_is_refused_before_slurm_is_read() -> None:
    """Issue 50: the gateway screens a job token's form only (it holds no key); the syncer checks
    the mac first, so a flood of forgeries costs slurmrestd nothing."""
    binding = jobtoken.new_binding()
    job = Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=placeholder.admin_comment(REF, binding))
    servicer, mirror = _servicer_reading(job)
    code, message = _started(servicer, jobtoken.token(b"x" * 32, REF, binding))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "no job key made it" in message
    mirror.refresh_job.assert_not_called()


def test_an_explicitly_revoked_job_refuses_its_token() -> None:
    """Issue 50: revocation by AdminComment without the binding made tokens of version 1 valid
    again; the marker says revoked, whatever token comes."""
    binding = jobtoken.new_binding()
    job = Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=placeholder.revoked_comment(REF))
    for token in (jobtoken.token(KEY, REF, binding), jobtoken.token(KEY, REF)):
        servicer, _ = _servicer_reading(job, accept_unbound_tokens=True)
        code, message = _started(servicer, token)
        assert code == grpc.StatusCode.PERMISSION_DENIED and ("revoked" in message or "own" in message), (
            message
        )
    assert placeholder.pod_of(job) == placeholder.PodRef("apps", "web", "uid-1")  # still Tandem's job


def test_an_unbound_token_is_accepted_only_behind_the_flag() -> None:
    """A token of version 1 names no job: valid for every later job of its placeholder, and for a
    job whose AdminComment lost its binding. Refused by default."""
    job = Job(7, REF, "RUNNING", nodes=("cpu-001",), admin_comment=REF)
    servicer, mirror = _servicer_reading(job)
    code, message = _started(servicer, jobtoken.token(KEY, REF))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "--accept-unbound-job-tokens" in message
    mirror.refresh_job.assert_not_called()
    servicer, _ = _servicer_reading(job, accept_unbound_tokens=True)
    assert _started(servicer, jobtoken.token(KEY, REF)) == (grpc.StatusCode.OK, "")
