"""Where the machine's CPU time went during a benchmark phase: each daemon of the stack, the
benchmark itself, and the rest (short-lived processes: slurmstepd, prolog and epilog scripts, their
curl calls). Tandem's own services report their CPU time on /metrics (process_cpu_seconds_total),
wherever they run; the other daemons are read from /proc."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from devstack import demo, services, stack
from devstack.config import StackConfig
from devstack.procs import Daemon, cpu_seconds


def _machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _group(daemon: str) -> str:
    return "slurmd (all)" if daemon.startswith("slurmd-") else daemon


def tandem_metrics(cfg: StackConfig) -> dict[str, list[str]]:
    """Each Tandem process's /metrics, by group: one per lab process (a second replica is a group of
    its own, as a daemon was), or a service's every replica when the chart runs it."""
    if cfg.deploy == "chart":
        return {service: demo.metrics_urls(cfg, service) for service in services.SERVICES}
    return {name: [url] for name in services.names(cfg) if (url := services.metrics_url(cfg, name))}


def process_metrics(url: str) -> dict[str, float]:
    """The process_* samples a service shows (prometheus_client reads them from its /proc/self);
    none from a service that does not answer, which counts as nothing, as a gone pid does."""
    try:
        r = httpx.get(url, timeout=5)
        r.raise_for_status()
    except httpx.HTTPError:
        return {}
    return {
        s.name: s.value
        for family in text_string_to_metric_families(r.text)
        if family.name.startswith("process_")
        for s in family.samples
    }


@dataclass
class CpuSample:
    machine: float
    by_group: dict[str, float]


def sample(daemons: Mapping[str, Daemon], tandem: Mapping[str, Sequence[str]] | None = None) -> CpuSample:
    """`tandem`: /metrics URLs by group (tandem_metrics); a daemon of such a group is not read
    from /proc."""
    tandem = tandem or {}
    by_group: dict[str, float] = {"benchmark": cpu_seconds(os.getpid())}
    for group, urls in tandem.items():
        by_group[group] = sum(process_metrics(url).get("process_cpu_seconds_total", 0.0) for url in urls)
    for name, daemon in daemons.items():
        if name in tandem:
            continue
        pid = daemon.main_pid()
        group = _group(name)
        by_group[group] = by_group.get(group, 0.0) + (cpu_seconds(pid) if pid is not None else 0.0)
    return CpuSample(_machine_busy_seconds(), by_group)


def sample_stack(cfg: StackConfig) -> CpuSample:
    """Every daemon of the stack and Tandem's services."""
    return sample(stack.all_daemons(cfg), tandem_metrics(cfg))


def used_between(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per group between two samples, with `other` the machine's unexplained rest."""
    used = {g: after.by_group.get(g, 0.0) - before.by_group.get(g, 0.0) for g in after.by_group}
    machine = after.machine - before.machine
    used["other (slurmstepd, prolog/epilog)"] = max(0.0, machine - sum(used.values()))
    used["whole machine"] = machine
    return used
