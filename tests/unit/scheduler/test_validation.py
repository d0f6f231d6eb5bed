from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from tandem import keys
from tandem.scheduler.validation import MAX_BYTES, Problem, Validation, effective_requests, validate

KILL_WAIT = 30.0


def container(
    name: str = "main", restart_policy: str | None = None, gpus: str | None = None, **requests: str
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "ubuntu"}
    if gpus is not None:
        requests[keys.GPU_RESOURCE] = gpus
    if requests:
        c["resources"] = {"requests": requests}
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def make_pod(
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    overhead: dict[str, str] | None = None,
    grace: int | None = 5,
    **spec_extra: Any,
) -> dict[str, Any]:
    """A Pod as the API server returns it; valid for Slurm unless told otherwise."""
    spec: dict[str, Any] = {
        "schedulerName": "tandem",
        "containers": containers if containers is not None else [container(cpu="1", memory="1Gi")],
    }
    if init_containers is not None:
        spec["initContainers"] = init_containers
    if overhead is not None:
        spec["overhead"] = overhead
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    spec.update(spec_extra)
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "u-1"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def annotation_field(key: str) -> str:
    return f"metadata.annotations[{key}]"


def only_error(result: Validation) -> Problem:
    assert len(result.errors) == 1, result.errors
    return result.errors[0]


# --- the whole result ----------------------------------------------------------------------------


def test_a_plain_pod_is_valid() -> None:
    result = validate(make_pod(), KILL_WAIT)
    assert result.ok
    assert result.errors == ()
    assert result.warnings == ()
    assert result.message() == ""


def test_all_problems_are_reported_at_once_in_one_event_line() -> None:
    pod = make_pod(
        annotations={keys.PRIORITY: "high", keys.EXCLUSIVE: "yes"},
        containers=[container()],
        grace=30,
    )
    result = validate(pod, KILL_WAIT)
    assert not result.ok
    fields = [p.field for p in result.errors]
    assert fields == [
        annotation_field(keys.EXCLUSIVE),
        annotation_field(keys.PRIORITY),
        "spec.containers[].resources.requests.cpu",
        "spec.containers[].resources.requests.memory",
        "spec.terminationGracePeriodSeconds",
    ]
    message = result.message()
    assert message.startswith("invalid for Slurm: ")
    assert f'{annotation_field(keys.PRIORITY)}: must be an integer, got "high"' in message
    assert message.count("; ") == 4


def test_problem_reads_as_field_then_rule() -> None:
    assert str(Problem("spec.x", "must be y, got z")) == "spec.x: must be y, got z"


# --- integer annotations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.PRIORITY, "100"),
        (keys.PRIORITY, "0"),
        (keys.PRIORITY, "4294967294"),
        (keys.USER_ID, "1001"),
        (keys.USER_ID, "0"),
        (keys.USER_ID, "+1001"),
        (keys.GROUP_ID, "1002"),
        (keys.GROUP_ID, "4294967294"),
        (keys.TIMEOUT, "123"),
        (keys.TIMEOUT, "1"),
    ],
)
def test_integer_annotations_accept_integers_in_range(key: str, value: str) -> None:
    assert validate(make_pod({key: value}), KILL_WAIT).ok


@pytest.mark.parametrize("key", [keys.PRIORITY, keys.USER_ID, keys.GROUP_ID, keys.TIMEOUT])
@pytest.mark.parametrize("value", ["1.5", "abc", "", " 1", "1 ", "1e3", "0x10", "1_000", "\u0661\u0662"])
def test_integer_annotations_reject_non_integers(key: str, value: str) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert problem.rule == f'must be an integer, got "{value}"'


@pytest.mark.parametrize(
    ("key", "value", "low"),
    [
        (keys.PRIORITY, "-1", 0),
        (keys.PRIORITY, "4294967295", 0),
        (keys.USER_ID, "-5", 0),
        (keys.USER_ID, "4294967295", 0),
        (keys.GROUP_ID, "99999999999999999999999999999", 0),
        (keys.TIMEOUT, "0", 1),
        (keys.TIMEOUT, "-10", 1),
    ],
)
def test_integer_annotations_reject_values_out_of_range(key: str, value: str, low: int) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert problem.rule == f'must be an integer from {low} to 4294967294, got "{value}"'


# --- exclusive -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["none", "ok", "user", "mcs", "topo", "true", "false", "True", "FALSE"])
def test_exclusive_accepts_slurm_values_and_legacy_booleans(value: str) -> None:
    assert validate(make_pod({keys.EXCLUSIVE: value}), KILL_WAIT).ok


@pytest.mark.parametrize("value", ["None", "USER", "yes", "exclusive", "", "1", " none"])
def test_exclusive_rejects_anything_else(value: str) -> None:
    problem = only_error(validate(make_pod({keys.EXCLUSIVE: value}), KILL_WAIT))
    assert problem.field == annotation_field(keys.EXCLUSIVE)
    assert "none, ok, user, mcs, topo" in problem.rule
    assert problem.rule.endswith(f'got "{value}"')


# --- node lists ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [keys.EXCLUDED_NODES, keys.REQUIRED_NODES])
@pytest.mark.parametrize(
    "value",
    [
        "a100-092-01",
        "a100-092-01,a100-092-02",
        "gpu-[001-004,007]",
        "gpu-[001-004],cpu_1,node.example",
        "rack[1-2]-node[01-04]",
        "gpu-[7]",
        "",
    ],
)
def test_node_lists_accept_slurm_hostlists(key: str, value: str) -> None:
    assert validate(make_pod({key: value}), KILL_WAIT).ok


@pytest.mark.parametrize("key", [keys.EXCLUDED_NODES, keys.REQUIRED_NODES])
@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("a,,b", "no empty items"),
        ("a,", "no empty items"),
        (",a", "no empty items"),
        ("a, b", 'bad item " b"'),
        ("a b", 'bad item "a b"'),
        ("gpu-[001-004", 'bad item "gpu-[001-004"'),
        ("gpu-001]", 'bad item "gpu-001]"'),
        ("gpu-[a-b]", 'bad item "gpu-[a-b]"'),
        ("gpu-[]", 'bad item "gpu-[]"'),
        ("gpu-[1-2-3]", 'bad item "gpu-[1-2-3]"'),
        ("node;rm", 'bad item "node;rm"'),
        ("gpu-[5-3]", "backwards node range 5-3"),
        ("gpu-[1-2,9-3]", "backwards node range 9-3"),
    ],
)
def test_node_lists_reject_malformed_hostlists(key: str, value: str, says: str) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert says in problem.rule
    assert f'got "{value}"' in problem.rule


# --- bounds: hostlists are counted, never expanded; every annotation has a length --------------------


@pytest.mark.parametrize("key", [keys.EXCLUDED_NODES, keys.REQUIRED_NODES])
def test_a_hostlist_naming_a_hundred_million_nodes_is_refused_without_expanding_it(key: str) -> None:
    pod = make_pod({key: "gpu-[0-99999999]"})
    tracemalloc.start()
    try:
        problem = only_error(validate(pod, KILL_WAIT))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problem.field == annotation_field(key)
    assert problem.rule == (
        'must name at most 65536 nodes (Slurm\'s own limit for a range), got 100000000 in "gpu-[0-99999999]"'
    )
    # Expanded, those names took several GiB (a MemoryError under the chart's 1 GiB limit).
    assert peak < 256 * 1024


@pytest.mark.parametrize("key", [keys.EXCLUDED_NODES, keys.REQUIRED_NODES])
def test_a_hostlist_of_exactly_the_cap_passes_and_one_more_node_is_refused(key: str) -> None:
    assert validate(make_pod({key: "gpu-[00000-65535]"}), KILL_WAIT).ok
    assert validate(make_pod({key: "r[1-256]n[1-256]"}), KILL_WAIT).ok
    for over in ("gpu-[00000-65536]", "gpu-[00000-65535],login", "r[1-256]n[1-257]"):
        problem = only_error(validate(make_pod({key: over}), KILL_WAIT))
        assert problem.rule.startswith("must name at most 65536 nodes"), problem.rule
        assert "got 65537 in" in problem.rule or "got 65792 in" in problem.rule


def test_a_hostlist_whose_padding_makes_names_too_long_is_refused() -> None:
    problem = only_error(validate(make_pod({keys.EXCLUDED_NODES: "n[" + "0" * 300 + "-1]"}), KILL_WAIT))
    assert "must name nodes of at most 253 characters" in problem.rule
    assert "got one of 301" in problem.rule


def test_every_job_annotation_has_a_length_bound() -> None:
    assert set(MAX_BYTES) == keys.JOB_ANNOTATIONS


@pytest.mark.parametrize("key", sorted(keys.JOB_ANNOTATIONS))
def test_an_annotation_over_its_length_bound_is_refused_naming_the_bound(key: str) -> None:
    bound = MAX_BYTES[key]
    problem = only_error(validate(make_pod({key: "1" * (bound + 1)}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert problem.rule.startswith(f"must be at most {bound} bytes long, got {bound + 1}: "), problem.rule
    assert len(str(problem)) < 250  # the value is shortened in the Event
    at_bound = validate(make_pod({key: "1" * bound}), KILL_WAIT)
    assert not any("bytes long" in p.rule for p in at_bound.errors)


def test_the_length_bound_counts_utf8_bytes() -> None:
    assert validate(make_pod({keys.COMMENT: "é" * 512}), KILL_WAIT).ok
    problem = only_error(validate(make_pod({keys.COMMENT: "é" * 513}), KILL_WAIT))
    assert problem.rule.startswith("must be at most 1024 bytes long, got 1026: ")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.PRIORITY, "0" * 5000 + "1"),  # int() refuses more than 4300 digits
        (keys.EXCLUDED_NODES, "gpu-[" + "0" * 5000 + "1-2]"),
        (keys.REQUIRED_NODES, "gpu-[0-1]" + ",gpu-1" * 50_000),
    ],
)
def test_huge_values_are_refused_by_length_not_by_an_exception(key: str, value: str) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.rule.startswith(f"must be at most {MAX_BYTES[key]} bytes long, got {len(value)}")


# --- working directory ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["/", "/path/to/use", "/home/user name/x"])
def test_working_dir_accepts_absolute_paths(value: str) -> None:
    assert validate(make_pod({keys.CURRENT_WORKING_DIR: value}), KILL_WAIT).ok


@pytest.mark.parametrize(
    ("value", "says"), [("tmp", "absolute path"), ("", "absolute path"), ("/a\nb", "control")]
)
def test_working_dir_rejects_relative_paths_and_control_characters(value: str, says: str) -> None:
    problem = only_error(validate(make_pod({keys.CURRENT_WORKING_DIR: value}), KILL_WAIT))
    assert problem.field == annotation_field(keys.CURRENT_WORKING_DIR)
    assert says in problem.rule


# --- string annotations --------------------------------------------------------------------------

NAME_KEYS = [keys.ACCOUNT, keys.PARTITION, keys.QOS, keys.RESERVATION]
TEXT_KEYS = [keys.COMMENT, keys.CONSTRAINTS, keys.PREFER]


@pytest.mark.parametrize("key", NAME_KEYS)
@pytest.mark.parametrize("value", ["root", "gpu-a100", "normal_qos", "res.1", ""])
def test_slurm_names_accept_plain_names(key: str, value: str) -> None:
    assert validate(make_pod({key: value}), KILL_WAIT).ok


@pytest.mark.parametrize("key", NAME_KEYS)
@pytest.mark.parametrize("value", ["a b", "a,b", " root", "root\u00a0"])
def test_slurm_names_reject_whitespace_and_commas(key: str, value: str) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert problem.rule == f'must be a single Slurm name without whitespace or commas, got "{value}"'


@pytest.mark.parametrize("key", TEXT_KEYS)
@pytest.mark.parametrize("value", ["A Kubernetes job", "a100&ib", "[rack1|rack2]*2", "", "héllo, wörld"])
def test_free_text_accepts_printable_text(key: str, value: str) -> None:
    assert validate(make_pod({key: value}), KILL_WAIT).ok


@pytest.mark.parametrize("key", [*TEXT_KEYS, *NAME_KEYS])
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("line1\nline2", '"line1\\nline2"'),
        ("nul\x00", '"nul\\x00"'),
        ("tab\there", '"tab\\there"'),
        ("\x7f", '"\\x7f"'),
    ],
)
def test_control_characters_are_rejected_and_shown_escaped(key: str, value: str, shown: str) -> None:
    problem = only_error(validate(make_pod({key: value}), KILL_WAIT))
    assert problem.field == annotation_field(key)
    assert "control characters" in problem.rule
    assert problem.rule.endswith(f"got {shown}")


def test_long_values_are_shortened_in_the_message() -> None:
    problem = only_error(validate(make_pod({keys.PRIORITY: "9" * 500}), KILL_WAIT))
    assert len(str(problem)) < 200
    assert '..."' in problem.rule


# --- unknown annotations -------------------------------------------------------------------------


def test_a_typo_under_the_prefix_is_a_warning_that_names_the_likely_key() -> None:
    result = validate(make_pod({keys.PREFIX + "paritition": "gpu"}), KILL_WAIT)
    assert result.ok
    assert result.warnings == (
        f"unknown annotation {keys.PREFIX}paritition is ignored (typo of {keys.PARTITION}?)",
    )


def test_an_unknown_key_far_from_any_known_one_still_warns() -> None:
    result = validate(make_pod({keys.PREFIX + "colour": "blue"}), KILL_WAIT)
    assert result.ok
    assert result.warnings == (f"unknown annotation {keys.PREFIX}colour is ignored (typo?)",)


def test_own_and_foreign_annotations_are_not_warned_about() -> None:
    pod = make_pod(
        {
            keys.JOB_ID_ANNOTATION: "42",
            keys.LOCK_KEY: "locked",
            "example.com/partition": "whatever",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        }
    )
    result = validate(pod, KILL_WAIT)
    assert result.ok
    assert result.warnings == ()


def test_unknown_annotations_do_not_hide_errors() -> None:
    result = validate(make_pod({keys.PREFIX + "prioritty": "1", keys.TIMEOUT: "soon"}), KILL_WAIT)
    assert [p.field for p in result.errors] == [annotation_field(keys.TIMEOUT)]
    assert len(result.warnings) == 1


# --- CPU and memory requests ---------------------------------------------------------------------


def test_a_pod_without_requests_fails_for_cpu_and_memory() -> None:
    result = validate(make_pod(containers=[container()]), KILL_WAIT)
    assert [str(p) for p in result.errors] == [
        "spec.containers[].resources.requests.cpu: must be set so Slurm can account for the Pod, got none",
        "spec.containers[].resources.requests.memory: must be set so Slurm can account for the Pod, got none",
    ]


@pytest.mark.parametrize(
    ("requests", "field"),
    [({"cpu": "0", "memory": "1Gi"}, "cpu"), ({"cpu": "1", "memory": "0"}, "memory")],
)
def test_zero_requests_are_rejected(requests: dict[str, str], field: str) -> None:
    problem = only_error(validate(make_pod(containers=[container(**requests)]), KILL_WAIT))
    assert problem.field == f"spec.containers[].resources.requests.{field}"
    assert problem.rule == "must be greater than zero so Slurm can account for the Pod, got 0"


def test_limits_do_not_stand_in_for_requests() -> None:
    c = {"name": "main", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
    result = validate(make_pod(containers=[c]), KILL_WAIT)
    assert len(result.errors) == 2


def test_requests_may_come_from_any_container() -> None:
    containers = [container("a", cpu="500m"), container("b", memory="64Mi")]
    assert validate(make_pod(containers=containers), KILL_WAIT).ok


def test_a_garbled_quantity_names_the_container_and_is_not_also_missing() -> None:
    containers = [container("a", cpu="lots", memory="1Gi")]
    problem = only_error(validate(make_pod(containers=containers), KILL_WAIT))
    assert (
        str(problem) == 'spec.containers[0].resources.requests.cpu: must be a Kubernetes quantity, got "lots"'
    )


# --- termination grace period --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("grace", "kill_wait", "ok"),
    [
        (24, 30.0, True),
        (0, 30.0, True),
        (25, 30.0, False),
        (29, 30.0, False),
        (54, 60.0, True),
        (55, 60.0, False),
        (25, 30.5, True),
        (26, 30.5, False),
    ],
)
def test_grace_period_must_stay_below_kill_wait_minus_five(grace: int, kill_wait: float, ok: bool) -> None:
    assert validate(make_pod(grace=grace), kill_wait).ok is ok


def test_grace_period_problem_states_the_limit_and_where_it_comes_from() -> None:
    problem = only_error(validate(make_pod(grace=30), 30.0))
    assert str(problem) == (
        "spec.terminationGracePeriodSeconds: must be less than 25"
        " (KillWait 30s minus 5s, KillWait from --slurm-kill-wait), got 30"
    )


KILL_WAIT_SOURCES = [
    (
        "Slurm's running configuration",
        30.0,
        40,
        "must be less than 25 (KillWait 30s minus 5s, KillWait from Slurm's running configuration), got 40",
    ),
    (
        "slurm.conf at /etc/slurm/slurm.conf",
        60.0,
        55,
        "must be less than 55 (KillWait 60s minus 5s, KillWait from slurm.conf at /etc/slurm/slurm.conf),"
        " got 55",
    ),
    (
        "--slurm-kill-wait",
        20.0,
        15,
        "must be less than 15 (KillWait 20s minus 5s, KillWait from --slurm-kill-wait), got 15",
    ),
    (
        "Slurm's default",
        30.0,
        25,
        "must be less than 25 (KillWait 30s minus 5s, KillWait from Slurm's default), got 25",
    ),
]


@pytest.mark.parametrize(
    ("source", "kill_wait", "grace", "rule"), KILL_WAIT_SOURCES, ids=[r[0] for r in KILL_WAIT_SOURCES]
)
def test_grace_period_problem_cites_where_kill_wait_came_from(
    source: str, kill_wait: float, grace: int, rule: str
) -> None:
    problem = only_error(validate(make_pod(grace=grace), kill_wait, kill_wait_source=source))
    assert problem.field == "spec.terminationGracePeriodSeconds"
    assert problem.rule == rule


def test_fractional_kill_wait_is_shown_as_given() -> None:
    problem = only_error(validate(make_pod(grace=26), 30.5))
    assert (
        problem.rule
        == "must be less than 25.5 (KillWait 30.5s minus 5s, KillWait from --slurm-kill-wait), got 26"
    )


def test_an_absent_grace_period_is_kubernetes_default_of_30() -> None:
    assert validate(make_pod(grace=None), 36.0).ok
    problem = only_error(validate(make_pod(grace=None), 30.0))
    assert problem.field == "spec.terminationGracePeriodSeconds"
    assert problem.rule.endswith("got 30 (the default when unset)")


# --- effective requests --------------------------------------------------------------------------


def test_regular_containers_are_summed_in_kubernetes_units() -> None:
    pod = make_pod(
        containers=[
            container("a", cpu="1500m", memory="1Gi", gpus="2"),
            container("b", cpu="1", memory="512Mi", gpus="1"),
        ]
    )
    assert effective_requests(pod) == {"cpu": 2500, "memory": 1536 * 2**20, "nvidia.com/gpu": 3}


def test_a_larger_init_container_sets_the_request() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi")],
        init_containers=[container("setup", cpu="4", memory="256Mi")],
    )
    # Per resource: CPU from the init container, memory from the main one.
    assert effective_requests(pod) == {"cpu": 4000, "memory": 2**30}


def test_init_containers_run_one_at_a_time() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi")],
        init_containers=[container("one", cpu="3"), container("two", cpu="2")],
    )
    assert effective_requests(pod)["cpu"] == 3000


def test_sidecars_run_beside_the_main_containers() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi")],
        init_containers=[container("proxy", "Always", cpu="500m", memory="128Mi")],
    )
    assert effective_requests(pod) == {"cpu": 1500, "memory": 2**30 + 128 * 2**20}


def test_a_plain_init_container_runs_beside_the_sidecars_declared_before_it() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi")],
        init_containers=[
            container("early-sidecar", "Always", cpu="1"),
            container("migrate", cpu="5"),
            container("late-sidecar", "Always", cpu="2"),
        ],
    )
    # migrate + early-sidecar (6) beats the running Pod (1 + 1 + 2); late-sidecar is not there yet.
    assert effective_requests(pod)["cpu"] == 6000


def test_sidecars_declared_after_an_init_container_do_not_add_to_it() -> None:
    pod = make_pod(
        containers=[container("main", cpu="100m", memory="1Gi")],
        init_containers=[container("migrate", cpu="3"), container("sidecar", "Always", cpu="2")],
    )
    assert effective_requests(pod)["cpu"] == 3000


def test_overhead_is_added_on_top() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi")],
        init_containers=[container("setup", cpu="2")],
        overhead={"cpu": "250m", "memory": "120Mi"},
    )
    assert effective_requests(pod) == {"cpu": 2250, "memory": 2**30 + 120 * 2**20}


def test_pod_level_requests_replace_the_containers_sum_for_cpu_and_memory() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi", gpus="1")],
        resources={"requests": {"cpu": "3", "memory": "4Gi"}},
        overhead={"cpu": "100m"},
    )
    assert effective_requests(pod) == {"cpu": 3100, "memory": 4 * 2**30, "nvidia.com/gpu": 1}


def test_sub_millicore_and_sub_byte_requests_round_up() -> None:
    pod = make_pod(containers=[container(cpu="0.0001", memory="1500m")])
    assert effective_requests(pod) == {"cpu": 1, "memory": 2}


def test_init_container_gpus_count_like_any_resource() -> None:
    pod = make_pod(
        containers=[container("main", cpu="1", memory="1Gi", gpus="1")],
        init_containers=[container("burn-in", gpus="8")],
    )
    assert effective_requests(pod)["nvidia.com/gpu"] == 8


def test_a_pod_with_no_requests_has_none() -> None:
    assert effective_requests(make_pod(containers=[container()])) == {}


def test_effective_requests_refuses_garbled_quantities() -> None:
    pod = make_pod(init_containers=[container("setup", memory="1 Gi")])
    with pytest.raises(ValueError, match=r"spec\.initContainers\[0\]\.resources\.requests\.memory"):
        effective_requests(pod)


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        ("metadata.annotations[sunk.coreweave.com/priority]", "sunk.coreweave.com/priority"),
        ("spec.containers[].resources.requests.memory", "spec.containers[].resources.requests.memory"),
        ("spec.terminationGracePeriodSeconds", "spec.terminationGracePeriodSeconds"),
    ],
)
def test_the_metrics_reason_names_the_annotation_or_the_field(field: str, reason: str) -> None:
    assert Problem(field, "is wrong").reason == reason


def _guaranteed(cpu: str) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"terminationGracePeriodSeconds": 5, "containers": [{"name": "c", "resources": resources}]},
    }


def test_a_guaranteed_pod_with_whole_cpus_is_warned_about_or_refused() -> None:
    from tandem.scheduler.validation import static_cpu, validate

    assert "static CPU manager pins them" in static_cpu(_guaranteed("2"))
    assert static_cpu(_guaranteed("1500m")) == ""  # not whole CPUs: shared pool
    burstable = _guaranteed("2")
    burstable["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "4"
    assert static_cpu(burstable) == ""
    warned = validate(_guaranteed("2"), 30)
    assert warned.ok and warned.static_cpu
    refused = validate(_guaranteed("2"), 30, reject_static_cpu=True)
    assert not refused.ok and "--reject-static-cpu" in refused.message()
