"""Real workloads through Tandem, made by the real controllers: Deployments, StatefulSets, Jobs and
DaemonSets; default-scheduled Pods next to Slurm jobs; a PodDisruptionBudget that blocks a lock."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, kube, services
from devstack.config import StackConfig
from tandem import placeholder
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]

NAMESPACE = "default"
# Where Pods that tolerate the lock run: a namespace the administrator lets share held Nodes. A
# tenant's namespace may not tolerate the lock (issue 50: the chart's admission policy).
OPS = config.OPS_NAMESPACE


@pytest.fixture(scope="module")
def apps(stack_cfg: StackConfig) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(kube.api(stack_cfg))


@pytest.fixture(scope="module")
def batch(stack_cfg: StackConfig) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(kube.api(stack_cfg))


@pytest.fixture(scope="module")
def policy(stack_cfg: StackConfig) -> k8s.PolicyV1Api:
    return k8s.PolicyV1Api(kube.api(stack_cfg))


def _template(cfg: StackConfig, labels: dict[str, str], tandem: bool = True, **extra: Any) -> dict[str, Any]:
    """A Pod template: scheduled by Tandem (valid for it) or by the default scheduler."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "nginx", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        ],
        "terminationGracePeriodSeconds": 5,
        **extra,
    }
    if tandem:
        spec["schedulerName"] = cfg.scheduler_name
    return {"metadata": {"labels": labels}, "spec": spec}


def _pods(core: k8s.CoreV1Api, selector: str, namespace: str = NAMESPACE) -> list[k8s.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=selector).items)


def _running(
    core: k8s.CoreV1Api, selector: str, count: int, namespace: str = NAMESPACE
) -> list[k8s.V1Pod] | None:
    pods = [
        p
        for p in _pods(core, selector, namespace)
        if p.spec.node_name and p.status.phase == "Running" and not p.metadata.deletion_timestamp
    ]
    return pods if len(pods) == count and len(_pods(core, selector, namespace)) == count else None


def _live_jobs_by_pod_uid(cfg: StackConfig) -> Counter[str]:
    """Pod uid -> how many of its placeholder jobs Slurm runs or queues."""
    out = h.squeue(cfg, "-t", "PD,R,CG", "-o", "%j")
    refs = (placeholder.parse_job_name(name) for name in out.split())
    return Counter(ref.uid for ref in refs if ref is not None)


Deploy = Callable[..., str]


@pytest.fixture
def deploy(stack_cfg: StackConfig, apps: k8s.AppsV1Api) -> Iterator[Deploy]:
    """Makes a Deployment (Tandem-scheduled unless `tandem=False`); deletes them all afterwards.
    Returns its name, which is also its Pods' `app` label."""
    made: list[str] = []

    def make(prefix: str, replicas: int, tandem: bool = True) -> str:
        name = h.unique(prefix)
        apps.create_namespaced_deployment(
            NAMESPACE,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": name}},
                    "template": _template(stack_cfg, {"app": name}, tandem=tandem),
                },
            },
        )
        made.append(name)
        return name

    yield make
    for name in made:
        apps.delete_namespaced_deployment(name, NAMESPACE, propagation_policy="Foreground")


def test_a_deployment_scales_and_rolls_out_with_one_job_per_pod(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, apps: k8s.AppsV1Api, deploy: Deploy
) -> None:
    name = deploy("web", replicas=3)
    selector = f"app={name}"
    pods = h.wait_until("3 replicas running", lambda: _running(core, selector, 3), 60)
    jobs = {int(p.metadata.annotations[h.PREFIX + "job-id"]) for p in pods}
    assert len(jobs) == 3
    assert set(_live_jobs_by_pod_uid(stack_cfg).values()) == {1}

    apps.patch_namespaced_deployment_scale(name, NAMESPACE, {"spec": {"replicas": 1}})
    kept = h.wait_until("scaled to 1", lambda: _running(core, selector, 1), 60)[0]
    gone = jobs - {int(kept.metadata.annotations[h.PREFIX + "job-id"])}
    h.wait_until("the 2 jobs ended", lambda: not (gone & h.squeue_ids(stack_cfg)), 60)
    busy = {h.rest_job(stack_cfg, j)["nodes"] for j in gone} - {_slurm_node_of(stack_cfg, kept)}
    h.wait_until("their locks released", lambda: all(h.lock_annotation(core, n) == "false" for n in busy), 30)

    # A rollout: sample Slurm throughout; no Pod may ever have two live jobs.
    worst: Counter[str] = Counter()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for uid, n in _live_jobs_by_pod_uid(stack_cfg).items():
                worst[uid] = max(worst[uid], n)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        apps.patch_namespaced_deployment(
            name, NAMESPACE, {"spec": {"template": {"metadata": {"annotations": {"rollout": "2"}}}}}
        )

        def rolled() -> k8s.V1Pod | None:
            running = _running(core, selector, 1)
            new = running[0] if running else None
            return new if new and new.metadata.uid != kept.metadata.uid else None

        new = h.wait_until("rollout done", rolled, 90)
    finally:
        stop.set()
        sampler.join()
    assert worst and max(worst.values()) == 1, worst
    assert new.metadata.annotations[h.PREFIX + "job-id"] != kept.metadata.annotations[h.PREFIX + "job-id"]


def _slurm_node_of(cfg: StackConfig, pod: k8s.V1Pod) -> str:
    return str(h.rest_job(cfg, int(pod.metadata.annotations[h.PREFIX + "job-id"]))["nodes"])


@pytest.mark.parallel
def test_a_statefulset_pod_deleted_comes_back_with_a_new_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    name = h.unique("db")
    apps.create_namespaced_stateful_set(
        NAMESPACE,
        {
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": _template(stack_cfg, {"app": name}),
            },
        },
    )
    try:
        first = h.wait_until("pod 0 running", lambda: _running(core, f"app={name}", 1), 60)[0]
        assert first.metadata.name == f"{name}-0"
        old_job = int(first.metadata.annotations[h.PREFIX + "job-id"])
        h.delete_pod(core, first.metadata.name)

        def replaced() -> k8s.V1Pod | None:
            running = _running(core, f"app={name}", 1)
            pod = running[0] if running else None
            return pod if pod and pod.metadata.uid != first.metadata.uid else None

        again = h.wait_until("pod 0 back, running", replaced, 90)
        assert again.metadata.name == f"{name}-0"
        new_job = int(again.metadata.annotations[h.PREFIX + "job-id"])
        assert new_job != old_job
        h.wait_until("the old job gone", lambda: old_job not in h.squeue_ids(stack_cfg), 30)
    finally:
        apps.delete_namespaced_stateful_set(name, NAMESPACE)


@pytest.mark.parallel
def test_a_job_whose_pods_finish_ends_its_slurm_jobs_and_keeps_the_pods(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, batch: k8s.BatchV1Api
) -> None:
    name = h.unique("batch")
    template = _template(stack_cfg, {"job": name}, restartPolicy="Never")
    template["metadata"]["annotations"] = kube.complete_after(3)
    batch.create_namespaced_job(
        NAMESPACE,
        {"metadata": {"name": name}, "spec": {"completions": 2, "parallelism": 2, "template": template}},
    )
    try:

        def succeeded() -> list[k8s.V1Pod] | None:
            pods = _pods(core, f"job={name}")
            done = [p for p in pods if p.status.phase == "Succeeded"]
            return done if len(done) == 2 else None

        pods = h.wait_until("2 Pods Succeeded", succeeded, 90)
        jobs = {int(p.metadata.annotations[h.PREFIX + "job-id"]) for p in pods}
        h.wait_until("their Slurm jobs ended", lambda: not (jobs & h.squeue_ids(stack_cfg)), 60)
        h.wait_until(
            "the Job complete",
            lambda: any(
                c.type == "Complete"
                for c in batch.read_namespaced_job(name, NAMESPACE).status.conditions or []
            ),
            30,
        )
        time.sleep(2)
        assert all(p.status.phase == "Succeeded" for p in _pods(core, f"job={name}"))
        assert len(_pods(core, f"job={name}")) == 2
    finally:
        batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")


def test_a_daemonset_pod_stays_on_a_node_a_pod_locks(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, apps: k8s.AppsV1Api
) -> None:
    name = h.unique("logs")
    node = "cpu-003"
    tolerate_all = [{"operator": "Exists"}]  # as logging DaemonSets do
    apps.create_namespaced_daemon_set(
        OPS,
        {
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                # On the Slurm nodes: DEPLOY=chart's real Node, which this toleration would let
                # in too, has no nginx image to run (no registry).
                "template": _template(
                    stack_cfg,
                    {"app": name},
                    tandem=False,
                    tolerations=tolerate_all,
                    nodeSelector={"type": "kwok"},
                ),
            },
        },
    )
    try:
        h.wait_until(
            f"{stack_cfg.nodes} DaemonSet Pods",
            lambda: _running(core, f"app={name}", stack_cfg.nodes, OPS),
            60,
        )
        ds_pod = next(p for p in _pods(core, f"app={name}", OPS) if p.spec.node_name == h.kube_node_of(node))
        pod = h.unique("locker")
        h.create(core, h.tandem_pod(stack_cfg, pod, {h.PREFIX + "required-nodes": node}))
        h.wait_until(
            "Tandem Pod running", lambda: (p := h.get_pod(core, pod)) and p.status.phase == "Running", 40
        )
        assert h.lock_annotation(core, node) == "locked_strict"
        time.sleep(2)
        still = h.get_pod(core, ds_pod.metadata.name, OPS)
        assert still is not None and still.metadata.uid == ds_pod.metadata.uid
        assert not still.metadata.deletion_timestamp
    finally:
        apps.delete_namespaced_daemon_set(name, OPS)


def test_a_default_scheduled_deployment_is_pushed_off_a_node_a_slurm_job_locks(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, deploy: Deploy
) -> None:
    name = deploy("plain", replicas=2, tandem=False)
    selector = f"app={name}"
    pods = h.wait_until("2 replicas running", lambda: _running(core, selector, 2), 60)
    victim_node = pods[0].spec.node_name
    slurm_node = config.slurm_node_name(int(victim_node.split("-")[1]))
    job = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={slurm_node}")

    def moved() -> list[k8s.V1Pod] | None:
        running = _running(core, selector, 2)
        return running if running and all(p.spec.node_name != victim_node for p in running) else None

    h.wait_until("both replicas running elsewhere", moved, 60)
    # RUNNING includes the prolog; the lock is taken once the evicted replica is really gone.
    h.wait_until("the node locked", lambda: h.lock_annotation(core, slurm_node) == "locked", 60)
    h.wait_until(
        "the job past its prolog",
        lambda: (j := h.rest_job(stack_cfg, job))["job_state"] == "RUNNING" and j["state_reason"] != "Prolog",
        60,
    )


SHORT_LOCK_BUDGET_S = 10


@pytest.fixture
def short_lock_budget(stack_cfg: StackConfig) -> Iterator[int]:
    """The prologs' lock budget (TANDEM_LOCK_TIMEOUT in the Slurm nodes' hooks.env) cut to a few
    seconds while a test waits for it to run out: what happens then does not depend on its length,
    and the lab's 50 s made the test wait a minute for it (issue 51)."""
    env_file = services.hooks_env_file(stack_cfg)
    original = env_file.read_text()
    assert "TANDEM_LOCK_TIMEOUT=" in original
    short = "".join(
        f"TANDEM_LOCK_TIMEOUT={SHORT_LOCK_BUDGET_S}\n"
        if line.startswith("TANDEM_LOCK_TIMEOUT=")
        else f"{line}\n"
        for line in original.splitlines()
    )
    services.publish(env_file, short)
    try:
        yield SHORT_LOCK_BUDGET_S
    finally:
        services.publish(env_file, original)


def test_a_pod_whose_budget_allows_no_disruption_drains_the_node_and_the_job_runs_elsewhere(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api, short_lock_budget: int
) -> None:
    blocked, other = "cpu-001", "cpu-005"
    name = h.unique("guarded")
    # A node agent an administrator lets share held Nodes (OPS), guarded by a budget.
    pod = h.tandem_pod(stack_cfg, name, labels={"app": name}, namespace=OPS)
    del pod["spec"]["schedulerName"]
    pod["spec"]["nodeName"] = h.kube_node_of(blocked)
    # It tolerates the lock for a while only: the lock must get it out, through the Eviction API.
    pod["spec"]["tolerations"] = [
        {"key": h.PREFIX + "lock", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}
    ]
    h.create(core, pod)
    pdb = h.unique("guarded-pdb")
    policy.create_namespaced_pod_disruption_budget(
        OPS,
        {"metadata": {"name": pdb}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}},
    )
    try:
        h.wait_until(
            "budget allows none",
            lambda: (
                (s := policy.read_namespaced_pod_disruption_budget(pdb, OPS).status)
                and s.current_healthy == 1
                and s.disruptions_allowed == 0
            ),
            30,
        )
        excluded = ",".join(n for n in stack_cfg.slurm_node_names() if n not in (blocked, other))
        job = h.sbatch(stack_cfg, "--exclusive", f"--exclude={excluded}")
        h.wait_until(
            "the job on the guarded node", lambda: h.rest_job(stack_cfg, job)["nodes"] == blocked, 20
        )

        def drained() -> str | None:
            state, reason = h.node_state(stack_cfg, blocked)
            return reason if "drain" in state else None

        reason = h.wait_until("node drained at the lock timeout", drained, short_lock_budget + 30, every=0.5)
        assert reason.startswith("k8s:") and f"{OPS}/{name}" in reason and pdb in reason
        try:
            h.wait_until(
                "the job running elsewhere",
                lambda: (j := h.rest_job(stack_cfg, job))["job_state"] == "RUNNING" and j["nodes"] == other,
                120,  # the whole test took 107 s in a full leg, 62 s alone: Slurm's requeue, then a pass
            )
        except AssertionError as e:
            # Seen in session 28 only (after test_kueue): say where the job is and why, and the node's.
            j = h.rest_job(stack_cfg, job)
            raise AssertionError(
                f"{e}: job {job} {j['job_state']} on {j['nodes']!r} ({j.get('state_reason')}),"
                f" {other} {h.node_state(stack_cfg, other)}: {h.scontrol(stack_cfg, 'show', 'job', str(job))}"
            ) from e
        assert h.get_pod(core, name, OPS) is not None
        warnings = [e for e in h.events_for(core, name, OPS) if e.reason == "BlockedSlurmJob"]
        assert len(warnings) == 1 and str(job) in warnings[0].message and pdb in warnings[0].message
    finally:
        policy.delete_namespaced_pod_disruption_budget(pdb, OPS)
        h.scancel(stack_cfg, job)
        h.resume_if_drained(stack_cfg, blocked)


def test_a_prolog_stuck_behind_a_budget_does_not_delay_unlocking_another_node(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, policy: k8s.PolicyV1Api
) -> None:
    """Issue 19: the syncer's safety net waited on each node's mutex in turn, and a prolog holds
    its node's while a PodDisruptionBudget keeps a Pod there (up to the lock timeout): a node
    whose epilog was lost stayed locked that long."""
    blocked, lost = "cpu-001", "cpu-007"
    name = h.unique("guarded")
    # A node agent an administrator lets share held Nodes (OPS), guarded by a budget.
    pod = h.tandem_pod(stack_cfg, name, labels={"app": name}, namespace=OPS)
    del pod["spec"]["schedulerName"]
    pod["spec"]["nodeName"] = h.kube_node_of(blocked)
    pod["spec"]["tolerations"] = [
        {"key": h.PREFIX + "lock", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}
    ]
    h.create(core, pod)
    pdb = h.unique("guarded-pdb")
    policy.create_namespaced_pod_disruption_budget(
        OPS,
        {"metadata": {"name": pdb}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}},
    )
    env_file = services.hooks_env_file(stack_cfg)
    original = env_file.read_text()
    marker = stack_cfg.state_dir / f"epilog-test-{h.unique('m')}"
    stuck = finished = 0
    try:
        h.wait_until(
            "budget allows none",
            lambda: (
                (s := policy.read_namespaced_pod_disruption_budget(pdb, OPS).status)
                and s.disruptions_allowed == 0
                and s.current_healthy == 1
            ),
            30,
        )
        stuck = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={blocked}")
        h.wait_until(
            "its prolog waiting for the guarded Pod",
            lambda: (
                h.rest_job(stack_cfg, stuck)["state_reason"] == "Prolog"
                and h.lock_annotation(core, blocked) == "pending"
            ),
            20,
        )
        finished = h.sbatch(stack_cfg, f"--nodelist={lost}", script=f"#!/bin/sh\ntouch {marker}\nsleep 2\n")
        h.wait_until("the other job's script started", marker.exists, 30)
        assert h.lock_annotation(core, lost) == "locked"
        # Its epilog cannot reach Tandem: only the safety net can unlock the node.
        env_file.write_text(
            original.replace("TANDEM_HOOKS_TOKEN_DIR", "IGNORED") + "TANDEM_HOOKS_TOKEN=wrong\n"
        )
        h.wait_until(
            "the other job done", lambda: h.rest_job(stack_cfg, finished)["job_state"] == "COMPLETED", 20
        )
        env_file.write_text(original)
        h.wait_until("the lost epilog's lock released", lambda: h.lock_annotation(core, lost) == "false", 15)
        # ... while the first prolog still waits behind the budget.
        assert h.rest_job(stack_cfg, stuck)["state_reason"] == "Prolog"
        assert not h.node_has_lock_taint(core, h.kube_node_of(lost))
    finally:
        env_file.write_text(original)
        marker.unlink(missing_ok=True)
        policy.delete_namespaced_pod_disruption_budget(pdb, OPS)
        if stuck:
            h.scancel(stack_cfg, stuck)
        h.wait_until("the guarded node settled", lambda: h.lock_annotation(core, blocked) == "false", 90)
        h.resume_if_drained(stack_cfg, blocked)


@pytest.mark.parallel
def test_a_namespace_with_tandem_pods_deletes_completely(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    ns = h.unique("team")
    core.create_namespace({"metadata": {"name": ns}})
    h.wait_until("default ServiceAccount", lambda: core.read_namespaced_service_account("default", ns), 20)
    names = [h.unique("p") for _ in range(2)]
    for n in names:
        h.create(core, h.tandem_pod(stack_cfg, n, namespace=ns))
    h.wait_until(
        "both running",
        lambda: all((p := h.get_pod(core, n, ns)) and p.status.phase == "Running" for n in names),
        40,
    )
    jobs = {h.job_id_of(core, n, ns) for n in names}
    core.delete_namespace(ns)

    def gone() -> bool:
        try:
            core.read_namespace(ns)
        except h.ApiException as e:
            return bool(e.status == 404)
        return False

    h.wait_until("namespace gone", gone, 90, every=0.5)
    h.wait_until("its jobs gone", lambda: not (jobs & h.squeue_ids(stack_cfg)), 30)
