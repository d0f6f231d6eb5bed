"""`kubectl tandem`: what a person reads for each kind of Pod and Node, decided from the facts
alone; and a clear error, not a traceback, when the cluster or the syncer cannot be asked."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from devstack import pki
from tandem import keys
from tandem.cli import facts as f
from tandem.cli import main, output, views
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.dra.taints import DeviceTaint
from tandem.kube import JSON
from tandem.mtls import TlsFiles
from tandem.slurm.models import Job, JobStatus, Node

NOW = dt.datetime(2026, 11, 23, 10, 0, tzinfo=dt.UTC)


def pod(
    name: str,
    job: int | None = None,
    node: str = "",
    nominated: str = "",
    reason: str = "",
    message: str = "",
    group: str = "",
    phase: str = "Pending",
    **annotations: str,
) -> JSON:
    ann = dict(annotations)
    if job is not None:
        ann[keys.JOB_ID_ANNOTATION] = str(job)
    p: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "annotations": ann,
            "creationTimestamp": "2026-11-23T09:55:00Z",
        },
        "spec": {"schedulerName": "tandem"},
        "status": {"phase": phase},
    }
    if node:
        p["spec"]["nodeName"] = node
    if nominated:
        p["status"]["nominatedNodeName"] = nominated
    if reason:
        p["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        ]
    if group:
        p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def slurmd(slurm_node: str, node: str, lock: str = "false") -> JSON:
    return {
        "metadata": {"name": slurm_node, "namespace": "slurm", "annotations": {keys.LOCK_KEY: lock}},
        "spec": {"nodeName": node},
    }


def facts(*pods: JSON, slurm: f.SlurmView | None = None) -> f.Facts:
    daemons = [slurmd("gpu-000", "node-000", "locked_strict"), slurmd("gpu-002", "node-002")]
    return f.Facts(
        pods=list(pods),
        slurmd={p["metadata"]["name"]: p for p in daemons},
        slurm_node_of={p["spec"]["nodeName"]: p["metadata"]["name"] for p in daemons},
        nodes={
            "node-000": {"metadata": {"name": "node-000"}},
            "node-002": {
                "metadata": {"name": "node-002", "annotations": {keys.DRAIN_ANNOTATION: "k8s: Node cordoned"}}
            },
        },
        slurm=slurm,
    )


PENDING_MESSAGE = (
    "Slurm job 12 in partition gpu is pending: Resources; position 2 of 4; "
    "expected to start at 2026-11-23T10:42Z"
)


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        (
            pod("waiting", 12, reason="SlurmJobPending", message=PENDING_MESSAGE),
            {"JOB": "12", "JOB STATE": "PENDING", "REASON": "Resources", "QUEUE": "2 of 4", "NODE": ""},
        ),
        (
            pod("bad", reason="ValidationFailed", message="sunk.coreweave.com/user-id: 0 is not allowed"),
            {"JOB": "", "JOB STATE": "", "REASON": "ValidationFailed", "QUEUE": "", "LOCK": ""},
        ),
        (
            pod("running", 13, node="node-000", phase="Running"),
            {"JOB STATE": "RUNNING", "REASON": "", "SLURM NODE": "gpu-000", "LOCK": "locked_strict"},
        ),
        (
            pod("starting", 14, nominated="node-000"),
            {"JOB STATE": "RUNNING", "REASON": "Prolog", "SLURM NODE": "gpu-000", "NODE": "node-000"},
        ),
        (
            pod("member-0", reason="WaitingForGroupMembers", message="1 of 2", group="train"),
            {"GROUP": "pg:train", "REASON": "WaitingForGroupMembers", "JOB": ""},
        ),
        (
            pod("done", 15, node="node-000", phase="Succeeded"),
            {"JOB": "15", "JOB STATE": "", "REASON": "Succeeded", "NODE": "node-000"},
        ),
    ],
    ids=["pending", "invalid", "running", "prolog", "gang member", "finished"],
)
def test_get_row(the_pod: JSON, expected: dict[str, str]) -> None:
    row = views.pod_row(facts(the_pod), the_pod, NOW)
    assert {k: row[k] for k in expected} == expected
    assert row["AGE"] == "5m"


def test_slurms_own_state_wins_when_the_syncer_was_asked() -> None:
    the_pod = pod("waiting", 12, reason="SlurmJobPending", message=PENDING_MESSAGE)
    slurm = f.SlurmView(jobs={12: JobStatus(Job(12, "x", "COMPLETING"))})
    assert views.pod_row(facts(the_pod, slurm=slurm), the_pod, NOW)["JOB STATE"] == "COMPLETING"


def test_nodes_from_kubernetes_alone_and_with_slurms_view() -> None:
    running = pod("running", 13, node="node-000", phase="Running")
    rows = views.node_rows(facts(running))
    assert rows == [
        {
            "NODE": "node-000",
            "SLURM NODE": "gpu-000",
            "SLURM STATE": "",
            "REASON": "",
            "LOCK": "locked_strict",
            "JOBS": "13",
            "GPUS": "",
            "GPU HEALTH": "",
            "PODS": "team-a/running",
        },
        {
            "NODE": "node-002",
            "SLURM NODE": "gpu-002",
            "SLURM STATE": "DRAINED",
            "REASON": "k8s: Node cordoned",
            "LOCK": "false",
            "JOBS": "",
            "GPUS": "",
            "GPU HEALTH": "",
            "PODS": "",
        },
    ]
    slurm = f.SlurmView(
        jobs={
            13: JobStatus(Job(13, "x", "RUNNING", nodes=("gpu-000",))),
            20: JobStatus(Job(20, "y", "RUNNING", nodes=("gpu-000",))),
        },
        nodes={
            "gpu-000": Node("gpu-000", "ALLOCATED"),
            "gpu-002": Node("gpu-002", "IDLE", ("DRAIN",), "k8s: Node cordoned"),
        },
    )
    rows = views.node_rows(facts(running, slurm=slurm))
    assert (rows[0]["SLURM STATE"], rows[0]["JOBS"]) == ("ALLOCATED", "13,20")
    assert rows[0]["GPUS"] == ""
    assert (rows[1]["SLURM STATE"], rows[1]["REASON"]) == ("IDLE+DRAIN", "k8s: Node cordoned")


def test_nodes_show_each_unhealthy_gpu_and_the_side_that_says_so() -> None:
    """Issue 37: GPU 3 tainted in Kubernetes (so Tandem drained the Slurm node), GPU 5 named by an
    admin's Slurm drain (so Tandem tainted its device, which is not Kubernetes' own word)."""
    xid = DeviceTaint("example.com/xid", "79", "NoSchedule")
    own = DeviceTaint(keys.SLURM_GPU_TAINT_KEY, "gpu-5", "NoSchedule")
    devices = NodeDevices(
        "node-000",
        "gpu.nvidia.com",
        "node-000",
        tuple(
            SlicedDevice(f"gpu-{i}", "gpu", "h100", i, (xid,) if i == 3 else (own,) if i == 5 else ())
            for i in range(8)
        ),
    )
    running = pod("running", 13, node="node-000", phase="Running")
    slurm = f.SlurmView(nodes={"gpu-000": Node("gpu-000", "IDLE", ("DRAIN",), "xid 79 on GPU 5", "root")})
    seen = facts(running, slurm=slurm)
    seen.gpus = {"node-000": devices, "node-002": "no ResourceSlice of gpu.nvidia.com for Node node-002"}
    rows = {r["NODE"]: r for r in views.node_rows(seen)}
    assert rows["node-000"]["GPU HEALTH"] == "3:k8s 5:slurm"
    assert rows["node-002"]["GPU HEALTH"].startswith("unknown: no ResourceSlice")
    seen.gpus = {"node-000": replace(devices, devices=tuple(replace(d, taints=()) for d in devices.devices))}
    seen.slurm = f.SlurmView(nodes={"gpu-000": Node("gpu-000", "IDLE")})
    assert views.node_rows(seen)[0]["GPU HEALTH"] == "ok"


def test_describe_tells_the_whole_story_of_a_pending_pod() -> None:
    the_pod = pod("waiting", 12, reason="SlurmJobPending", message=PENDING_MESSAGE, **{keys.PARTITION: "gpu"})
    event = {
        "type": "Normal",
        "reason": "SlurmJobSubmitted",
        "message": "job 12",
        "lastTimestamp": "2026-11-23T09:55:01Z",
    }
    story = views.describe(facts(the_pod), the_pod, [event], [], NOW)
    text = output.story(story)
    assert story["Validation"] == "passed"
    assert story["Slurm job"] == {"id": "12", "state": "PENDING", "partition": "gpu"}
    assert story["Waiting"] == {
        "reason": "Resources",
        "queue position": "2 of 4",
        "expected start": "2026-11-23T10:42Z",
    }
    assert "4m ago  Normal SlurmJobSubmitted: job 12" in text


def test_describe_of_a_refused_pod_says_why_and_no_queue() -> None:
    the_pod = pod("bad", reason="ValidationFailed", message="sunk.coreweave.com/user-id: 0 is not allowed")
    story = views.describe(facts(the_pod), the_pod, [], [], NOW)
    assert story["Validation"] == "refused: sunk.coreweave.com/user-id: 0 is not allowed"
    assert "Waiting" not in story and story["Slurm job"]["id"] == "(not submitted)"


def test_describe_of_a_running_pod_shows_its_nodes_lock_history() -> None:
    the_pod = pod("running", 13, node="node-000", phase="Running")
    locked = {
        "type": "Normal",
        "reason": keys.NODE_LOCKED_EVENT,
        "message": "Locked (locked_strict) for Slurm job 13",
        "lastTimestamp": "2026-11-23T09:56:00Z",
    }
    unrelated = {"type": "Normal", "reason": "Starting", "message": "kubelet"}
    story = views.describe(facts(the_pod), the_pod, [], views.lock_events([locked, unrelated]), NOW)
    assert story["Node"]["lock"] == "locked_strict"
    assert story["Node"]["lock history"] == [
        "  4m ago  Normal NodeLocked: Locked (locked_strict) for Slurm job 13"
    ]


def test_a_table_pads_columns_and_marks_empty_cells() -> None:
    assert output.table(("A", "LONGER"), [{"A": "x", "LONGER": ""}]) == "A   LONGER\nx   <none>"


def test_tandems_pods_are_found_by_their_marks() -> None:
    assert f.is_tandems(pod("p", 1), set())
    assert f.is_tandems(pod("p", reason="ValidationFailed"), set())
    assert not f.is_tandems(pod("p"), set())
    assert f.is_tandems(pod("p"), {"tandem"})


def test_an_unreachable_cluster_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: team-a}}]\n"
    )
    assert main.main(["--kubeconfig", str(kubeconfig), "get"]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("error: cannot reach the Kubernetes API: GET /api/v1/namespaces/team-a/pods:")
        and err[-1] == "\n"
    )


def test_a_missing_kubeconfig_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.main(["--kubeconfig", str(tmp_path / "nope"), "nodes"]) == 1
    assert "nope does not exist" in capsys.readouterr().err


def test_an_unreachable_syncer_is_named(tmp_path: Path) -> None:
    pki.ensure_grpc_pki(tmp_path)
    d = pki.grpc_dir(tmp_path)
    operator = TlsFiles(str(d / "ca.crt"), str(d / "tandem-operator.crt"), str(d / "tandem-operator.key"))
    with pytest.raises(f.Unreachable, match=r"cannot read Slurm from the syncer at 127.0.0.1:1: UNAVAILABLE"):
        f.read_syncer("127.0.0.1:1", operator)


def test_without_an_operator_certificate_the_syncer_is_not_asked() -> None:
    with pytest.raises(f.Unreachable, match=r"answers only certified callers: pass --grpc-ca"):
        f.read_syncer("127.0.0.1:1", None)


@pytest.mark.parametrize("command", [["get"], ["describe", "p"], ["nodes"]])
def test_the_output_flag_goes_before_or_after_the_subcommand(command: list[str]) -> None:
    assert main.parser().parse_args([*command, "-o", "yaml"]).output == "yaml"
    assert main.parser().parse_args(["-o", "json", *command]).output == "json"


def test_the_cli_reads_slurmd_pods_only_in_the_slurmd_namespace() -> None:
    """Before: every Pod labelled app.kubernetes.io/name=slurmd, in any namespace, was taken for a
    Slurm node; a tenant's Pod of the same name replaced the real one (issue 19)."""
    asked: list[str] = []
    impostor = {**slurmd("gpu-000", "node-009"), "metadata": {"name": "gpu-000", "namespace": "tenant"}}

    def get(path: str, params: dict[str, str] | None = None) -> JSON:
        asked.append(path)
        if path == "/api/v1/namespaces/tandem-slurm/pods":
            return {
                "items": [
                    impostor,
                    {
                        **slurmd("gpu-000", "node-000"),
                        "metadata": {
                            "name": "gpu-000",
                            "namespace": "tandem-slurm",
                            "labels": {keys.SLURMD_POD_LABEL: keys.SLURMD_POD_LABEL_VALUE},
                        },
                    },
                ]
            }
        return {"items": []}

    kube = mock.Mock()
    kube.get.side_effect = get
    found = f.gather(kube, "default", slurmd_namespace="tandem-slurm")
    assert "/api/v1/pods" not in asked  # no Pod of any other namespace is read as a slurmd
    assert found.slurm_node_of == {"node-000": "gpu-000"}


def test_nodes_show_which_gpu_indices_each_job_holds_and_a_disagreeing_node() -> None:
    """Issue 23: the indices are Slurm's IDX, the devices a claim of the job's Pod is given."""
    slurm = f.SlurmView(
        jobs={
            12: JobStatus(Job(12, "x", "RUNNING", nodes=("gpu-000",), gres_detail=("gpu:h100:2(IDX:0-1)",))),
            13: JobStatus(
                Job(13, "y", "RUNNING", nodes=("gpu-000",), gres_detail=("gpu:h100:4(IDX:2-3,6-7)",))
            ),
            14: JobStatus(
                Job(14, "z", "COMPLETED", nodes=("gpu-000",), gres_detail=("gpu:h100:2(IDX:4-5)",))
            ),
        },
        nodes={"gpu-000": Node("gpu-000", "MIXED"), "gpu-002": Node("gpu-002", "IDLE")},
    )
    seen = facts(slurm=slurm)
    seen.nodes["node-002"]["status"] = {
        "conditions": [
            {"type": keys.GPU_MISMATCH_CONDITION, "status": "True", "message": "Slurm has 8 gpu:h100"}
        ]
    }
    rows = views.node_rows(seen)
    assert rows[0]["GPUS"] == "0-1=12 2-3,6-7=13"
    assert rows[1]["GPUS"] == "disagree: Slurm has 8 gpu:h100"


def test_describe_names_the_pod_s_claims_and_its_job_s_gpus() -> None:
    the_pod = pod("infer", 12, node="node-000", phase="Running")
    the_pod["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "two"}]
    the_pod["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "infer-gpus-x7"}]
    slurm = f.SlurmView(
        jobs={
            12: JobStatus(Job(12, "x", "RUNNING", nodes=("gpu-000",), gres_detail=("gpu:h100:2(IDX:4-5)",)))
        }
    )
    story = views.describe(facts(the_pod, slurm=slurm), the_pod, [], [], NOW)
    assert story["Slurm job"]["gpus"] == "gpu:h100:2(IDX:4-5)"
    assert story["GPU claims"] == ["gpus: ResourceClaim infer-gpus-x7"]


def test_describe_names_the_claim_made_for_a_pods_nvidia_gpu() -> None:
    the_pod = pod("infer", 12, node="node-002", phase="Running")
    the_pod["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "infer-extended-resources-abcde",
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-2",
            }
        ],
    }
    story = views.describe(facts(the_pod), the_pod, [], [], NOW)
    assert story["GPU claims"] == [
        "nvidia.com/gpu of container main:"
        " ResourceClaim infer-extended-resources-abcde, request container-0-request-2"
    ]


def test_gpu_health_reads_a_slurm_drain_from_the_node_without_the_syncer() -> None:
    running = pod("running", 13, node="node-000", phase="Running")
    seen = facts(running)
    seen.nodes["node-000"]["metadata"]["annotations"] = {keys.DRAIN_ANNOTATION: "GPUs 1-2 ECC"}
    seen.gpus = {"node-000": NodeDevices("node-000", "gpu.nvidia.com", "node-000", ())}
    assert views.node_rows(seen)[0]["GPU HEALTH"] == "1:slurm 2:slurm"
