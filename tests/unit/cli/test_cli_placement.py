"""`kubectl tandem describe pod --scheduler-address`: what the scheduler itself says of the Pod
(GetPlacement), asked of a real gRPC server over mutual TLS; and when it cannot say (no answer, no
certificate, not its Pod), one line in its place while describe tells the rest."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from unittest import mock

import grpc
import pytest

from devstack import pki
from tandem import mtls, serving
from tandem.cli import facts as f
from tandem.cli import main
from tandem.mtls import TlsFiles
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc
from tests.unit.cli.test_cli import PENDING_MESSAGE, pod, soak

RUNNING = pod("infer", 812, node="node-000", phase="Running")
WAITING = pod("waiting", 12, reason="SlurmJobPending", message=PENDING_MESSAGE)
# Not the scheduler's: it answers NOT_FOUND for a Pod it does not hold.
STRANGER = pod("stranger")
PODS = {p["metadata"]["name"]: p for p in (RUNNING, WAITING, STRANGER)}


class FakeScheduler(scheduler_pb2_grpc.SchedulerServiceServicer):
    """A bound Pod and a pending one, as the scheduler's placements module answers them."""

    ANSWERS: ClassVar[dict[str, scheduler_pb2.Placement]] = {
        "infer": scheduler_pb2.Placement(
            job_id=812,
            slurm_node="gpu-000",
            kube_node="node-000",
            state=scheduler_pb2.PLACEMENT_STATE_BOUND,
        ),
        "waiting": scheduler_pb2.Placement(
            job_id=12, state=scheduler_pb2.PLACEMENT_STATE_PENDING, reason=PENDING_MESSAGE
        ),
    }

    def __init__(self) -> None:
        self.requests: list[scheduler_pb2.GetPlacementRequest] = []

    def GetPlacement(self, request: Any, context: Any) -> Any:
        self.requests.append(request)
        found = self.ANSWERS.get(request.pod_name)
        if found is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no Pod {request.pod_namespace}/{request.pod_name}")
            raise AssertionError("abort raises")
        placement = scheduler_pb2.Placement()
        placement.CopyFrom(found)
        placement.pod_namespace, placement.pod_name = request.pod_namespace, request.pod_name
        return scheduler_pb2.GetPlacementResponse(placement=placement)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Making a CA and its certificates takes a second: once for the module.
    made = tmp_path_factory.mktemp("pki")
    pki.ensure_grpc_pki(made)
    return pki.grpc_dir(made)


def operator_flags(d: Path) -> list[str]:
    return [
        f"--grpc-ca={d / 'ca.crt'}",
        f"--grpc-cert={d / f'{mtls.OPERATOR}.crt'}",
        f"--grpc-key={d / f'{mtls.OPERATOR}.key'}",
    ]


def start_scheduler(d: Path, fake: FakeScheduler, host: str = "127.0.0.1") -> serving.GrpcServer:
    # tandem.serving.GrpcServer is the grpc.aio server now (tandem.aioserving was folded into it).
    server = serving.GrpcServer(
        f"{host}:0",
        [lambda s: scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server(fake, s)],
        ["tandem.v1.SchedulerService"],
        TlsFiles(str(d / "ca.crt"), str(d / f"{mtls.SCHEDULER}.crt"), str(d / f"{mtls.SCHEDULER}.key")),
    )
    server.start()
    return server


@pytest.fixture
def scheduler(certs: Path) -> Iterator[tuple[FakeScheduler, str]]:
    fake = FakeScheduler()
    server = start_scheduler(certs, fake)
    try:
        yield fake, f"127.0.0.1:{server.port}"
    finally:
        server.stop(0)


def describe(*argv: str) -> str:
    """What `kubectl tandem ARGV describe NAME` prints, the last word naming one of PODS."""
    kube = mock.Mock()
    kube.get.side_effect = lambda path, params=None: (
        PODS[path.rsplit("/", 1)[1]] if "/pods/" in path else {"items": []}
    )
    with mock.patch.object(f, "gather", return_value=soak()):
        return main.run(main.parser().parse_args(list(argv)), kube, "team-a")


def section(text: str) -> list[str]:
    """The `Placement` section's lines: its heading and what is indented under it."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Placement:"))
    rest = lines[at + 1 :]
    under = next((i for i, line in enumerate(rest) if not line.startswith(" ")), len(rest))
    return [lines[at], *rest[:under]]


def assert_the_rest_is_told(text: str) -> None:
    for heading in ("Pod:", "Scheduled:", "Slurm job:", "Events:"):
        assert re.search(rf"^{heading}", text, re.M), (heading, text)


def test_describe_shows_where_the_scheduler_placed_a_bound_pod(
    certs: Path, scheduler: tuple[FakeScheduler, str]
) -> None:
    fake, address = scheduler
    text = describe("--scheduler-address", address, *operator_flags(certs), "describe", "infer")
    print(text)
    assert section(text) == [
        "Placement:",
        "  state:          BOUND",
        "  slurm job:      812",
        "  slurm node:     gpu-000",
        "  node:           node-000",
    ]
    # The scheduler's word sits by the condition it wrote, before the job's own section.
    headings = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith(" ")]
    assert headings.index("Placement") == headings.index("Scheduled") + 1 == headings.index("Slurm job") - 1
    assert [(r.pod_namespace, r.pod_name) for r in fake.requests] == [("team-a", "infer")]


def test_describe_shows_a_pending_pod_s_reason_and_no_node(
    certs: Path, scheduler: tuple[FakeScheduler, str]
) -> None:
    _, address = scheduler
    text = describe("--scheduler-address", address, *operator_flags(certs), "describe", "pod/waiting")
    assert section(text) == [
        "Placement:",
        "  state:          PENDING",
        "  slurm job:      12",
        f"  reason:         {PENDING_MESSAGE}",
    ]


def test_describe_yaml_carries_the_placement(certs: Path, scheduler: tuple[FakeScheduler, str]) -> None:
    _, address = scheduler
    out = describe("--scheduler-address", address, *operator_flags(certs), "describe", "infer", "-o", "yaml")
    assert "Placement:\n  state: BOUND\n  slurm job: '812'\n" in out


def test_a_pod_that_is_not_the_scheduler_s_is_one_line(
    certs: Path, scheduler: tuple[FakeScheduler, str]
) -> None:
    _, address = scheduler
    text = describe("--scheduler-address", address, *operator_flags(certs), "describe", "stranger")
    assert section(text) == [
        f"Placement:      not the scheduler's Pod (the scheduler at {address}: no Pod team-a/stranger)"
    ]
    assert_the_rest_is_told(text)


def test_an_unreachable_scheduler_is_one_line_and_describe_tells_the_rest(certs: Path) -> None:
    text = describe("--scheduler-address", "127.0.0.1:1", *operator_flags(certs), "describe", "infer")
    [line] = section(text)
    assert line.startswith("Placement:      cannot ask the scheduler at 127.0.0.1:1: UNAVAILABLE: "), line
    assert_the_rest_is_told(text)
    assert "  slurm node:     gpu-000" in text  # the Node section, from the cluster alone


def test_without_an_operator_certificate_the_line_names_the_flags(
    monkeypatch: pytest.MonkeyPatch, scheduler: tuple[FakeScheduler, str]
) -> None:
    fake, address = scheduler
    for name in ("CA", "CERT", "KEY"):
        monkeypatch.delenv(f"TANDEM_GRPC_{name}", raising=False)
    text = describe("--scheduler-address", address, "describe", "infer")
    [line] = section(text)
    assert f"the scheduler at {address} answers only certified callers" in line
    assert "--grpc-ca, --grpc-cert and --grpc-key" in line and "TANDEM_GRPC_CERT" in line
    assert_the_rest_is_told(text)
    assert not fake.requests


def test_an_address_the_certificate_does_not_carry_names_the_server_name_flag(certs: Path) -> None:
    """Dialled by a name its certificate lacks (a port-forward, a ClusterIP), the scheduler is
    found once --scheduler-server-name gives the name it carries."""
    fake = FakeScheduler()
    server = start_scheduler(certs, fake, host="127.0.0.2")  # the certificate names 127.0.0.1
    try:
        address = f"127.0.0.2:{server.port}"
        text = describe("--scheduler-address", address, *operator_flags(certs), "describe", "infer")
        [line] = section(text)
        assert "pass --scheduler-server-name <fullname>-scheduler.<namespace>.svc" in line, line
        assert "TANDEM_SCHEDULER_SERVER_NAME" in line
        named = ["--scheduler-server-name", "localhost", *operator_flags(certs)]
        text = describe("--scheduler-address", address, *named, "describe", "infer")
        assert section(text)[1] == "  state:          BOUND"
    finally:
        server.stop(0)


def test_without_the_address_the_scheduler_is_not_asked(scheduler: tuple[FakeScheduler, str]) -> None:
    fake, _ = scheduler
    text = describe("describe", "infer")
    assert "Placement" not in text and not fake.requests


def test_the_address_and_server_name_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_SCHEDULER_ADDRESS", "scheduler:50051")
    monkeypatch.setenv("TANDEM_SCHEDULER_SERVER_NAME", "tandem-scheduler.tandem.svc")
    args = main.parser().parse_args(["describe", "infer"])
    assert (args.scheduler_address, args.scheduler_server_name) == (
        "scheduler:50051",
        "tandem-scheduler.tandem.svc",
    )
