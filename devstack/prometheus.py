"""The lab's Prometheus: Debian's package, run as a Daemon of the stack on 127.0.0.1, scraping
Tandem as the chart's PodMonitors say and evaluating the chart's PrometheusRule.

Nothing here repeats the chart: the scrape jobs (names, paths, ports, intervals) and the rules come
from `helm template` of helm/tandem with the monitoring objects on. Only the targets are the lab's:
on the default stack the services are processes of this machine (their metrics ports, as the
PodMonitors' port names map onto them); with DEPLOY=chart, the installed Pods, found through the
lab's apiserver by the PodMonitors' selectors and port names (Debian's build has no Kubernetes
discovery: the lab writes them into a file_sd file).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from devstack import config, host_packages, kube, services
from devstack.config import StackConfig
from devstack.procs import Daemon, wait_for

PACKAGE = "prometheus"
BINARY = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")
CHART = config.REPO_ROOT / "helm" / "tandem"
# The lab's monitoring values: the chart's own objects, scraped and evaluated every few seconds
# and with every alert's `for` shortened, so that a test sees an alert fire within seconds.
SCRAPE_INTERVAL = "2s"
ALERT_FOR = "10s"
EVALUATION_INTERVAL = "2s"
LAB_VALUES = (
    "monitoring.podMonitors.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboard.enabled=true",
    f"monitoring.podMonitors.interval={SCRAPE_INTERVAL}",
    f"monitoring.prometheusRule.forOverride={ALERT_FOR}",
)
# Where a PodMonitor's port name is served by a lab process (the chart's containers name them).
PORT_OF_PROCESS = {"health": ("tandem-scheduler", "tandem-syncer"), "http": ("tandem-hooks",)}


def ensure_installed() -> None:
    """Debian's package (prometheus and promtool), without its recommended node exporter and
    without starting its service: the lab's Daemon is the only Prometheus that runs."""
    host_packages.ensure([PACKAGE], "the lab's Prometheus and promtool", start_services=False)


def url(cfg: StackConfig) -> str:
    return f"http://127.0.0.1:{cfg.ports.prometheus}"


def data_dir(cfg: StackConfig) -> Path:
    return cfg.state_dir / "prometheus"


def config_file(cfg: StackConfig) -> Path:
    return data_dir(cfg) / "prometheus.yml"


def rules_file(cfg: StackConfig) -> Path:
    return data_dir(cfg) / "tandem.rules.yml"


def render(cfg: StackConfig, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The chart's objects as the lab deploys it, monitoring on (`extra`: more `--set` pairs)."""
    sets = [*LAB_VALUES, *leader_election_values(cfg), *extra]
    argv = [str(cfg.bin_dir / "helm"), "template", config.TANDEM_RELEASE, str(CHART)]
    argv += ["--namespace", config.TANDEM_NAMESPACE]
    if cfg.deploy == "chart":
        argv += ["--values", str(config.REPO_ROOT / "devstack" / "chart-values.yaml")]
    argv += [a for s in sets for a in ("--set", s)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"helm template {CHART} failed: {out.stderr.strip()}")
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def leader_election_values(cfg: StackConfig) -> list[str]:
    """The Leases the rule names follow the services' --leader-elect: on with two replicas here,
    always on for the chart (its default)."""
    if cfg.deploy == "chart":
        return []
    on = str(cfg.replicas > 1).lower()
    return [f"scheduler.leaderElection.enabled={on}", f"syncer.leaderElection.enabled={on}"]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def rule_groups(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """A Prometheus rules file: the PrometheusRules' spec.groups, as the operator loads them."""
    return {"groups": [g for rule in of_kind(objects, "PrometheusRule") for g in rule["spec"]["groups"]]}


def scrape_configs(cfg: StackConfig, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One job per PodMonitor endpoint, named and labelled as the Prometheus Operator does
    (job_name podMonitor/<ns>/<name>/<i>; labels job=<ns>/<name>, namespace, pod, container)."""
    jobs = []
    for monitor in of_kind(objects, "PodMonitor"):
        meta, spec = monitor["metadata"], monitor["spec"]
        for i, endpoint in enumerate(spec["podMetricsEndpoints"]):
            job: dict[str, Any] = {
                "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{i}",
                "metrics_path": endpoint.get("path", "/metrics"),
                "scheme": endpoint.get("scheme", "http"),
            }
            if "interval" in endpoint:
                job["scrape_interval"] = endpoint["interval"]
            if "scrapeTimeout" in endpoint:
                job["scrape_timeout"] = endpoint["scrapeTimeout"]
            if cfg.deploy == "chart":
                job |= _pod_targets(cfg, monitor, endpoint)
            else:
                job["static_configs"] = _lab_processes(cfg, monitor, endpoint)
            jobs.append(job)
    return jobs


def _pod_targets(cfg: StackConfig, monitor: dict[str, Any], endpoint: dict[str, Any]) -> dict[str, Any]:
    """The installed Pods the PodMonitor selects, on their Pod IPs (the lab bridge reaches them from
    the host) and the port of that name. Debian builds Prometheus without Kubernetes discovery, so
    the lab lists the Pods itself into a file_sd file, which Prometheus re-reads when it changes;
    `make up` writes it again (after a Pod was replaced, say)."""
    meta = monitor["metadata"]
    path = data_dir(cfg) / "targets" / f"{meta['name']}-{endpoint['port']}.json"
    groups = [
        {"targets": [target], "labels": labels}
        for target, labels in _selected_pods(cfg, monitor, endpoint["port"])
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(groups, indent=2) + "\n")
    return {"file_sd_configs": [{"files": [str(path)], "refresh_interval": "10s"}]}


def _selected_pods(
    cfg: StackConfig, monitor: dict[str, Any], port_name: str
) -> list[tuple[str, dict[str, str]]]:
    meta, spec = monitor["metadata"], monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [meta["namespace"]]
    selector = ",".join(f"{k}={v}" for k, v in spec["selector"].get("matchLabels", {}).items())
    found = []
    for ns in namespaces:
        pods = json.loads(kube.kubectl(cfg, "-n", ns, "get", "pods", "-l", selector, "-o", "json"))["items"]
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            if not ip or pod["status"].get("phase") in ("Failed", "Succeeded"):
                continue
            for container in pod["spec"]["containers"]:
                for port in container.get("ports", []):
                    if port.get("name") == port_name:
                        labels = {
                            "job": f"{meta['namespace']}/{meta['name']}",
                            "namespace": ns,
                            "pod": pod["metadata"]["name"],
                            "container": container["name"],
                            "endpoint": port_name,
                        }
                        found.append((f"{ip}:{port['containerPort']}", labels))
    return found


def _lab_processes(
    cfg: StackConfig, monitor: dict[str, Any], endpoint: dict[str, Any]
) -> list[dict[str, Any]]:
    """The lab's processes of the component the PodMonitor selects (every replica), labelled as
    their Pods' scrape would be: the process name stands for the Pod's."""
    meta, spec = monitor["metadata"], monitor["spec"]
    component = spec["selector"]["matchLabels"]["app.kubernetes.io/name"]
    if component not in PORT_OF_PROCESS.get(endpoint["port"], ()):
        raise RuntimeError(f"PodMonitor {meta['name']}: no lab process serves port {endpoint['port']!r}")
    groups = []
    for name in services.names(cfg):
        metrics = services.metrics_url(cfg, name)
        if not name.startswith(component) or metrics is None:
            continue
        host_port = metrics.removeprefix("http://").split("/", 1)[0]
        labels = {
            "job": f"{meta['namespace']}/{meta['name']}",
            "namespace": meta["namespace"],
            "pod": name,
            "container": component,
            "endpoint": endpoint["port"],
        }
        groups.append({"targets": [host_port], "labels": labels})
    return groups


def write_config(cfg: StackConfig) -> bool:
    """The configuration and rules from the chart as rendered now; True if either changed."""
    objects = render(cfg)
    prometheus_yml = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(rules_file(cfg))],
        "scrape_configs": scrape_configs(cfg, objects),
    }
    changed = False
    for path, content in (
        (rules_file(cfg), rule_groups(objects)),
        (config_file(cfg), prometheus_yml),
    ):
        text = "# Made by devstack/prometheus.py from helm/tandem: edit the chart, not this.\n"
        text += yaml.safe_dump(content, sort_keys=False, width=120)
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed = True
    return changed


def daemons(cfg: StackConfig) -> dict[str, Daemon]:
    return {"prometheus": Daemon("prometheus", cfg.run_dir, cfg.log_dir)}


def start(cfg: StackConfig, daemon: Daemon) -> None:
    daemon.start(
        [
            str(BINARY),
            f"--config.file={config_file(cfg)}",
            f"--storage.tsdb.path={data_dir(cfg) / 'data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address=127.0.0.1:{cfg.ports.prometheus}",
            f"--web.external-url={url(cfg)}",
        ]
    )
    wait_for("Prometheus ready", lambda: _ready(cfg), 60, daemon)


def _ready(cfg: StackConfig) -> bool:
    return httpx.get(f"{url(cfg)}/-/ready", timeout=2).status_code == 200
