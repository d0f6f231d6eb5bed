"""The per-Pod call ledger (bench/calls.py): what a claim of "fewer calls per Pod" rests on."""

from __future__ import annotations

from bench import calls

SYNCER_METRICS = """\
# HELP tandem_reconcile_total reconciles by controller and outcome
# TYPE tandem_reconcile_total counter
tandem_reconcile_total{controller="nodes",result="success"} 90.0
tandem_reconcile_total{controller="nodes",result="requeue_after"} 10.0
tandem_reconcile_total{controller="topology",result="success"} 2.0
# HELP tandem_slurm_api_seconds slurmrestd call latency
# TYPE tandem_slurm_api_seconds histogram
tandem_slurm_api_seconds_bucket{le="0.1",operation="get_job"} 30.0
tandem_slurm_api_seconds_bucket{le="+Inf",operation="get_job"} 40.0
tandem_slurm_api_seconds_count{operation="get_job"} 40.0
tandem_slurm_api_seconds_sum{operation="get_job"} 1.5
# HELP tandem_kube_requests_total Kubernetes API requests made
# TYPE tandem_kube_requests_total counter
tandem_kube_requests_total{verb="patch",resource="nodes"} 20.0
# HELP process_cpu_seconds_total cpu
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.0
"""


def test_a_services_counters_are_read_by_what_they_count_and_outcomes_add_up() -> None:
    ledger = calls.parse("syncer", SYNCER_METRICS)
    assert ledger == {
        ("syncer", "reconcile_total", "nodes"): 100.0,  # success and requeue_after together
        ("syncer", "reconcile_total", "topology"): 2.0,
        ("syncer", "slurm_api_seconds_count", "get_job"): 40.0,  # calls, not buckets or seconds
        ("syncer", "kube_requests_total", "patch,nodes"): 20.0,
    }


def test_per_pod_takes_the_idle_rate_away_over_the_window() -> None:
    key = ("syncer", "reconcile_total", "nodes")
    before = calls.parse("syncer", SYNCER_METRICS)
    after = dict(before)
    after[key] += 1000.0  # over a 100 s window, 2/s of it the periodic resync
    got = calls.per_pod(before, after, {key: 2.0}, window=100.0, pods=200)
    assert got[key] == (1000.0 - 200.0) / 200
    assert got[("syncer", "reconcile_total", "topology")] == 0.0


def test_a_counter_new_in_the_run_counts_from_zero_and_noise_is_left_out_of_the_table() -> None:
    key = ("hooks", "hook_calls_total", "/v1/prolog")
    got = calls.per_pod({}, {key: 200.0}, {}, window=10.0, pods=100)
    assert got == {key: 2.0}
    assert calls.rows({key: 2.0, ("syncer", "reconcile_total", "nodes"): 0.01}) == [
        ["hooks", "hook_calls_total", "/v1/prolog", "2.00"]
    ]
