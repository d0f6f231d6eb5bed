"""`kubectl tandem get` beside each Pod's Slurm job shows the Kueue Workload that admitted its Job
(or its Pod group) and where that admission stands; a cluster without Kueue sees no new column."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from tandem.cli import kueue
from tandem.kube import JSON
from tests.unit.cli.test_cli import cli, facts, pod


def workload(name: str, owner_uid: str, **conditions: str) -> JSON:
    return {
        "metadata": {"name": name, "ownerReferences": [{"kind": "Job", "name": "train", "uid": owner_uid}]},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conditions.items()]},
    }


def owned(the_pod: JSON, uid: str, owner_uid: str) -> JSON:
    the_pod["metadata"] |= {
        "uid": uid,
        "ownerReferences": [{"kind": "Job", "name": "train", "uid": owner_uid}],
    }
    return the_pod


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        ({}, "Pending"),
        ({"QuotaReserved": "False"}, "Pending"),
        ({"QuotaReserved": "True"}, "QuotaReserved"),
        ({"QuotaReserved": "True", "Admitted": "True"}, "Admitted"),
        ({"QuotaReserved": "False", "Admitted": "False", "Evicted": "True"}, "Evicted"),
        ({"Admitted": "True", "Finished": "True"}, "Finished"),
    ],
)
def test_the_state_is_the_furthest_condition_that_holds(conditions: dict[str, str], state: str) -> None:
    assert kueue.state_of(workload("w", "j", **conditions)) == state


def test_get_shows_the_workload_of_a_jobs_pod_and_of_a_pod_groups_member() -> None:
    job_pod = owned(pod("train-0", 12, node="node-000", phase="Running"), "p1", "job-1")
    lws_pod: dict[str, Any] = pod("lws-0", 13, node="node-002", phase="Running")
    lws_pod["metadata"]["uid"] = "p2"
    plain = pod("plain", 14, node="node-000", phase="Running")
    seen = replace(
        facts(job_pod, lws_pod, plain),
        workloads=kueue.by_owner(
            [
                workload("job-train-7f3a2", "job-1", QuotaReserved="True", Admitted="True"),
                {
                    "metadata": {"name": "lws-group-0", "ownerReferences": [{"kind": "Pod", "uid": "p2"}]},
                    "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
                },
            ]
        ),
    )
    lines = cli(seen, "get").splitlines()
    header = re.split(r" {3,}", lines[0])
    assert header[header.index("JOB") + 1] == "WORKLOAD"
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "job-train-7f3a2 (Admitted)" in rows["train-0"]
    assert "lws-group-0 (QuotaReserved)" in rows["lws-0"]
    assert re.split(r" {3,}", rows["plain"])[header.index("WORKLOAD")] == "<none>"


def test_without_kueue_get_has_no_workload_column() -> None:
    lines = cli(facts(pod("train-0", 12, node="node-000", phase="Running")), "get").splitlines()
    assert "WORKLOAD" not in lines[0]
