"""Issue 18, bounded input: one Pod cannot take the scheduler down. A hostlist naming 100 M nodes
used to be expanded in full (a MemoryError under the chart's 1 GiB limit, on every replica in
turn); now it is refused like any invalid Pod, and the scheduler goes on binding the next one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from devstack import kube, services
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.parallel]

HUGE = "gpu-[0-99999999]"


@pytest.fixture
def namespace(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    """A namespace of the test's own: other tests sweep `default` while this one runs."""
    name = h.unique("bounded")
    core.create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(core, name)
    yield name
    for pod in core.list_namespaced_pod(name).items:
        h.delete_pod(core, pod.metadata.name, name, grace=0)
    h.wait_until("the test's Pods gone", lambda: not core.list_namespaced_pod(name).items, 30)
    h.wait_until("their jobs gone", lambda: not _jobs_in(stack_cfg, name), 60)
    core.delete_namespace(name)


def _jobs_in(cfg: StackConfig, namespace: str, pod: str = "") -> list[str]:
    """Slurm jobs for the namespace's Pods (a placeholder is named tandem:<scheduler>/<ns>/<pod>/<uid>)."""
    return [line for line in h.squeue(cfg, "-o", "%i %j").splitlines() if f"/{namespace}/{pod}" in line]


def _schedulers(cfg: StackConfig) -> dict[str, int | None]:
    """Each scheduler replica's PID: the same PIDs after the test mean none of them died."""
    return {
        name: daemon.pid()
        for name, daemon in services.daemons(cfg).items()
        if name.startswith("tandem-scheduler")
    }


def _rss_mib(pid: int | None) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _refused(core: k8s.CoreV1Api, name: str, namespace: str) -> k8s.V1PodCondition | None:
    pod = h.get_pod(core, name, namespace)
    cond = h.scheduled_condition(pod) if pod is not None else None
    return cond if cond is not None and cond.status == "False" else None


def _bound(core: k8s.CoreV1Api, name: str, namespace: str) -> k8s.V1Pod | None:
    pod = h.get_pod(core, name, namespace)
    return pod if pod is not None and pod.spec.node_name and pod.status.phase == "Running" else None


def _next_pod_is_bound(cfg: StackConfig, core: k8s.CoreV1Api, namespace: str) -> None:
    """The scheduler keeps serving: a plain Pod is placed through Slurm and bound. Other tests on
    the lab cancel every Slurm job when they finish, which can take this Pod's job before it runs
    (the scheduler then deletes the Pod): a few tries tell that apart from a scheduler that died."""
    for _ in range(3):
        name = h.unique("after")
        # Its user is named: whatever tenant policy other tests leave, 1001 is not refused.
        h.create(core, h.tandem_pod(cfg, name, {h.PREFIX + "user-id": "1001"}, namespace=namespace))
        if _bound_unless_deleted(core, name, namespace):
            return
    raise AssertionError("no Pod was bound after the refused one")


def _bound_unless_deleted(core: k8s.CoreV1Api, name: str, namespace: str) -> bool:
    def settled() -> str:
        if h.get_pod(core, name, namespace) is None:
            return "deleted"
        return "bound" if _bound(core, name, namespace) else ""

    try:
        return h.wait_until("the next Pod bound", settled, 60) == "bound"
    except AssertionError:
        return False


def _assert_refused_and_still_serving(
    cfg: StackConfig, core: k8s.CoreV1Api, namespace: str, annotations: dict[str, str], says: str
) -> None:
    name = h.unique("bounded")
    before = _schedulers(cfg)
    assert before and all(before.values()), before
    rss_before = {n: _rss_mib(pid) for n, pid in before.items()}

    h.create(core, h.tandem_pod(cfg, name, annotations, namespace=namespace))
    cond = h.wait_until("PodScheduled=False", lambda: _refused(core, name, namespace), 20)
    assert cond.reason == "ValidationFailed"
    assert says in cond.message
    events = h.wait_until(
        "the FailedValidation event",
        lambda: [e for e in h.events_for(core, name, namespace) if e.reason == "FailedValidation"],
        10,
    )
    assert events[0].type == "Warning" and says in events[0].message
    assert h.job_id_of(core, name, namespace) is None
    assert _jobs_in(cfg, namespace, name) == []

    _next_pod_is_bound(cfg, core, namespace)
    time.sleep(1)  # a resync of the refused Pod would come by now
    assert _schedulers(cfg) == before, "a scheduler replica restarted"
    for replica, pid in before.items():
        grown = _rss_mib(pid) - rss_before[replica]
        assert grown < 100, f"{replica} grew {grown:.0f} MiB"


def test_a_hostlist_naming_a_hundred_million_nodes_is_refused_and_the_scheduler_keeps_serving(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, namespace: str
) -> None:
    _assert_refused_and_still_serving(
        stack_cfg,
        core,
        namespace,
        {h.PREFIX + "excluded-nodes": HUGE},
        "metadata.annotations[sunk.coreweave.com/excluded-nodes]: must name at most 65536 nodes"
        f' (Slurm\'s own limit for a range), got 100000000 in "{HUGE}"',
    )


def test_an_annotation_over_its_length_bound_is_refused_and_the_scheduler_keeps_serving(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, namespace: str
) -> None:
    _assert_refused_and_still_serving(
        stack_cfg,
        core,
        namespace,
        {h.PREFIX + "comment": "x" * 100_000},
        "metadata.annotations[sunk.coreweave.com/comment]: must be at most 1024 bytes long, got 100000",
    )
