"""bench/latency.py reads each Pod's stages off its trace and each bare job's off its prolog's span:
a stage it cannot see is left out, never taken as zero."""

from __future__ import annotations

from bench.latency import bare_marks, table, tandem_marks
from bench.otlp import ExportedSpan


def _span(
    name: str, start: float, end: float, span_id: str, parent: str = "", trace: str = "t1", **attrs: str
) -> ExportedSpan:
    return ExportedSpan("svc", name, trace, span_id, parent, dict(attrs), int(start * 1e9), int(end * 1e9))


POD_TRACE = [
    _span("submit placeholder job", 10.2, 10.3, "a", **{"k8s.pod": "bench/lat-0"}),
    _span("slurmrestd POST job/submit", 10.21, 10.25, "b", parent="a"),
    _span("POST /v1/lock", 10.8, 10.9, "c", parent="a"),
    _span("POST /v1/started", 11.0, 11.05, "d", parent="a"),
    _span("bind pod", 11.1, 11.12, "e", parent="x"),
]


def test_a_pods_stages_come_from_its_trace() -> None:
    [marks] = tandem_marks(POD_TRACE, {"lat-0": 10.0}, {"lat-0": 11.5})
    assert round(marks.between("created", "submit begins") or 0, 3) == 0.2
    assert round(marks.between("submit begins", "submitted") or 0, 3) == 0.05
    assert round(marks.between("submitted", "prolog calls") or 0, 3) == 0.55
    assert round(marks.between("lock held", "script started") or 0, 3) == 0.1
    assert round(marks.between("created", "bound") or 0, 3) == 1.12


def test_a_stage_not_seen_is_left_out() -> None:
    [marks] = tandem_marks(POD_TRACE[:2], {"lat-0": 10.0}, {})
    assert marks.between("submitted", "prolog calls") is None
    _, results = table([], [marks])
    lock = next(r for r in results if r["stage"] == "prolog lock")
    assert lock["tandem_p50"] is None and lock["bare_p50"] is None


def test_a_bare_jobs_prolog_is_found_by_its_job_id() -> None:
    spans = [_span("POST /v1/lock", 5.5, 5.6, "z", trace="t9", **{"slurm.job_id": "42"})]
    [marks] = bare_marks(spans, {42: (5.0, 5.02)}, {42: 5.8})
    assert round(marks.between("submitted", "prolog calls") or 0, 3) == 0.48
    assert round(marks.between("created", "bound") or 0, 3) == 0.8
