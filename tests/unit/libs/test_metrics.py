"""What /metrics shows, now that prometheus_client writes it: the names, labels and buckets the
chart's alerts and dashboard read, and the process' own metrics beside Tandem's."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tandem.metrics import REGISTRY, Registry

ROOT = Path(__file__).resolve().parents[3]

# Every module that defines metrics when imported; the computed gauges come with their owners'
# objects (a lock manager, a controller, a policy source), which the chart test below covers.
DEFINING = (
    "tandem.kube",
    "tandem.leader",
    "tandem.runner",
    "tandem.slurm.rest",
    "tandem.workqueue",
    "tandem.jobtoken",
    "tandem.sakeys",
    "tandem.hooks.handler",
    "tandem.boundedhttp",
    "tandem.syncer.lockcalls",
    "tandem.syncer.nodeapply",
    "tandem.syncer.topologysync",
    "tandem.scheduler.controller",
    "tandem.scheduler.watches",
)

# name -> type, as the hand-written exposition showed them before prometheus_client (and the two
# work queue metrics added with it, and the scheduler's decisions by action since).
IMPORTED = {
    "tandem_build_info": "gauge",
    "tandem_kube_requests_total": "counter",
    "tandem_leader": "gauge",
    "tandem_reconcile_total": "counter",
    "tandem_reconcile_seconds": "histogram",
    "tandem_workqueue_depth": "gauge",
    "tandem_workqueue_adds_total": "counter",
    "tandem_workqueue_queue_duration_seconds": "histogram",
    "tandem_slurm_api_errors_total": "counter",
    "tandem_slurm_api_seconds": "histogram",
    "tandem_slurm_token_expiry_timestamp_seconds": "gauge",
    "tandem_hook_calls_total": "counter",
    "tandem_hook_call_seconds": "histogram",
    "tandem_hook_connections_refused_total": "counter",
    "tandem_lock_wait_seconds": "histogram",
    "tandem_unlocks_refused_total": "counter",
    "tandem_evictions_total": "counter",
    "tandem_node_sync_actions_total": "counter",
    "tandem_topology_writes_total": "counter",
    "tandem_topology_feature_writes_total": "counter",
    "tandem_pods_validated_total": "counter",
    "tandem_jobs_submitted_total": "counter",
    "tandem_submit_seconds": "histogram",
    "tandem_bind_seconds": "histogram",
    "tandem_pod_create_to_bound_seconds": "histogram",
    "tandem_scheduler_wakeups_total": "counter",
    "tandem_scheduler_wakeups_skipped_total": "counter",
    "tandem_scheduler_decisions_total": "counter",
    "tandem_scheduler_reconciles_to_bind": "histogram",
    "tandem_job_key_ring_unreadable_total": "counter",
    "tandem_sa_keys_refreshes_total": "counter",
    "tandem_health_connections_refused_total": "counter",
}
COMPUTED = ("tandem_node_locks", "tandem_node_locks_idle", "tandem_pods", "tandem_policy_stale")


def _types(text: str) -> dict[str, str]:
    """Each family's name and type from its `# TYPE` line, as a scrape reads them."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))


def _lines(registry: Registry) -> list[str]:
    return registry.render().splitlines()


def test_the_exposition_keeps_names_labels_and_buckets() -> None:
    registry = Registry()
    requests = registry.counter("x_requests_total", "requests", ["verb", "resource"])
    requests.inc(verb="GET", resource="pods")
    requests.inc(2, verb="GET", resource="pods")
    registry.counter("x_refused_total", "refused").inc()
    registry.histogram("x_seconds", "latency", ["op"], buckets=(0.25, 1, 30)).observe(0.5, op="a")
    registry.gauge("x_state", "by state", ["state"], collect=lambda: {("on",): 2.0})
    registry.gauge("x_expires", "when").set(1700000000)
    lines = _lines(registry)
    for line in (
        "# TYPE x_requests_total counter",
        'x_requests_total{resource="pods",verb="GET"} 3.0',
        "x_refused_total 1.0",
        "# TYPE x_seconds histogram",
        'x_seconds_bucket{le="0.25",op="a"} 0.0',
        'x_seconds_bucket{le="1.0",op="a"} 1.0',
        'x_seconds_bucket{le="30.0",op="a"} 1.0',
        'x_seconds_bucket{le="+Inf",op="a"} 1.0',
        'x_seconds_count{op="a"} 1.0',
        'x_seconds_sum{op="a"} 0.5',
        "# TYPE x_state gauge",
        'x_state{state="on"} 2.0',
        "x_expires 1.7e+09",
    ):
        assert line in lines
    # No `_created` series: names /metrics never showed.
    assert not [line for line in lines if "_created" in line]
    assert registry.sample("x_expires") == 1700000000


def test_the_registry_has_the_process_metrics() -> None:
    """What the benchmarks read for each service's CPU time and memory (bench/cpu.py)."""
    samples = {
        s.name: s.value for f in text_string_to_metric_families(Registry().render()) for s in f.samples
    }
    assert samples["process_cpu_seconds_total"] > 0
    assert samples["process_resident_memory_bytes"] > 1e6
    assert "python_gc_collections_total" in samples
    assert "# TYPE process_cpu_seconds_total counter" in _lines(REGISTRY)


def test_wrong_labels_and_a_counter_without_total_are_refused() -> None:
    registry = Registry()
    counter = registry.counter("y_total", "y", ["a"])
    with pytest.raises(ValueError):
        counter.inc(b="1")
    with pytest.raises(ValueError):
        counter.inc()
    with pytest.raises(ValueError):
        registry.gauge("y_gauge", "y", ["a"]).set(1, b="1")
    # prometheus_client would expose it as y_total, not under the name the code says.
    with pytest.raises(ValueError):
        registry.counter("y", "y")
    with pytest.raises(TypeError):
        registry.histogram("y_total", "y")


def test_a_metric_registered_twice_is_one() -> None:
    registry = Registry()
    first = registry.counter("z_total", "z", ["a"])
    assert registry.counter("z_total", "z", ["a"]) is first
    first.inc(a="1")
    assert [line for line in _lines(registry) if line.startswith("z_total")] == ['z_total{a="1"} 1.0']


def test_every_service_metric_is_exposed_under_its_name_and_type() -> None:
    for module in DEFINING:
        importlib.import_module(module)
    exposed = {name: kind for name, kind in _types(REGISTRY.render()).items() if name.startswith("tandem_")}
    assert {n: k for n, k in exposed.items() if n not in COMPUTED} == IMPORTED


def test_what_the_charts_alerts_and_dashboard_read_is_exposed() -> None:
    """Every series a PrometheusRule or dashboard expression selects is one a service shows."""
    for module in DEFINING:
        importlib.import_module(module)
    exposed = set(COMPUTED)
    for name, kind in _types(REGISTRY.render()).items():
        exposed |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    chart = ROOT / "helm" / "tandem"
    text = (chart / "templates" / "prometheusrule.yaml").read_text()
    text += (chart / "files" / "dashboards" / "tandem.json").read_text()
    selected = set(re.findall(r"\b(tandem_[a-z_]+)\s*\{", text))
    assert len(selected) >= 10
    assert selected <= exposed
