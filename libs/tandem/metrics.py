"""Prometheus metrics in the text exposition format, without a client library: counters, gauges
(set, or computed when scraped) and histograms, with labels. One registry per process."""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Callable, Sequence

LabelValues = tuple[str, ...]
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: LabelValues, extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _num(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.label_names = name, help, tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, str]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {sorted(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return [f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in items]


class Gauge(_Metric):
    kind = "gauge"

    def __init__(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        collect: Callable[[], dict[LabelValues, float]] | None = None,
    ) -> None:
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {}
        self._collect = collect

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self._values[self._key(labels)] = value

    def render(self) -> list[str]:
        with self._lock:
            values = dict(self._values)
        if self._collect is not None:
            values.update(self._collect())
        return [f"{self.name}{_labels(self.label_names, k)} {_num(v)}" for k, v in sorted(values.items())]


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self, name: str, help: str, labels: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets))
        self._counts: dict[LabelValues, list[int]] = {}
        self._sums: dict[LabelValues, float] = {}

    def observe(self, value: float, **labels: str) -> None:
        key = self._key(labels)
        with self._lock:
            counts = self._counts.setdefault(key, [0] * (len(self.buckets) + 1))
            counts[bisect.bisect_left(self.buckets, value)] += 1
            self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, **labels: str) -> int:
        return sum(self._counts.get(self._key(labels), []))

    def render(self) -> list[str]:
        lines = []
        with self._lock:
            items = sorted((k, list(v), self._sums[k]) for k, v in self._counts.items())
        for key, counts, total in items:
            running = 0
            for bound, n in zip((*self.buckets, math.inf), counts, strict=True):
                running += n
                le = 'le="' + _num(bound) + '"'
                lines.append(f"{self.name}_bucket{_labels(self.label_names, key, le)} {running}")
            lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {_num(total)}")
            lines.append(f"{self.name}_count{_labels(self.label_names, key)} {running}")
        return lines


class Registry:
    def __init__(self) -> None:
        self._metrics: dict[str, _Metric] = {}
        self._lock = threading.Lock()

    def _add(self, metric: _Metric) -> _Metric:
        with self._lock:
            existing = self._metrics.get(metric.name)
            if existing is not None:
                return existing  # modules imported twice, tests: one metric per name
            self._metrics[metric.name] = metric
            return metric

    def counter(self, name: str, help: str, labels: Sequence[str] = ()) -> Counter:
        metric = self._add(Counter(name, help, labels))
        assert isinstance(metric, Counter)
        return metric

    def gauge(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        collect: Callable[[], dict[LabelValues, float]] | None = None,
    ) -> Gauge:
        metric = self._add(Gauge(name, help, labels, collect))
        assert isinstance(metric, Gauge)
        if collect is not None:
            # Registered again by a newer owner (a re-created lock manager): it reports now.
            metric._collect = collect
        return metric

    def histogram(
        self, name: str, help: str, labels: Sequence[str] = (), buckets: Sequence[float] = DEFAULT_BUCKETS
    ) -> Histogram:
        metric = self._add(Histogram(name, help, labels, buckets))
        assert isinstance(metric, Histogram)
        return metric

    def render(self) -> str:
        with self._lock:
            metrics = list(self._metrics.values())
        lines: list[str] = []
        for m in metrics:
            lines += m.header() + m.render()
        return "\n".join(lines) + "\n"


REGISTRY = Registry()
