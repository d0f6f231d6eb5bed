"""Entry point of `tandem-scheduler`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from tandem import jobtoken, keys, leader, logs, serving, settings, tracing
from tandem.events import EventRecorder
from tandem.hooks.scripts import placeholder_batch_script
from tandem.informer import Informer
from tandem.kube import KubeClient, object_key
from tandem.metrics import REGISTRY
from tandem.runner import Runner
from tandem.scheduler import eligibility, jobspec
from tandem.scheduler.controller import (
    BY_GROUP,
    BY_NODE,
    BY_UNSCHEDULABLE,
    ClusterCaches,
    Controller,
    group_index,
    node_index,
    unschedulable_index,
)
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.policy_source import PolicySource
from tandem.scheduler.service import SchedulerServicer
from tandem.scheduler.settings import SchedulerSettings
from tandem.slurm.rest import SlurmRestClient
from tandem.sources import Source, Sources
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc, syncer_pb2_grpc
from tandem.workqueue import WorkQueue

log = logging.getLogger("tandem.scheduler")


def placeholder_config(cfg: SchedulerSettings) -> jobspec.PlaceholderConfig:
    """What every placeholder job gets: the script, its environment, its credential's key. A
    service whose flags cannot make one does not start."""
    if not cfg.scheduler_name:
        raise SystemExit("--scheduler-name (TANDEM_SCHEDULER_NAME) is required")
    try:
        gpu_types = jobspec.parse_gpu_types(cfg.gpu_types)
    except ValueError as e:
        raise SystemExit(f"--gpu-types: {e}") from e
    return jobspec.PlaceholderConfig(
        script=placeholder_batch_script(),
        environment={
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "TANDEM_HOOKS_ENV": cfg.hooks_env_file,
            "TANDEM_KILL_WAIT": str(int(cfg.slurm_kill_wait)),
        },
        gpu_types=gpu_types,
        scheduler_name=cfg.scheduler_name,
        output=cfg.placeholder_output,
        job_key=jobtoken.read_key(cfg.job_key_file),
    )


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SchedulerSettings, argv)
    logs.setup("scheduler", cfg.log_level)
    tracing.setup("tandem-scheduler", cfg.otlp_endpoint)
    placeholder_cfg = placeholder_config(cfg)
    tls = cfg.grpc_tls("tandem-scheduler")
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig)
    slurm = SlurmRestClient.for_service(cfg)
    channel = serving.channel(cfg.syncer_address, tls)
    stop = threading.Event()
    queue = WorkQueue()
    paths = (
        [f"/api/v1/namespaces/{ns}/pods" for ns in cfg.watch_namespaces]
        if cfg.watch_namespaces
        else ["/api/v1/pods"]
    )
    controller: Controller
    try:
        policy = PolicySource(kube, cfg.policy_configmap, lambda: controller.on_policy_changed())
    except ValueError as e:
        raise SystemExit(str(e)) from e
    pods = Informer(
        kube,
        paths,
        {"fieldSelector": f"spec.schedulerName={cfg.scheduler_name}"},
        lambda key, old, new: controller.on_pod(key, old, new),
        indexes={BY_GROUP: group_index, BY_UNSCHEDULABLE: unschedulable_index},
    )
    # What fits where (tandem.scheduler.eligibility): every Node, and every Pod bound to one (of the
    # watched namespaces in namespace scope), slimmed to what the filters read.
    nodes = Informer(
        kube,
        ["/api/v1/nodes"],
        {},
        lambda key, old, new: controller.on_node(key, old, new),
        transform=eligibility.slim_node,
    )
    bound = Informer(
        kube,
        paths,
        {"fieldSelector": "spec.nodeName!="},
        lambda key, old, new: controller.on_bound_pod(key, old, new),
        indexes={BY_NODE: node_index},
        transform=eligibility.slim_bound_pod,
    )
    # Gangs: the Workload API's PodGroups (alpha in Kubernetes 1.36; absent is fine).
    podgroup_api = f"/apis/{keys.PODGROUP_API}"
    podgroups = Informer(
        kube,
        [f"{podgroup_api}/namespaces/{ns}/podgroups" for ns in cfg.watch_namespaces]
        if cfg.watch_namespaces
        else [f"{podgroup_api}/podgroups"],
        {},
        lambda key, old, new: controller.on_podgroup(key, old, new),
        # A list's items lack kind and apiVersion; Events and status writes name them.
        transform=lambda pg: {**pg, "apiVersion": keys.PODGROUP_API, "kind": keys.PODGROUP_KIND},
        optional=True,
    )
    jobs = JobTracker(
        cfg.scheduler_name,
        syncer_pb2_grpc.SyncerServiceStub(channel),
        lambda pod, job: controller.on_job(pod, job),
        lambda slurm_node: controller.on_node_moved(slurm_node),
    )
    controller = Controller(
        kube,
        slurm,
        jobs,
        EventRecorder(kube, "tandem-scheduler"),
        queue,
        pods,
        placeholder_cfg,
        cfg.slurm_kill_wait,
        podgroups,
        ClusterCaches(nodes, bound),
        cfg.reject_static_cpu,
        policy.current,
    )
    # Everything a reconcile reads: the workers wait for all of it, readiness names what is missing.
    sources = Sources(
        [
            Source.of("Pods", pods),
            Source.of("PodGroups", podgroups),
            Source.of("Nodes", nodes),
            Source.of("bound Pods", bound),
            Source.of("the tenant policy", policy),
            Source.of("Slurm jobs (the syncer's stream)", jobs),
        ]
    )
    runner = Runner("scheduler", queue, controller.reconcile, [sources.synced], cfg.workers)
    servicer = SchedulerServicer(controller)
    name = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name
    grpc_server = serving.GrpcServer(
        cfg.grpc_address,
        [lambda s: scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(servicer, s)],
        [name],
        tls,
    )

    def waiting_for() -> list[str]:
        waiting = sources.waiting_for()
        if jobs.synced and not jobs.connected:
            waiting.append(f"the syncer's stream is not connected ({jobs.trouble or 'reconnecting'})")
        return waiting

    http = serving.HealthHttpServer(cfg.health_address, waiting_for, REGISTRY.render)
    threading.Thread(target=jobs.run, args=(stop,), name="slurm-stream", daemon=True).start()
    pods.start(stop)
    podgroups.start(stop)
    nodes.start(stop)
    bound.start(stop)
    policy.start(stop)
    lost = threading.Event()

    def lead() -> None:
        # Standby replicas keep their caches warm; only the leader reconciles (submits, binds).
        runner.start(stop, on_started=enqueue_all)

    def enqueue_all() -> None:
        for pod in pods.items():
            queue.add(object_key(pod))

    leader.lead_when_elected(
        kube, cfg.leader_elect, cfg.leader_election_namespace, cfg.leader_election_id, stop, lead, lost.set
    )
    grpc_server.start()
    http.start()
    pods.wait_synced(30)
    jobs.wait_synced(30)
    grpc_server.set_serving(True)
    log.info(
        "serving",
        extra={
            "scheduler_name": cfg.scheduler_name,
            "grpc_port": grpc_server.port,
            "namespaces": list(cfg.watch_namespaces) or "all",
        },
    )
    serving.wait_for_stop_signal(lost)
    stop.set()
    queue.shutdown()
    grpc_server.stop()
    http.stop()
    channel.close()
    slurm.close()
    kube.close()
    tracing.shutdown()
    if lost.is_set():
        raise SystemExit("lost the leader lease; exiting so a fresh start rejoins the election")


if __name__ == "__main__":
    main()
