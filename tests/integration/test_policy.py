"""Issues 12 and 18: the tenant policy. A restricted namespace cannot ask Slurm for root, a foreign
account or a priority above its maximum; an allowed Pod runs as the policy's user; an edit applies
at once. It fails closed: root without a rule is refused, a Pod without user-id runs as the lab's
default user (tandem-pods, 1001), a deleted policy keeps the last good one, a Pod refused while its
job waits loses the job, and a bound Pod is only told."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client as k8s

from devstack import config, kube
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

RULES = {"userIds": ["1001", "2000-2999"], "accounts": ["k8s"], "maxPriority": 1000}


def _read_policy(core: k8s.CoreV1Api) -> dict[str, Any]:
    configmap = core.read_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE)
    return dict(yaml.safe_load(configmap.data["policy.yaml"]) or {})


def _put_policy(core: k8s.CoreV1Api, text: str) -> None:
    body = {"metadata": {"name": config.POLICY_CONFIGMAP}, "data": {"policy.yaml": text}}
    try:
        core.replace_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE, body)
    except h.ApiException as e:
        if e.status != 404:
            raise
        core.create_namespaced_config_map(config.TANDEM_NAMESPACE, body)


@pytest.fixture
def lab_policy(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[dict[str, Any]]:
    """The lab's policy (`make up` writes it); put back as it was after the test."""
    lab = _read_policy(core)
    assert lab["default"]["defaultUser"] == 1001
    yield lab
    _put_policy(core, yaml.safe_dump(lab))


def _write_policy(core: k8s.CoreV1Api, lab: dict[str, Any], namespace: str, rules: dict[str, object]) -> None:
    """The lab's policy with a rule for `namespace`."""
    _put_policy(core, yaml.safe_dump({**lab, "namespaces": {namespace: rules}}))


def _namespace(stack_cfg: StackConfig, core: k8s.CoreV1Api, prefix: str) -> Iterator[str]:
    name = h.unique(prefix)
    core.create_namespace({"metadata": {"name": name}})
    kube.wait_for_default_service_account(core, name)
    yield name
    for pod in core.list_namespaced_pod(name).items:
        h.delete_pod(core, pod.metadata.name, name, grace=0)
    # Its own Pods' jobs only: the `unlisted` tests run beside others (issue 51).
    h.wait_until(
        f"no Slurm jobs of {name}'s Pods",
        lambda: not any(f"/{name}/" in job for job in h.squeue_names(stack_cfg).values()),
        60,
    )
    core.delete_namespace(name)


@pytest.fixture
def team(stack_cfg: StackConfig, core: k8s.CoreV1Api, lab_policy: dict[str, Any]) -> Iterator[str]:
    """A namespace with a rule of its own (RULES)."""
    for name in _namespace(stack_cfg, core, "tenant"):
        _write_policy(core, lab_policy, name, RULES)
        yield name


@pytest.fixture
def unlisted(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[str]:
    """A namespace no rule names: the lab's default applies (read here, never written, so its tests
    run beside others: the policy tests that write it run alone)."""
    assert _read_policy(core)["default"]["defaultUser"] == 1001
    yield from _namespace(stack_cfg, core, "unlisted")


def _refusal(core: k8s.CoreV1Api, name: str, namespace: str) -> str | None:
    pod = h.get_pod(core, name, namespace)
    cond = h.scheduled_condition(pod) if pod is not None else None
    return cond.message if cond is not None and cond.reason == "ValidationFailed" else None


def _refused_with_one_event(stack_cfg: StackConfig, core: k8s.CoreV1Api, name: str, namespace: str) -> str:
    message = h.wait_until("refused", lambda: _refusal(core, name, namespace), 20)
    # The Event is posted after the condition is written (off the reconcile's path): wait for it.
    events = h.wait_until(
        "the FailedValidation Event",
        lambda: [e for e in h.events_for(core, name, namespace) if e.reason == "FailedValidation"] or None,
        10,
    )
    assert len(events) == 1 and events[0].message == message
    assert h.job_id_of(core, name, namespace) is None
    return message


@pytest.mark.parametrize(
    ("annotation", "value", "says"),
    [
        (
            "user-id",
            "0",
            "sunk.coreweave.com/user-id: 0 is not allowed in namespace {ns} (allowed: 1001, 2000-2999)",
        ),
        (
            "priority",
            "4294967294",
            "sunk.coreweave.com/priority: 4294967294 is above the maximum 1000 in namespace {ns}",
        ),
        (
            "account",
            "root",
            "sunk.coreweave.com/account: root is not allowed in namespace {ns} (allowed: k8s)",
        ),
    ],
)
def test_a_restricted_namespace_refuses_what_it_may_not_ask(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, annotation: str, value: str, says: str
) -> None:
    name = h.unique("greedy")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + annotation: value}, namespace=team))
    assert says.format(ns=team) in _refused_with_one_event(stack_cfg, core, name, team)
    assert not h.squeue_ids(stack_cfg)


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        (
            {h.PREFIX + "user-id": "0"},
            "sunk.coreweave.com/user-id: 0 (root) is not allowed in namespace {ns} "
            "(a rule must list 0 in userIds)",
        ),
        (
            {h.PREFIX + "group-id": "0"},
            "sunk.coreweave.com/group-id: 0 (root) is not allowed in namespace {ns} "
            "(a rule must list 0 in groupIds)",
        ),
        (
            {h.PREFIX + "priority": "4294967294"},
            "sunk.coreweave.com/priority: 4294967294 is above the maximum 10000 in namespace {ns}",
        ),
    ],
)
@pytest.mark.parallel
def test_without_a_rule_root_and_a_high_priority_are_refused(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, unlisted: str, annotations: dict[str, str], says: str
) -> None:
    name = h.unique("root")
    h.create(core, h.tandem_pod(stack_cfg, name, annotations, namespace=unlisted))
    assert _refused_with_one_event(stack_cfg, core, name, unlisted) == (
        f"invalid for Slurm: {says.format(ns=unlisted)}"
    )


def _running_as(stack_cfg: StackConfig, core: k8s.CoreV1Api, name: str, namespace: str) -> tuple[int, int]:
    def bound() -> bool:
        pod = h.get_pod(core, name, namespace)
        return bool(pod is not None and pod.spec.node_name)

    h.wait_until("bound", bound, 40)
    job_id = h.job_id_of(core, name, namespace)
    assert job_id is not None
    job = h.rest_job(stack_cfg, job_id)
    return int(job["user_id"]), int(job["group_id"])


@pytest.mark.parallel
def test_a_pod_without_user_id_runs_as_the_labs_default_user(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, unlisted: str
) -> None:
    name = h.unique("nobody-said")
    h.create(core, h.tandem_pod(stack_cfg, name, namespace=unlisted))
    assert _running_as(stack_cfg, core, name, unlisted) == (1001, 1001)  # tandem-pods
    assert "UserId=tandem-pods(1001)" in h.scontrol(
        stack_cfg, "show", "job", str(h.job_id_of(core, name, unlisted))
    )


def test_a_pod_without_user_id_where_no_default_user_is_refused_saying_how(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, lab_policy: dict[str, Any]
) -> None:
    _write_policy(core, lab_policy, team, {"accounts": ["k8s"]})
    name = h.unique("no-user")

    def refused() -> str | None:
        h.create(core, h.tandem_pod(stack_cfg, name, namespace=team))
        message = h.wait_until(
            "judged", lambda: _refusal(core, name, team) or h.job_id_of(core, name, team), 10
        )
        if isinstance(message, str):
            return message
        h.delete_pod(core, name, team, grace=0)  # judged by the policy before the edit
        h.wait_until("deleted", lambda: h.get_pod(core, name, team) is None, 10)
        return None

    assert h.wait_until("refused after the edit", refused, 20, every=0.5) == (
        f"invalid for Slurm: sunk.coreweave.com/user-id: not set, and namespace {team} has no default "
        "user: set the annotation, or a defaultUser for the namespace in the tenant policy"
    )


def test_an_allowed_pod_runs_as_the_policys_user_and_an_edit_applies_at_once(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, lab_policy: dict[str, Any]
) -> None:
    name = h.unique("allowed")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "account": "k8s"}, namespace=team))
    assert _running_as(stack_cfg, core, name, team) == (1001, 1001)  # the first allowed id: the default
    _write_policy(core, lab_policy, team, {**RULES, "userIds": ["0", "1001"]})
    root = h.unique("root-now")

    def accepted() -> bool:
        h.create(core, h.tandem_pod(stack_cfg, root, {h.PREFIX + "user-id": "0"}, namespace=team))
        refused = h.wait_until(
            "judged", lambda: _refusal(core, root, team) or h.job_id_of(core, root, team), 10
        )
        if isinstance(refused, str):
            h.delete_pod(core, root, team, grace=0)
            h.wait_until("deleted", lambda: h.get_pod(core, root, team) is None, 10)
            return False
        return True

    h.wait_until("uid 0 allowed after the edit", accepted, 20, every=0.5)
    assert _running_as(stack_cfg, core, root, team) == (0, 0)


def _stale_gauge(stack_cfg: StackConfig) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{stack_cfg.ports.scheduler_health}/metrics", timeout=5).text
    lines = [line for line in text.splitlines() if line.startswith("tandem_policy_stale{")]
    return {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in lines}


def _policy_events(core: k8s.CoreV1Api, reason: str) -> list[k8s.CoreV1Event]:
    events = core.list_namespaced_event(
        config.TANDEM_NAMESPACE, field_selector=f"involvedObject.name={config.POLICY_CONFIGMAP}"
    ).items
    return [e for e in events if e.reason == reason]


def test_a_deleted_policy_keeps_the_last_good_one_and_says_so(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str
) -> None:
    before = len(_policy_events(core, "TenantPolicyStale"))
    core.delete_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE)
    h.wait_until("the stale gauge", lambda: _stale_gauge(stack_cfg).get("deleted") == 1.0, 10)
    event = h.wait_until(
        "the TenantPolicyStale Event",
        lambda: _policy_events(core, "TenantPolicyStale")[before:] or None,
        10,
    )[-1]
    assert event.type == "Warning"
    assert event.message == (
        f"tenant policy ConfigMap {config.TANDEM_NAMESPACE}/{config.POLICY_CONFIGMAP} was deleted: the "
        "last good policy stays until it is created again"
    )
    # Never reopens: the namespace's rule still holds, and so does the default.
    name = h.unique("still-greedy")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "account": "root"}, namespace=team))
    assert _refused_with_one_event(stack_cfg, core, name, team) == (
        "invalid for Slurm: sunk.coreweave.com/account: root is not allowed in namespace "
        f"{team} (allowed: k8s)"
    )


def test_a_restored_policy_applies_again(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, lab_policy: dict[str, Any]
) -> None:
    core.delete_namespaced_config_map(config.POLICY_CONFIGMAP, config.TANDEM_NAMESPACE)
    h.wait_until("stale", lambda: _stale_gauge(stack_cfg).get("deleted") == 1.0, 10)
    _put_policy(core, yaml.safe_dump(lab_policy))
    h.wait_until("applied again", lambda: set(_stale_gauge(stack_cfg).values()) == {0.0}, 10)


def test_a_pod_refused_while_its_job_waits_loses_the_job(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, lab_policy: dict[str, Any]
) -> None:
    node = "cpu-001"
    blocker = h.sbatch(stack_cfg, "--exclusive", f"--nodelist={node}")
    try:
        name = h.unique("waits")
        pin = {h.PREFIX + "required-nodes": node, h.PREFIX + "exclusive": "none"}
        h.create(core, h.tandem_pod(stack_cfg, name, pin, namespace=team))
        job_id = h.wait_until("job submitted", lambda: h.job_id_of(core, name, team), 20)
        assert job_id in h.squeue_ids(stack_cfg)
        # The policy changes while the job waits: the Pod may no longer name that node.
        _write_policy(core, lab_policy, team, {**RULES, "nodes": "gpu-[000-006]"})
        message = h.wait_until("refused", lambda: _refusal(core, name, team), 20)
        assert message == (
            f"invalid for Slurm: sunk.coreweave.com/required-nodes: {node} names {node}, not allowed in "
            f"namespace {team} (allowed: gpu-[000-006])"
        )
        h.wait_until("its job cancelled", lambda: job_id not in h.squeue_ids(stack_cfg), 20)
    finally:
        h.scancel(stack_cfg, blocker)


def test_a_bound_pod_is_never_evicted_by_a_policy_change(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, team: str, lab_policy: dict[str, Any]
) -> None:
    name = h.unique("bound")
    h.create(core, h.tandem_pod(stack_cfg, name, {h.PREFIX + "account": "k8s"}, namespace=team))
    _running_as(stack_cfg, core, name, team)
    job_id = h.job_id_of(core, name, team)
    _write_policy(core, lab_policy, team, {**RULES, "accounts": ["physics"]})
    event = h.wait_until(
        "the WouldNowBeRefused Event",
        lambda: [e for e in h.events_for(core, name, team) if e.reason == "WouldNowBeRefused"] or None,
        20,
    )[0]
    assert event.type == "Warning"
    assert event.message == (
        "this Pod would now be refused (invalid for Slurm: sunk.coreweave.com/account: k8s is not allowed "
        f"in namespace {team} (allowed: physics)); it keeps running: a bound Pod is never evicted by a "
        "policy change"
    )
    pod = h.get_pod(core, name, team)
    assert pod is not None and pod.spec.node_name and pod.metadata.deletion_timestamp is None
    assert job_id in h.squeue_ids(stack_cfg)
