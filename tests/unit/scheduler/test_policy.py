"""The tenant policy: parsed with clear errors, and each rule refusing what it should, in words
that name the annotation, the value and what is allowed. It fails closed: root, a Pod without a
user and a high priority need a rule that says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tandem import keys
from tandem.scheduler import jobspec
from tandem.scheduler import policy as p
from tandem.scheduler.validation import validate

TEXT = """
default:
  defaultUser: 1001
namespaces:
  team-a:
    userIds: ["1001", "2000-2999"]
    groupIds: ["1001"]
    accounts: ["k8s"]
    partitions: ["infer"]
    qos: ["normal"]
    reservations: []
    maxPriority: 1000
    nodes: "gpu-[000-003],cpu-001"
    exclusive: ["user", "mcs"]
    constraints: ["h100", "ib"]
    maxTimeoutMinutes: 1440
    workingDirs: ["/scratch/team-a", "/tmp"]
  no-default: {}
  root-ok:
    userIds: ["0-4294967294"]
  no-nodes:
    nodes: ""
"""
POLICY = p.parse(TEXT)


# --- fail closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "namespace", "annotations", "problem"),
    [
        (
            p.BUILTIN,
            "team-b",
            {keys.USER_ID: "0"},
            (keys.USER_ID, "0 (root) is not allowed in namespace team-b (a rule must list 0 in userIds)"),
        ),
        (
            p.BUILTIN,
            "team-b",
            {keys.USER_ID: "1001", keys.GROUP_ID: "0"},
            (keys.GROUP_ID, "0 (root) is not allowed in namespace team-b (a rule must list 0 in groupIds)"),
        ),
        (
            POLICY,
            "team-b",
            {keys.USER_ID: "+0"},
            (keys.USER_ID, "+0 (root) is not allowed in namespace team-b (a rule must list 0 in userIds)"),
        ),
        (
            p.BUILTIN,
            "team-b",
            {keys.USER_ID: "1001", keys.PRIORITY: "4294967294"},
            (keys.PRIORITY, f"4294967294 is above the maximum {p.DEFAULT_MAX_PRIORITY} in namespace team-b"),
        ),
        (
            p.BUILTIN,
            "team-b",
            {},
            (
                keys.USER_ID,
                "not set, and namespace team-b has no default user: set the annotation, "
                "or a defaultUser for the namespace in the tenant policy",
            ),
        ),
        (
            POLICY,
            "no-default",
            {},
            (
                keys.USER_ID,
                "not set, and namespace no-default has no default user: set the annotation, "
                "or a defaultUser for the namespace in the tenant policy",
            ),
        ),
    ],
)
def test_without_a_rule_root_a_missing_user_and_a_high_priority_are_refused(
    policy: p.Policy, namespace: str, annotations: dict[str, str], problem: tuple[str, str]
) -> None:
    assert problem in p.check(policy, namespace, annotations).problems


def test_a_namespace_without_a_rule_runs_as_the_default_user_and_the_group_follows() -> None:
    verdict = p.check(POLICY, "team-b", {})
    assert verdict.problems == () and dict(verdict.defaults) == {keys.USER_ID: "1001"}
    spec = jobspec.build_job_spec(_pod("team-b"), CFG, defaults=verdict.defaults)
    assert (spec.user_id, spec.group_id) == (1001, 1001)


def test_root_is_allowed_only_where_a_rule_lists_it_and_then_its_group_too() -> None:
    # SUNK's behaviour, spelled out: any id including root, root the default.
    verdict = p.check(POLICY, "root-ok", {})
    assert verdict.problems == () and dict(verdict.defaults) == {keys.USER_ID: "0"}
    assert p.check(POLICY, "root-ok", {keys.USER_ID: "0", keys.GROUP_ID: "0"}).problems == ()
    assert p.check(POLICY, "root-ok", {keys.PRIORITY: "10001"}).problems  # the cap still holds
    sunk = p.parse('default: {userIds: ["0-4294967294"], maxPriority: 4294967294}')
    assert p.check(sunk, "any", {keys.PRIORITY: "4294967294"}).problems == ()


def test_empty_text_is_the_builtin_policy() -> None:
    assert p.parse("") == p.BUILTIN
    assert p.parse("default: {}") == p.BUILTIN


# --- each rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "problem"),
    [
        (
            {keys.USER_ID: "0"},
            (keys.USER_ID, "0 is not allowed in namespace team-a (allowed: 1001, 2000-2999)"),
        ),
        (
            {keys.USER_ID: "1001", keys.GROUP_ID: "0"},
            (keys.GROUP_ID, "0 is not allowed in namespace team-a (allowed: 1001)"),
        ),
        ({keys.ACCOUNT: "root"}, (keys.ACCOUNT, "root is not allowed in namespace team-a (allowed: k8s)")),
        (
            {keys.PARTITION: "batch"},
            (keys.PARTITION, "batch is not allowed in namespace team-a (allowed: infer)"),
        ),
        ({keys.QOS: "high"}, (keys.QOS, "high is not allowed in namespace team-a (allowed: normal)")),
        (
            {keys.RESERVATION: "r1"},
            (keys.RESERVATION, "r1 is not allowed in namespace team-a (allowed: none)"),
        ),
        (
            {keys.PRIORITY: "4294967294"},
            (keys.PRIORITY, "4294967294 is above the maximum 1000 in namespace team-a"),
        ),
        (
            {keys.REQUIRED_NODES: "gpu-[002-005]"},
            (
                keys.REQUIRED_NODES,
                "gpu-[002-005] names gpu-[004-005], not allowed in namespace team-a "
                "(allowed: gpu-[000-003],cpu-001)",
            ),
        ),
        (
            {keys.EXCLUDED_NODES: "cpu-002"},
            (
                keys.EXCLUDED_NODES,
                "cpu-002 names cpu-002, not allowed in namespace team-a (allowed: gpu-[000-003],cpu-001)",
            ),
        ),
        (
            {keys.EXCLUSIVE: "none"},
            (keys.EXCLUSIVE, "none is not allowed in namespace team-a (allowed: user, mcs)"),
        ),
        (
            {keys.EXCLUSIVE: "true"},  # legacy true is a whole node: `none`
            (keys.EXCLUSIVE, "true is not allowed in namespace team-a (allowed: user, mcs)"),
        ),
        (
            {keys.CONSTRAINTS: "[h100*2&ib]|a100"},
            (
                keys.CONSTRAINTS,
                "[h100*2&ib]|a100 names feature(s) a100 not allowed in namespace team-a (allowed: h100, ib)",
            ),
        ),
        (
            {keys.TIMEOUT: "1441"},
            (keys.TIMEOUT, "1441 minutes is above the maximum 1440 in namespace team-a"),
        ),
        (
            {keys.CURRENT_WORKING_DIR: "/scratch/team-b"},
            (
                keys.CURRENT_WORKING_DIR,
                "/scratch/team-b is not allowed in namespace team-a "
                "(allowed: /scratch/team-a, /tmp and below)",
            ),
        ),
        (
            {keys.CURRENT_WORKING_DIR: "/scratch/team-a/../team-b"},
            (
                keys.CURRENT_WORKING_DIR,
                "/scratch/team-a/../team-b is not allowed in namespace team-a "
                "(allowed: /scratch/team-a, /tmp and below)",
            ),
        ),
        (
            {keys.CURRENT_WORKING_DIR: "/scratch/team-ab"},
            (
                keys.CURRENT_WORKING_DIR,
                "/scratch/team-ab is not allowed in namespace team-a "
                "(allowed: /scratch/team-a, /tmp and below)",
            ),
        ),
    ],
)
def test_each_rule_refuses_what_it_does_not_allow(
    annotations: dict[str, str], problem: tuple[str, str]
) -> None:
    assert problem in p.check(POLICY, "team-a", annotations).problems


def test_an_empty_node_rule_allows_neither_node_annotation() -> None:
    problems = p.check(POLICY, "no-nodes", {keys.USER_ID: "5", keys.REQUIRED_NODES: "gpu-000"}).problems
    assert problems == (
        (keys.REQUIRED_NODES, "gpu-000 names gpu-000, not allowed in namespace no-nodes (allowed: none)"),
    )


def test_allowed_values_pass_and_absent_fields_take_the_rules_defaults() -> None:
    allowed = {
        keys.USER_ID: "2500",
        keys.GROUP_ID: "1001",
        keys.PRIORITY: "1000",
        keys.REQUIRED_NODES: "gpu-[000-001]",
        keys.EXCLUDED_NODES: "cpu-001",
        keys.EXCLUSIVE: "user",
        keys.CONSTRAINTS: "h100&ib",
        keys.TIMEOUT: "60",
        keys.CURRENT_WORKING_DIR: "/scratch/team-a/run-1",
    }
    assert p.check(POLICY, "team-a", allowed).problems == ()
    assert (
        p.check(POLICY, "team-a", {keys.EXCLUSIVE: "false", keys.CURRENT_WORKING_DIR: "/tmp"}).problems == ()
    )
    defaulted = p.check(POLICY, "team-a", {})
    # The user defaults to the first allowed id, the group to the user's (an allowed group), and
    # the time limit to the maximum (the partition's default may be none at all).
    assert defaulted.problems == ()
    assert dict(defaulted.defaults) == {keys.USER_ID: "1001", keys.TIMEOUT: "1440"}
    # The group follows the user (SUNK's rule) when that id is an allowed group.
    assert keys.GROUP_ID not in p.check(POLICY, "team-a", {keys.USER_ID: "1001"}).defaults
    assert p.check(POLICY, "team-a", {keys.USER_ID: "2000"}).defaults[keys.GROUP_ID] == "1001"


def test_constraint_features_are_the_names_between_operators() -> None:
    assert p.constraint_features("[h100*2&ib]|a100,(x)&!y") == ["h100", "ib", "a100", "x", "y"]


# --- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("- a\n- b", "must be a mapping"),
        ("namespaces: {a: {userIds: [x]}}", "'x' is not an id or a range"),
        ("namespaces: {a: {userIds: ['5-1']}}", "runs backwards"),
        ("namespaces: {a: {maxPriority: -1}}", "maxPriority must be a whole number from 0 to 4294967294"),
        ("namespaces: {a: {acounts: [k8s]}}", "unknown rule(s) acounts"),
        ("defaults: {}", "unknown key(s) defaults"),
        ("a: [", "is not YAML"),
        ("default: {defaultUser: 0}", "default.defaultUser 0 is root: list 0 in userIds to allow it"),
        (
            "default: {defaultUser: 7, userIds: ['1001']}",
            "default.defaultUser 7 is not one of userIds (1001)",
        ),
        ("default: {defaultUser: x}", "default.defaultUser must be a whole number"),
        ("default: {exclusive: [always]}", "default.exclusive: 'always' is not one of none, ok, user"),
        ("default: {workingDirs: [scratch]}", "default.workingDirs: 'scratch' is not an absolute path"),
        ("default: {nodes: [gpu-1]}", "default.nodes must be a Slurm hostlist"),
        (
            "default: {nodes: 'gpu-[0-99999999]'}",
            "default.nodes: hostlist 'gpu-[0-99999999]' names 100000000",
        ),
        ("default: {maxTimeoutMinutes: 0}", "maxTimeoutMinutes must be a whole number from 1"),
    ],
)
def test_a_bad_policy_says_where(text: str, error: str) -> None:
    with pytest.raises(p.PolicyError) as raised:
        p.parse(text)
    assert error in str(raised.value)


# --- through validation --------------------------------------------------------------------------

CFG = jobspec.PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={})


def _pod(namespace: str = "team-a", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": "p", "uid": "u", "annotations": annotations},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }


def test_validation_refuses_by_the_policy_and_the_job_takes_its_defaults() -> None:
    refused = validate(_pod(**{keys.USER_ID: "0"}), 30, policy=POLICY)
    assert not refused.ok
    assert refused.message() == (
        f"invalid for Slurm: {keys.USER_ID}: 0 is not allowed in namespace team-a (allowed: 1001, 2000-2999)"
    )
    allowed = validate(_pod(), 30, policy=POLICY)
    assert allowed.ok
    spec = jobspec.build_job_spec(_pod(), CFG, allowed.requests, defaults=allowed.defaults)
    assert (spec.user_id, spec.group_id, spec.time_limit_minutes) == (1001, 1001, 1440)
    # No policy given: only what Slurm can be handed is checked (the scheduler always gives one).
    assert validate(_pod(**{keys.USER_ID: "0"}), 30).ok


def test_with_no_policy_at_all_a_pod_without_user_is_refused_in_words_that_say_how() -> None:
    refused = validate(_pod("team-b"), 30, policy=p.BUILTIN)
    assert refused.message() == (
        "invalid for Slurm: sunk.coreweave.com/user-id: not set, and namespace team-b has no default "
        "user: set the annotation, or a defaultUser for the namespace in the tenant policy"
    )


def test_the_charts_default_policy_is_the_builtin_one() -> None:
    # A chart install without a policy of its own behaves as a scheduler with none at all.
    values = Path(__file__).parents[3] / "helm" / "tandem" / "charts" / "scheduler" / "values.yaml"
    chart = yaml.safe_load(values.read_text())["policy"]
    assert p.parse(yaml.safe_dump(chart)) == p.BUILTIN
    assert chart["default"]["maxPriority"] == p.DEFAULT_MAX_PRIORITY
