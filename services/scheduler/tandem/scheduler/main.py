"""Entry point of `tandem-scheduler`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import grpc

from tandem import jobtoken, keys, logs, serving, settings, tracing
from tandem.discovery import Versioned
from tandem.dra import claims as dra_claims
from tandem.dra import extended
from tandem.dra.slices import slim_slice
from tandem.events import EventRecorder
from tandem.informer import Informer
from tandem.kube import KubeClient, object_key
from tandem.manager import Election, Manager
from tandem.metrics import REGISTRY
from tandem.mtls import TlsFiles
from tandem.runner import Runner
from tandem.scheduler import eligibility, groups, jobspec, watches, workloads
from tandem.scheduler.caches import (
    BY_NODE,
    BY_PARENT,
    POD_INDEXES,
    Caches,
    ClusterCaches,
    Informers,
    node_index,
)
from tandem.scheduler.controller import Controller
from tandem.scheduler.controller_settings import ControllerSettings
from tandem.scheduler.dra_source import (
    BY_EXTENDED_OWNER,
    BY_SLICE_NODE,
    DraCaches,
    slice_node_index,
)
from tandem.scheduler.hands import Writers
from tandem.scheduler.jobs import JobTracker
from tandem.scheduler.killwait_source import KillWaitSource
from tandem.scheduler.policy_source import PolicySource
from tandem.scheduler.service import SchedulerServicer
from tandem.scheduler.settings import SchedulerSettings
from tandem.scheduler.topology_source import TopologySource
from tandem.scripts import placeholder_batch_script
from tandem.slurm.rest import SlurmRestClient
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc, syncer_pb2_grpc
from tandem.workqueue import WorkQueue

log = logging.getLogger("tandem.scheduler")


def placeholder_config(cfg: SchedulerSettings) -> jobspec.PlaceholderConfig:
    """What every placeholder job gets: the script, its environment, its credential's key. A
    service whose flags cannot make one does not start. TANDEM_KILL_WAIT is added at each submit:
    the KillWait current then (tandem.scheduler.killwait_source)."""
    if not cfg.scheduler_name:
        raise SystemExit("--scheduler-name (TANDEM_SCHEDULER_NAME) is required")
    try:
        gpu_types = jobspec.parse_gpu_types(cfg.gpu_types)
    except ValueError as e:
        raise SystemExit(f"--gpu-types: {e}") from e
    if cfg.extra_member_nice < 0:
        # Below 0 an extra would rank above its core, and Slurm would take the core back first.
        raise SystemExit(f"--extra-member-nice must be 0 or more, not {cfg.extra_member_nice}")
    return jobspec.PlaceholderConfig(
        script=placeholder_batch_script(),
        environment={
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "TANDEM_HOOKS_ENV": cfg.hooks_env_file,
        },
        gpu_types=gpu_types,
        scheduler_name=cfg.scheduler_name,
        output=cfg.placeholder_output,
        job_key=jobtoken.read_key(cfg.job_key_file),
        extra_nice=cfg.extra_member_nice,
    )


def main(argv: Sequence[str] | None = None) -> None:
    cfg = settings.load(SchedulerSettings, argv)
    logs.setup("scheduler", cfg.log_level)
    tracing.setup("tandem-scheduler", cfg.otlp_endpoint)
    placeholder_cfg = placeholder_config(cfg)
    tls = cfg.grpc_tls("tandem-scheduler")
    kube = KubeClient.from_kubeconfig(cfg.kubeconfig)
    slurm = SlurmRestClient.for_service(cfg)
    # Read from Slurm at a decision, again every --slurm-conf-refresh; --slurm-kill-wait overrides it.
    kill_wait = KillWaitSource(
        cfg.slurm_kill_wait, slurm, cfg.slurm_conf_file, refresh_seconds=cfg.slurm_conf_refresh
    )
    channel = serving.channel(cfg.syncer_address, tls)
    policy = tenant_policy(kube, cfg)
    try:
        slurm_topology = TopologySource(kube, cfg.topology_configmap)
    except ValueError as e:
        raise SystemExit(str(e)) from e
    informers = watch_cluster(kube, cfg)
    jobs = JobTracker(cfg.scheduler_name, syncer_pb2_grpc.SyncerServiceStub(channel))
    queue = WorkQueue(name="scheduler")
    controller = Controller(
        Caches(
            informers.pods,
            informers.podgroups,
            informers.composites,
            ClusterCaches(informers.nodes, informers.bound, informers.pods),
            DraCaches(
                informers.claims,
                informers.claim_templates,
                informers.slices,
                informers.device_classes,
                dra_config(cfg),
            ),
            informers.kube_jobs,
        ),
        jobs,
        Writers.of(kube, slurm, EventRecorder(kube, "tandem-scheduler")),
        ControllerSettings(
            placeholder_cfg,
            kill_wait.current,
            policy.current,
            slurm_topology.current,
            cfg.reject_static_cpu,
        ),
    )
    # What each source calls back on a change: the placement keys it concerns, queued.
    watches.register(
        watches.SchedulerWatches(controller.caches, jobs, controller.assumed, queue),
        informers,
        jobs,
        policy,
        slurm_topology,
    )
    manager = Manager(kube, Election(cfg.leader_elect, cfg.leader_election_namespace, cfg.leader_election_id))
    # Everything a reconcile reads: the workers wait for all of it, readiness names what is missing.
    manager.add_source("Pods", informers.pods, informers.pods.run)
    manager.add_source("PodGroups", informers.podgroups, informers.podgroups.run)
    manager.add_source("CompositePodGroups", informers.composites, informers.composites.run)
    manager.add_source("Nodes", informers.nodes, informers.nodes.run)
    manager.add_source("ResourceClaims", informers.claims, informers.claims.run)
    manager.add_source("ResourceClaimTemplates", informers.claim_templates, informers.claim_templates.run)
    manager.add_source("ResourceSlices", informers.slices, informers.slices.run)
    manager.add_source("DeviceClasses", informers.device_classes, informers.device_classes.run)
    manager.add_source("bound Pods", informers.bound, informers.bound.run)
    manager.add_source("Jobs", informers.kube_jobs, informers.kube_jobs.run)
    manager.add_source("the tenant policy", policy, policy.start)
    # Not a source the workers wait for: a topology that cannot be read (RBAC, a release without a
    # syncer publishing one) holds back only the gangs that ask for a domain, which say why.
    manager.add_runnable("Slurm's topology", slurm_topology.run, leader_only=False)
    manager.add_source("Slurm jobs (the syncer's stream)", jobs, jobs.run)
    # Standby replicas keep their caches warm; only the leader reconciles (submits, binds).
    runner = Runner("scheduler", queue, controller.reconcile, workers=cfg.workers)
    manager.add_controller(runner, on_started=lambda: enqueue_every_pod(informers.pods, queue))
    grpc_server = grpc_service(cfg.grpc_address, tls, SchedulerServicer(controller))
    http = serving.HealthHttpServer(cfg.health_address, readiness(manager, jobs), REGISTRY.render)
    manager.start()
    grpc_server.start()
    http.start()
    informers.pods.wait_synced(30)
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
    manager.run_until_signal(
        grpc_server.stop, http.stop, channel.close, slurm.close, kube.close, tracing.shutdown
    )


def tenant_policy(kube: KubeClient, cfg: SchedulerSettings) -> PolicySource:
    try:
        return PolicySource(kube, cfg.policy_configmap)
    except ValueError as e:
        raise SystemExit(str(e)) from e


def watch_cluster(kube: KubeClient, cfg: SchedulerSettings) -> Informers:
    """The informers a reconcile reads (tandem.scheduler.watches.register says what each calls back
    on a change). What fits where (tandem.scheduler.eligibility) reads every Node and every Pod
    bound to one (of the watched namespaces in namespace scope), slimmed to what the filters read."""
    namespaces = cfg.watch_namespaces
    paths = [f"/api/v1/namespaces/{ns}/pods" for ns in namespaces] if namespaces else ["/api/v1/pods"]
    # Gangs: the Workload API's PodGroups, in the version the cluster serves (absent is fine).
    podgroup_api = Versioned(keys.PODGROUP_GROUP, keys.PODGROUP_RESOURCE, keys.PODGROUP_VERSIONS)
    composite_api = Versioned(keys.PODGROUP_GROUP, keys.COMPOSITE_RESOURCE, keys.COMPOSITE_VERSIONS)
    return Informers(
        pods=Informer(
            kube,
            paths,
            {"fieldSelector": f"spec.schedulerName={cfg.scheduler_name}"},
            indexes=POD_INDEXES,
        ),
        nodes=Informer(
            kube,
            ["/api/v1/nodes"],
            {},
            transform=eligibility.slim_node,
            same=eligibility.same_node,
        ),
        bound=Informer(
            kube,
            paths,
            # This scheduler's own Pods come from `pods` (ClusterCaches.own), not twice.
            {"fieldSelector": f"spec.nodeName!=,spec.schedulerName!={cfg.scheduler_name}"},
            indexes={BY_NODE: node_index},
            transform=eligibility.slim_bound_pod,
        ),
        podgroups=Informer(
            kube,
            [f"/apis/{{api}}/namespaces/{ns}/podgroups" for ns in namespaces]
            if namespaces
            else ["/apis/{api}/podgroups"],
            {},
            indexes={BY_PARENT: groups.parent_index},
            api=podgroup_api,
        ),
        composites=Informer(
            kube,
            [f"/apis/{{api}}/namespaces/{ns}/{keys.COMPOSITE_RESOURCE}" for ns in namespaces]
            if namespaces
            else [f"/apis/{{api}}/{keys.COMPOSITE_RESOURCE}"],
            {},
            api=composite_api,
        ),
        claims=Informer(
            kube,
            _namespaced(keys.RESOURCE_CLAIMS, namespaces),
            {},
            indexes={BY_EXTENDED_OWNER: extended.owner_index},
            api=Versioned(keys.DRA_GROUP, keys.RESOURCE_CLAIMS, keys.DRA_VERSIONS),
        ),
        claim_templates=Informer(
            kube,
            _namespaced(keys.RESOURCE_CLAIM_TEMPLATES, namespaces),
            {},
            api=Versioned(keys.DRA_GROUP, keys.RESOURCE_CLAIM_TEMPLATES, keys.DRA_VERSIONS),
        ),
        # Only NVIDIA's GPUs: Slurm's GRES are what its driver publishes.
        slices=Informer(
            kube,
            [f"/apis/{{api}}/{keys.RESOURCE_SLICES}"],
            {"fieldSelector": f"spec.driver={dra_claims.DRIVER}"},
            indexes={BY_SLICE_NODE: slice_node_index},
            transform=slim_slice,
            api=Versioned(keys.DRA_GROUP, keys.RESOURCE_SLICES, keys.DRA_VERSIONS),
        ),
        device_classes=Informer(
            kube,
            [f"/apis/{{api}}/{keys.DEVICE_CLASSES}"],
            {},
            api=Versioned(keys.DRA_GROUP, keys.DEVICE_CLASSES, keys.DRA_VERSIONS),
        ),
        # An elastic gang's workload: how many members its Job asks for (tandem.scheduler.workloads).
        kube_jobs=Informer(
            kube,
            [f"/apis/batch/v1/namespaces/{ns}/jobs" for ns in namespaces]
            if namespaces
            else ["/apis/batch/v1/jobs"],
            {},
            transform=workloads.slim_job,
            same=workloads.same_job,
        ),
    )


def _namespaced(resource: str, namespaces: Sequence[str]) -> list[str]:
    if namespaces:
        return [f"/apis/{{api}}/namespaces/{ns}/{resource}" for ns in namespaces]
    return [f"/apis/{{api}}/{resource}"]


def dra_config(cfg: SchedulerSettings) -> dra_claims.DraConfig:
    try:
        return dra_claims.dra_config(cfg.gpu_products)
    except ValueError as e:
        raise SystemExit(f"--gpu-products: {e}") from e


def enqueue_every_pod(pods: Informer, queue: WorkQueue) -> None:
    """A new leader looks at every Pod once: what happened while it stood by has no event left."""
    for pod in pods.items():
        queue.add(object_key(pod))


def grpc_service(address: str, tls: TlsFiles, servicer: SchedulerServicer) -> serving.GrpcServer:
    name = scheduler_pb2.DESCRIPTOR.services_by_name["SchedulerService"].full_name

    def register(server: grpc.Server) -> None:
        scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(servicer, server)

    return serving.GrpcServer(address, [register], [name], tls)


def readiness(manager: Manager, jobs: JobTracker) -> Callable[[], list[str]]:
    """What /readyz says: every source not synced (past the timeout, with its last error), and a
    syncer stream that broke after its snapshot."""

    def waiting_for() -> list[str]:
        waiting = manager.waiting_for()
        if jobs.synced and not jobs.connected:
            waiting.append(f"the syncer's stream is not connected ({jobs.trouble or 'reconnecting'})")
        return waiting

    return waiting_for


if __name__ == "__main__":
    main()
