"""The uninstall cleanup's steps in their order, on a fake API server and a fake slurmrestd
(tandem.syncer.uninstall): the scheduler stops before any job is cancelled, the syncer only after
the placeholders ended, what is left goes last; a step that fails does not stop the next, and the
exit status says so. What each step chooses is table-tested in test_uninstall_plan.py."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.kube import JSON, KubeClient, KubeError
from tandem.slurm.models import Job, Node
from tandem.slurm.rest import SlurmApiError, SlurmRestClient
from tandem.syncer import uninstall
from tandem.syncer.settings import UninstallSettings
from tandem.syncer.uninstall_report import Report
from tests.unit.fake_clock import Clock

NS, SLURMD_NS = "tandem", "slurm"
SCHEDULER = "tandem-t"
SCHEDULER_DEPLOYMENT, SYNCER_DEPLOYMENT = "t-tandem-scheduler", "t-tandem-syncer"
SYNCER_USER = "tandem"
CFG = UninstallSettings(
    slurm_user=SYNCER_USER,
    slurmd_namespace=SLURMD_NS,
    scheduler_name=SCHEDULER,
    release_namespace=NS,
    scheduler_deployment=SCHEDULER_DEPLOYMENT,
    syncer_deployment=SYNCER_DEPLOYMENT,
)
LOCK_TAINT = {"key": keys.LOCK_KEY, "value": "true", "effect": "NoExecute"}
OTHER_TAINT = {"key": "dedicated", "value": "infer", "effect": "NoSchedule"}
WEB = placeholder.PodRef("demo", "web-0", "uid-web")


class FakeKube(KubeClient):
    """The few API paths the cleanup uses, over dicts; `log` records each write in order."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.replicas = {SCHEDULER_DEPLOYMENT: 2, SYNCER_DEPLOYMENT: 2}
        # A Deployment's Pods, still listed for this many looks after it is scaled to 0.
        self.lingering = {SCHEDULER_DEPLOYMENT: 1, SYNCER_DEPLOYMENT: 1}
        self.pods: dict[tuple[str, str], JSON] = {}
        self.nodes: dict[str, JSON] = {}
        self.fail: dict[tuple[str, str], KubeError] = {}

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> JSON:
        if (method, path) in self.fail:
            raise self.fail[(method, path)]
        parts = path.strip("/").split("/")
        if parts[:2] == ["apis", "apps"]:
            return self._scale(method, parts[6], body)
        if parts[:3] == ["api", "v1", "nodes"]:
            return self._node(method, parts[3:], body)
        if parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            return self._pod(method, parts[3], parts[5] if len(parts) > 5 else "", params or {}, body)
        raise AssertionError(f"unexpected {method} {path}")

    def _scale(self, method: str, name: str, body: Any) -> JSON:
        if name not in self.replicas:
            raise KubeError(404, "NotFound", f"deployments {name} not found")
        if method == "PATCH":
            self.replicas[name] = body["spec"]["replicas"]
            self.log.append(f"scale {name} {self.replicas[name]}")
        return {"spec": {"replicas": self.replicas[name]}, "status": {"selector": f"app={name}"}}

    def _pod(self, method: str, namespace: str, name: str, params: dict[str, str], body: Any) -> JSON:
        if method == "GET" and not name:
            selector = params.get("labelSelector", "")
            if selector.startswith("app="):  # a Deployment's Pods
                deployment = selector.removeprefix("app=")
                listed = self.replicas[deployment] > 0 or self._linger(deployment)
                return {"items": [{"metadata": {"name": f"{deployment}-abc"}}] if listed else []}
            items = [p for (ns, _), p in self.pods.items() if ns == namespace]
            if selector:
                key, _, value = selector.partition("=")
                items = [p for p in items if p["metadata"].get("labels", {}).get(key) == value]
            field = params.get("fieldSelector", "")
            if field:
                items = [p for p in items if p["spec"].get("schedulerName") == field.split("=", 1)[1]]
            return {"items": copy.deepcopy(items)}
        if (namespace, name) not in self.pods:
            raise KubeError(404, "NotFound", f"pods {name} not found")
        pod = self.pods[(namespace, name)]
        if method == "GET":
            return copy.deepcopy(pod)
        if method == "DELETE":
            assert body == {"preconditions": {"uid": pod["metadata"]["uid"]}}
            del self.pods[(namespace, name)]
            self.log.append(f"delete pod {namespace}/{name}")
            return {}
        if method == "PATCH":
            annotations = pod["metadata"].setdefault("annotations", {})
            for key, value in body["metadata"]["annotations"].items():
                if value is None:
                    annotations.pop(key, None)
            self.log.append(f"annotate pod {namespace}/{name}")
            return copy.deepcopy(pod)
        raise AssertionError(method)

    def _linger(self, deployment: str) -> bool:
        if self.lingering[deployment] > 0:
            self.lingering[deployment] -= 1
            return True
        return False

    def _node(self, method: str, rest: list[str], body: Any) -> JSON:
        if method == "GET" and not rest:
            return {"items": copy.deepcopy(list(self.nodes.values()))}
        node = self.nodes[rest[0]]
        meta = node["metadata"]
        if method == "GET":
            return copy.deepcopy(node)
        if rest[1:] == ["status"]:
            conditions = node["status"]["conditions"]
            for c in body["status"]["conditions"]:
                if c.get("$patch") == "delete":
                    node["status"]["conditions"] = [x for x in conditions if x["type"] != c["type"]]
            self.log.append(f"condition {rest[0]}")
        elif isinstance(body, list):  # the taint's JSON patch: test the version, replace the list
            test, replace = body
            if test["value"] != meta["resourceVersion"]:
                raise KubeError(409, "Conflict", "changed")
            node["spec"]["taints"] = replace["value"]
            self.log.append(f"taints {rest[0]}")
        else:
            for key, value in body["metadata"]["annotations"].items():
                if value is None:
                    meta["annotations"].pop(key, None)
            self.log.append(f"annotations {rest[0]}")
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return copy.deepcopy(node)


class FakeSlurm(SlurmRestClient):
    """Jobs end one look after they are cancelled (CANCELLED + COMPLETING, then CANCELLED)."""

    def __init__(self, log: list[str], jobs: list[Job], nodes: list[Node] | None = None) -> None:
        self.log = log
        self.jobs = {j.job_id: j for j in jobs}
        self.nodes = nodes or []
        self.completing: dict[int, int] = {}
        self.never_ends: set[int] = set()
        self.refuse_cancel: set[int] = set()

    def list_jobs(self, changed_since: int | None = None) -> list[Job]:
        return list(self.jobs.values())

    def cancel_job(self, job_id: int, signal: str | None = None) -> None:
        if job_id in self.refuse_cancel:
            raise SlurmApiError("Access/permission denied", 403)
        self.log.append(f"cancel {job_id}")
        if job_id not in self.never_ends:
            self.completing[job_id] = 1

    def job_states(self, job_ids: list[int]) -> dict[int, tuple[str, tuple[str, ...]]]:
        states: dict[int, tuple[str, tuple[str, ...]]] = {}
        for job_id in job_ids:
            if job_id in self.never_ends:
                states[job_id] = ("RUNNING", ())
            elif self.completing.get(job_id, 0) > 0:
                self.completing[job_id] -= 1
                states[job_id] = ("CANCELLED", ("COMPLETING",))
            else:
                states[job_id] = ("CANCELLED", ())
                if f"ended {job_id}" not in self.log:
                    self.log.append(f"ended {job_id}")
        return states

    def list_nodes(self, changed_since: int | None = None) -> list[Node]:
        return list(self.nodes)

    def resume_node(self, node: str) -> None:
        self.log.append(f"resume {node}")


def placeholder_job(job_id: int, ref: placeholder.PodRef, scheduler: str = SCHEDULER) -> Job:
    reference = placeholder.job_name(ref, scheduler)
    return Job(job_id, reference, "RUNNING", admin_comment=reference)


def app_pod(ref: placeholder.PodRef, scheduler: str = SCHEDULER) -> JSON:
    return {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid, "annotations": {}},
        "spec": {"schedulerName": scheduler, "nodeName": "node-001"},
        "status": {"phase": "Running"},
    }


def kube_node(name: str, taints: list[JSON], annotations: dict[str, str] | None = None) -> JSON:
    return {
        "metadata": {"name": name, "resourceVersion": "1", "annotations": annotations or {}},
        "spec": {"taints": taints},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def slurmd_pod(name: str, node: str, lock: str) -> JSON:
    return {
        "metadata": {
            "namespace": SLURMD_NS,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
            "annotations": {keys.LOCK_KEY: lock},
        },
        "spec": {"nodeName": node},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def world() -> tuple[list[str], FakeKube, FakeSlurm, Clock]:
    """One placeholder of this release running on node-001 (locked), another release's on
    node-002, a user's job named like ours; node-003 drained by Tandem for a cordon that cleared."""
    log: list[str] = []
    kube = FakeKube(log)
    other = placeholder.PodRef("demo", "api-0", "uid-api")
    kube.pods = {
        ("demo", "web-0"): app_pod(WEB),
        ("demo", "api-0"): app_pod(other, scheduler="tandem-other"),
        (SLURMD_NS, "cpu-001"): slurmd_pod("cpu-001", "node-001", "locked_strict"),
        (SLURMD_NS, "cpu-002"): slurmd_pod("cpu-002", "node-002", "false"),
        (SLURMD_NS, "cpu-003"): slurmd_pod("cpu-003", "node-003", "false"),
    }
    cordon_node = kube_node("node-003", [], {keys.DRAIN_ANNOTATION: "k8s: Node node-003 is cordoned"})
    cordon_node["status"]["conditions"].append({"type": "SlurmCordon", "status": "True"})
    kube.nodes = {
        "node-001": kube_node("node-001", [OTHER_TAINT, LOCK_TAINT]),
        "node-002": kube_node("node-002", []),
        "node-003": cordon_node,
    }
    jobs = [
        placeholder_job(11, WEB),
        placeholder_job(12, other, scheduler="tandem-other"),
        Job(13, placeholder.job_name(WEB, SCHEDULER), "RUNNING"),  # a user's job, named like ours
    ]
    nodes = [
        Node("cpu-001", "ALLOCATED"),
        Node("cpu-002", "IDLE", ("DRAIN",), "maintenance", "root"),
        Node("cpu-003", "IDLE", ("DRAIN",), "k8s: Node node-003 is cordoned", SYNCER_USER),
    ]
    clock = Clock()
    return log, kube, FakeSlurm(log, jobs, nodes), clock


def run(kube: FakeKube, slurm: FakeSlurm | None, clock: Clock, cfg: UninstallSettings = CFG) -> Report:
    return uninstall.Cleanup(kube, slurm, cfg, clock=clock, sleep=clock.sleep, say=lambda line: None).run()


def test_the_steps_run_in_order_and_leave_nothing_of_tandems(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, slurm, clock = world
    report = run(kube, slurm, clock)
    assert report.ok, report.problems
    assert log == [
        f"scale {SCHEDULER_DEPLOYMENT} 0",
        "cancel 11",
        "delete pod demo/web-0",
        "ended 11",
        f"scale {SYNCER_DEPLOYMENT} 0",
        "taints node-001",
        "annotations node-003",
        "condition node-003",
        "annotate pod slurm/cpu-001",
        "annotate pod slurm/cpu-002",
        "annotate pod slurm/cpu-003",
        "resume cpu-003",
    ]
    assert kube.nodes["node-001"]["spec"]["taints"] == [OTHER_TAINT]
    assert all(
        keys.LOCK_KEY not in p["metadata"]["annotations"]
        for (ns, _), p in kube.pods.items()
        if ns == SLURMD_NS
    )
    assert kube.nodes["node-003"]["metadata"]["annotations"] == {}
    assert [c["type"] for c in kube.nodes["node-003"]["status"]["conditions"]] == ["Ready"]
    # Another release's placeholder and its Pod, and a user's job, are not touched.
    assert ("demo", "api-0") in kube.pods
    assert report.cancelled == ["11 (demo/web-0)"]
    assert report.deleted == ["demo/web-0"]
    assert report.resumed == ["cpu-003 (k8s: Node node-003 is cordoned): its Kubernetes cause has cleared"]
    assert report.left_drained == [
        "cpu-002 (maintenance): not Tandem's drain (set by root): left for its owner"
    ]


def test_a_second_run_finds_nothing_left_to_do(world: tuple[list[str], FakeKube, FakeSlurm, Clock]) -> None:
    log, kube, slurm, clock = world
    assert run(kube, slurm, clock).ok
    slurm.jobs = {j: job for j, job in slurm.jobs.items() if j != 11}
    slurm.nodes = [n for n in slurm.nodes if n.name != "cpu-003"]
    log.clear()
    report = run(kube, slurm, clock)
    assert report.ok, report.problems
    assert log == []
    assert report.stopped == [SCHEDULER_DEPLOYMENT, SYNCER_DEPLOYMENT]


def test_a_health_drain_stays_while_its_condition_holds(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    """The chart gives the cleanup the syncer's --health-conditions: a node Tandem drained for
    GpuUnhealthy is left drained while the Node still says so, and resumed once it does not."""
    log, kube, slurm, clock = world
    reason = "k8s: Node node-003 has GpuUnhealthy: gpu 3: XID 79"
    slurm.nodes = [
        n if n.name != "cpu-003" else Node("cpu-003", "IDLE", ("DRAIN",), reason, SYNCER_USER)
        for n in slurm.nodes
    ]
    bad = {"type": "GpuUnhealthy", "status": "True", "message": "gpu 3: XID 79"}
    kube.nodes["node-003"]["status"]["conditions"].append(bad)
    cfg = dataclasses.replace(CFG, health_conditions=("GpuUnhealthy",))
    report = run(kube, slurm, clock, cfg)
    assert "resume cpu-003" not in log
    assert (
        f"cpu-003 ({reason}): Node node-003 has GpuUnhealthy: gpu 3: XID 79: resume it once that is fixed"
        in (report.left_drained)
    )
    bad["status"] = "False"
    log.clear()
    run(kube, slurm, clock, cfg)
    assert "resume cpu-003" in log


def test_without_slurm_the_kubernetes_side_is_still_cleaned_and_the_run_fails(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, _, clock = world
    report = run(kube, None, clock)
    assert not report.ok
    assert any("slurmrestd" in p for p in report.problems)
    assert "taints node-001" in log and "annotate pod slurm/cpu-001" in log
    # No job was cancelled, so no Pod is deleted: it would outlive nothing, its job would run on.
    assert ("demo", "web-0") in kube.pods


def test_a_job_that_does_not_end_is_waited_for_within_the_timeout_only(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, slurm, clock = world
    slurm.never_ends.add(11)
    report = run(kube, slurm, clock)
    assert not report.ok
    assert report.still_running == [11]
    assert clock.now <= CFG.timeout
    assert "taints node-001" in log  # what is left is still removed


def test_a_job_slurm_will_not_cancel_keeps_its_pod(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, slurm, clock = world
    slurm.refuse_cancel.add(11)
    report = run(kube, slurm, clock)
    assert not report.ok and any("job 11" in p for p in report.problems)
    assert ("demo", "web-0") in kube.pods
    assert f"scale {SYNCER_DEPLOYMENT} 0" in log


def test_a_release_without_a_scheduler_or_syncer_deployment_skips_their_steps(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, slurm, clock = world
    kube.replicas = {}
    report = run(kube, slurm, clock)
    assert report.ok, report.problems
    assert report.stopped == []
    assert "cancel 11" in log


def test_a_node_write_that_fails_is_reported_and_the_rest_still_done(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    log, kube, slurm, clock = world
    kube.fail[("GET", "/api/v1/nodes/node-001")] = KubeError(403, "Forbidden", "nodes is forbidden")
    report = run(kube, slurm, clock)
    assert not report.ok and any("node-001" in p and "Forbidden" in p for p in report.problems)
    assert "annotations node-003" in log and "resume cpu-003" in log


def test_the_summary_says_what_was_done_and_what_failed() -> None:
    report = Report(scheduler=SCHEDULER, cancelled=["11 (demo/web-0)"], deleted=["demo/web-0"])
    text = report.render()
    assert "placeholder jobs cancelled: 1\n    11 (demo/web-0)" in text
    assert f"it names scheduler {SCHEDULER}, which is gone" in text
    assert text.endswith("is left.")
    report.problems.append("stop the syncer: Forbidden")
    text = report.render()
    assert "FAILED (1):\n  - stop the syncer: Forbidden" in text and "helm uninstall --no-hooks" in text


def test_a_pod_that_went_or_changed_hands_meanwhile_is_not_counted_as_deleted(
    world: tuple[list[str], FakeKube, FakeSlurm, Clock],
) -> None:
    _, kube, slurm, clock = world
    conflict = KubeError(409, "Conflict", "Precondition failed: UID in precondition: uid-web")
    kube.fail[("DELETE", "/api/v1/namespaces/demo/pods/web-0")] = conflict
    report = run(kube, slurm, clock)
    assert report.ok, report.problems
    assert report.deleted == [] and report.cancelled == ["11 (demo/web-0)"]


def test_the_command_refuses_to_guess_which_release_is_going() -> None:
    with pytest.raises(SystemExit, match="--scheduler-name and --release-namespace are required"):
        uninstall.main(["--release-namespace=tandem"])
