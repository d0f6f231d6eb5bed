"""Issue 3: a Pod goes Pending -> placeholder Slurm job -> prolog lock -> script started -> bound."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from devstack import audit, config, identities
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.chart, pytest.mark.slurm, pytest.mark.usefixtures("clean")]


def _bound(core: k8s.CoreV1Api, name: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name)
    return pod if pod is not None and pod.spec.node_name and pod.status.phase == "Running" else None


@pytest.mark.parallel
def test_a_pod_runs_on_the_node_slurm_picked(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("basic")
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until("pod running", lambda: _bound(core, name), 30)
    job_id = h.job_id_of(core, name)
    assert job_id is not None
    job = h.rest_job(stack_cfg, job_id)
    assert job["job_state"] == "RUNNING"
    assert job["name"] == f"tandem:{stack_cfg.scheduler_name}/default/{name}/{pod.metadata.uid}"
    assert pod.spec.node_name == h.kube_node_of(job["nodes"])
    assert job["extra"].endswith(": started")
    assert any(t.key == h.PREFIX + "lock" and t.effect == "NoExecute" for t in pod.spec.tolerations)
    scheduled = [e for e in h.events_for(core, name) if e.reason == "Scheduled"]
    assert len(scheduled) == 1
    assert f"Slurm job {job_id} on {job['nodes']}" in scheduled[0].message
    assert h.lock_annotation(core, job["nodes"]) == "locked_strict"
    assert h.node_has_lock_taint(core, pod.spec.node_name)


def test_a_pod_alone_is_written_by_the_scheduler_once_its_binding(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    """Created with the lock toleration (the chart's admission policy gives it), a Pod alone gets
    one request from the scheduler: its binding, which records its job id too (issue 55). Alone on
    the lab (not beside others): a job that pends 2 s gets its condition and job id written."""
    name = h.unique("one-write")
    h.create(core, h.tandem_pod(stack_cfg, name))
    pod = h.wait_until("pod running", lambda: _bound(core, name), 30)
    assert any(t.key == h.PREFIX + "lock" and t.effect == "NoExecute" for t in pod.spec.tolerations)
    assert h.job_id_of(core, name) is not None
    release = identities.MAIN
    scheduler = f"system:serviceaccount:{release.namespace}:{release.service_account('scheduler')}"

    def by_the_scheduler() -> list[str]:
        return [c.split()[2] for c in audit.requests_on(stack_cfg, "pods", "default", name) if scheduler in c]

    assert h.wait_until("the binding in the audit log", by_the_scheduler, 10) == ["create/binding"]


def test_every_annotation_lands_on_the_job(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("annotated")
    with h.reservation(stack_cfg, "cpu-001,cpu-003") as resv:
        try:
            annotations = {
                h.PREFIX + "account": "k8s",
                h.PREFIX + "comment": "A Kubernetes job",
                h.PREFIX + "constraints": "cpu",
                h.PREFIX + "exclusive": "user",
                h.PREFIX + "excluded-nodes": "cpu-003",
                h.PREFIX + "required-nodes": "cpu-001",
                h.PREFIX + "partition": "high",
                h.PREFIX + "priority": "4242",
                h.PREFIX + "qos": "normal",
                h.PREFIX + "reservation": resv,
                h.PREFIX + "user-id": "1001",
                h.PREFIX + "current-working-dir": "/var/tmp",
                h.PREFIX + "timeout": "17",
            }
            h.create(core, h.tandem_pod(stack_cfg, name, annotations))
            h.wait_until("pod running", lambda: _bound(core, name), 30)
            job = h.rest_job(stack_cfg, h.job_id_of(core, name) or 0)
            assert job["account"] == "k8s"
            assert job["comment"] == "A Kubernetes job"
            assert job["extra"].endswith(": started")
            assert job["qos"] == "normal"
            assert job["features"] == "cpu"
            assert job["shared"] == "user"
            assert job["excluded_nodes"] == "cpu-003"
            assert job["required_nodes"] == "cpu-001"
            assert job["nodes"] == "cpu-001"
            assert job["partition"] == "high"
            assert job["priority"] == 4242
            assert job["resv_name"] == resv
            assert job["user_id"] == 1001
            assert job["group_id"] == 1001  # group-id defaults to the user id
            assert job["current_working_directory"] == "/var/tmp"
            assert job["time_limit"] == 17
        finally:
            h.delete_pod(core, name, grace=0)
            h.wait_until("pod gone", lambda: h.get_pod(core, name) is None, 30)
            h.wait_until("its job gone", lambda: not h.squeue_ids(stack_cfg), 30)


@pytest.mark.parallel
def test_prefer_steers_the_job_to_preferred_nodes(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("prefer")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "prefer": "gpu"}))
    h.wait_until("pod running", lambda: _bound(core, name), 30)
    job = h.rest_job(stack_cfg, h.job_id_of(core, name) or 0)
    assert "gpu" in (job["prefer"], job["features"])
    assert job["nodes"].startswith("gpu-")


@pytest.mark.parallel
def test_a_pod_slurm_cannot_place_gets_an_event_and_no_retry(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    name = h.unique("no-partition")
    # Every Node would take it; Slurm has no such partition and refuses the job at submit.
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "partition": "no-such-partition"}))
    events = h.wait_until(
        "FailedScheduling",
        lambda: [e for e in h.events_for(core, name) if e.reason == "FailedScheduling"],
        15,
    )
    assert "Slurm refused the placeholder job" in events[0].message
    assert "Invalid partition name specified" in events[0].message
    time.sleep(3)  # a retry would come after a backoff: by now
    assert len([e for e in h.events_for(core, name) if e.reason == "FailedScheduling"]) == 1
    assert not h.own_jobs(stack_cfg)
    pod = h.get_pod(core, name)
    assert pod is not None and not pod.spec.node_name


@pytest.mark.parallel
def test_group_id_makes_the_job_run_with_that_group(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    name = h.unique("group")
    h.create(
        core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "user-id": "1001", h.PREFIX + "group-id": "1002"})
    )
    h.wait_until("pod running", lambda: _bound(core, name), 30)
    job = h.rest_job(stack_cfg, h.job_id_of(core, name) or 0)
    assert (job["user_id"], job["group_id"]) == (1001, 1002)


# On the chart's install (CI's third leg) one case shows the refusal's Event and status writes under
# the chart's RBAC; the others check the scheduler's validation, the same code on every install.
FIRST_LEG = pytest.mark.first_leg
INVALID = [
    ("priority-not-int", {h.PREFIX + "priority": "1.5"}, {}, "sunk.coreweave.com/priority"),
    ("timeout-not-int", {h.PREFIX + "timeout": "ten"}, {}, "sunk.coreweave.com/timeout"),
    ("user-id-negative", {h.PREFIX + "user-id": "-1"}, {}, "sunk.coreweave.com/user-id"),
    ("group-id-not-int", {h.PREFIX + "group-id": "wheel"}, {}, "sunk.coreweave.com/group-id"),
    ("exclusive-unknown", {h.PREFIX + "exclusive": "sometimes"}, {}, "sunk.coreweave.com/exclusive"),
    (
        "nodes-malformed",
        {h.PREFIX + "required-nodes": "gpu-000,,gpu 002"},
        {},
        "sunk.coreweave.com/required-nodes",
    ),
    ("no-cpu", {}, {"cpu": None}, "cpu"),
    ("no-memory", {}, {"memory": None}, "memory"),
    ("zero-cpu", {}, {"cpu": "0"}, "cpu"),
    ("grace-too-long", {}, {"grace": 25}, "terminationGracePeriodSeconds"),
    ("grace-default", {}, {"grace": None}, "terminationGracePeriodSeconds"),
]


@pytest.mark.parametrize(
    ("case", "annotations", "overrides", "field"),
    [pytest.param(*c, id=c[0], marks=[FIRST_LEG] if i else []) for i, c in enumerate(INVALID)],
)
@pytest.mark.parallel
def test_an_invalid_pod_gets_one_event_and_no_job(
    stack_cfg: StackConfig,
    core: k8s.CoreV1Api,
    case: str,
    annotations: dict[str, str],
    overrides: dict[str, object],
    field: str,
) -> None:
    name = h.unique(case)
    h.create(core, h.tandem_pod(stack_cfg, name, annotations, **overrides))  # type: ignore[arg-type]
    pod = h.wait_until(
        "PodScheduled=False", lambda: (p := h.get_pod(core, name)) and h.scheduled_condition(p) and p, 15
    )
    cond = h.scheduled_condition(pod)
    assert cond is not None and cond.status == "False" and cond.reason == "ValidationFailed"
    assert field in cond.message
    events = h.wait_until(
        "the Warning event",
        lambda: [e for e in h.events_for(core, name) if e.reason == "FailedValidation"],
        10,
    )
    # A storm would show by the time a Pod made after the change is judged: label changes and
    # resyncs must not repeat the refusal.
    core.patch_namespaced_pod(name, "default", {"metadata": {"labels": {"touched": "yes"}}})
    h.refused_probe(stack_cfg, core)
    events = [e for e in h.events_for(core, name) if e.reason == "FailedValidation"]
    assert len(events) == 1 and (events[0].count or 1) == 1
    assert events[0].type == "Warning" and field in events[0].message
    assert h.job_id_of(core, name) is None
    assert not h.own_jobs(stack_cfg)


@pytest.mark.parallel
def test_an_unknown_annotation_is_warned_about_but_the_pod_runs(
    stack_cfg: StackConfig, core: k8s.CoreV1Api
) -> None:
    name = h.unique("typo")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "paritition": "high"}))
    h.wait_until("pod running", lambda: _bound(core, name), 30)
    warnings = [e for e in h.events_for(core, name) if e.type == "Warning"]
    assert any("sunk.coreweave.com/paritition" in e.message for e in warnings)


@pytest.mark.parallel
def test_the_reference_example_pods_run(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    full = h.unique("full-node")
    single = h.unique("single-gpu")
    h.create(
        core,
        h.tandem_pod(
            stack_cfg,
            full,
            {
                h.PREFIX + "account": "root",
                h.PREFIX + "comment": "A Kubernetes job",
                h.PREFIX + "exclusive": "none",
            },
            cpu="30",
            memory="200Gi",
            gpus=8,
            gpu_model=config.GPU_MODEL,
        ),
    )
    h.create(
        core,
        h.tandem_pod(
            stack_cfg,
            single,
            {
                h.PREFIX + "account": "root",
                h.PREFIX + "comment": "A single GPU Pod",
                h.PREFIX + "exclusive": "user",
                h.PREFIX + "user-id": "1001",
            },
            cpu="8",
            memory="128Gi",
            gpus=1,
            gpu_model=config.GPU_MODEL,
        ),
    )
    full_pod = h.wait_until("full-node pod running", lambda: _bound(core, full), 30)
    single_pod = h.wait_until("single-GPU pod running", lambda: _bound(core, single), 30)
    full_job = h.rest_job(stack_cfg, h.job_id_of(core, full) or 0)
    single_job = h.rest_job(stack_cfg, h.job_id_of(core, single) or 0)
    assert full_job["shared"] == "none" or full_job["shared"] is None  # whole node
    assert "gpu:h100:8" in full_job["tres_per_node"]
    assert "gpu:h100:1" in single_job["tres_per_node"]
    assert full_job["nodes"].startswith("gpu-") and single_job["nodes"].startswith("gpu-")
    assert full_job["nodes"] != single_job["nodes"]
    assert full_pod.spec.node_name != single_pod.spec.node_name
    assert single_job["user_id"] == 1001


def test_slurms_pending_reason_shows_on_the_pod(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    first, second = h.unique("holder"), h.unique("waiter")
    pin = {h.PREFIX + "required-nodes": "cpu-001", h.PREFIX + "exclusive": "none"}
    h.create(core, h.tandem_pod(stack_cfg, first, pin))
    h.wait_until("first pod running", lambda: _bound(core, first), 30)
    h.create(core, h.tandem_pod(stack_cfg, second, pin))

    def pending_message() -> str | None:
        pod = h.get_pod(core, second)
        cond = h.scheduled_condition(pod) if pod else None
        return cond.message if cond is not None and cond.reason == "SlurmJobPending" else None

    message = h.wait_until("pending reason on the Pod", pending_message, 15)
    job_id = h.job_id_of(core, second)
    assert f"Slurm job {job_id}" in message
    assert any(reason in message for reason in ("Resources", "Priority", "ReqNodeNotAvail"))
    h.delete_pod(core, first)
    h.wait_until("second pod running once the node is free", lambda: _bound(core, second), 30)
