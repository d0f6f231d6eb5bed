"""Prometheus metrics on prometheus_client, behind the small facade the services were written
against: `REGISTRY.counter(name, help, labels)` and `.inc(**labels)`, histograms' `.observe(v,
**labels)`, gauges set or computed when scraped. One registry per process, which also carries the
process' own metrics (process_cpu_seconds_total, process_resident_memory_bytes, python_*)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import prometheus_client as prom
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tandem import buildinfo

LabelValues = tuple[str, ...]
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The text format every Prometheus reads; prometheus_client's newer default (1.0.0) only matters for
# UTF-8 metric names, which Tandem has none of.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Without this, each counter and histogram adds a `<name>_created` series: names nothing reads,
# which /metrics did not show before.
prom.disable_created_metrics()  # type: ignore[no-untyped-call]

_Prom = TypeVar("_Prom", prom.Counter, prom.Histogram)


def _series(metric: _Prom, label_names: Sequence[str], labels: dict[str, str]) -> _Prom:
    """The series of `labels`; prometheus_client raises ValueError for wrong label names."""
    return metric.labels(**labels) if labels or label_names else metric


class Counter:
    def __init__(self, registry: prom.CollectorRegistry, name: str, help: str, labels: Sequence[str]) -> None:
        # prometheus_client exposes a counter as <name>_total whatever it is given: a name without
        # the suffix would be exposed under another one than the code says.
        if not name.endswith("_total"):
            raise ValueError(f"counter {name}: a counter's name ends in _total")
        self.name, self.label_names = name, tuple(labels)
        self._metric = prom.Counter(name, help, self.label_names, registry=registry)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        _series(self._metric, self.label_names, labels).inc(amount)


class Histogram:
    def __init__(
        self,
        registry: prom.CollectorRegistry,
        name: str,
        help: str,
        labels: Sequence[str],
        buckets: Sequence[float],
    ) -> None:
        self.name, self.label_names = name, tuple(labels)
        self._metric = prom.Histogram(name, help, self.label_names, registry=registry, buckets=buckets)

    def observe(self, value: float, **labels: str) -> None:
        _series(self._metric, self.label_names, labels).observe(value)


class Gauge(Collector):
    """Values set, and those `compute` gives when scraped (label values -> value). A Collector of
    its own: prometheus_client's Gauge computes at most one unlabelled series at scrape time, and
    these callbacks give a series per label value (Pods by state, locks by state, ...)."""

    def __init__(
        self,
        name: str,
        help: str,
        labels: Sequence[str],
        compute: Callable[[], dict[LabelValues, float]] | None,
    ) -> None:
        self.name, self.help, self.label_names = name, help, tuple(labels)
        self.compute = compute
        self._values: dict[LabelValues, float] = {}
        self._lock = threading.Lock()

    def set(self, value: float, **labels: str) -> None:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {sorted(labels)}")
        with self._lock:
            self._values[tuple(str(labels[n]) for n in self.label_names)] = value

    def describe(self) -> Iterable[Metric]:
        # The registry learns the name from this, without calling `compute` before its owner is ready.
        return [GaugeMetricFamily(self.name, self.help, labels=self.label_names)]

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            values = dict(self._values)
        if self.compute is not None:
            values.update(self.compute())
        family = GaugeMetricFamily(self.name, self.help, labels=self.label_names)
        for key, value in sorted(values.items()):
            family.add_metric(key, value)
        return [family]


_Metric = TypeVar("_Metric", Counter, Gauge, Histogram)


class Registry:
    def __init__(self) -> None:
        self.collectors = prom.CollectorRegistry()
        prom.ProcessCollector(registry=self.collectors)
        prom.PlatformCollector(registry=self.collectors)
        prom.GCCollector(registry=self.collectors)
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}
        self._lock = threading.Lock()
        # Which code answers: a benchmark's manifest and an operator's dashboard read it (issue 55).
        self.gauge(
            "tandem_build_info",
            "1, labelled with the commit this process's code was built from and whether it had changes",
            ["commit", "dirty", "python"],
            collect=lambda: {buildinfo.current().labels: 1.0},
        )

    def _add(self, name: str, kind: type[_Metric], make: Callable[[], _Metric]) -> _Metric:
        with self._lock:
            metric = self._metrics.get(name)
            if metric is None:
                # Modules imported twice, tests: one metric per name (prometheus_client refuses a
                # second registration).
                metric = self._metrics[name] = make()
        if not isinstance(metric, kind):
            raise TypeError(f"{name} is a {type(metric).__name__}, not a {kind.__name__}")
        return metric

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(name, Counter, lambda: Counter(self.collectors, name, help, labels))

    def gauge(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        collect: Callable[[], dict[LabelValues, float]] | None = None,
    ) -> Gauge:
        def make() -> Gauge:
            gauge = Gauge(name, help, labels, collect)
            self.collectors.register(gauge)
            return gauge

        metric = self._add(name, Gauge, make)
        if collect is not None:
            # Registered again by a newer owner (a re-created lock manager): it reports now.
            metric.compute = collect
        return metric

    def histogram(
        self, name: str, help: str, labels: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> Histogram:
        return self._add(name, Histogram, lambda: Histogram(self.collectors, name, help, labels, buckets))

    def sample(self, name: str, **labels: str) -> float | None:
        """One sample's value as /metrics shows it (`x_total`, `x_count`, ...), None if absent."""
        return self.collectors.get_sample_value(name, labels)

    def render(self) -> str:
        return prom.generate_latest(self.collectors).decode()


REGISTRY = Registry()
