"""Interleaved trials on several arms (bench/arms.py) and their section of BENCHMARKS.md
(bench/report_arms.py, bench/report.py): the order a reader is told the arms ran in, a failed
trial kept out of the figures and said, and the earlier method's runs not published beside."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from bench import arms, report, report_arms
from bench.lifecycle import ARMS, BARE, KUBE_SCHEDULER, TANDEM, TRULY_BARE


@pytest.fixture
def no_slurm_switch(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """slurm_for without a lab: records which arms were run inside a switch of slurm.conf."""
    switched: list[str] = []

    @contextlib.contextmanager
    def slurm_for(cfg: Any, arm: str) -> Iterator[None]:
        switched.append(arm)
        yield

    monkeypatch.setattr(arms, "slurm_for", slurm_for)
    return switched


def test_arms_rotate_round_by_round_and_each_arm_runs_its_rows_together(no_slurm_switch: list[str]) -> None:
    order: list[tuple[int, str, str]] = []

    def trial(arm: str, row: str) -> arms.Trial:
        def run(r: int) -> dict[str, float]:
            order.append((r, arm, row))
            return {"seconds": 1.0}

        return run

    rows = {row: {arm: trial(arm, row) for arm in ARMS} for row in ("2 members", "4 members")}
    trials = arms.run(None, ARMS, 3, rows, say=lambda _: None)  # type: ignore[arg-type]
    assert len(trials) == 3 * 4 * 2
    firsts = [next(arm for r, arm, _ in order if r == k) for k in range(3)]
    assert firsts == [TRULY_BARE, BARE, KUBE_SCHEDULER]
    # One switch per arm per round: truly bare's rows share one restart of Slurm.
    assert no_slurm_switch.count(TRULY_BARE) == 3
    assert [row for r, arm, row in order if r == 0 and arm == TANDEM] == ["2 members", "4 members"]


def test_an_arm_a_row_does_not_name_is_not_run(no_slurm_switch: list[str]) -> None:
    rows = {"elastic": {BARE: lambda r: {"seconds": 0.5}, TANDEM: lambda r: {"seconds": 0.4}}}
    trials = arms.run(None, ARMS, 2, rows, say=lambda _: None)  # type: ignore[arg-type]
    assert {t["arm"] for t in trials} == {BARE, TANDEM}
    assert TRULY_BARE not in no_slurm_switch and KUBE_SCHEDULER not in no_slurm_switch


def test_a_failed_trial_is_said_and_left_out_of_the_figures(no_slurm_switch: list[str]) -> None:
    seconds = iter([1.0, 2.0, 3.0, 4.0])

    def tandem(r: int) -> dict[str, float]:
        if r == 1:
            raise arms.TrialFailed("t-2-1: only 1 of 2 members bound after 120 s")
        return {"seconds": next(seconds)}

    def timed_out(r: int) -> dict[str, float]:
        raise SystemExit("the extra bound not within 120 s")

    rows = {"2 members": {TANDEM: tandem, BARE: timed_out}}
    trials = arms.run(None, [BARE, TANDEM], 3, rows, say=lambda _: None)  # type: ignore[arg-type]
    result = arms.result(trials, [("seconds", "s")], 3)
    cells = result["rows"][0]["arms"]
    assert cells[TANDEM]["runs"] == 3 and cells[TANDEM]["failed"] == 1
    assert cells[TANDEM]["seconds"]["median"] == pytest.approx(1.5)
    assert cells[BARE]["failed"] == 3 and "seconds" not in cells[BARE]
    assert any("only 1 of 2 members bound" in f for f in result["checks_failed"])
    assert any("the extra bound not within" in f for f in result["checks_failed"])

    shown = "\n".join(report_arms.table(result))
    assert "| 2 members | Tandem | 3 (1 **failed**) | 1.5 [" in shown
    assert "| 2 members | bare Slurm in a Tandem cluster | 3 (3 **failed**) | - |" in shown


def _record(result: dict[str, Any], at: str) -> dict[str, Any]:
    return {
        "name": "gang",
        "at": at,
        "commit": "abc1234",
        "nodes": 64,
        "command": ["/x/.venv/bin/python", "bench/gang.py", "--rounds", "5"],
        "result": result,
    }


def test_the_report_publishes_only_the_arms_runs_of_a_section_and_says_where_the_rest_are(
    no_slurm_switch: list[str],
) -> None:
    rows = {"2 members": {arm: (lambda r: {"seconds": 0.3}) for arm in ARMS}}
    trials = arms.run(None, ARMS, 5, rows, say=lambda _: None)  # type: ignore[arg-type]
    earlier = {"sizes": [{"size": 2, "bare_p50": 0.26, "tandem_p50": 0.54, "runs": 5}]}
    text = report.render(
        {
            "gang": [
                {**_record(earlier, "2026-11-28"), "command": ["python", "bench/gang.py", "--repeat", "5"]},
                _record(arms.result(trials, [("seconds", "to running s")], 5), "2026-12-04"),
            ]
        }
    )
    assert "| 2 members | kube-scheduler's default scheduler | 5 | 0.3 [0.3, 0.3] |" in text
    assert "0.54" not in text  # the earlier method's figure
    assert "1 earlier runs, on the earlier method, are kept in `bench/results/gang.jsonl`." in text
    assert "bench/gang.py --rounds 5" in text and "--repeat" not in text


def _burst_run(arm: str, starts: list[float], sends: list[float], problems: list[str] | None = None) -> Any:
    from bench import lifecycle, openloop

    t0 = 1000.0
    sent = [openloop.Sent(i, t0, t0 + lag) for i, lag in enumerate(sends)]
    run = lifecycle.ArmRun(arm, 0.0, sent, {i: t0 + s for i, s in enumerate(starts)}, 0.0, t0)
    run.window = 20.0
    run.cpu = {"tandem-scheduler": 0.2, "tandem-syncer": 0.3, "tandem-hooks": 0.1, "kube-scheduler": 0.05}
    run.api.update({"system:serviceaccount:tandem:tandem-scheduler": 8})
    run.problems = problems or []
    return run


def test_a_bursts_latency_and_rate_count_from_its_one_intended_instant_not_each_send() -> None:
    from bench import burst

    # Four Pods meant for one instant, the last sent 2 s late (a slow client) and bound at 2.5 s.
    figures = burst.figures(TANDEM, _burst_run(TANDEM, [0.5, 1.0, 1.5, 2.5], [0.0, 0.0, 0.0, 2.0]))
    assert figures["max"] == pytest.approx(2.5)
    assert figures["rate"] == pytest.approx(4 / 2.5)
    assert figures["tandem_cpu"] == pytest.approx(150.0)  # 0.6 s of CPU over 4 Pods, in ms
    assert figures["api"] == pytest.approx(2.0)
    # A Slurm arm's jobs cost no API request of a scheduler's: no figure, not a zero.
    assert "api" not in burst.figures(BARE, _burst_run(BARE, [0.5, 1.0], [0.0, 0.0]))


def test_a_burst_that_failed_a_check_is_a_failed_trial() -> None:
    from bench import burst

    with pytest.raises(arms.TrialFailed, match="bound 2 times"):
        burst.figures(TANDEM, _burst_run(TANDEM, [0.5], [0.0], ["b0-1-tandem-0 was bound 2 times"]))


def test_kube_schedulers_gang_members_are_kept_one_per_node_as_a_jobs_nodes_are() -> None:
    from types import SimpleNamespace

    from bench import gang

    cfg: Any = SimpleNamespace(scheduler_name="tandem")
    kube = gang._member(cfg, "k-4-0-0", "k-4-0", scheduler="default-scheduler")
    term = kube["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == kube["metadata"]["labels"] == {gang.SPREAD_LABEL: "k-4-0"}
    assert kube["spec"]["schedulingGroup"] == {"podGroupName": "k-4-0"}
    # A het group's two PodGroups share one label: no two of its members on one Node.
    leader = gang._member(cfg, "kh-0-leader-0", "kh-0-leader", "4", "default-scheduler", spread_as="kh-0")
    assert leader["metadata"]["labels"] == {gang.SPREAD_LABEL: "kh-0"}
    # Tandem's members are its own to place (one Slurm job's nodes): no affinity of the benchmark's.
    tandem = gang._member(cfg, "t-4-0-0", "t-4-0")
    assert tandem["spec"]["schedulerName"] == "tandem" and "affinity" not in tandem["spec"]
