"""What the scheduler itself says of one Pod (its gRPC API: GetPlacement), for `describe pod`.

Asked only with --scheduler-address. It is one section of the story: whatever keeps the scheduler
from answering (no certificate, no answer, a Pod that is not its own) becomes one line in its
place, and `describe` tells the rest from the cluster, as it does without the syncer."""

from __future__ import annotations

import grpc

from tandem.cli.facts import Unreachable, operator_credentials, server_name_hint
from tandem.mtls import TlsFiles
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc

# One unary call to a service that answers from its caches: a few seconds is plenty, and a
# person waiting on `describe` should not wait on a scheduler that is not there.
SCHEDULER_TIMEOUT_S = 5.0
STATE_PREFIX = "PLACEMENT_STATE_"


def read_placement(
    address: str, tls: TlsFiles | None, namespace: str, name: str, server_name: str = ""
) -> scheduler_pb2.Placement:
    """The Pod's placement, asked as an operator; Unreachable (its message the one line describe
    prints) when the scheduler cannot or will not say."""
    credentials = operator_credentials("scheduler", address, tls)
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    request = scheduler_pb2.GetPlacementRequest(pod_namespace=namespace, pod_name=name)
    try:
        with grpc.secure_channel(address, credentials, options) as channel:
            stub = scheduler_pb2_grpc.SchedulerServiceStub(channel)
            answer: scheduler_pb2.GetPlacementResponse = stub.GetPlacement(
                request, timeout=SCHEDULER_TIMEOUT_S
            )
    except grpc.RpcError as e:
        code, details = e.code(), e.details()
        if code == grpc.StatusCode.NOT_FOUND:
            # Not a failure: another scheduler's Pod, or one outside this scheduler's namespaces.
            raise Unreachable(f"not the scheduler's Pod (the scheduler at {address}: {details})") from e
        hint = server_name_hint("scheduler", address, server_name, e)
        raise Unreachable(f"cannot ask the scheduler at {address}: {code.name}: {details}{hint}") from e
    return answer.placement


def section(placement: scheduler_pb2.Placement) -> dict[str, str]:
    """The `Placement` section: the state as the proto names it, less its prefix, and only what
    the scheduler knows (a pending Pod has no node yet, a bound one no reason)."""
    state = scheduler_pb2.PlacementState.Name(placement.state)
    lines = {
        "state": state.removeprefix(STATE_PREFIX),
        "slurm job": str(placement.job_id) if placement.job_id else "(none)",
    }
    if placement.slurm_node:
        lines["slurm node"] = placement.slurm_node
    if placement.kube_node:
        lines["node"] = placement.kube_node
    if placement.reason:
        lines["reason"] = placement.reason
    return lines


def describe_placement(
    address: str, tls: TlsFiles | None, namespace: str, name: str, server_name: str = ""
) -> dict[str, str] | str:
    """The section, or the one line saying why there is none."""
    try:
        return section(read_placement(address, tls, namespace, name, server_name))
    except Unreachable as e:
        return str(e)
