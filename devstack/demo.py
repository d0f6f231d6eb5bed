"""`make demo`: the stack up, the reference's two example Pods scheduled through Slurm, and where
each one landed: Pod -> Slurm job -> Slurm node -> Node -> lock."""

from __future__ import annotations

import copy
import time
from typing import Any

import httpx
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import chart, config, kube, services
from devstack.config import StackConfig
from devstack.table import format_table
from tandem import keys
from tandem.v1 import lock_pb2, scheduler_pb2, scheduler_pb2_grpc, slurm_pb2, syncer_pb2, syncer_pb2_grpc

NAMESPACE = "demo"
PREFIX = keys.PREFIX


def example_pods(cfg: StackConfig) -> list[dict[str, Any]]:
    """The reference's two examples, sized for the local nodes (32 CPUs, 250 GiB, 8 GPUs)."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "gpu.nvidia.com/model", "operator": "In", "values": [config.GPU_MODEL]}
                        ]
                    }
                ]
            }
        }
    }

    def pod(
        name: str, annotations: dict[str, str], requests: dict[str, str], limits: dict[str, str]
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
            "spec": {
                "schedulerName": cfg.scheduler_name,
                "terminationGracePeriodSeconds": 5,
                "affinity": affinity,
                "containers": [
                    {
                        "name": "main",
                        "image": "ubuntu",
                        "command": ["/bin/bash"],
                        "args": ["-c", "sleep infinity"],
                        "resources": {"requests": requests, "limits": limits},
                    }
                ],
            },
        }

    return [
        pod(
            "slurm-test-full-node",
            {
                PREFIX + "account": "root",
                PREFIX + "comment": "A Kubernetes job",
                PREFIX + "exclusive": "none",
            },
            {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": "8"},
            {"memory": "200Gi", "nvidia.com/gpu": "8"},
        ),
        pod(
            "slurm-test-single-gpu",
            {
                PREFIX + "account": "root",
                PREFIX + "comment": "A single GPU Pod",
                PREFIX + "exclusive": "user",
                PREFIX + "user-id": "1001",
            },
            {"cpu": "8", "memory": "128Gi", "nvidia.com/gpu": "1"},
            {"memory": "200Gi", "nvidia.com/gpu": "1"},
        ),
    ]


def run(cfg: StackConfig) -> int:
    core = k8s.CoreV1Api(kube.api(cfg))
    kube.ensure_namespace(core, NAMESPACE)
    pods = example_pods(cfg)
    refused = invalid_pod(pods[1])
    for p in [*pods, refused]:
        _delete_and_wait(core, p["metadata"]["name"])
    started = time.monotonic()
    for p in pods:
        core.create_namespaced_pod(NAMESPACE, p)
        print(f"created pod {NAMESPACE}/{p['metadata']['name']}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        phases = [core.read_namespaced_pod(p["metadata"]["name"], NAMESPACE).status.phase for p in pods]
        if all(phase == "Running" for phase in phases):
            break
        time.sleep(0.2)
    else:
        print("the example Pods did not all start within 60s; `kubectl describe pod -n demo` says why")
        return 1
    print(f"both Pods running {time.monotonic() - started:.1f}s after creation\n")
    print(placement_table(cfg))
    created = core.create_namespaced_pod(NAMESPACE, refused)
    print(f"\ncreated pod {NAMESPACE}/{refused['metadata']['name']} (no CPU or memory request)")
    print(f"  -> {_first_warning(core, created.metadata.uid)}")
    print("\nwhat each service's /metrics says now:")
    print(metrics_table(cfg))
    print("\nlocal stack: . .tandem/env   |   stop it: make down")
    return 0


# The figures a platform team watches, by service (Prometheus text on each /metrics).
WATCHED_METRICS = {
    "tandem-scheduler": (
        "tandem_pods_validated_total",
        "tandem_jobs_submitted_total",
        "tandem_submit_seconds_count",
        "tandem_bind_seconds_count",
        "tandem_pod_create_to_bound_seconds_count",
        "tandem_slurm_api_seconds_count",
    ),
    "tandem-syncer": (
        "tandem_node_locks",
        "tandem_lock_wait_seconds_count",
        "tandem_evictions_total",
        "tandem_slurm_api_seconds_count",
        "tandem_slurm_api_errors_total",
    ),
    "tandem-hooks": ("tandem_hook_calls_total", "tandem_hook_call_seconds_count"),
}


def metrics_urls(cfg: StackConfig, service: str) -> list[str]:
    """Each replica's /metrics (one process each, or every Pod the chart runs)."""
    if cfg.deploy == "chart":
        return chart.metrics_urls(cfg, service.removeprefix("tandem-"))
    p = cfg.ports
    port = {"tandem-scheduler": p.scheduler_health, "tandem-syncer": p.syncer_health}.get(service)
    return [f"http://127.0.0.1:{port}/metrics" if port else f"{cfg.hooks_url}/metrics"]


def scrape(cfg: StackConfig, service: str) -> dict[str, list[tuple[str, float]]]:
    """Samples by metric name: (labels, value), over the replicas: counters summed (a standby
    counts nothing), gauges the largest (every replica reports its own view of the same state)."""
    merged: dict[str, dict[str, float]] = {}
    gauges: set[str] = set()
    for url in metrics_urls(cfg, service):
        for line in httpx.get(url, timeout=5).text.splitlines():
            if line.startswith("# TYPE ") and line.endswith(" gauge"):
                gauges.add(line.split()[2])
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            name, _, labels = key.partition("{")
            by_labels = merged.setdefault(name, {})
            shown = "{" + labels if labels else ""
            seen = by_labels.get(shown)
            if seen is None:
                by_labels[shown] = float(value)
            else:
                by_labels[shown] = max(seen, float(value)) if name in gauges else seen + float(value)
    return {name: list(by_labels.items()) for name, by_labels in merged.items()}


def metrics_table(cfg: StackConfig) -> str:
    rows = [("SERVICE", "METRIC", "LABELS", "VALUE")]
    for service, names in WATCHED_METRICS.items():
        samples = scrape(cfg, service)
        for name in names:
            for labels, value in samples.get(name, [("", 0.0)]):
                rows.append((service, name, labels or "-", f"{value:g}"))
    return format_table(rows)


def invalid_pod(example: dict[str, Any]) -> dict[str, Any]:
    """An example Pod without requests: Tandem refuses it with an Event and submits nothing."""
    pod = copy.deepcopy(example)
    pod["metadata"]["name"] = "slurm-test-no-requests"
    pod["spec"]["containers"][0]["resources"] = {}
    return pod


def _first_warning(core: k8s.CoreV1Api, uid: str, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = core.list_namespaced_event(
            NAMESPACE, field_selector=f"involvedObject.uid={uid},type=Warning"
        ).items
        if events:
            return f"Warning {events[0].reason}: {events[0].message}"
        time.sleep(0.2)
    return f"no Warning event within {timeout:.0f}s"


def placement_table(cfg: StackConfig, namespace: str = NAMESPACE) -> str:
    addr = services.grpc_addresses(cfg)
    with (
        services.operator_channel(cfg, addr["tandem-scheduler"]) as sch,
        services.operator_channel(cfg, addr["tandem-syncer"]) as syn,
    ):
        placements = (
            scheduler_pb2_grpc.SchedulerServiceStub(sch)
            .ListPlacements(scheduler_pb2.ListPlacementsRequest(pod_namespace=namespace), timeout=10)
            .placements
        )
        locks = {
            lock.slurm_node: lock
            for lock in syncer_pb2_grpc.SyncerServiceStub(syn)
            .ListNodeLocks(syncer_pb2.ListNodeLocksRequest(), timeout=10)
            .locks
        }
    rows = [("POD", "SLURM JOB", "JOB STATE", "SLURM NODE", "NODE", "LOCK")]
    for p in placements:
        lock = locks.get(p.slurm_node)
        rows.append(
            (
                f"{p.pod_namespace}/{p.pod_name}",
                str(p.job_id or "-"),
                slurm_pb2.JobState.Name(p.job_state).removeprefix("JOB_STATE_"),
                p.slurm_node or "-",
                p.kube_node or "-",
                lock_pb2.LockState.Name(lock.state).removeprefix("LOCK_STATE_").lower() if lock else "-",
            )
        )
    return format_table(rows)


def _delete_and_wait(core: k8s.CoreV1Api, name: str) -> None:
    try:
        core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)
    except ApiException as e:
        if e.status == 404:
            return
        raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_pod(name, NAMESPACE)
        except ApiException as e:
            if e.status == 404:
                return
        time.sleep(0.2)
