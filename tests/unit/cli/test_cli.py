"""`kubectl tandem`: what a person reads for each kind of Pod and Node, decided from the facts
alone; and a clear error, not a traceback, when the cluster or the syncer cannot be asked."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from devstack import pki
from tandem import keys, mtls, placeholder, serving, topology
from tandem.cli import facts as f
from tandem.cli import main, output, views
from tandem.dra.slices import NodeDevices, SlicedDevice
from tandem.dra.taints import DeviceTaint
from tandem.kube import JSON
from tandem.mtls import TlsFiles
from tandem.slurm.models import Job, JobStatus, Node
from tandem.v1 import slurm_pb2, syncer_pb2, syncer_pb2_grpc

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


def test_an_elastic_gangs_extra_member_says_it_is_one() -> None:
    core = placeholder.PodRef("default", "pg:train", "pg-uid")
    extra = placeholder.job_name(placeholder.extra_ref(core, "uid-x"), "tandem")
    own = placeholder.job_name(core, "tandem")
    slurm = f.SlurmView(
        jobs={
            20: JobStatus(Job(20, extra, "RUNNING", admin_comment=extra)),
            7: JobStatus(Job(7, own, "RUNNING", admin_comment=own)),
        }
    )
    member = pod("train-2", 20, node="node-000", phase="Running", group="train")
    assert views.pod_row(facts(member, slurm=slurm), member, NOW)["GROUP"] == "pg:train (extra)"
    core_member = pod("train-0", 7, node="node-002", phase="Running", group="train")
    assert views.pod_row(facts(core_member, slurm=slurm), core_member, NOW)["GROUP"] == "pg:train"


def test_nodes_from_kubernetes_alone_and_with_slurms_view() -> None:
    running = pod("running", 13, node="node-000", phase="Running")
    rows = views.node_records(facts(running), NOW)
    assert rows == [
        {
            "NODE": "node-000",
            "SLURM NODE": "gpu-000",
            "SLURM STATE": "",
            "REASON": "",
            "LOCK": "locked_strict",
            "JOBS": [13],
            "GPUS": "",
            "GPUS USED": None,
            "GPUS TOTAL": None,
            "GPU HEALTH": "",
            "PODS": ["team-a/running"],
            "AGE": "",
        },
        {
            "NODE": "node-002",
            "SLURM NODE": "gpu-002",
            "SLURM STATE": "DRAINED",
            "REASON": "k8s: Node cordoned",
            "LOCK": "false",
            "JOBS": [],
            "GPUS": "",
            "GPUS USED": None,
            "GPUS TOTAL": None,
            "GPU HEALTH": "",
            "PODS": [],
            "AGE": "",
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
    rows = views.node_records(facts(running, slurm=slurm), NOW)
    assert (rows[0]["SLURM STATE"], rows[0]["JOBS"]) == ("ALLOCATED", [13, 20])
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
    rows = {r["NODE"]: r for r in views.node_rows(seen, NOW, wide=True)}
    assert rows["node-000"]["GPU HEALTH"] == "2 unhealthy"  # which ones: -o wide, describe node
    assert rows["node-000"]["UNHEALTHY GPUS"] == "3:k8s 5:slurm"
    assert rows["node-002"]["GPU HEALTH"] == "unknown"
    assert rows["node-002"]["UNHEALTHY GPUS"].startswith("unknown: no ResourceSlice")
    assert views.node_records(seen, NOW)[0]["GPU HEALTH"] == "3:k8s 5:slurm"
    health = views.describe_node(seen, "node-000", [], NOW)["GPU health"]
    assert [(g["GPU"], g["Health"]) for g in health if g["Health"] != "ok"] == [
        ("3", "tainted in Kubernetes: example.com/xid=79:NoSchedule"),
        ("5", "named by Slurm's drain reason"),
    ]
    seen.gpus = {"node-000": replace(devices, devices=tuple(replace(d, taints=()) for d in devices.devices))}
    seen.slurm = f.SlurmView(nodes={"gpu-000": Node("gpu-000", "IDLE")})
    assert views.node_rows(seen, NOW)[0]["GPU HEALTH"] == "ok"


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


class BatchingSyncer(syncer_pb2_grpc.SyncerServiceServicer):
    """A syncer's snapshot in two batched messages, the last marked done, then a change."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    def WatchSlurm(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        node = syncer_pb2.SlurmChange(
            node=slurm_pb2.SlurmNode(name="gpu-000", state=slurm_pb2.NODE_STATE_IDLE)
        )
        jobs = [syncer_pb2.SlurmChange(job=slurm_pb2.SlurmJob(job_id=j, name=f"job-{j}")) for j in (1, 2, 3)]
        yield syncer_pb2.WatchSlurmResponse(changes=[node, jobs[0]])
        yield syncer_pb2.WatchSlurmResponse(changes=jobs[1:], snapshot_done=True)
        yield syncer_pb2.WatchSlurmResponse(
            changes=[syncer_pb2.SlurmChange(job=slurm_pb2.SlurmJob(job_id=4))]
        )


def test_the_syncer_s_snapshot_is_read_whole_from_its_batches(tmp_path: Path) -> None:
    pki.ensure_grpc_pki(tmp_path)
    d = pki.grpc_dir(tmp_path)
    fake = BatchingSyncer()
    server = serving.GrpcServer(
        "127.0.0.1:0",
        [lambda s: syncer_pb2_grpc.add_SyncerServiceServicer_to_server(fake, s)],
        ["tandem.v1.SyncerService"],
        TlsFiles(str(d / "ca.crt"), str(d / f"{mtls.SYNCER}.crt"), str(d / f"{mtls.SYNCER}.key")),
    )
    server.start()
    try:
        operator = TlsFiles(
            str(d / "ca.crt"), str(d / f"{mtls.OPERATOR}.crt"), str(d / f"{mtls.OPERATOR}.key")
        )
        view = f.read_syncer(f"127.0.0.1:{server.port}", operator)
    finally:
        server.stop(0)
    assert [r.batched for r in fake.requests] == [True]
    assert sorted(view.jobs) == [1, 2, 3], "the snapshot, not what came after it"
    assert list(view.nodes) == ["gpu-000"]


def test_without_an_operator_certificate_the_syncer_is_not_asked() -> None:
    with pytest.raises(f.Unreachable, match=r"answers only certified callers: pass --grpc-ca"):
        f.read_syncer("127.0.0.1:1", None)


@pytest.mark.parametrize("command", [["get"], ["describe", "p"], ["describe", "node", "n"], ["nodes"]])
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
    rows = views.node_rows(seen, NOW, wide=True)
    assert rows[0]["GPU IDX=JOB"] == "0-1=12 2-3,6-7=13"
    assert rows[1]["GPU IDX=JOB"] == "disagree: Slurm has 8 gpu:h100"
    # 6 held; how many the Node has, only its ResourceSlice says (it publishes none here)
    assert (rows[0]["GPUS USED/TOTAL"], rows[1]["GPUS USED/TOTAL"]) == ("6/?", "disagree")
    assert views.node_records(seen, NOW)[0]["GPUS"] == "0-1=12 2-3,6-7=13"


def test_nodes_count_the_shares_of_a_shared_gpu_as_part_of_it() -> None:
    """Issue 54: two jobs' shards on GPU 0 (4 and 8 of 16) and one job's whole GPUs 1-7."""
    shards = "shard:h100:{n}({n}/16,0/16,0/16,0/16,0/16,0/16,0/16,0/16)"
    slurm = f.SlurmView(
        jobs={
            21: JobStatus(Job(21, "a", "RUNNING", nodes=("gpu-000",), gres_detail=(shards.format(n=4),))),
            22: JobStatus(Job(22, "b", "RUNNING", nodes=("gpu-000",), gres_detail=(shards.format(n=8),))),
            23: JobStatus(Job(23, "c", "RUNNING", nodes=("gpu-000",), gres_detail=("gpu:h100:7(IDX:1-7)",))),
        },
        nodes={"gpu-000": Node("gpu-000", "MIXED")},
    )
    seen = facts(slurm=slurm)
    shared = tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i, shares=16, capacity="shares") for i in range(8))
    seen.gpus = {"node-000": NodeDevices("node-000", "gpu.nvidia.com", "node-000", shared)}
    row = views.node_rows(seen, NOW, wide=True)[0]
    assert row["GPUS USED/TOTAL"] == "7.75/8"
    assert row["GPU IDX=JOB"] == "1-7=23 0=21:4 0=22:8"
    assert views.node_records(seen, NOW)[0]["GPUS USED"] == 7.75


def test_nodes_count_an_mps_share_of_a_gpu_as_part_of_it() -> None:
    """Issue 54: two jobs' MPS on GPU 0 (30 and 20 of 100) and one job's whole GPU 1."""
    mps = "mps:h100:{n}({n}/100,0/100)"
    slurm = f.SlurmView(
        jobs={
            31: JobStatus(Job(31, "a", "RUNNING", nodes=("gpu-002",), gres_detail=(mps.format(n=30),))),
            32: JobStatus(Job(32, "b", "RUNNING", nodes=("gpu-002",), gres_detail=(mps.format(n=20),))),
            33: JobStatus(Job(33, "c", "RUNNING", nodes=("gpu-002",), gres_detail=("gpu:h100:1(IDX:1)",))),
        },
        nodes={"gpu-002": Node("gpu-002", "MIXED")},
    )
    seen = facts(slurm=slurm)
    shared = tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i, shares=100, capacity="mps") for i in range(2))
    seen.gpus = {"node-002": NodeDevices("node-002", "gpu.nvidia.com", "node-002", shared)}
    (row,) = [r for r in views.node_rows(seen, NOW, wide=True) if r["NODE"] == "node-002"]
    assert row["GPUS USED/TOTAL"] == "1.5/2"
    assert row["GPU IDX=JOB"] == "1=33 0=32:20 0=31:30"


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
    assert views.node_records(seen, NOW)[0]["GPU HEALTH"] == "1:slurm 2:slurm"


def soak() -> f.Facts:
    """Node node-000 after a soak on the 8-node lab: 35 jobs (four holding 7 of its 8 GPUs, GPU 7
    tainted), 28 Pods; node-002 drained with a long reason."""
    gpus = {812: "0-1", 813: "2-3", 814: "4-5", 815: "6"}
    jobs = {
        j: JobStatus(
            Job(
                j,
                "soak",
                "RUNNING",
                nodes=("gpu-000",),
                gres_detail=(f"gpu:h100:{2 if '-' in gpus[j] else 1}(IDX:{gpus[j]})",) if j in gpus else (),
            )
        )
        for j in range(812, 847)
    }
    long_reason = "GPU 3 ECC errors climbing, RMA ticket INC-48213 opened by the night shift, do not resume"
    slurm = f.SlurmView(
        jobs=jobs,
        nodes={
            "gpu-000": Node("gpu-000", "MIXED"),
            "gpu-002": Node("gpu-002", "IDLE", ("DRAIN",), long_reason),
        },
    )
    pods = [
        pod(f"soak-infer-{i:04d}-7d9f8c6b5-x2k4q", 812 + i, node="node-000", phase="Running")
        for i in range(28)
    ]
    seen = facts(*pods, slurm=slurm)
    seen.nodes["node-000"]["metadata"]["creationTimestamp"] = "2026-11-10T10:00:00Z"
    xid = DeviceTaint("example.com/xid", "79", "NoSchedule")
    devices = tuple(SlicedDevice(f"gpu-{i}", "gpu", "h100", i, (xid,) if i == 7 else ()) for i in range(8))
    seen.gpus = {"node-000": NodeDevices("node-000", "gpu.nvidia.com", "node-000", devices)}
    return seen


def cli(seen: f.Facts, *argv: str) -> str:
    """What `kubectl tandem ARGV` prints for these facts."""
    kube = mock.Mock()
    kube.get.return_value = {"items": []}  # no Events
    with mock.patch.object(f, "gather", return_value=seen):
        return main.run(main.parser().parse_args(list(argv)), kube, "team-a")


SOAK_PODS = [f"team-a/soak-infer-{i:04d}-7d9f8c6b5-x2k4q" for i in range(28)]


def test_nodes_counts_jobs_and_pods_in_a_row_that_fits_a_terminal() -> None:
    """Issue 41: after a soak, one row listed 35 job ids and 28 Pod names, ~900 characters."""
    lines = cli(soak(), "nodes").splitlines()
    assert max(len(line) for line in lines) < 120
    assert re.split(r" {3,}", lines[0]) == [
        "NODE",
        "SLURM NODE",
        "SLURM STATE",
        "LOCK",
        "JOBS",
        "PODS",
        "GPUS USED/TOTAL",  # the header says what the number counts
        "GPU HEALTH",
        "AGE",
    ]
    assert lines[1].split()[:9] == [
        "node-000",
        "gpu-000",
        "MIXED",
        "locked_strict",
        "35",
        "28",
        "7/8",
        "1",
        "unhealthy",
    ]
    assert lines[2].split()[:8] == [
        "node-002",
        "gpu-002",
        "IDLE+DRAIN",
        "false",
        "0",
        "0",
        "<none>",
        "<none>",
    ]
    assert "812" not in "\n".join(lines) and "soak-infer" not in "\n".join(lines) and "RMA" not in lines[2]


def test_nodes_wide_lists_the_job_ids_the_pods_the_gpus_and_the_reason() -> None:
    lines = cli(soak(), "nodes", "-o", "wide").splitlines()
    assert re.split(r" {3,}", lines[0])[9:] == [
        "REASON",
        "JOB IDS",
        "GPU IDX=JOB",
        "UNHEALTHY GPUS",
        "POD NAMES",
    ]
    assert re.split(r" {3,}", lines[1])[9:] == [
        "<none>",
        "812-846",
        "0-1=812 2-3=813 4-5=814 6=815",
        "7:k8s",
        ",".join(SOAK_PODS),
    ]
    assert (
        "GPU 3 ECC errors climbing, RMA ticket INC-48213 opened by the night shift, do not resume" in lines[2]
    )


def test_nodes_json_keeps_every_job_and_pod() -> None:
    rows = {r["NODE"]: r for r in json.loads(cli(soak(), "nodes", "-o", "json"))}
    assert rows["node-000"]["JOBS"] == list(range(812, 847))
    assert rows["node-000"]["PODS"] == SOAK_PODS
    assert (rows["node-000"]["GPUS USED"], rows["node-000"]["GPUS TOTAL"]) == (7, 8)
    assert rows["node-000"]["GPUS"] == "0-1=812 2-3=813 4-5=814 6=815"
    assert rows["node-000"]["GPU HEALTH"] == "7:k8s"
    assert rows["node-002"]["REASON"].endswith("do not resume")


@pytest.mark.parametrize(
    "target", [["node", "node-000"], ["node/node-000"], ["nodes", "gpu-000"], ["no/gpu-000"]]
)
def test_describe_node_lists_every_job_with_its_gpus_every_pod_and_each_gpu(target: list[str]) -> None:
    text = cli(soak(), "describe", *target)
    lines = text.splitlines()
    assert lines[:6] == [
        "Node:           node-000",
        "Slurm node:     gpu-000",
        "Slurm state:    MIXED",
        "Reason:         (none)",
        "Lock:           locked_strict",
        "GPUs:           7 of 8 held by Slurm jobs",
    ]
    assert "Jobs:           (35 in total)" in lines and "Pods:           (28 in total)" in lines
    jobs = [line.split() for line in lines if line.startswith("  8")]
    assert [j[0] for j in jobs] == [str(j) for j in range(812, 847)]
    assert jobs[0] == ["812", "RUNNING", "0-1", SOAK_PODS[0]]
    assert jobs[3][:3] == ["815", "RUNNING", "6"] and jobs[-1] == ["846", "RUNNING", "<none>", "<none>"]
    pods = [line.split()[:4] for line in lines if line.startswith("  team-a ")]
    assert pods == [["team-a", p.split("/")[1], str(812 + i), "Running"] for i, p in enumerate(SOAK_PODS)]
    gpu = lines.index("GPU health:     (8 in total)")
    assert lines[gpu + 1].split() == ["GPU", "Device", "Job", "Health"]
    assert lines[gpu + 3].split() == ["0", "gpu-0", "812", "ok"]
    assert lines[gpu + 10].split() == [
        "7",
        "gpu-7",
        "<none>",
        "tainted",
        "in",
        "Kubernetes:",
        "example.com/xid=79:NoSchedule",
    ]
    assert max(len(line) for line in lines) < 120


def test_describe_node_of_an_idle_drained_node_and_json() -> None:
    story = json.loads(cli(soak(), "describe", "node", "node-002", "-o", "json"))
    assert story["Slurm state"] == "IDLE+DRAIN" and story["Reason"].endswith("do not resume")
    assert story["Jobs"] == [] and story["Pods"] == []
    assert "Jobs:           (none)" in cli(soak(), "describe", "node", "node-002")
    with pytest.raises(f.Unreachable, match='node "node-009" not found'):
        cli(soak(), "describe", "node", "node-009")


@pytest.mark.parametrize(
    ("words", "target"),
    [
        (("infer", None), ("pod", "infer")),
        (("node", None), ("pod", "node")),  # one word is a Pod's name, as before
        (("pod", "infer"), ("pod", "infer")),
        (("po/infer", None), ("pod", "infer")),
        (("Node", "node-000"), ("node", "node-000")),
        (("node/node-000", None), ("node", "node-000")),
    ],
)
def test_describe_reads_a_pod_name_type_name_and_type_slash_name(
    words: tuple[str, str | None], target: tuple[str, str]
) -> None:
    assert main.describe_target(*words) == target


@pytest.mark.parametrize("words", [("deployment", "x"), ("svc/x", None), ("node/", None)])
def test_describe_of_anything_else_is_a_clear_error(words: tuple[str, str | None]) -> None:
    with pytest.raises(main.UsageError, match="describe"):
        main.describe_target(*words)


def test_nodes_gpu_counts_say_which_side_is_unknown() -> None:
    """Without the syncer, which GPUs jobs hold is unknown; without a ResourceSlice, how many."""
    seen = soak()
    seen.slurm = None
    rows = views.node_rows(seen, NOW)
    assert (rows[0]["SLURM STATE"], rows[0]["JOBS"], rows[0]["GPUS USED/TOTAL"]) == ("", "28", "?/8")
    seen = soak()
    seen.gpus = {}
    assert views.node_rows(seen, NOW)[0]["GPUS USED/TOTAL"] == "7/?"
    assert views.node_rows(seen, NOW)[1]["GPUS USED/TOTAL"] == ""  # no GPU published, none held


@pytest.mark.parametrize("target", [["infer"], ["pod", "infer"], ["pods/infer"]])
def test_describe_pod_still_tells_a_pods_story(target: list[str]) -> None:
    the_pod = pod("infer", 812, node="node-000", phase="Running")
    kube = mock.Mock()
    kube.get.side_effect = lambda path, params=None: (
        the_pod if path == "/api/v1/namespaces/team-a/pods/infer" else {"items": []}
    )
    with mock.patch.object(f, "gather", return_value=soak()):
        text = main.run(main.parser().parse_args(["describe", *target]), kube, "team-a")
    assert text.startswith("Pod:            team-a/infer\n")
    assert "  slurm node:     gpu-000" in text


def test_describe_of_an_unknown_type_says_so_before_asking_the_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main.main(["--kubeconfig", str(tmp_path / "nope"), "describe", "deployment", "x"]) == 1
    assert capsys.readouterr().err == (
        'error: cannot describe "deployment": a pod (POD, pod POD, pod/POD) or a node (node NODE)\n'
    )


def test_topology_tells_which_nodes_miss_a_levels_label_and_what_slurm_makes_of_it() -> None:
    """Issue 53: racks labelled without a zone are racks in Slurm, and the user is told why."""
    zone, rack = "topology.kubernetes.io/zone", "topology.kubernetes.io/rack"
    t = topology.build(
        (zone, rack), topology.TREE, {"cpu-001": {rack: "r1"}, "cpu-002": {rack: "r1"}, "cpu-003": {}}
    )
    facts = f.Facts([], {}, {"node-001": "cpu-001", "node-002": "cpu-002", "node-003": "cpu-003"}, {})
    rows = views.topology_rows(facts, t)
    assert [r["DOMAIN"].strip() for r in rows if r["LABEL"] == zone] == ["(no label)", "(cpu-003 alone)"]
    assert views.missing_labels(facts, t) == [
        "3 Node(s) without a topology.kubernetes.io/zone label: node-001, node-002, node-003: one"
        " topology.kubernetes.io/zone domain for those with a narrower label, each its own for those"
        " with none.",
        "1 Node(s) without a topology.kubernetes.io/rack label: node-003: each its own"
        " topology.kubernetes.io/rack domain (no narrower label says which share one).",
    ]
