"""Slurm's topology follows Node labels (issue 38): the syncer writes it where slurmctld reads it
(topology.conf on 24.11, topology.yaml on 26.05), Slurm takes it without a restart, and label
values at the edge of what Kubernetes allows never take slurmctld down."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from devstack import config, slurm
from devstack import kube as devkube
from devstack.config import StackConfig
from tandem import topology
from tandem.slurm.hostlist import expand
from tests.integration import helpers as h
from tests.integration.test_kubectl_tandem import kubectl_tandem

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

ZONE, RACK = config.TOPOLOGY_LEVELS


@pytest.fixture(scope="module")
def labelled(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[None]:
    """Tests that label Nodes, each every Node as it wants them and waiting for its own labels'
    domains; at the module's end no Node carries a topology label (each its own domain). Not
    flattened after each: each flattening is a topology rewrite and slurmctld reading it again
    (about 10 s a test, issue 51)."""
    yield
    _flatten(stack_cfg, core)


def _flatten(cfg: StackConfig, core: k8s.CoreV1Api) -> None:
    for i in range(cfg.nodes):
        _label(core, config.kube_node_name(i), {ZONE: None, RACK: None})
    h.wait_until("Slurm's topology flat again", lambda: _racks(cfg) == _singletons(cfg), 60)
    # The syncer is done with it too (the features gone, the flat topology published): a test after
    # this module that restarts the syncer would otherwise have it rewrite Slurm's topology while
    # the next test submits (the flake of issue 51's notes).
    h.wait_until("no rack features and the flat topology published", lambda: _flat_published(cfg, core), 60)


def _flat_published(cfg: StackConfig, core: k8s.CoreV1Api) -> bool:
    published = _published(core)
    return (
        published is not None
        and not any(d.value for d in published.domains)
        and not published.unplaced
        and not _rack_features(cfg)
    )


Racks = tuple[frozenset[str], frozenset[str]]


class TwoRacks:
    """Racks a and b (_two_racks) for the tests of this module that place work in them."""

    def __init__(self, cfg: StackConfig, core: k8s.CoreV1Api) -> None:
        self.cfg, self.core = cfg, core
        self.labelled = False

    def get(self) -> Racks:
        """Label them (a no-op once they are) and wait until Slurm shows them: after a slurmctld
        restart too."""
        self.labelled = True
        return _two_racks(self.cfg, self.core)


@pytest.fixture(scope="module")
def two_racks(stack_cfg: StackConfig, core: k8s.CoreV1Api) -> Iterator[TwoRacks]:
    """Kept from the first test that asks to the module's end, not flattened after each: each
    relabelling has the syncer rewrite Slurm's topology and slurmctld read it again (about 10 s a
    test, issue 51)."""
    racks = TwoRacks(stack_cfg, core)
    yield racks
    if racks.labelled:
        _flatten(stack_cfg, core)


def _label(core: k8s.CoreV1Api, node: str, labels: dict[str, str | None]) -> None:
    core.patch_node(node, {"metadata": {"labels": labels}})


def _shown(cfg: StackConfig) -> str:
    return h.scontrol(cfg, "show", "topology")


def _racks(cfg: StackConfig) -> list[frozenset[str]] | None:
    """Slurm's leaf switches as it shows them: the node sets under each (None while it shows no
    topology)."""
    shown = _shown(cfg)
    leaves = [
        frozenset(_expand(m.group(1)))
        for line in shown.splitlines()
        if "Level=0" in line and (m := re.search(r"\bNodes=(\S+)", line))
    ]
    return sorted(leaves, key=sorted) or None


def _expand(hostlist: str) -> list[str]:
    return expand(hostlist)


def _singletons(cfg: StackConfig) -> list[frozenset[str]]:
    return sorted((frozenset({config.slurm_node_name(i)}) for i in range(cfg.nodes)), key=sorted)


def _alive(cfg: StackConfig) -> bool:
    return "UP" in h.scontrol(cfg, "ping")


def test_slurms_topology_follows_node_labels_added_moved_and_removed(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    nodes = [config.slurm_node_name(i) for i in range(stack_cfg.nodes)]
    for i in range(stack_cfg.nodes):
        # Racks of uneven size: 3 in rack-a, the rest in rack-b, all in one zone.
        _label(core, config.kube_node_name(i), {ZONE: "z1", RACK: "rack-a" if i < 3 else "rack-b"})
    want = sorted([frozenset(nodes[:3]), frozenset(nodes[3:])], key=sorted)
    h.wait_until("Slurm's racks as labelled", lambda: _racks(stack_cfg) == want, 60)
    # Moved: node 2 to rack-b.
    _label(core, config.kube_node_name(2), {RACK: "rack-b"})
    want = sorted([frozenset(nodes[:2]), frozenset(nodes[2:])], key=sorted)
    h.wait_until("node 2 in rack-b", lambda: _racks(stack_cfg) == want, 60)
    # Removed: node 0's labels go; it is a domain of its own.
    _label(core, config.kube_node_name(0), {ZONE: None, RACK: None})
    want = sorted([frozenset(nodes[:1]), frozenset(nodes[1:2]), frozenset(nodes[2:])], key=sorted)
    h.wait_until("node 0 on its own", lambda: _racks(stack_cfg) == want, 60)
    assert _alive(stack_cfg)
    # A two-node job asking for one leaf switch lands inside one rack.
    job = h.sbatch(stack_cfg, "-N2", "--switches=1", "--mem=1G", "--cpus-per-task=1")
    h.wait_until(
        "the job running", lambda: "RUNNING" in h.squeue(stack_cfg, "-j", str(job), "-h", "-o", "%T"), 60
    )
    placed = set(_expand(h.squeue(stack_cfg, "-j", str(job), "-h", "-o", "%N").strip()))
    assert any(placed <= rack for rack in want), (placed, want)
    # The tree as an operator reads it.
    shown = kubectl_tandem(stack_cfg, "topology")
    assert "rack-b" in shown and nodes[5] in shown


EDGE = [
    "a" * 63,
    "rack.1_A",
    "1rack1",
    "Rack-A",
    "rack-a",
    "0",
]


def test_label_values_at_the_edge_never_take_slurmctld_down(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    """Values Kubernetes allows, differing only in case, with dots, underscores and digits at both
    ends, 63 characters long: each its own rack, and slurmctld up after every reconfigure."""
    values = EDGE[: stack_cfg.nodes]
    for i in range(stack_cfg.nodes):
        _label(core, config.kube_node_name(i), {ZONE: None, RACK: values[i] if i < len(values) else None})

    def published_racks() -> set[str]:
        t = _published(core)
        # A Node without the label is a domain of its own, with no value.
        return {d.value for d in t.domains if d.key == RACK and d.value} if t is not None else set()

    # Published once Slurm has every value's rack, so the racks read below are these.
    h.wait_until("every value published as a rack", lambda: published_racks() == set(values), 60)
    assert len(_racks(stack_cfg) or []) == stack_cfg.nodes, _shown(stack_cfg)
    assert _alive(stack_cfg)
    log = (stack_cfg.log_dir / "slurmctld.log").read_text()
    assert "fatal:" not in log[-20000:]


def test_the_topology_is_published_for_the_scheduler_and_kubectl(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    _label(core, config.kube_node_name(1), {ZONE: "z1", RACK: "r9"})

    def published() -> topology.Topology | None:
        t = _published(core)
        return t if t is not None and any(d.value == "r9" for d in t.domains) else None

    t = h.wait_until("the ConfigMap", published, 60)
    r9 = next(d for d in t.domains if d.value == "r9")
    assert r9.nodes == (config.slurm_node_name(1),) and r9.key == RACK
    assert set(t.nodes) == {config.slurm_node_name(i) for i in range(stack_cfg.nodes)}


def _published(core: k8s.CoreV1Api) -> topology.Topology | None:
    namespace, name = config.TOPOLOGY_CONFIGMAP.split("/")
    try:
        data = core.read_namespaced_config_map(name, namespace).data or {}
    except k8s.ApiException:
        return None
    return topology.from_json(data["topology.json"]) if data.get("topology.json") else None


def test_a_gang_created_as_soon_as_its_racks_are_published_reaches_slurm(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    """Issue 53: racks labelled, and a gang created the moment the topology showed them got no Slurm
    job for ever (Slurm refused its rack features, which it did not have yet). The topology is
    published once Slurm has them, and a gang created at once is placed in one rack."""
    half = stack_cfg.nodes // 2
    for i in range(stack_cfg.nodes):
        _label(core, config.kube_node_name(i), {ZONE: "z2", RACK: "rack-c" if i < half else "rack-d"})

    def both_racks() -> bool:
        t = _published(core)
        return t is not None and {d.value for d in t.domains if d.key == RACK} == {"rack-c", "rack-d"}

    h.wait_until("the racks published", both_racks, 60, every=0.05)
    members = _lws_gang(stack_cfg, core, h.unique("fresh"), 2, {h.PREFIX + "topology": RACK})
    h.wait_until("the gang's job", lambda: h.job_id_of(core, members[0]), 30)
    placed = h.wait_until("the gang bound", lambda: _bound_slurm_nodes(core, members), 60)
    nodes = [config.slurm_node_name(i) for i in range(stack_cfg.nodes)]
    assert placed <= set(nodes[:half]) or placed <= set(nodes[half:]), placed


def test_a_rack_labelled_while_a_gang_waits_is_added_to_its_job_and_the_gang_runs_there(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    """Issue 53: a pending gang's job kept the domains of its submit, so a rack labelled while it
    waited was never tried. Now the job's constraint follows the published topology."""
    nodes = [config.slurm_node_name(i) for i in range(stack_cfg.nodes)]
    for i in range(stack_cfg.nodes):  # rack-e: the first two nodes; every other node alone
        _label(
            core,
            config.kube_node_name(i),
            {ZONE: "z3", RACK: "rack-e"} if i < 2 else {ZONE: None, RACK: None},
        )

    def racks_published(*wanted: str) -> bool:
        t = _published(core)
        return t is not None and {d.value for d in t.domains if d.key == RACK} >= set(wanted)

    h.wait_until("rack-e published", lambda: racks_published("rack-e"), 60)
    busy = [h.sbatch(stack_cfg, "-N1", "--exclusive", f"--nodelist={n}") for n in nodes[:2]]
    members = _lws_gang(stack_cfg, core, h.unique("waits"), 2, {h.PREFIX + "topology": RACK})
    job_id = h.wait_until("the gang's job", lambda: h.job_id_of(core, members[0]), 30)
    before = str(h.rest_job(stack_cfg, job_id).get("features"))
    assert "l1-rack-e-" in before and "|" not in before, before  # rack-e alone, busy
    for i in (2, 3):
        _label(core, config.kube_node_name(i), {ZONE: "z3", RACK: "rack-f"})
    placed = h.wait_until("the gang bound in the new rack", lambda: _bound_slurm_nodes(core, members), 90)
    assert placed == set(nodes[2:4]), placed
    after = str(h.rest_job(stack_cfg, job_id).get("features"))
    assert "l1-rack-e-" in after and "l1-rack-f-" in after, after
    h.scancel(stack_cfg, *busy)


def test_racks_labelled_without_a_zone_are_racks_in_slurm_and_the_user_is_told(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, labelled: None
) -> None:
    """Issue 53: most on-premises clusters label racks only. Before, each such Node was its own zone
    and so its own rack, and a gang asking for a rack was refused ("the largest rack domain has 1
    node"); nothing said the missing zone label was why."""
    nodes = [config.slurm_node_name(i) for i in range(stack_cfg.nodes)]
    for i in range(stack_cfg.nodes):
        rack = "rack-g" if i < 2 else "rack-h" if i < 4 else None
        _label(core, config.kube_node_name(i), {ZONE: None, RACK: rack})
    want = sorted(
        [frozenset(nodes[:2]), frozenset(nodes[2:4]), *(frozenset({n}) for n in nodes[4:])], key=sorted
    )
    # Published for the scheduler and kubectl once Slurm has the racks as node features too.
    told = [
        f"{stack_cfg.nodes - 4} Node(s) without a {RACK} label",
        f"{stack_cfg.nodes} Node(s) without a {ZONE} label",
    ]

    def shown_once_published() -> str | None:
        shown = kubectl_tandem(stack_cfg, "topology")
        return shown if "rack-g" in shown and "rack-h" in shown else None

    shown = h.wait_until("kubectl tandem topology", shown_once_published, 60)
    assert all(line in shown for line in told) and "(no label)" in shown, shown
    assert _racks(stack_cfg) == want, _shown(stack_cfg)
    members = _lws_gang(stack_cfg, core, h.unique("racks"), 2, {h.PREFIX + "topology": RACK})
    placed = h.wait_until("the gang bound", lambda: _bound_slurm_nodes(core, members), 60)
    assert placed in (set(nodes[:2]), set(nodes[2:4])), placed


# --- a gang's topology constraint reaches its Slurm job (step 2) -------------------------------------


def _two_racks(cfg: StackConfig, core: k8s.CoreV1Api) -> Racks:
    """Racks a (nodes 0-3) and b (nodes 4-7), as Slurm shows them once the syncer wrote them; the
    two racks' features are on every node then too."""
    half = cfg.nodes // 2
    for i in range(cfg.nodes):
        _label(core, config.kube_node_name(i), {ZONE: "z1", RACK: "rack-a" if i < half else "rack-b"})
    nodes = [config.slurm_node_name(i) for i in range(cfg.nodes)]
    a, b = frozenset(nodes[:half]), frozenset(nodes[half:])
    h.wait_until("Slurm's two racks", lambda: _racks(cfg) == sorted([a, b], key=sorted), 60)
    h.wait_until("every node's rack feature", lambda: _rack_features(cfg) == {a, b}, 60)
    return a, b


def _rack_features(cfg: StackConfig) -> set[frozenset[str]]:
    """The nodes sharing each rack-level feature tandem-syncer gave them."""
    by_feature: dict[str, set[str]] = {}
    for line in h.scontrol(cfg, "show", "node", "-o").splitlines():
        name = re.search(r"NodeName=(\S+)", line)
        features = re.search(r"AvailableFeatures=(\S+)", line)
        for f in features.group(1).split(",") if features else []:
            if f.startswith("l1-rack-") and name:
                by_feature.setdefault(f, set()).add(name.group(1))
    return {frozenset(v) for v in by_feature.values()}


def _podgroup(custom: k8s.CustomObjectsApi, name: str, size: int, key: str = RACK) -> dict[str, Any]:
    group, version, plural = h.podgroups()
    return dict(
        custom.create_namespaced_custom_object(
            group,
            version,
            "default",
            plural,
            {
                "apiVersion": f"{group}/{version}",
                "kind": "PodGroup",
                "metadata": {"name": name},
                "spec": {
                    "schedulingPolicy": {"gang": {"minCount": size}},
                    "schedulingConstraints": {"topology": [{"key": key}]},
                },
            },
        )
    )


def _members(cfg: StackConfig, core: k8s.CoreV1Api, group: str, size: int) -> list[str]:
    names = []
    for i in range(size):
        pod = h.tandem_pod(cfg, f"{group}-{i}", cpu="1", memory="1Gi")
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        h.create(core, pod)
        names.append(pod["metadata"]["name"])
    return names


def _bound_slurm_nodes(core: k8s.CoreV1Api, names: list[str]) -> set[str] | None:
    pods = [h.get_pod(core, n) for n in names]
    if not all(p is not None and p.spec.node_name for p in pods):
        return None
    kube_to_slurm = {config.kube_node_name(i): config.slurm_node_name(i) for i in range(16)}
    return {kube_to_slurm[p.spec.node_name] for p in pods if p is not None}


def _podgroup_condition(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    group, version, plural = h.podgroups()
    pg = custom.get_namespaced_custom_object(group, version, "default", plural, name)
    return next(
        (c for c in (pg.get("status") or {}).get("conditions") or [] if c["type"] == "PodGroupScheduled"),
        None,
    )


@pytest.fixture
def custom(stack_cfg: StackConfig) -> Iterator[k8s.CustomObjectsApi]:
    api = devkube.api(stack_cfg)
    custom = k8s.CustomObjectsApi(api)
    yield custom
    k8s.BatchV1Api(api).delete_collection_namespaced_job("default", propagation_policy="Background")
    group, version, plural = h.podgroups()
    for item in custom.list_namespaced_custom_object(group, version, "default", plural)["items"]:
        with contextlib.suppress(k8s.ApiException):
            custom.delete_namespaced_custom_object(
                group, version, "default", plural, item["metadata"]["name"]
            )


def _serves_topology_constraints(custom: k8s.CustomObjectsApi) -> bool:
    """Kubernetes 1.37 with TopologyAwareWorkloadScheduling keeps the field; 1.36 drops it."""
    name = h.unique("probe")
    pg = _podgroup(custom, name, 1)
    group, version, plural = h.podgroups()
    custom.delete_namespaced_custom_object(group, version, "default", plural, name)
    return bool((pg.get("spec") or {}).get("schedulingConstraints"))


def test_a_podgroup_asking_for_one_rack_waits_for_one_rather_than_spanning_two(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, two_racks: TwoRacks
) -> None:
    if not _serves_topology_constraints(custom):
        pytest.skip("this apiserver drops PodGroup spec.schedulingConstraints (before Kubernetes 1.37)")
    a, b = two_racks.get()
    # Two nodes of each rack busy: no rack has three free, eight minus four would.
    busy = [
        h.sbatch(stack_cfg, "-N1", "--exclusive", f"--nodelist={n}") for n in (*sorted(a)[:2], *sorted(b)[:2])
    ]
    name = h.unique("rack")
    _podgroup(custom, name, 3)
    members = _members(stack_cfg, core, name, 3)
    job_id = h.wait_until("the gang's job", lambda: h.job_id_of(core, members[0]), 30)
    job = h.rest_job(stack_cfg, job_id)
    assert "l1-rack-" in str(job.get("features")), job.get("features")
    time.sleep(5)
    assert "PENDING" in h.squeue(stack_cfg, "-j", str(job_id), "-h", "-o", "%T")  # not across racks
    h.scancel(stack_cfg, busy[3])  # a node of rack b frees: b has three
    placed = h.wait_until("the gang bound", lambda: _bound_slurm_nodes(core, members), 60)
    assert placed <= b, (placed, b)
    condition = h.wait_until("PodGroupScheduled", lambda: _podgroup_condition(custom, name), 15)
    assert "topology.kubernetes.io/rack=rack-b" in condition["message"], condition
    events = [
        e.message for e in core.list_namespaced_event("default").items if e.involved_object.name == name
    ]
    assert any("rack-b" in (m or "") for m in events), events
    story = kubectl_tandem(stack_cfg, "describe", members[0])
    assert f"one domain of {RACK}" in story and f"{RACK}=rack-b" in story, story
    h.scancel(stack_cfg, *busy)


def test_a_job_with_spec_scheduling_lands_in_one_rack(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, two_racks: TwoRacks
) -> None:
    if not _serves_topology_constraints(custom):
        pytest.skip(
            "this apiserver has no Job spec.scheduling.schedulingConstraints (before Kubernetes 1.37)"
        )
    a, b = two_racks.get()
    busy = [h.sbatch(stack_cfg, "-N1", "--exclusive", f"--nodelist={n}") for n in sorted(a)[:2]]
    batch = k8s.BatchV1Api(devkube.api(stack_cfg))
    name = h.unique("train")
    pod = h.tandem_pod(stack_cfg, "x")
    batch.create_namespaced_job(
        "default",
        {
            "metadata": {"name": name},
            "spec": {
                "completionMode": "Indexed",
                "completions": 3,
                "parallelism": 3,
                "scheduling": {
                    "schedulingPolicy": {"gang": {"minCount": 3}},
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
                },
                "template": {"metadata": {"labels": {}}, "spec": {**pod["spec"], "restartPolicy": "Never"}},
            },
        },
    )

    def bound() -> set[str] | None:
        pods = core.list_namespaced_pod("default", label_selector=f"job-name={name}").items
        names = [p.metadata.name for p in pods]
        return _bound_slurm_nodes(core, names) if len(names) == 3 else None

    placed = h.wait_until("the Job's three Pods bound", bound, 60)
    assert placed <= b, (placed, b)  # rack a has two free nodes only
    h.scancel(stack_cfg, *busy)


def _lws_gang(
    cfg: StackConfig, core: k8s.CoreV1Api, name: str, size: int, annotations: dict[str, str]
) -> list[str]:
    """A LeaderWorkerSet's replica group as its controller labels it (a gang with no Workload API
    object: the annotation asks for the domain; Kubernetes 1.36 and 1.37 alike)."""
    members = []
    for i in range(size):
        pod = h.tandem_pod(cfg, f"{name}-{i}", annotations=dict(annotations))
        pod["metadata"]["labels"] = {
            "leaderworkerset.sigs.k8s.io/name": name,
            "leaderworkerset.sigs.k8s.io/group-index": "0",
            "leaderworkerset.sigs.k8s.io/group-key": name,
            "leaderworkerset.sigs.k8s.io/worker-index": str(i),
        }
        pod["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"] = str(size)
        h.create(core, pod)
        members.append(pod["metadata"]["name"])
    return members


def test_a_gang_too_large_for_any_rack_is_unschedulable_naming_the_key_and_the_largest(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, two_racks: TwoRacks
) -> None:
    two_racks.get()
    size = stack_cfg.nodes // 2 + 1
    before = h.squeue_ids(stack_cfg)
    members = _lws_gang(stack_cfg, core, h.unique("big"), size, {h.PREFIX + "topology": RACK})

    def unschedulable() -> str | None:
        pod = h.get_pod(core, members[0])
        c = h.scheduled_condition(pod) if pod is not None else None
        return c.message if c is not None and c.reason == "Unschedulable" else None

    message = h.wait_until("Unschedulable", unschedulable, 30)
    assert RACK in message and f"largest {RACK} domain has {stack_cfg.nodes // 2} nodes" in message, message
    assert h.squeue_ids(stack_cfg) == before  # no job submitted


def test_an_annotated_gang_lands_in_one_rack(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, two_racks: TwoRacks
) -> None:
    a, b = two_racks.get()
    busy = [h.sbatch(stack_cfg, "-N1", "--exclusive", f"--nodelist={n}") for n in sorted(b)[:2]]
    members = _lws_gang(stack_cfg, core, h.unique("lws"), 3, {h.PREFIX + "topology": RACK})
    placed = h.wait_until("the gang bound", lambda: _bound_slurm_nodes(core, members), 60)
    assert placed <= a, (placed, a)  # rack b has two free nodes only
    h.scancel(stack_cfg, *busy)


@pytest.fixture
def qos_preemption(stack_cfg: StackConfig) -> Iterator[None]:
    """slurmctld with PreemptType=preempt/qos (QOS high preempts normal, by cancelling)."""
    slurm.switch_preemption(stack_cfg, "qos")
    try:
        yield
    finally:
        slurm.switch_preemption(StackConfig.from_env(), stack_cfg.preempt)


@pytest.mark.usefixtures("qos_preemption")
def test_a_big_high_qos_gang_frees_one_whole_rack_by_preemption_and_nothing_elsewhere(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, two_racks: TwoRacks
) -> None:
    a, b = two_racks.get()
    # Normal-QOS work on all but one node of each rack: a single Pod's placeholder on the first,
    # plain Slurm jobs on the next ones. The two free nodes sit in different racks: a job free to
    # span racks could take both and preempt less.
    racks = (sorted(a), sorted(b))
    plain = {
        n: h.sbatch(stack_cfg, "--qos=normal", "--exclusive", f"--nodelist={n}")
        for r in racks
        for n in r[1:-1]
    }
    pods = {}
    for r in racks:
        name = h.unique("single")
        annotations = {
            h.PREFIX + "required-nodes": r[0],
            h.PREFIX + "exclusive": "none",
            h.PREFIX + "qos": "normal",
        }
        h.create(core, h.tandem_pod(stack_cfg, name, annotations))
        pods[r[0]] = name
    h.wait_until(
        "the plain jobs running", lambda: all(_state(stack_cfg, j) == "RUNNING" for j in plain.values()), 60
    )
    h.wait_until("both single Pods bound", lambda: _bound_slurm_nodes(core, list(pods.values())), 60)
    jobs = {n: h.job_id_of(core, p) or 0 for n, p in pods.items()} | plain
    # The big gang: a whole rack, high QOS.
    size = stack_cfg.nodes // 2
    members = _lws_gang(
        stack_cfg, core, h.unique("big"), size, {h.PREFIX + "topology": RACK, h.PREFIX + "qos": "high"}
    )
    started = time.monotonic()
    placed = h.wait_until("the big gang bound", lambda: _bound_slurm_nodes(core, members), 120)
    took = time.monotonic() - started
    rack = a if placed <= a else b
    assert placed == rack, (placed, a, b)
    gang_job = h.rest_job(stack_cfg, h.job_id_of(core, members[0]) or 0)
    assert "l1-rack-" in str(gang_job.get("features")), gang_job.get("features")
    preempted = {n for n, j in jobs.items() if _state(stack_cfg, j) != "RUNNING"}
    assert preempted == {n for n in jobs if n in rack}, (preempted, rack)  # its rack's, none elsewhere
    gone = [p for n, p in pods.items() if n in rack]
    h.wait_until("the preempted single Pod gone", lambda: all(h.get_pod(core, p) is None for p in gone), 60)
    print(f"big gang bound {took:.1f} s after its Pods were made; preempted {len(preempted)} jobs in 1 rack")
    h.scancel(stack_cfg, *plain.values())


def _state(cfg: StackConfig, job_id: int) -> str:
    return h.squeue(cfg, "-j", str(job_id), "-h", "-o", "%T").strip() or str(
        h.rest_job(cfg, job_id).get("job_state")
    )
