"""Chaos soak: seeded churn of Pods, gangs, Deployments and plain Slurm jobs while a seeded fault
injector kills Tandem's processes and restarts Slurm's and Kubernetes' daemons; then, after a
settle time, the invariants that say nothing was lost, duplicated or left locked.

    make up && .venv/bin/python bench/soak.py --minutes 30 --seed 1
    REPLICAS=2 make up && .venv/bin/python bench/soak.py ...   (two schedulers, two syncers)

Churn (about one action a second): a single Pod (some finish by themselves), a gang (PodGroup of
2-3), an elastic gang (minCount 2, 3-4 members: a core job and extras), an elastic Indexed Job
(minCount 2, or 1 at parallelism 1) scaled up and down between 1 and 5 members, a heterogeneous gang (a
CompositePodGroup of a 2-CPU leader and 1-2 workers, where the cluster serves them), a Deployment
scaled up and down, a plain Slurm job (some time-limited, some preempting from the high partition,
some scancel'ed), Pods deleted at random, and on a lab with the mixed GPU node (GPU 0 as MIG slices
beside whole GPUs): Pods there claiming whole GPUs or a slice by ResourceClaimTemplate, and GPU
taints (DeviceTaintRules) coming and going on the GPU nodes, all removed before the settle.
Faults: `kill -9` of a random Tandem process every ~20 s (restarted as `make up` would), and
slurmctld, slurmrestd, slurmdbd and kube-apiserver each restarted at least once.

Invariants, counted after the settle (each must be 0):
  jobs_without_pod        a live placeholder job whose Pod (or every member of its group) is gone
  bound_pods_without_job  a bound Tandem Pod whose job does not run on its Node
  pods_with_many_jobs     a Pod (or group) with more than one live job
  locked_idle_nodes       a Node locked while its Slurm node runs nothing
  stale_k8s_drains        a Slurm node drained for a Kubernetes cause that no longer holds
  untolerating_on_locked  a Pod running on a Node a Slurm job holds without tolerating the lock
  partly_bound_gangs      a group with some members bound and some not, fewer than its minCount bound
  extras_without_core     an elastic gang's extra member's job running while its core's job does not
  cores_preempted_before_extras  seen at any time of the run: an elastic gang's core job preempted
                          while an extra of the same group ran (Slurm takes the extras back first)
  core_nodes_without_member  a node of an elastic Job's running core job on whose Node no member of
                          the group is bound (a member that left holds its node: its workload asked
                          for fewer, and the core was not shrunk), but its batch host (its first
                          node), which Slurm cannot release
  failed_hook_drains      a Slurm node Slurm drained because Tandem's prolog or epilog failed
  stale_killwait_drains   a Slurm node drained at KillWait for a Pod that is gone or finished
  drains_for_pods_elsewhere  a KillWait drain, seen at any time of the run, naming a Pod that was
                          not bound to that node's Node (one never bound, or bound elsewhere)
  gpus_given_twice        a GPU device allocated to two live claims at once, not both as shares
  gpu_shares_overcommitted  a GPU whose shares live claims consume beyond Slurm's shards in use
  stale_gpu_drains        a Slurm node still drained for a GPU taint once every taint is gone
Prints a table, then one JSON line with each count and what was done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from devstack import config, identities, kube, services, stack
from devstack.config import StackConfig
from devstack.procs import Daemon
from devstack.slurm import slurm_env
from devstack.table import format_table
from tandem import keys
from tandem.dra.claims import SHARE_CAPACITY
from tandem.dra.gres import GresError, parse_gres
from tandem.kube import KubeClient, KubeError, object_key, pod_finished
from tandem.placeholder import extra_member, parse_job_name
from tandem.slurm.hostlist import expand

NAMESPACE = "bench"
ELASTIC_JOB = "soak-elastic-job"  # the one elastic Indexed Job the churn scales
RESTARTED_ONCE = ("slurmctld", "slurmrestd", "slurmdbd", "kube-apiserver")
OURS = ("k8s: Node ", "k8s: slurmd Pod ")
TAINT_PREFIX = "soak-taint-"  # what `Soak._name("taint")` makes
# The shares of a GPU a shard Pod's claim or a shard job asks for (the lab's GPUs have 16 each).
SOAK_SHARES = (2, 4, 8)


class Soak:
    def __init__(self, cfg: StackConfig, seed: int, namespace: str = NAMESPACE) -> None:
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.kube = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
        self.namespace = namespace
        self.pods = f"/api/v1/namespaces/{namespace}/pods"
        self.podgroup_api = "/".join(kube.podgroup_api(cfg))
        self.podgroups = f"/apis/{self.podgroup_api}/namespaces/{namespace}/podgroups"
        self.composites = f"/apis/{COMPOSITE_API}/namespaces/{namespace}/compositepodgroups"
        self.serves_composites = _served(self.kube, self.composites)
        self.deployments = f"/apis/apps/v1/namespaces/{namespace}/deployments"
        self.batch_jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
        # A Job's own gang (spec.scheduling) keeps a minCount below its parallelism only where the
        # Workload API is beta (Kubernetes 1.36's Job controller makes the two equal: no extras).
        self.elastic_jobs = self.podgroup_api.endswith("/v1beta1")
        # Core jobs seen preempted while an extra of their group ran (the sampler's).
        self.cores_preempted_first: set[int] = set()
        self.done: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.plain_jobs: list[int] = []
        self.serial = 0
        self.lock = threading.Lock()
        # The mixed GPU node (MIG slices beside whole GPUs), where GPU Pods go; the GPU nodes a
        # taint may come to; the DeviceTaintRules served (None: no GPU churn).
        self.mixed = config.kube_node_name(config.MIG_NODE) if cfg.nodes > config.MIG_NODE else ""
        self.gpu_nodes = [config.kube_node_name(i) for i in range(cfg.nodes) if config.is_gpu_node(i)]
        self.rules = f"/apis/{keys.DRA_GROUP}/v1/{keys.DEVICE_TAINT_RULES}"
        self.serves_rules = bool(self.mixed) and _served(self.kube, self.rules)
        # The node whose GPUs both sides share out (issue 54): shard Pods and shard jobs go there.
        self.shard_node = config.SHARD_NODE if self.serves_rules and cfg.nodes > config.SHARD_NODE else None
        self.templates = f"/apis/{keys.DRA_GROUP}/v1/namespaces/{namespace}/resourceclaimtemplates"
        self.taints: list[str] = []
        # KillWait drains seen during the run that named a Pod not on that node: (node, pod, where).
        self.misplaced_drains: set[tuple[str, str, str]] = set()

    # -- churn -------------------------------------------------------------------------------------

    def churn(self, stop: threading.Event) -> None:
        actions = [
            (self.single_pod, 5),
            (self.gang, 2),
            (self.elastic_gang, 1),
            *([(self.het_gang, 1)] if self.serves_composites else []),
            (self.scale_deployment, 2),
            *([(self.scale_elastic_job, 2)] if self.elastic_jobs else []),
            (self.plain_job, 3),
            (self.delete_some, 3),
            (self.scancel_some, 1),
            (self.squat, 2),
            *([(self.gpu_pod, 2), (self.gpu_taint, 1)] if self.serves_rules else []),
            *([(self.shard_pod, 2), (self.shard_job, 1)] if self.shard_node is not None else []),
        ]
        weights = [w for _, w in actions]
        # Every kind once first, in a random order, then drawn by weight: a short run exercises each
        # whatever the draws (a fresh CI run drew no heterogeneous gang in 115 actions).
        untried = [a for a, _ in actions]
        self.rng.shuffle(untried)
        while not stop.wait(self.rng.uniform(0.5, 1.5)):
            first = bool(untried)
            act = untried.pop(0) if first else self.rng.choices([a for a, _ in actions], weights)[0]
            try:
                act()
            except (KubeError, subprocess.CalledProcessError, OSError) as e:
                # The API server or Slurm is being restarted: that is the point.
                self.errors[f"{act.__name__}: {type(e).__name__}"] += 1
                if first:
                    untried.append(act)  # refused while a daemon restarted: once more, later

    def _name(self, kind: str) -> str:
        self.serial += 1
        return f"soak-{kind}-{self.serial}"

    def _pod(self, name: str, **extra: Any) -> dict[str, Any]:
        annotations = {}
        if self.rng.random() < 0.3:
            annotations = kube.complete_after(self.rng.randint(5, 40))
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "annotations": annotations},
            "spec": {
                "schedulerName": self.cfg.scheduler_name,
                "terminationGracePeriodSeconds": 2,
                "containers": [
                    {"name": "c", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}
                ],
            },
        }
        pod["spec"].update(extra)
        return pod

    def single_pod(self) -> None:
        self.kube.post(self.pods, self._pod(self._name("pod")))
        self.done["pods created"] += 1

    def gpu_pod(self) -> None:
        """A Pod on the mixed node claiming 1-2 whole GPUs of any product, or one MIG slice."""
        if self.rng.random() < 0.6:
            template, kind = f"soak-whole-{self.rng.randint(1, 2)}", "whole"
        else:
            template, kind = "soak-slice", "slice"
        pod = self._pod(
            self._name(f"gpu-{kind}"),
            nodeSelector={"kubernetes.io/hostname": self.mixed},
            resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": template}],
        )
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        self.kube.post(self.pods, pod)
        self.done[f"gpu pods ({kind}) created"] += 1

    def shard_pod(self) -> None:
        """A Pod on the shard node claiming 2, 4 or 8 shares of a GPU."""
        assert self.shard_node is not None
        shares = self.rng.choice(SOAK_SHARES)
        pod = self._pod(
            self._name("gpu-share"),
            nodeSelector={"kubernetes.io/hostname": config.kube_node_name(self.shard_node)},
            resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": f"soak-share-{shares}"}],
        )
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        self.kube.post(self.pods, pod)
        self.done["gpu pods (shares) created"] += 1

    def shard_job(self) -> None:
        """A Slurm job of its own taking shards of a GPU of the shard node, beside the Pods' shares."""
        assert self.shard_node is not None
        shards = self.rng.choice(SOAK_SHARES)
        self._sbatch(
            [f"--gres=shard:{shards}", f"--nodelist={config.slurm_node_name(self.shard_node)}"],
            "shard jobs",
        )

    def gpu_taint(self) -> None:
        """A DeviceTaintRule on a random GPU of a random GPU node, or one of those made going."""
        if self.taints and (len(self.taints) >= 2 or self.rng.random() < 0.5):
            name = self.taints[self.rng.randrange(len(self.taints))]
            _delete(self.kube, f"{self.rules}/{name}")
            self.taints.remove(name)
            self.done["gpu taints removed"] += 1
            return
        node, gpu = self.rng.choice(self.gpu_nodes), self.rng.randint(1, config.GPUS_PER_NODE - 1)
        name = self._name("taint")
        self.taints.append(name)  # before the create: a refused create may still be stored
        self.kube.post(self.rules, taint_rule(name, node, f"gpu-{gpu}"))
        self.done["gpu taints made"] += 1

    def ensure_templates(self) -> None:
        """The claim templates the GPU Pods name: 1 and 2 whole GPUs of any product, a MIG slice."""
        profile = f'device.attributes["gpu.nvidia.com"].profile == "{config.MIG_PROFILE}"'
        for name, count, device_class, selector, shares in (
            ("soak-whole-1", 1, "gpu.nvidia.com", "", 0),
            ("soak-whole-2", 2, "gpu.nvidia.com", "", 0),
            ("soak-slice", 1, "mig.nvidia.com", profile, 0),
            *((f"soak-share-{n}", 1, "gpu.nvidia.com", "", n) for n in SOAK_SHARES),
        ):
            exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
            if selector:
                exactly["selectors"] = [{"cel": {"expression": selector}}]
            if shares:
                exactly["capacity"] = {"requests": {SHARE_CAPACITY: str(shares)}}
            body = {
                "metadata": {"name": name},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}},
            }
            try:
                self.kube.post(self.templates, body)
            except KubeError as e:
                if e.status != 409:
                    raise

    def untaint_all(self) -> None:
        """Every GPU taint the churn made, gone (before the settle: its drains must then go).

        Listed from the API server, not from `self.taints`: a create refused while the API server
        restarted may still have been stored, and a refused delete leaves its rule in place.
        """
        made = set(self.taints)
        for rule in self.kube.get(self.rules).get("items") or []:
            if (name := rule["metadata"]["name"]).startswith(TAINT_PREFIX):
                made.add(name)
        for name in sorted(made):
            _delete(self.kube, f"{self.rules}/{name}")
        self.taints.clear()

    def watch_drains(self, stop: threading.Event) -> None:
        """Every few seconds: a KillWait drain must name a Pod bound to that node's Node."""
        kube_node = {config.slurm_node_name(i): config.kube_node_name(i) for i in range(self.cfg.nodes)}
        while not stop.wait(2.0):
            try:
                nodes = slurm_nodes(self.cfg)
            except (subprocess.CalledProcessError, OSError, ValueError):
                continue  # slurmctld restarting
            for name, (drained, reason) in nodes.items():
                named = keys.killwait_drain_of(reason) if drained else None
                if named is None:
                    continue
                try:
                    pod = self.kube.get(f"/api/v1/namespaces/{named[0]}/pods/{named[1]}")
                except KubeError:
                    continue  # gone: stale_killwait_drains says whether the drain outlives it
                where = str((pod.get("spec") or {}).get("nodeName") or "")
                if where != kube_node.get(name):
                    self.misplaced_drains.add((name, f"{named[0]}/{named[1]}", where or "not bound"))

    def gang(self) -> None:
        name, size = self._name("gang"), self.rng.randint(2, 3)
        self.kube.post(
            self.podgroups,
            {
                "apiVersion": self.podgroup_api,
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"schedulingPolicy": {"gang": {"minCount": size}}},
            },
        )
        for i in range(size):
            pod = self._pod(f"{name}-{i}", schedulingGroup={"podGroupName": name})
            pod["metadata"]["annotations"] = {}
            self.kube.post(self.pods, pod)
        self.done["gangs created"] += 1

    def elastic_gang(self) -> None:
        """A PodGroup of minCount 2 with 3-4 members: a core job of 2 and each other member an
        extra on a job of its own, which the preempting plain jobs take back first (issue 53)."""
        name, size = self._name("elastic"), self.rng.randint(3, 4)
        self.kube.post(
            self.podgroups,
            {
                "apiVersion": self.podgroup_api,
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        )
        for i in range(size):
            pod = self._pod(f"{name}-{i}", schedulingGroup={"podGroupName": name})
            pod["metadata"]["annotations"] = {}
            self.kube.post(self.pods, pod)
        self.done["elastic gangs created"] += 1

    def het_gang(self) -> None:
        """A CompositePodGroup of a leader PodGroup (one 2-CPU Pod) and a workers PodGroup: one
        Slurm heterogeneous job."""
        name, workers = self._name("het"), self.rng.randint(1, 2)
        self.kube.post(
            self.composites,
            {
                "apiVersion": COMPOSITE_API,
                "kind": "CompositePodGroup",
                "metadata": {"name": name},
                "spec": {
                    "workloadRef": {"workloadName": name, "templateName": "het"},
                    "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                },
            },
        )
        for child, size, cpu in ((f"{name}-leader", 1, "2"), (f"{name}-workers", workers, "500m")):
            self.kube.post(
                self.podgroups,
                {
                    "apiVersion": self.podgroup_api,
                    "kind": "PodGroup",
                    "metadata": {"name": child},
                    "spec": {
                        "parentCompositePodGroupName": name,
                        "workloadRef": {"workloadName": name, "templateName": child.rsplit("-", 1)[1]},
                        "schedulingPolicy": {"gang": {"minCount": size}},
                    },
                },
            )
            for i in range(size):
                pod = self._pod(f"{child}-{i}", schedulingGroup={"podGroupName": child})
                pod["metadata"]["annotations"] = {}
                pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cpu
                self.kube.post(self.pods, pod)
        self.done["het gangs created"] += 1

    def scale_deployment(self) -> None:
        replicas = self.rng.randint(0, 4)
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "soak-web"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "soak-web"}},
                "template": {"metadata": {"labels": {"app": "soak-web"}}, "spec": self._pod("x")["spec"]},
            },
        }
        try:
            self.kube.merge_patch(f"{self.deployments}/soak-web", {"spec": {"replicas": replicas}})
        except KubeError as e:
            if not e.not_found:
                raise
            self.kube.post(self.deployments, body)
        self.done["deployment scaled"] += 1

    def scale_elastic_job(self) -> None:
        """An elastic Indexed Job (completions changed with parallelism, so a scale-down removes the
        highest indexes) of 1-5 members, its gang's minCount 2 (1 at parallelism 1: never above
        it): a core and extras, the extras ended first on a scale-down, the core shrunk in place
        when it must, a minCount raised again met by linked jobs (issue 53)."""
        size = self.rng.randint(1, 5)
        scale = {
            "parallelism": size,
            "completions": size,
            "scheduling": {"schedulingPolicy": {"gang": {"minCount": min(2, size)}}},
        }
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": ELASTIC_JOB},
            "spec": {
                **scale,
                "completionMode": "Indexed",
                # The churn deletes members at random: each counts as a failure of the Job.
                "backoffLimit": 100000,
                "template": {"spec": {**self._pod("x")["spec"], "restartPolicy": "Never"}},
            },
        }
        try:
            self.kube.merge_patch(f"{self.batch_jobs}/{ELASTIC_JOB}", {"spec": scale})
        except KubeError as e:
            if not e.not_found:
                raise
            self.kube.post(self.batch_jobs, body)
        self.done["elastic job scaled"] += 1

    def watch_elastic(self, stop: threading.Event) -> None:
        """Every 2 s: an elastic gang's core job preempted while an extra of its group ran at the
        sample before (Slurm must take the extras back first)."""
        extras_running: set[str] = set()
        while not stop.wait(2.0):
            try:
                jobs = slurm_jobs(self.cfg, ("PREEMPTED",))
            except (subprocess.CalledProcessError, OSError, ValueError, subprocess.TimeoutExpired):
                continue  # slurmctld restarting
            now_running: set[str] = set()
            for j in jobs:
                ref = parse_job_name(j["name"])
                if ref is None:
                    continue
                if extra_member(ref) is not None and j["state"] == "RUNNING":
                    now_running.add(ref.key)
                elif extra_member(ref) is None and j["state"] == "PREEMPTED" and ref.key in extras_running:
                    self.cores_preempted_first.add(j["id"])
            extras_running = now_running

    def _core_nodes_without_member(
        self, live_pods: list[dict[str, Any]], placeholder: list[dict[str, Any]], kube_node: dict[str, str]
    ) -> int:
        """Nodes of the elastic Job's running core jobs on whose Node no member of the group is
        (bound, or still going): its workload replaces a member that left, else the core shrinks to
        the nodes its members hold and its batch host (the first: Slurm cannot release it)."""
        held: dict[str, set[str]] = {}
        for p in live_pods:
            group = ((p.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
            node = (p.get("spec") or {}).get("nodeName")
            if group and node:
                held.setdefault(f"{p['metadata']['namespace']}/pg:{group}", set()).add(node)
        elastic = _owned_by_a_job(live_pods)
        count = 0
        for j in placeholder:
            ref = parse_job_name(j["name"])
            if (
                ref is None
                or extra_member(ref) is not None
                or ref.key not in elastic
                or j["state"] != "RUNNING"
            ):
                continue
            for n in j["nodes"][1:]:
                if kube_node.get(n) not in held.get(ref.key, set()):
                    count += 1
                    print(f"[soak] core job {j['id']} holds {n}, where no member of {ref.key} is", flush=True)
        return count

    def plain_job(self) -> None:
        args = []
        kind = self.rng.random()
        if kind < 0.2:
            args += ["--time=1"]  # minutes: ends by its time limit
        elif kind < 0.35:
            args += ["--partition=high", "--exclusive"]  # preempts what runs there
        self._sbatch(args, "plain jobs")

    def _sbatch(self, more: list[str], counted: str) -> None:
        args = ["--parsable", "--output=/dev/null", f"--job-name=soak-plain-{self.serial}", *more]
        out = subprocess.run(
            ["sbatch", *args],
            input=f"#!/bin/sh\nsleep {self.rng.randint(5, 120)}\n",
            env=slurm_env(self.cfg),
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            # sbatch said nothing while slurmctld restarted: counted, and the churn goes on.
            self.errors[f"{counted}: sbatch printed no job id"] += 1
            return
        self.plain_jobs.append(int(job_id))
        self.serial += 1
        self.done[counted] += 1

    def squat(self) -> None:
        """A tenant tries to put a Pod of its own on a Node, beside whatever Slurm runs there
        (issue 50): tolerating the lock in one of the ways a toleration can, posing as a
        DaemonSet's Pod, or holding out with a budget. The admission policy refuses the
        tolerations; the rest the lock's taint evicts. The invariant says none stays."""
        name = self._name("squat")
        node = config.kube_node_name(self.rng.randrange(self.cfg.nodes))
        way = self.rng.choice(("lock key", "blanket", "for an hour", "daemonset owner", "budget"))
        tolerations = {
            "lock key": [{"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute"}],
            "blanket": [{"operator": "Exists"}],
            "for an hour": [
                {"key": keys.LOCK_KEY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600}
            ],
        }.get(way, [])
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace, "labels": {"soak-squat": name}}
        if way == "daemonset owner":
            meta["ownerReferences"] = [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "agent",
                    "uid": name,
                    "controller": True,
                }
            ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "nodeName": node,
                "tolerations": tolerations,
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "c", "image": "x"}],
            },
        }
        if way == "budget":
            self.kube.post(
                f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets",
                {
                    "metadata": {"name": name},
                    "spec": {"maxUnavailable": 0, "selector": {"matchLabels": meta["labels"]}},
                },
            )
        try:
            self.kube.post(self.pods, pod)
        except KubeError as e:
            if e.status not in (403, 422) or "may not tolerate the lock taint" not in e.message:
                raise
            self.done["squats refused at admission"] += 1
            return
        self.done["squats admitted (no toleration)"] += 1

    def delete_some(self) -> None:
        pods = [
            p
            for p in self.kube.get(self.pods).get("items") or []
            if not p["metadata"].get("deletionTimestamp")
        ]
        if pods:
            victim = self.rng.choice(pods)
            self.kube.delete(f"{self.pods}/{victim['metadata']['name']}")
            self.done["pods deleted"] += 1

    def scancel_some(self) -> None:
        if self.plain_jobs:
            job = self.plain_jobs.pop(self.rng.randrange(len(self.plain_jobs)))
            subprocess.run(["scancel", str(job)], env=slurm_env(self.cfg), capture_output=True, timeout=30)
            self.done["plain jobs scancelled"] += 1

    # -- faults ------------------------------------------------------------------------------------

    def faults(self, stop: threading.Event, minutes: float) -> None:
        pending = list(RESTARTED_ONCE)
        self.rng.shuffle(pending)
        # Spread the once-each restarts over the first 80 % of the run.
        spacing = minutes * 60 * 0.8 / (len(pending) + 1)
        next_restart = time.monotonic() + spacing
        # Every Tandem process, both replicas and so their leaders too, but not the lab's router.
        victims = [n for n in services.names(self.cfg) if n != services.SYNCER_ROUTER]
        while not stop.wait(self.rng.uniform(15, 25)):
            victim = self.rng.choice(victims)
            self._kill(victim)
            if pending and time.monotonic() >= next_restart:
                self._restart(pending.pop())
                next_restart += spacing
        for name in pending:  # a short run: still each once
            self._restart(name)

    def _kill(self, name: str) -> None:
        daemon = Daemon(name, self.cfg.run_dir, self.cfg.log_dir)
        pid = daemon.pid()
        if pid is not None and daemon.alive():
            os.kill(pid, signal.SIGKILL)
            self.done[f"kill -9 {name}"] += 1
        self._up()

    def _restart(self, name: str) -> None:
        Daemon(name, self.cfg.run_dir, self.cfg.log_dir).stop()
        self.done[f"restart {name}"] += 1
        self._up()

    def _up(self) -> None:
        for attempt in range(5):
            try:
                stack.up_as_built(self.cfg)
                return
            except Exception as e:  # a daemon still coming back: the next try finds it
                self.errors[f"stack.up: {type(e).__name__}"] += 1
                time.sleep(2 + attempt)

    # -- invariants --------------------------------------------------------------------------------

    def invariants(self) -> dict[str, int]:
        pods = self.kube.get("/api/v1/pods").get("items") or []
        jobs = slurm_jobs(self.cfg)
        nodes = slurm_nodes(self.cfg)
        live_pods = [p for p in pods if not pod_finished(p)]
        by_uid = {p["metadata"]["uid"]: p for p in live_pods}
        podgroups = self._podgroups()
        parents = _parents(podgroups)
        groups = Counter(_group_of(p, parents) for p in live_pods if _group_of(p, parents))
        placeholder = [j for j in jobs if j["name"].startswith(f"tandem:{self.cfg.scheduler_name}/")]
        # A het job's components share its id and name: one job.
        owners = Counter(name.rsplit("/", 1)[1] for name, _ in {(j["name"], j["id"]) for j in placeholder})
        kube_node = {config.slurm_node_name(i): config.kube_node_name(i) for i in range(self.cfg.nodes)}
        running_on: dict[str, set[int]] = {}
        for j in jobs:
            if j["state"] in ("RUNNING", "COMPLETING"):
                for n in j["nodes"]:
                    running_on.setdefault(n, set()).add(j["id"])
        counts = Counter[str]()
        running = {object_key(p) for p in live_pods}
        refs = {j["id"]: parse_job_name(j["name"]) for j in placeholder}
        # The groups whose own job (an elastic gang's core) runs.
        cores_running = {
            ref.key
            for j in placeholder
            if j["state"] == "RUNNING" and (ref := refs[j["id"]]) is not None and extra_member(ref) is None
        }
        for j in placeholder:
            owner = j["name"].split("/")
            uid, pod_name = owner[-1], owner[-2]
            ref = refs[j["id"]]
            member = extra_member(ref) if ref is not None else None
            if ref is not None and member:  # an elastic gang's extra: its member's, never without its core
                alive = member in by_uid
                if j["state"] == "RUNNING" and ref.key not in cores_running:
                    counts["extras_without_core"] += 1
                    print(f"[soak] extra job {j['id']} runs without its core", flush=True)
            else:
                alive = uid in by_uid or (":" in pod_name and groups.get(f"{owner[-3]}/{pod_name}", 0) > 0)
            if not alive:
                counts["jobs_without_pod"] += 1
        counts["pods_with_many_jobs"] = sum(1 for n in owners.values() if n > 1)
        slurm_of = {v: k for k, v in kube_node.items()}
        for p in live_pods:
            spec, ann = p.get("spec") or {}, (p["metadata"].get("annotations") or {})
            node = spec.get("nodeName")
            if (
                spec.get("schedulerName") == self.cfg.scheduler_name
                and node
                and not p["metadata"].get("deletionTimestamp")
            ):
                job = ann.get(keys.JOB_ID_ANNOTATION)
                if not job or int(job) not in running_on.get(slurm_of.get(node, ""), set()):
                    counts["bound_pods_without_job"] += 1
            tolerates = any(
                t.get("key") == keys.LOCK_KEY or (t.get("operator") == "Exists" and not t.get("key"))
                for t in spec.get("tolerations") or []
            )
            if (
                node
                and running_on.get(slurm_of.get(node, ""))
                and spec.get("schedulerName") != self.cfg.scheduler_name
                and p["metadata"]["namespace"] not in identities.LOCK_SHARING_NAMESPACES
                and (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ):
                # Issue 50: a held Node is the Slurm job's alone, whatever a tenant writes.
                counts["tenant_pods_on_held_nodes"] += 1
                print(f"[soak] {object_key(p)} runs on {node}, which a Slurm job holds", flush=True)
            if (
                node
                and not tolerates
                and running_on.get(slurm_of.get(node, ""))
                and p["metadata"]["namespace"] != config.SLURM_NAMESPACE
                and (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")
            ):
                counts["untolerating_on_locked"] += 1
        for p in pods:
            if p["metadata"]["namespace"] == config.SLURM_NAMESPACE:
                lock = (p["metadata"].get("annotations") or {}).get(keys.LOCK_KEY, "false")
                if lock != "false" and not running_on.get(p["metadata"]["name"]):
                    counts["locked_idle_nodes"] += 1
        for name, (drained, reason) in nodes.items():
            node = self._node(kube_node.get(name, ""))
            cause = node is None or (node.get("spec") or {}).get("unschedulable")
            if drained and reason.startswith(OURS) and not cause:
                counts["stale_k8s_drains"] += 1
                print(f"[soak] {name} still drained: {reason}", flush=True)
            if drained and reason.startswith(("Prolog error", "Epilog error")):
                counts["failed_hook_drains"] += 1
            if (
                drained
                and (named := keys.killwait_drain_of(reason))
                and f"{named[0]}/{named[1]}" not in running
            ):
                counts["stale_killwait_drains"] += 1
        bound_in_group: dict[str, list[bool]] = {}
        for p in live_pods:
            group = _group_of(p, parents)
            if group and not p["metadata"].get("deletionTimestamp"):
                bound_in_group.setdefault(group, []).append(bool((p.get("spec") or {}).get("nodeName")))
        # Bound and unbound members together: only when fewer than minCount are bound (an elastic
        # gang's extras wait for nodes beside a whole core), or than its running core job's nodes
        # (an elastic Job's core shrunk by its workload below minCount: its members beyond, grown
        # back, wait on jobs of their own).
        min_counts = _min_counts(podgroups)
        owned = _owned_by_a_job(live_pods)
        core_nodes = {
            ref.key: len(j["nodes"])
            for j in placeholder
            if j["state"] == "RUNNING"
            and (ref := refs[j["id"]]) is not None
            and extra_member(ref) is None
            and ref.key in owned
        }
        counts["partly_bound_gangs"] = sum(
            1
            for group, states in bound_in_group.items()
            if set(states) == {True, False}
            and sum(states) < min(min_counts.get(group, len(states)), core_nodes.get(group, len(states)))
        )
        counts["cores_preempted_before_extras"] = len(self.cores_preempted_first)
        for job_id in sorted(self.cores_preempted_first):
            print(f"[soak] core job {job_id} was preempted while an extra of its group ran", flush=True)
        counts["core_nodes_without_member"] = self._core_nodes_without_member(
            live_pods, placeholder, kube_node
        )
        counts["drains_for_pods_elsewhere"] = len(self.misplaced_drains)
        for node, pod, where in sorted(self.misplaced_drains):
            print(f"[soak] {node} drained at KillWait for {pod}, which was {where}", flush=True)
        counts["gpus_given_twice"] = self._gpus_given_twice()
        counts["gpu_shares_overcommitted"] = self._gpu_shares_overcommitted()
        tainted = [r for drained, r in nodes.values() if drained and r.startswith(OURS) and " tainted: " in r]
        counts["stale_gpu_drains"] = len(tainted)
        names = (
            "jobs_without_pod",
            "bound_pods_without_job",
            "pods_with_many_jobs",
            "locked_idle_nodes",
            "stale_k8s_drains",
            "untolerating_on_locked",
            "tenant_pods_on_held_nodes",
            "partly_bound_gangs",
            "extras_without_core",
            "cores_preempted_before_extras",
            "core_nodes_without_member",
            "failed_hook_drains",
            "stale_killwait_drains",
            "drains_for_pods_elsewhere",
            "gpus_given_twice",
            "gpu_shares_overcommitted",
            "stale_gpu_drains",
        )
        return {n: counts[n] for n in names}

    def _held_devices(self) -> list[dict[str, Any]] | None:
        """Every allocation result of a claim a live Pod holds (None: the API server did not say)."""
        try:
            claims = self.kube.get(f"/apis/{keys.DRA_GROUP}/v1/resourceclaims").get("items") or []
        except KubeError:
            return None
        return [
            r
            for claim in claims
            if (claim.get("status") or {}).get("reservedFor")
            for r in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results"
            )
            or []
        ]

    def _gpus_given_twice(self) -> int:
        """Devices allocated to more than one claim of a live Pod at once, one of them not as a
        share of the device (a share names its shareID)."""
        held: dict[tuple[str, str], list[bool]] = {}
        for r in self._held_devices() or []:
            held.setdefault((str(r.get("pool")), str(r.get("device"))), []).append(bool(r.get("shareID")))
        return sum(1 for shared in held.values() if len(shared) > 1 and not all(shared))

    def _gpu_shares_overcommitted(self) -> int:
        """GPUs of the shard node whose shares the Pods' claims consume beyond what Slurm counts in
        use there (its gres_used, every job's shards, a GPU held whole as all of them): a share
        Kubernetes gives that Slurm could give again."""
        if self.shard_node is None:
            return 0
        pool = config.kube_node_name(self.shard_node)
        claimed = Counter[int]()
        for r in self._held_devices() or []:
            device = str(r.get("device"))
            if str(r.get("pool")) == pool and device.startswith("gpu-") and device[4:].isdigit():
                claimed[int(device[4:])] += int(
                    str((r.get("consumedCapacity") or {}).get(SHARE_CAPACITY) or 0)
                )
        used = slurm_shards_used(self.cfg, config.slurm_node_name(self.shard_node))
        if used is None:
            return 0
        return sum(1 for index, n in claimed.items() if n > used.get(index, 0))

    def _podgroups(self) -> list[dict[str, Any]]:
        return list(self.kube.get(f"/apis/{self.podgroup_api}/podgroups").get("items") or [])

    def _node(self, name: str) -> dict[str, Any] | None:
        try:
            return self.kube.get(f"/api/v1/nodes/{name}")
        except KubeError:
            return None


COMPOSITE_API = "scheduling.k8s.io/v1alpha3"


def taint_rule(
    name: str,
    kube_node: str,
    device: str,
    key: str = "example.com/soak",
    value: str = "chaos",
    effect: str = "NoSchedule",
) -> dict[str, Any]:
    """A DeviceTaintRule tainting one GPU of a Node's pool, as an admin or a health controller
    writes it (resource.k8s.io/v1, Kubernetes 1.37)."""
    return {
        "apiVersion": f"{keys.DRA_GROUP}/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": kube_node, "device": device},
            "taint": {"key": key, "value": value, "effect": effect},
        },
    }


def _served(client: KubeClient, path: str) -> bool:
    try:
        client.get(path)
    except KubeError:
        return False
    return True


def _parents(podgroups: list[dict[str, Any]]) -> dict[str, str]:
    """`ns/<PodGroup>` -> its CompositePodGroup, for every PodGroup that has one."""
    return {
        f"{pg['metadata']['namespace']}/{pg['metadata']['name']}": parent
        for pg in podgroups
        if (parent := (pg.get("spec") or {}).get("parentCompositePodGroupName"))
    }


def _min_counts(podgroups: list[dict[str, Any]]) -> dict[str, int]:
    """`ns/pg:<PodGroup>` -> its gang's minCount, for every PodGroup of no CompositePodGroup."""
    return {
        f"{pg['metadata']['namespace']}/pg:{pg['metadata']['name']}": int(gang.get("minCount") or 1)
        for pg in podgroups
        if not (pg.get("spec") or {}).get("parentCompositePodGroupName")
        and (gang := ((pg.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")) is not None
    }


def _owned_by_a_job(pods: list[dict[str, Any]]) -> set[str]:
    """The `ns/pg:<PodGroup>` groups whose members a Job controls (the churn's elastic Job)."""
    return {
        f"{p['metadata']['namespace']}/pg:{group}"
        for p in pods
        if (group := ((p.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName"))
        and any(r.get("kind") == "Job" for r in p["metadata"].get("ownerReferences") or [])
    }


def _group_of(pod: dict[str, Any], parents: dict[str, str]) -> str:
    """The group a Pod is placed with, keyed as its placeholder job names it (a child PodGroup's:
    its CompositePodGroup's)."""
    name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if not name:
        return ""
    namespace = pod["metadata"]["namespace"]
    parent = parents.get(f"{namespace}/{name}")
    return f"{namespace}/cpg:{parent}" if parent else f"{namespace}/pg:{name}"


LIVE_STATES = ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED")


def slurm_jobs(cfg: StackConfig, also: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Slurm's live jobs (and those in the states `also` names)."""
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%j|%T|%N"],
        env=slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    jobs = []
    for line in out.splitlines():
        job_id, name, state, nodes = line.split("|", 3)
        if state in LIVE_STATES or state in also:
            # A het job's component prints as `<het job id>+<offset>`: its nodes are the het job's.
            jobs.append(
                {
                    "id": int(job_id.partition("+")[0]),
                    "name": name,
                    "state": state,
                    "nodes": expand(nodes) if nodes else [],
                }
            )
    return jobs


def slurm_shards_used(cfg: StackConfig, node: str) -> dict[int, int] | None:
    """Shards of each GPU of `node` in use as Slurm counts them (`GresUsed=...,shard:h100:3(3/16,
    -/16,...)`, `-`: the GPU held whole, all its shards); None when scontrol does not say."""
    shown = subprocess.run(
        ["scontrol", "show", "node", "-d", node],
        env=slurm_env(cfg),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    found = re.search(r"GresUsed=(\S+)", shown)
    if found is None:
        return None
    try:
        parsed = parse_gres(found.group(1))
    except GresError:
        return None
    return {s.index: s.total if s.used < 0 else s.used for g in parsed if g.name == "shard" for s in g.shares}


def slurm_nodes(cfg: StackConfig) -> dict[str, tuple[bool, str]]:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N|%T|%E"],
        env=slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    nodes = {}
    for line in out.splitlines():
        name, state, reason = line.split("|", 2)
        nodes[name] = ("drain" in state, reason)
    return nodes


@dataclass
class SoakResult:
    counts: dict[str, int]
    done: Counter[str]
    errors: Counter[str]
    minutes: float
    replicas: int = 1

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())


def run(cfg: StackConfig, seed: int, minutes: float, settle: float, namespace: str = NAMESPACE) -> SoakResult:
    """Churn and faults for `minutes`, quiet for `settle` seconds, then the invariants."""
    kube.ensure_namespace(k8s.CoreV1Api(kube.api(cfg)), namespace)
    soak = Soak(cfg, seed, namespace)
    if soak.serves_rules:
        soak.ensure_templates()
    stop = threading.Event()
    threads = [
        threading.Thread(target=soak.churn, args=(stop,), daemon=True),
        threading.Thread(target=soak.faults, args=(stop, minutes), daemon=True),
        threading.Thread(target=soak.watch_drains, args=(stop,), daemon=True),
        threading.Thread(target=soak.watch_elastic, args=(stop,), daemon=True),
    ]
    began = time.monotonic()
    for t in threads:
        t.start()
    stop.wait(minutes * 60)
    stop.set()
    for t in threads:
        t.join(300)
    soak._up()
    for attempt in range(5):
        try:
            soak.untaint_all()
            break
        except KubeError:
            time.sleep(2 + attempt)  # the apiserver was the last thing restarted
    ran = (time.monotonic() - began) / 60
    print(f"churn and faults for {ran:.1f} min; settling up to {settle:.0f}s", flush=True)
    counts, took = settled(soak.invariants, settle)
    print(f"settled in {took:.0f}s", flush=True)
    return SoakResult(counts, soak.done, soak.errors, ran, cfg.replicas)


# How long every invariant must stay 0 before the settle ends early: past the lab's KillWait (30 s),
# so a drain or a lock that a Pod still terminating would leave has had its time to show.
QUIET_SECONDS = 40.0
SETTLE_POLL_SECONDS = 5.0


def settled(
    invariants: Callable[[], dict[str, int]],
    most: float,
    quiet: float = QUIET_SECONDS,
    every: float = SETTLE_POLL_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[dict[str, int], float]:
    """The invariants once they have read 0 for `quiet` seconds in a row, or as they read after
    `most` seconds (issue 51: a fixed settle waited 90 s however soon the stack was quiet); and how
    long it took."""
    began = clock()
    zero_since: float | None = None
    while True:
        counts = invariants()
        now = clock()
        if any(counts.values()):
            zero_since = None
        elif zero_since is None:
            zero_since = now
        if (zero_since is not None and now - zero_since >= quiet) or now - began >= most:
            return counts, now - began
        sleep(min(every, max(0.0, most - (now - began))))


def cleanup(cfg: StackConfig, namespace: str = NAMESPACE) -> None:
    """What the churn made, gone: its Deployment, PodGroups and Pods, and the plain jobs."""
    client = KubeClient.from_kubeconfig(str(cfg.kubeconfig))
    composites = f"/apis/{COMPOSITE_API}/namespaces/{namespace}/compositepodgroups"
    for path in (
        f"/apis/batch/v1/namespaces/{namespace}/jobs",  # before its Pods, or it makes them again
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",  # the squatters'
        f"/apis/{'/'.join(kube.podgroup_api(cfg))}/namespaces/{namespace}/podgroups",
        *([composites] if _served(client, composites) else []),
    ):
        for item in client.get(path).get("items") or []:
            # A Job's Pods go with it (the API's default for Jobs is to orphan them).
            _delete(client, f"{path}/{item['metadata']['name']}", {"propagationPolicy": "Background"})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for pod in client.get(pods).get("items") or []:
        _delete(client, f"{pods}/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    rules = f"/apis/{keys.DRA_GROUP}/v1/{keys.DEVICE_TAINT_RULES}"
    if _served(client, rules):
        for rule in client.get(rules).get("items") or []:
            if rule["metadata"]["name"].startswith("soak-taint-"):
                _delete(client, f"{rules}/{rule['metadata']['name']}")
    templates = f"/apis/{keys.DRA_GROUP}/v1/namespaces/{namespace}/resourceclaimtemplates"
    if _served(client, templates):
        for template in client.get(templates).get("items") or []:
            _delete(client, f"{templates}/{template['metadata']['name']}")
    plain = [str(j["id"]) for j in slurm_jobs(cfg) if j["name"].startswith("soak-plain-")]
    if plain:
        subprocess.run(["scancel", *plain], env=slurm_env(cfg), capture_output=True, timeout=30)


def _delete(client: KubeClient, path: str, body: Any = None) -> None:
    try:
        client.delete(path, body)
    except KubeError as e:
        if not e.not_found:
            raise


def report(result: SoakResult, seed: int) -> None:
    rows = [["invariant", "count"], *([k, str(v)] for k, v in result.counts.items())]
    rows += [["--- done", ""], *([k, str(v)] for k, v in sorted(result.done.items()))]
    rows += [
        ["--- refused while a daemon restarted", ""],
        *([k, str(v)] for k, v in sorted(result.errors.items())),
    ]
    print(format_table(rows))
    print(
        json.dumps(
            {
                **result.counts,
                "replicas": result.replicas,
                "minutes": round(result.minutes, 2),
                "seed": seed,
                "done": dict(result.done),
                "ok": result.ok,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=120, help="seconds of quiet before the checks")
    args = parser.parse_args()
    cfg = config.StackConfig.from_env()
    report(run(cfg, args.seed, args.minutes, args.settle), args.seed)


if __name__ == "__main__":
    main()
