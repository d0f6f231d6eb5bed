from __future__ import annotations

from typing import Any

import pytest

from tandem import jobtoken, keys, placeholder
from tandem.placeholder import PodRef, parse_job_name
from tandem.scheduler.jobspec import (
    PlaceholderConfig,
    build_job_spec,
    gpu_type,
    job_user,
    parse_gpu_types,
    pod_ref,
)
from tandem.scheduler.validation import validate

GPU_TYPES = {"H100_NVLINK_80GB": "h100", "A100_PCIE_80GB": "a100"}
CFG = PlaceholderConfig(
    script="#!/bin/sh\nexec placeholder\n",
    environment={"TANDEM_HOOKS_URL": "http://hooks:8000"},
    gpu_types=GPU_TYPES,
)


def make_pod(
    annotations: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    gpu_terms: list[list[dict[str, Any]]] | None = None,
    user: str | None = "1001",
) -> dict[str, Any]:
    """A Pod as the API server returns it. `gpu_terms`: nodeSelectorTerms, each a list of
    matchExpressions. `user`: its user-id (a job is never built without one)."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "resources": {"requests": requests or {"cpu": "1", "memory": "1Gi"}}}
        ],
        "terminationGracePeriodSeconds": 5,
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if gpu_terms is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": exprs} for exprs in gpu_terms]
                }
            }
        }
    return {
        "metadata": {
            "name": "infer-0",
            "namespace": "team-a",
            "uid": "8f1c",
            "annotations": ({keys.USER_ID: user} if user is not None else {}) | (annotations or {}),
        },
        "spec": spec,
    }


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


MODEL, CLASS = keys.GPU_MODEL_LABELS

# --- --gpu-types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mapping"),
    [
        ("H100_NVLINK_80GB=h100,A100_PCIE_80GB=a100", GPU_TYPES),
        (" H100_NVLINK_80GB = h100 , A100_PCIE_80GB=a100, ", GPU_TYPES),
        ("", {}),
        ("H100_NVLINK_80GB=h100,H100_NVLINK_80GB=h100", {"H100_NVLINK_80GB": "h100"}),
        ("L40S=l40s,RTX.6000-Ada=rtx_6000", {"L40S": "l40s", "RTX.6000-Ada": "rtx_6000"}),
    ],
)
def test_parse_gpu_types(text: str, mapping: dict[str, str]) -> None:
    assert parse_gpu_types(text) == mapping


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("H100_NVLINK_80GB", "must be LABEL_VALUE=GRES_TYPE"),
        ("H100_NVLINK_80GB:h100", "must be LABEL_VALUE=GRES_TYPE"),
        ("=h100", "is not a Kubernetes label value"),
        ("H100 NVLINK=h100", "is not a Kubernetes label value"),
        ("H100_NVLINK_80GB=", "is not a Slurm GRES type"),
        ("H100_NVLINK_80GB=h:100", "is not a Slurm GRES type"),
        ("H100_NVLINK_80GB=h100=x", "is not a Slurm GRES type"),
        ("H100_NVLINK_80GB=h100,H100_NVLINK_80GB=a100", "mapped twice"),
    ],
)
def test_parse_gpu_types_rejects_bad_input_clearly(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_gpu_types(text)


# --- pod reference -------------------------------------------------------------------------------


def test_pod_ref() -> None:
    assert pod_ref(make_pod()) == PodRef("team-a", "infer-0", "8f1c")


@pytest.mark.parametrize("missing", ["namespace", "name", "uid"])
def test_pod_ref_refuses_a_pod_it_could_not_find_again(missing: str) -> None:
    pod = make_pod()
    del pod["metadata"][missing]
    with pytest.raises(ValueError, match="lacks"):
        pod_ref(pod)


# --- GPU type ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("terms", "gres"),
    [
        ([[expr(MODEL, "In", "H100_NVLINK_80GB")]], "h100"),
        ([[expr(CLASS, "In", "A100_PCIE_80GB")]], "a100"),
        ([[expr(MODEL, "In", "UNKNOWN_GPU", "A100_PCIE_80GB")]], "a100"),
        ([[expr("topology.kubernetes.io/zone", "In", "a")], [expr(MODEL, "In", "H100_NVLINK_80GB")]], "h100"),
        ([[expr(MODEL, "NotIn", "H100_NVLINK_80GB")]], ""),
        ([[expr(MODEL, "Exists")]], ""),
        ([[expr("other/model", "In", "H100_NVLINK_80GB")]], ""),
        ([[expr(MODEL, "In", "UNKNOWN_GPU")]], ""),
        ([], ""),
    ],
)
def test_gpu_type_from_required_node_affinity(terms: list[list[dict[str, Any]]], gres: str) -> None:
    assert gpu_type(make_pod(gpu_terms=terms), GPU_TYPES) == gres


@pytest.mark.parametrize(
    ("selector", "gres"),
    [
        ({MODEL: "H100_NVLINK_80GB"}, "h100"),
        ({CLASS: "A100_PCIE_80GB"}, "a100"),
        ({MODEL: "UNKNOWN_GPU", CLASS: "A100_PCIE_80GB"}, "a100"),
        ({"kubernetes.io/hostname": "H100_NVLINK_80GB"}, ""),
        ({}, ""),
    ],
)
def test_gpu_type_from_node_selector(selector: dict[str, str], gres: str) -> None:
    assert gpu_type(make_pod(node_selector=selector), GPU_TYPES) == gres


def test_node_selector_wins_over_a_wider_affinity() -> None:
    pod = make_pod(
        node_selector={MODEL: "H100_NVLINK_80GB"},
        gpu_terms=[[expr(MODEL, "In", "A100_PCIE_80GB", "H100_NVLINK_80GB")]],
    )
    assert gpu_type(pod, GPU_TYPES) == "h100"


def test_preferred_affinity_is_not_a_requirement() -> None:
    pod = make_pod()
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [expr(MODEL, "In", "H100_NVLINK_80GB")]}}
            ]
        }
    }
    assert gpu_type(pod, GPU_TYPES) == ""


# --- the job -------------------------------------------------------------------------------------


def test_a_plain_pod_becomes_a_plain_job() -> None:
    pod = make_pod()
    spec = build_job_spec(pod, CFG)
    assert parse_job_name(spec.name) == PodRef("team-a", "infer-0", "8f1c")
    assert spec.script == CFG.script
    assert spec.environment == {
        "TANDEM_HOOKS_URL": "http://hooks:8000",
        "TANDEM_POD_NAMESPACE": "team-a",
        "TANDEM_POD_NAME": "infer-0",
        "TANDEM_POD_UID": "8f1c",
        "TANDEM_JOB_EXTRA": "",
    }
    # The Pod's user, sent explicitly: the scheduler's token is root's.
    assert (spec.user_id, spec.group_id, spec.extra) == (1001, 1001, "")
    assert (spec.cpus, spec.memory_mb, spec.gpus, spec.gpu_type) == (1, 1024, 0, "")
    assert spec.working_dir == "/tmp"
    assert (spec.account, spec.partition, spec.exclusive, spec.priority, spec.time_limit_minutes) == (
        "",
        "",
        "",
        None,
        None,
    )


def test_the_pod_identity_overrides_configured_environment() -> None:
    cfg = PlaceholderConfig(script="x", environment={"TANDEM_POD_NAME": "stale"}, gpu_types={})
    assert build_job_spec(make_pod(), cfg).environment["TANDEM_POD_NAME"] == "infer-0"


@pytest.mark.parametrize(
    ("cpu", "cpus"),
    [("1", 1), ("100m", 1), ("1001m", 2), ("2.5", 3), ("110", 110), ("0.0001", 1)],
)
def test_cpus_round_up_to_whole_cpus(cpu: str, cpus: int) -> None:
    assert build_job_spec(make_pod(requests={"cpu": cpu, "memory": "1Gi"}), CFG).cpus == cpus


@pytest.mark.parametrize(
    ("memory", "mb"),
    [("1Gi", 1024), ("960Gi", 983040), ("1G", 954), ("1Mi", 1), ("1", 1), ("1049000", 2)],
)
def test_memory_rounds_up_to_mebibytes(memory: str, mb: int) -> None:
    assert build_job_spec(make_pod(requests={"cpu": "1", "memory": memory}), CFG).memory_mb == mb


def test_gpus_become_gres_with_the_type_of_the_required_model() -> None:
    pod = make_pod(
        requests={"cpu": "110", "memory": "960Gi", keys.GPU_RESOURCE: "8"},
        gpu_terms=[[expr(MODEL, "In", "H100_NVLINK_80GB")]],
    )
    spec = build_job_spec(pod, CFG)
    assert (spec.cpus, spec.memory_mb, spec.gpus, spec.gpu_type) == (110, 983040, 8, "h100")


def test_gpus_without_a_known_model_are_untyped() -> None:
    pod = make_pod(requests={"cpu": "1", "memory": "1Gi", keys.GPU_RESOURCE: "2"})
    spec = build_job_spec(pod, CFG)
    assert (spec.gpus, spec.gpu_type) == (2, "")


def test_a_cpu_pod_on_a_gpu_node_asks_for_no_gpu_type() -> None:
    pod = make_pod(node_selector={MODEL: "H100_NVLINK_80GB"})
    spec = build_job_spec(pod, CFG)
    assert (spec.gpus, spec.gpu_type) == (0, "")


def test_every_annotation_reaches_its_job_field() -> None:
    pod = make_pod(
        {
            keys.ACCOUNT: "root",
            keys.COMMENT: "A Kubernetes job",
            keys.CONSTRAINTS: "a100&ib",
            keys.EXCLUSIVE: "user",
            keys.EXCLUDED_NODES: "a100-092-01,a100-092-02",
            keys.REQUIRED_NODES: "a100-092-[04,06]",
            keys.PARTITION: "default",
            keys.PREFER: "rack1",
            keys.PRIORITY: "100",
            keys.QOS: "normal",
            keys.RESERVATION: "test",
            keys.TIMEOUT: "123",
            keys.CURRENT_WORKING_DIR: "/path/to/use",
            keys.USER_ID: "1001",
            keys.GROUP_ID: "1002",
        }
    )
    assert validate(pod, 30.0).ok
    spec = build_job_spec(pod, CFG)
    assert spec.account == "root"
    assert spec.comment == "A Kubernetes job"
    assert spec.constraints == "a100&ib"
    assert spec.exclusive == "user"
    assert spec.excluded_nodes == "a100-092-01,a100-092-02"
    assert spec.required_nodes == "a100-092-[04,06]"
    assert spec.partition == "default"
    assert spec.prefer == "rack1"
    assert spec.priority == 100
    assert spec.qos == "normal"
    assert spec.reservation == "test"
    assert spec.time_limit_minutes == 123
    assert spec.working_dir == "/path/to/use"


@pytest.mark.parametrize(
    ("value", "exclusive"),
    [
        ("none", "none"),
        ("ok", "ok"),
        ("user", "user"),
        ("mcs", "mcs"),
        ("topo", "topo"),
        ("true", "none"),
        ("True", "none"),
        ("false", ""),
        ("FALSE", ""),
    ],
)
def test_exclusive_mapping(value: str, exclusive: str) -> None:
    assert build_job_spec(make_pod({keys.EXCLUSIVE: value}), CFG).exclusive == exclusive


def test_priority_zero_is_kept_not_dropped() -> None:
    assert build_job_spec(make_pod({keys.PRIORITY: "0"}), CFG).priority == 0


def test_default_working_dir_comes_from_config() -> None:
    cfg = PlaceholderConfig(script="x", environment={}, gpu_types={}, default_working_dir="/var/tmp")
    assert build_job_spec(make_pod(), cfg).working_dir == "/var/tmp"


# --- who the job runs as -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "user"),
    [
        ({keys.USER_ID: "1001"}, (1001, 1001)),
        ({keys.USER_ID: "1001", keys.GROUP_ID: "1002"}, (1001, 1002)),
        ({keys.USER_ID: "1001", keys.GROUP_ID: "0"}, (1001, 0)),
        ({keys.USER_ID: "0"}, (0, 0)),
    ],
)
def test_job_user_defaults(annotations: dict[str, str], user: tuple[int, int]) -> None:
    assert job_user(make_pod(annotations, user=None)) == user


@pytest.mark.parametrize("annotations", [{}, {keys.GROUP_ID: "1002"}])
def test_a_job_is_never_root_by_default(annotations: dict[str, str]) -> None:
    # Validation refuses a Pod without user-id where the policy has no default user; one that
    # gets here anyway must not run as whoever submits (root).
    with pytest.raises(ValueError, match="user-id is not set"):
        job_user(make_pod(annotations, user=None))
    assert job_user(make_pod(annotations, user=None), {keys.USER_ID: "1001"})[0] == 1001


@pytest.mark.parametrize(
    ("annotations", "user"),
    [
        ({keys.USER_ID: "1001"}, (1001, 1001)),
        ({keys.USER_ID: "1001", keys.GROUP_ID: "1002"}, (1001, 1002)),
    ],
)
def test_the_job_runs_as_the_pods_user_and_group(annotations: dict[str, str], user: tuple[int, int]) -> None:
    spec = build_job_spec(make_pod(annotations, user=None), CFG)
    assert (spec.user_id, spec.group_id) == user


def test_a_placeholder_carries_its_own_credential_and_tandems_mark() -> None:
    cfg = PlaceholderConfig(script="x", environment={}, gpu_types={}, job_key=b"k" * 32)
    spec = build_job_spec(make_pod(), cfg)
    # Only Slurm's administrators write the AdminComment: the reference, and the binding the
    # job's own token names (issue 39: bound to this job, not to the reference alone).
    token = spec.environment["TANDEM_JOB_TOKEN"]
    assert placeholder.reference_of(spec.admin_comment) == spec.name
    assert placeholder.binding_of(spec.admin_comment) == jobtoken.binding_of(token) != ""
    assert spec.environment["TANDEM_PLACEHOLDER"] == spec.name
    assert jobtoken.verifies([b"k" * 32], spec.name, token)
    # The next job of the same placeholder gets another binding: this token is not its.
    again = build_job_spec(make_pod(), cfg)
    assert placeholder.binding_of(again.admin_comment) != jobtoken.binding_of(token)
