"""Issue 4: restarting a service mid-flow converges (no orphaned or duplicate job, no orphaned Pod,
no lock left behind); the scheduler touches only the Pods it owns."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from devstack import config, identities, services, stack
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from devstack.kube import delete_delay
from devstack.procs import Daemon
from devstack.slurm import slurm_env
from tandem import jobtoken, placeholder
from tandem.scripts import placeholder_batch_script
from tandem.slurm.models import JobSpec
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean")]


def _kill(cfg: StackConfig, name: str) -> None:
    daemon = Daemon(name, cfg.run_dir, cfg.log_dir)
    pid = daemon.pid()
    assert pid is not None and daemon.alive()
    os.kill(pid, signal.SIGKILL)
    h.wait_until(f"{name} dead", lambda: not daemon.alive(), 10)


def _restart(cfg: StackConfig) -> None:
    stack.up_as_built(cfg)  # the same code as `make up`: starts what died


def _running(core: k8s.CoreV1Api, name: str, namespace: str = "default") -> bool:
    pod = h.get_pod(core, name, namespace)
    return bool(pod is not None and pod.spec.node_name and pod.status.phase == "Running")


def _jobs_named(cfg: StackConfig, pod: k8s.V1Pod) -> list[int]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i %j"],
        env=slurm_env(cfg),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wanted = f"tandem:{cfg.scheduler_name}/{pod.metadata.namespace}/{pod.metadata.name}/{pod.metadata.uid}"
    return [int(line.split()[0]) for line in out.splitlines() if line.split()[1:] == [wanted]]


def _running_with_one_job(cfg: StackConfig, core: k8s.CoreV1Api, name: str, timeout: float) -> int | None:
    """Wait until the Pod runs; the job id recorded on it is the only job named after it."""
    h.wait_until("pod running", lambda: _running(core, name), timeout)
    pod = h.get_pod(core, name)
    assert pod is not None
    job_id = h.job_id_of(core, name)
    assert _jobs_named(cfg, pod) == [job_id]
    return job_id


def test_a_scheduler_killed_while_a_pod_waits_binds_it_later_with_one_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    node = "cpu-001"
    blocker = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={node}")
    name = h.unique("waits")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "required-nodes": node}))
    h.wait_until("job submitted", lambda: h.job_id_of(core, name), 20)
    _kill(stack_cfg, "tandem-scheduler")
    h.scancel(stack_cfg, blocker)
    time.sleep(1)
    _restart(stack_cfg)
    _running_with_one_job(stack_cfg, core, name, 30)


def test_a_job_submitted_before_a_crash_is_adopted_not_duplicated(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """The crash window between submitting and recording the job id on the Pod."""
    Daemon("tandem-scheduler", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    name = h.unique("adopted")
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until("pod created", lambda: h.get_pod(core, name), 10)
    orphan = _submit_placeholder_by_hand(stack_cfg, pod, services.hooks_env_file(stack_cfg))
    _restart(stack_cfg)
    assert _running_with_one_job(stack_cfg, core, name, 30) == orphan


def _submit_placeholder_by_hand(
    cfg: StackConfig, pod: k8s.V1Pod, hooks_env: Path, kill_wait: int = config.KILL_WAIT_SECONDS
) -> int:
    """The job the scheduler would have submitted for the Pod (its AdminComment and its own
    credential included), with the script's hook calls going to the gateway `hooks_env` names.
    `kill_wait` is how long its script, once cancelled, waits for its Pod to go (less 3 s)."""
    slurm = devstack_slurm.admin_client(cfg)
    name = f"tandem:{cfg.scheduler_name}/{pod.metadata.namespace}/{pod.metadata.name}/{pod.metadata.uid}"
    key = services.job_key_file(cfg).read_text().strip().encode()
    binding = jobtoken.new_binding()  # as the scheduler binds each job's token to that job
    env = {
        "PATH": "/usr/bin:/bin",
        "TANDEM_HOOKS_ENV": str(hooks_env),
        "TANDEM_KILL_WAIT": str(kill_wait),
        "TANDEM_POD_NAMESPACE": pod.metadata.namespace,
        "TANDEM_POD_NAME": pod.metadata.name,
        "TANDEM_POD_UID": pod.metadata.uid,
        "TANDEM_JOB_EXTRA": "",
        "TANDEM_PLACEHOLDER": name,
        "TANDEM_JOB_TOKEN": jobtoken.token(key, name, binding),
    }
    try:
        return slurm.submit_job(
            JobSpec(
                name=name,
                admin_comment=placeholder.admin_comment(name, binding),
                script=placeholder_batch_script(),
                environment=env,
                cpus=1,
                memory_mb=1024,
                output=f"{services.placeholder_log_dir(cfg)}/%j.out",
            )
        )
    finally:
        slurm.close()


def test_a_script_whose_started_call_was_lost_is_bound_after_a_restart_from_its_extra_marker(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """No push: the script's `started` call cannot reach a gateway while the scheduler is down;
    only the `: started` the script appended to the job's Extra field, seen by the syncer's poll,
    tells the restarted scheduler that the Pod may be bound."""
    Daemon("tandem-scheduler", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    name = h.unique("no-push")
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until("pod created", lambda: h.get_pod(core, name), 10)
    # The prolog still locks through the real gateway (slurm.conf's Prolog has its own settings).
    dead_gateway = stack_cfg.slurm_dir / "hooks-unreachable.env"
    dead_gateway.write_text(
        f"TANDEM_HOOKS_URL='http://127.0.0.1:{h.free_port()}'\n"
        f"TANDEM_HOOKS_TOKEN_DIR='{services.hooks_token_dir(stack_cfg)}'\n"
    )
    dead_gateway.chmod(0o644)
    # Its script, cancelled at the end, asks the dead gateway for 5 s, not KillWait's 27 (the clean-up
    # below waits that out and resumes the node should the script then drain it).
    job = _submit_placeholder_by_hand(stack_cfg, pod, dead_gateway, kill_wait=8)
    try:
        h.wait_until(
            "the script's marker in Extra", lambda: h.rest_job(stack_cfg, job)["extra"] == ": started", 40
        )
        log = (services.placeholder_log_dir(stack_cfg) / f"{job}.out").read_text()
        assert "started call failed" in log  # the push really was lost
        _restart(stack_cfg)
        assert _running_with_one_job(stack_cfg, core, name, 30) == job
    finally:
        node = str(h.rest_job(stack_cfg, job)["nodes"])
        h.delete_pod(core, name, grace=0)
        h.scancel(stack_cfg, job)
        h.wait_until("its job ended", lambda: job not in h.squeue_ids(stack_cfg), 40, every=0.5)
        if node:
            h.resume_if_drained(stack_cfg, node)


def test_a_pod_created_while_slurmrestd_is_down_says_so_and_runs_once_it_is_back(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    Daemon("slurmrestd", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    name = h.unique("no-slurm")
    try:
        h.create(core, h.tandem_pod(stack_cfg, name))

        def unavailable() -> k8s.V1PodCondition | None:
            pod = h.get_pod(core, name)
            cond = h.scheduled_condition(pod) if pod is not None else None
            return cond if cond is not None and cond.reason == "SlurmUnavailable" else None

        cond = h.wait_until("PodScheduled=False SlurmUnavailable", unavailable, 20)
        assert "unreachable" in cond.message and "retrying" in cond.message
        time.sleep(5)  # two retries or more: still one Event, no job id
        warnings = [e for e in h.events_for(core, name) if e.reason == "SlurmUnavailable"]
        assert len(warnings) == 1 and warnings[0].type == "Warning"
        assert h.job_id_of(core, name) is None
    finally:
        _restart(stack_cfg)
    _running_with_one_job(stack_cfg, core, name, 60)


def test_an_apiserver_outage_during_a_prolog_delays_the_job_and_loses_nothing(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    node = "cpu-003"
    Daemon("kube-apiserver", stack_cfg.run_dir, stack_cfg.log_dir).stop()
    try:
        job = h.sbatch(stack_cfg, f"--nodelist={node}", script="#!/bin/sh\nsleep 30\n")
        # RUNNING with reason Prolog: the prolog's lock call is answered 503 and retried.
        h.wait_until("prolog running", lambda: h.rest_job(stack_cfg, job)["job_state"] == "RUNNING", 20)
        time.sleep(3)
        assert h.rest_job(stack_cfg, job)["state_reason"] == "Prolog"  # still waiting for its lock
    finally:
        _restart(stack_cfg)
    h.wait_until("node locked for the job", lambda: h.lock_annotation(core, node) == "locked", 60)
    h.wait_until("job running", lambda: h.rest_job(stack_cfg, job)["job_state"] == "RUNNING", 30)
    state, reason = h.node_state(stack_cfg, node)
    assert "drain" not in state, reason
    # The scheduler's watches came back too: a new Pod is scheduled.
    name = h.unique("after-outage")
    h.create(core, h.tandem_pod(stack_cfg, name))
    h.wait_until("pod running", lambda: _running(core, name), 60)


def test_a_syncer_restart_during_a_prolog_does_not_fail_the_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    node = "cpu-003"
    _kill(stack_cfg, "tandem-syncer")
    job = h.sbatch(stack_cfg, f"--nodelist={node}", script="#!/bin/sh\nsleep 5\n")
    time.sleep(2)  # the prolog is retrying against the gateway while the syncer is gone
    _restart(stack_cfg)
    # RUNNING with reason Prolog while the prolog waits; the lock is the proof it got through.
    h.wait_until("node locked for the job", lambda: h.lock_annotation(core, node) == "locked", 30)
    assert h.rest_job(stack_cfg, job)["job_state"] == "RUNNING"
    state, _ = h.node_state(stack_cfg, node)
    assert "drain" not in state


def test_a_gateway_restart_during_terminating_still_waits_for_the_pod(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    node = "cpu-005"
    name = h.unique("restart-term")
    pod = h.tandem_pod(stack_cfg, name, {h.PREFIX + "required-nodes": node})
    pod["metadata"]["annotations"].update(delete_delay(3))
    h.create(core, pod)
    h.wait_until("pod running", lambda: _running(core, name), 30)
    job = h.job_id_of(core, name) or 0
    _kill(stack_cfg, "tandem-hooks")
    h.scancel(stack_cfg, job)
    time.sleep(1)
    _restart(stack_cfg)
    h.wait_until("pod gone", lambda: h.get_pod(core, name) is None, 30)
    h.wait_until(
        "job ended", lambda: h.rest_job(stack_cfg, job)["job_state"] not in ("RUNNING", "COMPLETING"), 30
    )
    state, _ = h.node_state(stack_cfg, node)
    assert "drain" not in state


def test_a_lock_whose_epilog_never_ran_is_released(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    node = "cpu-007"
    env_file = services.hooks_env_file(stack_cfg)
    original = env_file.read_text()
    marker = stack_cfg.state_dir / f"epilog-test-{h.unique('m')}"
    job = h.sbatch(stack_cfg, f"--nodelist={node}", script=f"#!/bin/sh\ntouch {marker}\nsleep 3\n")
    try:
        # The script runs only after the prolog locked the node: break the hooks for the epilog.
        h.wait_until("job script started", marker.exists, 30)
        assert h.lock_annotation(core, node) == "locked"
        env_file.write_text(
            original.replace("TANDEM_HOOKS_TOKEN_DIR", "IGNORED") + "TANDEM_HOOKS_TOKEN=wrong\n"
        )
        h.wait_until("job done", lambda: h.rest_job(stack_cfg, job)["job_state"] == "COMPLETED", 20)
    finally:
        env_file.write_text(original)
        marker.unlink(missing_ok=True)
    h.wait_until("lock released by the syncer", lambda: h.lock_annotation(core, node) == "false", 30)
    assert not h.node_has_lock_taint(core, h.kube_node_of(node))
    state, _ = h.node_state(stack_cfg, node)
    assert "drain" not in state


def test_pods_for_another_scheduler_are_never_touched(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("not-ours")
    pod = h.tandem_pod(stack_cfg, name)
    pod["spec"]["schedulerName"] = "some-other-scheduler"
    before = h.squeue_ids(stack_cfg)
    h.create(core, pod)
    time.sleep(3)
    seen = h.get_pod(core, name)
    assert seen is not None and not seen.spec.node_name
    assert h.job_id_of(core, name) is None
    assert not h.events_for(core, name)
    assert h.squeue_ids(stack_cfg) == before


@pytest.fixture
def team_scheduler(stack_cfg: StackConfig, core: k8s.CoreV1Api, tmp_path: Path) -> Iterator[str]:
    """A second scheduler, scoped to namespace team-a (scope.type=namespace)."""
    for ns in ("team-a", "team-b"):
        try:
            core.create_namespace({"metadata": {"name": ns}})
        except h.ApiException as e:
            if e.status != 409:
                raise
    name = h.TEAM_A_SCHEDULER
    # Installed as the chart would: its own ServiceAccount, with Roles in team-a only.
    identities.ensure_release_rbac(stack_cfg, h.TEAM_A)
    kubeconfig = identities.write_kubeconfig(stack_cfg, h.TEAM_A, "scheduler", tmp_path / "kubeconfig")
    argv = h.service_argv(
        stack_cfg,
        "tandem-scheduler",
        h.TEAM_A,
        kubeconfig,
        f"--scheduler-name={name}",
        "--watch-namespace=team-a",
        "--grpc-bind-address=127.0.0.1:0",
        "--health-probe-bind-address=127.0.0.1:0",
    )
    with h.service_process(stack_cfg, argv, tmp_path / "team-scheduler.log"):
        yield name
    for ns in ("team-a", "team-b"):
        for p in core.list_namespaced_pod(ns).items:
            h.delete_pod(core, p.metadata.name, ns, grace=0)


def test_a_namespace_scoped_scheduler_schedules_only_its_namespaces(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team_scheduler: str
) -> None:
    inside, outside = h.unique("inside"), h.unique("outside")
    for name, ns in ((inside, "team-a"), (outside, "team-b")):
        pod = h.tandem_pod(stack_cfg, name, namespace=ns)
        pod["spec"]["schedulerName"] = team_scheduler
        h.create(core, pod)
    h.wait_until("the team-a pod running", lambda: _running(core, inside, "team-a"), 30)
    time.sleep(2)
    other = h.get_pod(core, outside, "team-b")
    assert other is not None and not other.spec.node_name
    assert h.job_id_of(core, outside, "team-b") is None
