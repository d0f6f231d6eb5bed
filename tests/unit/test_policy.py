"""The tenant policy: parsed with clear errors, and each rule refusing what it should, in words
that name the annotation, the value and what is allowed."""

from __future__ import annotations

import pytest

from tandem import keys
from tandem.scheduler import policy as p

TEXT = """
default: {}
namespaces:
  team-a:
    userIds: ["1001", "2000-2999"]
    groupIds: ["1001"]
    accounts: ["k8s"]
    partitions: ["infer"]
    qos: ["normal"]
    reservations: []
    maxPriority: 1000
"""
POLICY = p.parse(TEXT)


def test_an_unlisted_namespace_gets_the_default_and_empty_text_is_open() -> None:
    assert p.check(POLICY, "team-b", {keys.USER_ID: "0", keys.PRIORITY: "4294967294"}).problems == ()
    assert p.parse("") == p.OPEN


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
    ],
)
def test_each_rule_refuses_what_it_does_not_allow(
    annotations: dict[str, str], problem: tuple[str, str]
) -> None:
    assert problem in p.check(POLICY, "team-a", annotations).problems


def test_allowed_values_pass_and_absent_ids_default_to_the_first_allowed() -> None:
    verdict = p.check(POLICY, "team-a", {keys.USER_ID: "2500", keys.GROUP_ID: "1001", keys.PRIORITY: "1000"})
    assert verdict.problems == ()
    defaulted = p.check(POLICY, "team-a", {})
    # The user defaults to the first allowed id, and the group to the user's (an allowed group).
    assert defaulted.problems == () and dict(defaulted.defaults) == {keys.USER_ID: "1001"}
    # The group follows the user (SUNK's rule) when that id is an allowed group.
    assert p.check(POLICY, "team-a", {keys.USER_ID: "1001"}).defaults == {}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("- a\n- b", "must be a mapping"),
        ("namespaces: {a: {userIds: [x]}}", "'x' is not an id or a range"),
        ("namespaces: {a: {userIds: ['5-1']}}", "runs backwards"),
        ("namespaces: {a: {maxPriority: -1}}", "maxPriority must be a whole number"),
        ("namespaces: {a: {acounts: [k8s]}}", "unknown rule(s) acounts"),
        ("defaults: {}", "unknown key(s) defaults"),
        ("a: [", "is not YAML"),
    ],
)
def test_a_bad_policy_says_where(text: str, error: str) -> None:
    with pytest.raises(p.PolicyError, match=None) as raised:
        p.parse(text)
    assert error in str(raised.value)


def test_validation_refuses_by_the_policy_and_the_job_takes_its_defaults() -> None:
    from tandem.scheduler import jobspec
    from tandem.scheduler.validation import validate

    def pod(**annotations: str) -> dict[str, object]:
        return {
            "metadata": {"namespace": "team-a", "name": "p", "uid": "u", "annotations": annotations},
            "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            },
        }

    refused = validate(pod(**{keys.USER_ID: "0"}), 30, policy=POLICY)
    assert not refused.ok
    assert refused.message() == (
        f"invalid for Slurm: {keys.USER_ID}: 0 is not allowed in namespace team-a (allowed: 1001, 2000-2999)"
    )
    allowed = validate(pod(), 30, policy=POLICY)
    assert allowed.ok
    cfg = jobspec.PlaceholderConfig(script="#!/bin/sh\n", environment={}, gpu_types={})
    spec = jobspec.build_job_spec(pod(), cfg, allowed.requests, defaults=allowed.defaults)
    assert (spec.user_id, spec.group_id) == (1001, 1001)
    assert validate(pod(**{keys.USER_ID: "0"}), 30).ok  # no policy: anything goes
