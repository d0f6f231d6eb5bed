"""Random Pods (hypothesis) through validation, the decision and job building: no exception, every
refused Pod is rejected with a message (its Event), every accepted one becomes a job spec Slurm can
be handed. `FUZZ_EXAMPLES` sets the size (bench/fuzz.py runs 10,000)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tandem import keys
from tandem.scheduler import actions, groups, jobspec
from tandem.scheduler import decide as d
from tandem.scheduler.policy import parse

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
CFG = jobspec.PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={"H100": "h100"})
POLICY = parse("namespaces: {team-a: {userIds: ['1001', '2000-2999'], accounts: [k8s], maxPriority: 10}}")

annotation_keys = st.sampled_from(
    [*sorted(keys.JOB_ANNOTATIONS | keys.OWN_ANNOTATIONS), keys.PREFIX + "typo", "other/x"]
)
annotation_values = st.one_of(
    st.text(max_size=40),
    st.integers(-(2**40), 2**40).map(str),
    st.sampled_from(["true", "false", "none", "topo", "cpu-[001-003]", "gpu-[3-1]", "a,,b", "/tmp", "\n"]),
)
quantities = st.one_of(
    st.sampled_from(["1", "100m", "0", "-1", "1Gi", "1.5", "1e3", "abc", "", "0.0001", "9999999999999Ki"]),
    st.text(max_size=8),
    st.integers(-5, 10**6),
)
resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", keys.GPU_RESOURCE, "ephemeral-storage", "x"]), quantities, max_size=4
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.just("c")},
        optional={
            "resources": st.fixed_dictionaries({}, optional={"requests": resources, "limits": resources})
        },
    ),
    max_size=3,
)
pods = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {
                "namespace": st.sampled_from(["default", "team-a"]),
                "name": st.just("fuzzed"),
                "uid": st.just("uid-1"),
                "annotations": st.dictionaries(annotation_keys, annotation_values, max_size=6),
            }
        ),
        "spec": st.fixed_dictionaries(
            {"containers": containers},
            optional={
                "terminationGracePeriodSeconds": st.one_of(
                    st.integers(-5, 100), st.none(), st.text(max_size=3), st.booleans()
                ),
                "initContainers": containers,
                "overhead": resources,
                "nodeSelector": st.dictionaries(
                    st.sampled_from(list(keys.GPU_MODEL_LABELS)), st.sampled_from(["H100", "x"]), max_size=1
                ),
            },
        ),
    }
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(pod=pods, policy=st.sampled_from([None, POLICY]))
def test_any_pod_is_refused_with_a_reason_or_becomes_a_job(pod: dict[str, Any], policy: Any) -> None:
    key = "default/fuzzed"
    observed = actions.Observed(
        key,
        groups.alone(groups.target(key), pod),
        (pod,),
        kill_wait=30,
        **({"policy": policy} if policy else {}),
    )
    action = d.decide(observed)
    if isinstance(action, actions.Reject):
        assert action.message.startswith("invalid for Slurm: ")
        return
    assert isinstance(action, actions.Submit), action
    (result,) = action.validations
    spec = jobspec.build_job_spec(pod, CFG, result.requests, annotations=result.job_annotations)
    assert spec.cpus >= 1 and spec.memory_mb >= 1
    assert 0 <= (spec.user_id or 0) <= 0xFFFFFFFE and 0 <= (spec.group_id or 0) <= 0xFFFFFFFE
