"""GPU health both ways, one GPU at a time (issue 37): a device tainted in Kubernetes drains its Slurm
node with a reason naming the GPU (resumed when the taint goes, by the cordon rules), and a Slurm
drain naming GPUs taints those devices through DeviceTaintRules of the syncer's own, as tables."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import pytest

from tandem import keys
from tandem.dra import gpuhealth
from tandem.dra.claims import DraConfig
from tandem.dra.slices import NodeDevices, SlicedDevice, node_devices
from tandem.dra.taints import DeviceTaint, taint_rule
from tandem.slurm.models import Node
from tandem.syncer import gputaints
from tandem.syncer import nodesync as ns
from tandem.syncer.facts import NodeFacts, RunningJob
from tandem.syncer.nodeapply import NodeSync
from tests.unit.syncer.test_nodesync import drained, facts, kube_node

XID = DeviceTaint("example.com/xid", "79", "NoSchedule")
EVICT = DeviceTaint("example.com/ecc", "", "NoExecute")
INFO = DeviceTaint("example.com/degraded", "", "None")
OWN = DeviceTaint(keys.SLURM_GPU_TAINT_KEY, "gpu-3", "NoSchedule")


def devices(*taints: tuple[int, DeviceTaint]) -> NodeDevices:
    by_index: dict[int, list[DeviceTaint]] = {}
    for index, taint in taints:
        by_index.setdefault(index, []).append(taint)
    return NodeDevices(
        "node-001",
        "gpu.nvidia.com",
        "node-001",
        tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i, tuple(by_index.get(i, ()))) for i in range(8)),
    )


def with_gpus(f: NodeFacts, d: NodeDevices, rules: tuple[dict[str, Any], ...] = ()) -> NodeFacts:
    return replace(f, devices=d, gpu_rules=rules, rules_served="resource.k8s.io/v1")


GPU3 = "k8s: Node node-001 has GPU 3 tainted: gpu-3 example.com/xid=79:NoSchedule"

ROWS = [
    ("a GPU tainted NoSchedule drains the node naming it", with_gpus(facts(), devices((3, XID))), GPU3),
    (
        "several GPUs are named together, NoExecute too",
        with_gpus(facts(), devices((3, XID), (5, EVICT))),
        "k8s: Node node-001 has GPUs 3,5 tainted: gpu-3 example.com/xid=79:NoSchedule;"
        " gpu-5 example.com/ecc:NoExecute",
    ),
    ("an informational taint (None) drains nothing", with_gpus(facts(), devices((3, INFO))), ""),
    ("the syncer's own mirror of a Slurm drain drains nothing", with_gpus(facts(), devices((3, OWN))), ""),
    ("no devices, no cause", facts(), ""),
]


@pytest.mark.parametrize(("why", "f", "reason"), ROWS, ids=[r[0] for r in ROWS])
def test_the_drain_reason_of_a_tainted_gpu(why: str, f: NodeFacts, reason: str) -> None:
    plan = ns.decide(f)
    assert plan.drain == reason, why
    assert not plan.resume


def test_the_taint_going_resumes_the_drain_it_made() -> None:
    plan = ns.decide(with_gpus(facts(slurm=drained(GPU3)), devices()))
    assert plan.resume and not plan.drain


def test_an_admins_drain_naming_the_same_words_is_not_resumed() -> None:
    plan = ns.decide(with_gpus(facts(slurm=drained(GPU3, by="root")), devices()))
    assert not plan.resume


def test_another_gpu_tainted_says_the_new_set() -> None:
    plan = ns.decide(with_gpus(facts(slurm=drained(GPU3)), devices((3, XID), (4, XID))))
    assert plan.drain.startswith("k8s: Node node-001 has GPUs 3,4 tainted")


def test_a_cordon_says_more_than_a_gpu_taint() -> None:
    plan = ns.decide(with_gpus(facts(node=kube_node(cordoned=True)), devices((3, XID))))
    assert plan.drain == "k8s: Node node-001 is cordoned"


@pytest.mark.parametrize(
    ("reason", "named"),
    [
        ("xid 79 on GPU 3", (3,)),
        ("GPUs 3,5 ECC errors", (3, 5)),
        ("NHC: check_nv_healthmon: gpu:2-3 failed", (2, 3)),
        ("GPU#7 fell off the bus", (7,)),
        ("gpu=0, gpu=1", (0, 1)),
        ("maintenance", ()),
        ("gpu:h100 firmware", ()),  # a GRES type, not an index
        ("GPU 3-1", ()),  # a range that runs backwards names nothing
        ("k8s: Node node-001 has GPU 3 tainted: gpu-3 k:NoSchedule", ()),  # the syncer's own words
        ("GPUs 0-9999", ()),  # more than a node has
    ],
)
def test_the_gpus_a_slurm_drain_reason_names(reason: str, named: tuple[int, ...]) -> None:
    assert gpuhealth.gpus_named(reason) == named


def test_a_slurm_drain_naming_gpus_taints_those_devices_and_resume_untaints_them() -> None:
    admin = Node("cpu-001", "IDLE", ("DRAIN",), "xid 79 on GPU 3", "root")
    plan = ns.decide(with_gpus(facts(slurm=admin), devices()))
    assert not plan.resume  # an admin's drain
    (rule,) = plan.rules.create
    assert rule["metadata"]["name"] == "tandem-slurm-node-001-gpu-3"
    assert rule["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com",
        "pool": "node-001",
        "device": "gpu-3",
    }
    assert rule["spec"]["taint"] == {
        "key": keys.SLURM_GPU_TAINT_KEY,
        "value": "gpu-3",
        "effect": "NoSchedule",
    }
    assert rule["metadata"]["labels"][keys.SLURM_GPU_RULE_LABEL] == "cpu-001"
    assert rule["metadata"]["annotations"][keys.SLURM_GPU_RULE_REASON] == "xid 79 on GPU 3"
    # Made and seen: nothing more to do; the device is tainted by the syncer's own key, which
    # drains nothing (its drain is Slurm's already).
    seen = with_gpus(facts(slurm=admin), devices((3, OWN)), (rule,))
    assert not ns.decide(seen).rules and not ns.decide(seen).drain
    # Slurm resumed: the rule goes.
    resumed = with_gpus(facts(), devices((3, OWN)), (rule,))
    assert ns.decide(resumed).rules == gputaints.RulesPlan(delete=(rule["metadata"]["name"],))


def test_the_syncers_own_drain_is_never_mirrored_back() -> None:
    plan = ns.decide(with_gpus(facts(slurm=drained(GPU3)), devices((3, XID))))
    assert not plan.rules


def test_nothing_is_mirrored_where_the_cluster_serves_no_device_taint_rules() -> None:
    admin = Node("cpu-001", "IDLE", ("DRAIN",), "GPU 3", "root")
    f = replace(with_gpus(facts(slurm=admin), devices()), rules_served="")
    assert not ns.decide(f).rules


def test_an_index_the_node_does_not_publish_is_not_tainted() -> None:
    admin = Node("cpu-001", "DOWN", (), "GPU 12 missing", "root")
    assert not ns.decide(with_gpus(facts(slurm=admin), devices())).rules


def test_a_rule_that_differs_is_made_again() -> None:
    admin = Node("cpu-001", "IDLE", ("DRAIN",), "GPU 3", "root")
    wanted = gputaints.wanted_rules(admin, "cpu-001", "node-001", devices())
    assert wanted is not None
    (rule,) = wanted.values()
    changed = {**rule, "spec": {**rule["spec"], "taint": {**rule["spec"]["taint"], "effect": "NoExecute"}}}
    plan = gputaints.plan_rules(wanted, [changed])
    assert plan.delete == (rule["metadata"]["name"],) and len(plan.create) == 1


def test_device_taint_rules_reach_the_devices_they_select() -> None:
    rules = [
        taint_rule(
            {
                "metadata": {"name": "r1"},
                "spec": {
                    "deviceSelector": {"pool": "node-001", "device": "gpu-2"},
                    "taint": {"key": "k", "effect": "NoExecute"},
                },
            }
        ),
        taint_rule(
            {
                "metadata": {"name": "r2"},
                "spec": {
                    "deviceSelector": {"pool": "node-009"},
                    "taint": {"key": "other", "effect": "NoSchedule"},
                },
            }
        ),
        # A CEL selector cannot be evaluated here: it selects nothing rather than everything.
        taint_rule(
            {
                "metadata": {"name": "r3"},
                "spec": {
                    "deviceSelector": {"selectors": [{"cel": {}}]},
                    "taint": {"key": "cel", "effect": "NoSchedule"},
                },
            }
        ),
        taint_rule({"metadata": {"name": "r4"}, "spec": {"taint": {"effect": "NoSchedule"}}}),  # no key
    ]
    found = node_devices(
        "node-001",
        [
            {
                "spec": {
                    "driver": "gpu.nvidia.com",
                    "nodeName": "node-001",
                    "pool": {"name": "node-001", "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {
                                "type": {"string": "gpu"},
                                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                                "index": {"int": i},
                            },
                        }
                        for i in range(4)
                    ],
                }
            }
        ],
        DraConfig(product_types={"NVIDIA H100 80GB HBM3": "h100"}),
        [r for r in rules if r is not None],
    )
    assert isinstance(found, NodeDevices)
    assert [(g.index, [str(t) for t in g.taints]) for g in gpuhealth.tainted_gpus(found)] == [
        (2, ["k:NoExecute"])
    ]
    assert rules[3] is None


def test_a_long_node_name_still_makes_a_valid_rule_name() -> None:
    name = gputaints.rule_name("n" * 253, 12)
    assert len(name) <= 253 and name.endswith("-gpu-12")


def test_the_reason_is_one_bounded_line() -> None:
    many = devices(*((i, DeviceTaint("k" * 60, "v\nx", "NoSchedule")) for i in range(8)))
    reason = ns.decide(with_gpus(facts(), many)).drain
    assert (
        "\n" not in reason and len(reason) <= 200 and reason.startswith("k8s: Node node-001 has GPUs 0,1,2")
    )


def test_a_slurm_job_on_a_gpu_tainted_no_execute_is_cancelled_a_placeholder_is_left_to_kubernetes() -> None:
    jobs = (
        RunningJob(42, gpus=(4, 5)),
        RunningJob(43, placeholder=True, gpus=(5,)),
        RunningJob(44, gpus=(3,)),
    )
    f = replace(with_gpus(facts(), devices((5, EVICT), (3, XID))), jobs=jobs)
    plan = ns.decide(f)
    assert plan.evict == ((42, 5),)  # 43 is Tandem's: its Pod is evicted; 44's GPU is NoSchedule
    assert plan.drain.startswith("k8s: Node node-001 has GPUs 3,5 tainted")


def test_the_node_sync_cancels_an_evicted_job_once() -> None:
    f = replace(with_gpus(facts(), devices((5, EVICT))), jobs=(RunningJob(42, gpus=(5,)),))
    source = mock.Mock()
    source.facts.return_value = f
    slurm = mock.Mock()
    sync = NodeSync(mock.Mock(), slurm, source)
    sync.reconcile("cpu-001")
    sync.reconcile("cpu-001")
    slurm.cancel_job.assert_called_once_with(42)
