"""What the integration tests do to the real stack: make Pods, wait for things, read Slurm."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from devstack import audit, config, identities, services, slurm
from devstack import kube as devkube
from devstack.config import StackConfig
from devstack.slurm import slurm_env

__all__ = ["ApiException", "slurm_env"]
T = TypeVar("T")
PREFIX = "sunk.coreweave.com/"


def wait_until(what: str, check: Callable[[], T | None], timeout: float = 30.0, every: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except Exception as e:
            last = e
        else:
            if value:
                return value
            last = value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# A test that waits a KillWait out (marked `short_kill_wait`) runs at this KillWait, not the lab's
# 30 s: above 10 s, so the test Pods' 5 s grace period stays allowed (KillWait minus 5 s).
SHORT_KILL_WAIT = 12
# How long such a test's stuck Pod takes to leave once deleted: past the placeholder's budget
# (KillWait minus 3 s), so Tandem drains its node, and not much longer.
STUCK_SECONDS = 20


def refused_probe(cfg: StackConfig, core: k8s.CoreV1Api) -> str:
    """A Pod whose grace period no KillWait allows, made now, and its refusal's message once the
    scheduler wrote it; the Pod is deleted again. The scheduler's queue is first in, first out: what
    it was told before the probe, it has acted on by the time the probe is refused."""
    name = unique("probe")
    create(core, tandem_pod(cfg, name, grace=100_000))
    try:
        said = wait_until(
            "the probe Pod refused",
            lambda: [e.message for e in events_for(core, name) if e.reason == "FailedValidation"],
            20,
        )
    finally:
        delete_pod(core, name, grace=0)
    return str(said[-1])


def wait_for_kill_wait(cfg: StackConfig, core: k8s.CoreV1Api, seconds: int) -> None:
    """Until the scheduler judges Pods by KillWait `seconds` (it reads Slurm again every 2 s): a
    probe Pod whose grace period no KillWait allows is refused, citing the KillWait it used."""

    wait_until(
        f"the scheduler judging by KillWait {seconds}s",
        lambda: f"KillWait {seconds}s minus" in refused_probe(cfg, core),
        60,
        every=0.5,
    )


def tandem_pod(
    cfg: StackConfig,
    name: str,
    annotations: dict[str, str] | None = None,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    gpus: int = 0,
    grace: int | None = 5,
    gpu_model: str | None = None,
    labels: dict[str, str] | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": cfg.scheduler_name,
        "containers": [{"name": "main", "image": "ubuntu", "resources": {"requests": requests}}],
    }
    if gpus:
        spec["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": str(gpus)}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if gpu_model:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "gpu.nvidia.com/model", "operator": "In", "values": [gpu_model]}
                            ]
                        }
                    ]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": spec,
    }


@dataclass
class Made:
    """What the running test made on the shared stack, so that a test run beside others (marked
    `parallel`) cleans up its own objects only (issue 51)."""

    pods: set[tuple[str, str]] = field(default_factory=set)  # (namespace, name)
    jobs: set[int] = field(default_factory=set)  # Slurm jobs it submitted itself


made = Made()


def create(core: k8s.CoreV1Api, pod: dict[str, Any]) -> None:
    made.pods.add((pod["metadata"]["namespace"], pod["metadata"]["name"]))
    core.create_namespaced_pod(pod["metadata"]["namespace"], pod)


def get_pod(core: k8s.CoreV1Api, name: str, namespace: str = "default") -> k8s.V1Pod | None:
    try:
        return core.read_namespaced_pod(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def delete_pod(core: k8s.CoreV1Api, name: str, namespace: str = "default", grace: int | None = None) -> None:
    try:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace)
    except ApiException as e:
        if e.status != 404:
            raise


def job_id_of(core: k8s.CoreV1Api, name: str, namespace: str = "default") -> int | None:
    pod = get_pod(core, name, namespace)
    value = ((pod.metadata.annotations or {}) if pod else {}).get(PREFIX + "job-id")
    return int(value) if value else None


def events_for(core: k8s.CoreV1Api, name: str, namespace: str = "default") -> list[k8s.CoreV1Event]:
    return list(core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items)


def scheduled_condition(pod: k8s.V1Pod) -> k8s.V1PodCondition | None:
    return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)


def pod_story(
    core: k8s.CoreV1Api, name: str, namespace: str = "default", cfg: StackConfig | None = None
) -> str:
    """What a person would read in `kubectl describe` about why a Pod is where it is: its
    PodScheduled condition and its Events, for a failure message; with `cfg`, what the scheduler
    logged about it, who asked the API server what of it, and how Slurm accounted its jobs."""
    pod = get_pod(core, name, namespace)
    # A deleted Pod's Events outlive it: they say who deleted it and why.
    events = "; ".join(f"{e.reason}: {e.message}" for e in events_for(core, name, namespace))
    logged = ""
    if cfg:
        jobs = accounting_about(cfg, f"/{namespace}/{name}/")
        calls = " | ".join(audit.requests_on(cfg, "pods", namespace, name)) or "none logged"
        logged = (
            f"; scheduler log: {scheduler_log_about(cfg, f'{namespace}/{name}')}"
            f"; API calls on it: {calls}"
            f"; its jobs in Slurm's accounting: {jobs}"
            f"; slurmctld on them: {slurmctld_log_about(cfg, JOB_ROW.findall(jobs))}"
        )
    if pod is None:
        return f"{namespace}/{name}: gone; events: {events or 'none'}{logged}"
    cond = scheduled_condition(pod)
    said = (
        f"PodScheduled={cond.status} {cond.reason}: {cond.message}" if cond else "no PodScheduled condition"
    )
    where = pod.spec.node_name or "no node"
    return f"{namespace}/{name} on {where}, {said}; events: {events or 'none'}{logged}"


def wait_bound(
    cfg: StackConfig, core: k8s.CoreV1Api, name: str, timeout: float = 30.0, namespace: str = "default"
) -> str:
    """The node the Pod is bound to; past `timeout`, the failure says what the Pod's Events, the
    scheduler's log and Slurm's queue said of it."""
    try:
        return str(
            wait_until(
                "pod bound",
                lambda: (p := get_pod(core, name, namespace)) is not None and p.spec.node_name,
                timeout,
            )
        )
    except AssertionError as e:
        story = pod_story(core, name, namespace, cfg)
        raise AssertionError(f"{e}: {story}; Slurm now: {_slurm_snapshot(cfg).strip()}") from e


def accounting_about(cfg: StackConfig, part_of_name: str) -> str:
    """Slurm's accounting of the last ten minutes' jobs whose name has `part_of_name`: id, state,
    exit code and nodes (a job that ended before its Pod was bound says how it ended)."""
    fields = "JobID,JobName%200,State,ExitCode,NodeList"
    try:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-S", "now-10minutes", "-o", fields],
            env=slurm.slurm_env(cfg),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except subprocess.TimeoutExpired:
        return "sacct did not answer"
    rows = [line.split("|") for line in out.splitlines() if part_of_name in line]
    return " | ".join(f"{r[0]} {' '.join(r[2:])}" for r in rows) or "none"


# A job id at the start of each of accounting_about's rows.
JOB_ROW = re.compile(r"(?:^|[|] )(\d+) ")


def slurmctld_log_about(cfg: StackConfig, job_ids: list[str], last: int = 6) -> str:
    """slurmctld's last log lines naming any of these jobs: why Slurm refused or ended one (a CI
    run's refusals said only "Requested topology configuration is not available")."""
    if not job_ids:
        return "no job"
    alternatives = "|".join(map(re.escape, job_ids))
    wanted = re.compile(rf"JobId=(?:{alternatives})\b")
    try:
        text = (cfg.state_dir / "log" / "slurmctld.log").read_text(errors="replace")
    except OSError as e:
        return f"no log ({e.strerror})"
    lines = [line.strip() for line in text.splitlines() if wanted.search(line) and "Recovered" not in line]
    return " | ".join(lines[-last:]) or "nothing logged"


def scheduler_log_about(cfg: StackConfig, pod: str, last: int = 8) -> str:
    """The scheduler's last log records naming `pod` (namespace/name), each as its time, message
    and the fields that say why, for a failure message."""
    try:
        lines = (cfg.state_dir / "log" / "tandem-scheduler.log").read_text(errors="replace").splitlines()
    except OSError as e:
        return f"unreadable ({e})"
    said = []
    for line in lines:
        if f'{pod}"' not in line:  # its own records and its key's (the runner's)
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        why = ", ".join(
            f"{k}={record[k]}" for k in ("job", "why", "error", "reason", "retry_in_s") if k in record
        )
        said.append(f"{record.get('ts', '?')[11:23]} {record.get('msg', '')}" + (f" ({why})" if why else ""))
    return " | ".join(said[-last:]) or "nothing"


# The data-parser version every Slurm release of the lab serves (24.11: v0.0.40-42, 26.05: 42-45).
REST_VERSION = "v0.0.42"


def rest_job(cfg: StackConfig, job_id: int) -> dict[str, Any]:
    """The job as slurmrestd reports it, read by hand (not through Tandem's client), with its
    `{set, infinite, number}` numbers as plain numbers and one-element lists as their element."""
    headers = {"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": slurm.rest_token(cfg, lifespan=300)}
    r = httpx.get(f"{cfg.slurmrestd_url}/slurm/{REST_VERSION}/job/{job_id}", headers=headers, timeout=10)
    r.raise_for_status()
    job = {k: _plain(v) for k, v in r.json()["jobs"][0].items()}
    # ["CANCELLED", "COMPLETING"]: the base state, and its flags apart.
    states = job.get("job_state")
    states = states if isinstance(states, list) else [states]
    job["job_state"], job["job_flags"] = states[0], states[1:]
    return job


def _plain(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"set", "infinite", "number"}:
        return value["number"] if value["set"] and not value["infinite"] else None
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        return value[0]
    if isinstance(value, list) and not value:
        return None
    return value


def squeue(cfg: StackConfig, *args: str) -> str:
    return subprocess.run(
        ["squeue", "-h", *args], env=slurm.slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout


def squeue_ids(cfg: StackConfig) -> set[int]:
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i"], env=slurm.slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout
    # A het job's components print as `<het job id>+<offset>`: the het job's id stands for all.
    return {int(x.partition("+")[0]) for x in out.split()}


def squeue_names(cfg: StackConfig) -> dict[int, str]:
    """Every job in Slurm's queue by id, with its name (a het job once, by its own id)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j"], env=slurm.slurm_env(cfg), capture_output=True, text=True, check=True
    ).stdout
    return {int(i.partition("+")[0]): n for i, _, n in (line.partition("|") for line in out.splitlines())}


def own_jobs(cfg: StackConfig) -> set[int]:
    """The jobs in Slurm's queue the running test made: those it submitted itself and the
    placeholders of its Pods (named `tandem:<scheduler>/<namespace>/<name>/<uid>`)."""
    ours = {f"/{ns}/{name}/" for ns, name in made.pods}
    return {
        job
        for job, name in squeue_names(cfg).items()
        if job in made.jobs or (name.startswith("tandem:") and any(o in name for o in ours))
    }


def clean_own(cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    """A test run beside others leaves none of its Pods and jobs behind, and touches nobody else's."""
    for ns, name in made.pods:
        delete_pod(core, name, ns, grace=0)
    jobs = own_jobs(cfg)
    if jobs:
        scancel(cfg, *jobs)
    clean_wait(
        cfg, "the test's Pods gone", lambda: all(get_pod(core, n, ns) is None for ns, n in made.pods), 30
    )
    jobs_gone(cfg, "the test's Slurm jobs gone", lambda: own_jobs(cfg))


def clean_all(cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    """No test Pod, no Slurm job, no reservation and no lock left, whoever made them."""
    # A test's tenant Pods are in default; its node agents in the namespace that may share held Nodes.
    namespaces = ("default", config.OPS_NAMESPACE)
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns).items:
            delete_pod(core, pod.metadata.name, ns, grace=0)
    jobs = squeue_ids(cfg)
    if jobs:
        scancel(cfg, *jobs)
    clean_wait(
        cfg, "no test Pods", lambda: not any(core.list_namespaced_pod(ns).items for ns in namespaces), 30
    )
    jobs_gone(cfg, "no Slurm jobs", lambda: squeue_ids(cfg))
    for line in scontrol(cfg, "show", "reservation", "-o").splitlines():
        if line.startswith("ReservationName="):
            scontrol(cfg, "delete", line.split()[0].lower())
    clean_wait(
        cfg,
        "every lock released",
        lambda: all(lock_annotation(core, n) == "false" for n in cfg.slurm_node_names()),
        30,
    )


# A cancelled job's script gets SIGTERM and is gone in about 0.2 s (4 s, half the time, before
# slurmd ran below devstack/reaper.py). Now and then (1 or 2 tests a run, each a job cancelled
# about when its script started) a job stayed COMPLETING for KillWait and 3 s more: its script
# outlived the SIGTERM and ran until Slurm's SIGKILL (issue 51). Past this, the clean-up kills what
# is left of such a script itself, and writes down that it did.
SIGTERM_OUTLIVED_S = 6.0


def jobs_gone(cfg: StackConfig, what: str, left: Callable[[], set[int]]) -> None:
    """Wait for the cancelled jobs `left()` names to leave Slurm's queue, killing the scripts of
    those that outlive their SIGTERM (on this machine: the lab's slurmd all run here)."""
    try:
        wait_until(what, lambda: not left(), SIGTERM_OUTLIVED_S)
        return
    except AssertionError:
        pass
    killed = kill_job_scripts(cfg, left())
    if killed:
        record_slow_clean(cfg, f"{what}: killed the scripts that outlived their SIGTERM: {killed}")
    clean_wait(cfg, what, lambda: not left(), 60 - SIGTERM_OUTLIVED_S)


def kill_job_scripts(cfg: StackConfig, jobs: set[int]) -> dict[int, int]:
    """SIGKILL to the process group of each job's batch script still running here (proctrack/pgid
    makes the script its group's leader): {job: the script's pid}."""
    spool = str(slurm.paths(cfg)["spool"])
    wanted = {f"job{j:05d}/slurm_script": j for j in jobs}
    killed: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile
        script = next((a for a in argv if a.startswith(spool) and a.endswith("/slurm_script")), None)
        job = wanted.get("/".join(script.split("/")[-2:])) if script else None
        if job is None:
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
                killed[job] = pid
        except ProcessLookupError:
            pass
    return killed


# A clean-up wait longer than this is written down with what Slurm showed meanwhile: that is how
# the scripts that outlive their SIGTERM were found (issue 51), and what finds the next surprise.
SLOW_CLEAN_S = 8.0


def clean_wait(cfg: StackConfig, what: str, check: Callable[[], object], timeout: float) -> None:
    """wait_until, and if it takes past SLOW_CLEAN_S, Slurm's jobs and nodes as they were then in
    the lab's slow-clean.log (and on stderr), with the test that was cleaning up."""
    began = time.monotonic()
    try:
        wait_until(what, check, min(SLOW_CLEAN_S, timeout))
        return
    except AssertionError:
        pass
    seen = _slurm_snapshot(cfg)
    wait_until(what, check, timeout - SLOW_CLEAN_S)
    took = time.monotonic() - began
    record_slow_clean(cfg, f"{what!r} took {took:.1f}s; at {SLOW_CLEAN_S:.0f}s:\n{seen}")


def record_slow_clean(cfg: StackConfig, what: str) -> None:
    """In the lab's slow-clean.log and on stderr, with the test that was cleaning up."""
    line = f"[slow clean] {os.environ.get('PYTEST_CURRENT_TEST', '?')}: {what}"
    with (cfg.log_dir / "slow-clean.log").open("a") as log:
        log.write(line + "\n")
    print(line, file=sys.__stderr__, flush=True)


def _slurm_snapshot(cfg: StackConfig) -> str:
    env = slurm.slurm_env(cfg)
    commands = (
        ["squeue", "-h", "-o", "%i %j %T %r %N %M"],
        ["sinfo", "-h", "-N", "-o", "%N %T %E"],
    )
    return "".join(
        subprocess.run(c, env=env, capture_output=True, text=True, timeout=10, check=False).stdout
        for c in commands
    )


def scontrol(cfg: StackConfig, *args: str, check: bool = True) -> str:
    return subprocess.run(
        ["scontrol", *args], env=slurm.slurm_env(cfg), capture_output=True, text=True, check=check
    ).stdout


def resume_if_drained(cfg: StackConfig, node: str) -> None:
    """A test's clean-up: bring a node it drained back, unless something did already."""
    if "drain" in node_state(cfg, node)[0]:
        # Resumed meanwhile (Tandem does, once the cause is gone): Slurm refuses, which is fine.
        scontrol(cfg, "update", f"nodename={node}", "state=resume", check=False)


def node_state(cfg: StackConfig, node: str) -> tuple[str, str]:
    """(sinfo state, reason) of one Slurm node."""
    out = subprocess.run(
        ["sinfo", "-h", "-n", node, "-o", "%T|%E"],
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[0]
    state, reason = out.split("|", 1)
    return state, reason


def lock_annotation(core: k8s.CoreV1Api, slurm_node: str) -> str:
    pod = core.read_namespaced_pod(slurm_node, config.SLURM_NAMESPACE)
    return str((pod.metadata.annotations or {}).get(PREFIX + "lock", "false"))


def node_has_lock_taint(core: k8s.CoreV1Api, kube_node: str) -> bool:
    node = core.read_node(kube_node)
    return any(t.key == PREFIX + "lock" for t in node.spec.taints or [])


def kube_node_of(slurm_node: str) -> str:
    return config.kube_node_name(int(slurm_node.split("-")[1]))


def sbatch(cfg: StackConfig, *args: str, script: str = "#!/bin/sh\nsleep 300\n") -> int:
    out = subprocess.run(
        ["sbatch", "--parsable", "--output=/dev/null", *args],
        input=script,
        env=slurm.slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    job_id = int(out.strip().split(";")[0])
    made.jobs.add(job_id)
    return job_id


@contextmanager
def reservation(cfg: StackConfig, nodes: str, users: str = "root,tandem-pods") -> Iterator[str]:
    """A Slurm reservation on `nodes` for the test's duration; yields its name."""
    name = unique("resv")
    scontrol(
        cfg,
        "create",
        "reservation",
        f"reservationname={name}",
        "starttime=now",
        "duration=60",
        f"users={users}",
        f"nodes={nodes}",
    )
    try:
        yield name
    finally:
        scontrol(cfg, "delete", f"reservationname={name}")


def scancel(cfg: StackConfig, *job_ids: int) -> None:
    subprocess.run(["scancel", *map(str, job_ids)], env=slurm.slurm_env(cfg), capture_output=True)


def free_port() -> int:
    """A port nothing listens on now, for a process that must be told its address up front."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Flags a second copy of a stack service must set itself (its name, addresses and identity).
_OWN_FLAGS = (
    "--scheduler-name",
    "--grpc-bind-address",
    "--health-probe-bind-address",
    "--kubeconfig",
    "--policy-configmap",
)


@contextmanager
def service_process(cfg: StackConfig, argv: list[str], log_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A service of another release, run for one test: its output in `log_path`, stopped after."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "SLURM_CONF": str(cfg.slurm_conf)}
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)


def service_argv(
    cfg: StackConfig, service: str, release: identities.Release, kubeconfig: Path, *own: str
) -> list[str]:
    """The stack's command line for a service, run as another release's ServiceAccount (and, for
    the scheduler, reading that release's policy ConfigMap, the one its Role names)."""
    argv = [a for a in services.argv(cfg, service) if not a.startswith(_OWN_FLAGS)]
    if service == "tandem-scheduler":
        argv.append(f"--policy-configmap={release.policy_configmap}")
    return [*argv, f"--kubeconfig={kubeconfig}", *own]


# A second install whose scheduler watches namespace team-a only (scope.type=namespace).
TEAM_A_SCHEDULER = "team-a-tandem"
TEAM_A = identities.Release(
    "team-a",
    values=(
        "scheduler.scope.type=namespace",
        "scheduler.scope.namespaces=team-a",
        f"scheduler.name={TEAM_A_SCHEDULER}",
    ),
)


@functools.cache
def delete_custom_objects(custom: k8s.CustomObjectsApi, kind: tuple[str, str, str], namespace: str) -> None:
    """Every object of `kind` (group, version, plural) in `namespace`; none when the apiserver does
    not serve the kind (LWS's CRDs come with its controller, which a fresh machine's session starts
    only for the tests that use it)."""
    group, version, plural = kind
    try:
        items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
    except ApiException as e:
        if e.status == 404:
            return
        raise
    for item in items:
        try:
            custom.delete_namespaced_custom_object(
                group, version, namespace, plural, item["metadata"]["name"]
            )
        except ApiException as e:
            if e.status != 404:
                raise


def podgroups() -> tuple[str, str, str]:
    """(group, version, plural) of the PodGroups the running stack's apiserver serves: v1beta1 on
    Kubernetes 1.37, v1alpha2 on 1.36 (CI's second leg)."""
    group, version = devkube.podgroup_api(StackConfig.from_env())
    return group, version, "podgroups"


def indexed_job_gang(size: int) -> dict[str, Any]:
    """What makes an Indexed Job's PodGroup a gang: on Kubernetes 1.37 the Job says so
    (`spec.scheduling`, basic when absent); 1.36's Job controller made every Indexed Job with
    parallelism = completions > 1 a gang by itself, and has no such field."""
    if podgroups()[1] == "v1alpha2":
        return {}
    return {"scheduling": {"schedulingPolicy": {"gang": {"minCount": size}}}}
