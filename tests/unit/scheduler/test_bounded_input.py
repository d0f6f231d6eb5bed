"""Issue 18, bounded input: a Pod whose hostlist names more nodes than Slurm would take is refused on
every path (one Pod, a group, a Pod edited after its job was submitted) before anything expands it,
and every place that does expand a hostlist stops at the cap instead of at the memory limit."""

from __future__ import annotations

import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from tandem import keys, placeholder
from tandem.scheduler import actions, groups, jobspec
from tandem.scheduler import decide as d
from tandem.scheduler.eligibility import Eligibility
from tandem.slurm.dialects import Dialect
from tandem.slurm.hostlist import HostlistTooLarge
from tandem.slurm.models import Job, JobStatus

HUGE = "gpu-[0-99999999]"  # 100 M names: several GiB once expanded
REFUSED = f'must name at most 65536 nodes (Slurm\'s own limit for a range), got 100000000 in "{HUGE}"'
SCHEDULER = "tandem-test"
REF = placeholder.PodRef("default", "p", "uid-1")
CFG = jobspec.PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={})


def make_pod(annotations: dict[str, str], name: str = "p", **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}", "annotations": annotations}
        | metadata,
        "spec": {
            "schedulerName": SCHEDULER,
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
        "status": {"phase": "Pending"},
    }


def peak_bytes(call: Callable[[], object]) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def fits_but(*unfit: str) -> Eligibility:
    return Eligibility(4, unfit, Counter({"node(s) were unschedulable": len(unfit)}))


@pytest.mark.parametrize("key", [keys.EXCLUDED_NODES, keys.REQUIRED_NODES])
def test_a_new_pod_is_rejected_with_the_cap_in_its_event_and_nothing_expanded(key: str) -> None:
    pod = make_pod({key: HUGE})
    observed = actions.Observed(
        REF.key,
        groups.alone(groups.target(REF.key), pod),
        (pod,),
        kill_wait=30,
        fits={REF.uid: fits_but("gpu-1")},
    )
    action, peak = peak_bytes(lambda: d.decide(observed))
    assert isinstance(action, actions.Reject)
    assert action.message == f"invalid for Slurm: metadata.annotations[{key}]: {REFUSED}"
    assert peak < 1024 * 1024


def test_a_pod_edited_after_its_job_was_submitted_is_rejected_before_its_excludes_are_compared() -> None:
    # Annotations can change on a live Pod: the pending job's excludes are recomputed from them on
    # every pass, so validation must come first there too.
    pod = make_pod({keys.EXCLUDED_NODES: HUGE, keys.JOB_ID_ANNOTATION: "7"})
    pending = JobStatus(
        Job(7, placeholder.job_name(REF, SCHEDULER), "PENDING", "Resources", (), "cpu"), started=False
    )
    observed = actions.Observed(
        REF.key,
        groups.alone(groups.target(REF.key), pod),
        (pod,),
        job=pending,
        jobs=(pending,),
        recorded={REF.uid: 7},
        kill_wait=30,
        fits={REF.uid: fits_but("gpu-1")},
    )
    action, peak = peak_bytes(lambda: d.decide(observed))
    assert isinstance(action, actions.Reject)
    assert peak < 1024 * 1024


def test_a_group_with_a_huge_hostlist_is_rejected_on_every_member() -> None:
    podgroup = {
        "apiVersion": f"{keys.PODGROUP_GROUP}/{keys.PODGROUP_VERSIONS[0]}",
        "kind": keys.PODGROUP_KIND,
        "metadata": {"namespace": "default", "name": "train", "uid": "pg-uid"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    group = groups.resolve(groups.target("default/pg:train"), [], {"default/train": podgroup}.get)
    members = []
    for i in range(2):
        member = make_pod({keys.EXCLUDED_NODES: HUGE}, name=f"train-{i}")
        member["spec"]["schedulingGroup"] = {"podGroupName": "train"}
        members.append(member)
    observed = actions.Observed("default/pg:train", group, tuple(members), slurm_nodes=8, kill_wait=30)
    action, peak = peak_bytes(lambda: d.decide(observed))
    assert isinstance(action, actions.Reject) and len(action.pods) == 2
    assert REFUSED in action.message
    assert peak < 1024 * 1024


def test_the_job_spec_refuses_to_merge_a_huge_hostlist_rather_than_expand_it() -> None:
    # Never reached after validation; if it were, it stops at the cap, not at the memory limit.
    pod = make_pod({keys.EXCLUDED_NODES: HUGE, keys.USER_ID: "1001"})
    tracemalloc.start()
    try:
        with pytest.raises(HostlistTooLarge, match="names 100000000 nodes, more than the 65536"):
            jobspec.build_job_spec(pod, CFG, {"cpu": 1000, "memory": 2**30}, unfit=("gpu-1",))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_slurm_answer_naming_too_many_nodes_is_a_malformed_answer_not_a_memory_error() -> None:
    with pytest.raises(ValueError, match="more than the 65536"):
        Dialect().parse_job({"job_id": 1, "job_state": ["PENDING"], "excluded_nodes": HUGE})
