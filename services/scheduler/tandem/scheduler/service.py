"""The scheduler's gRPC API (proto/tandem/v1/scheduler.proto): where each Pod is."""

from __future__ import annotations

import grpc

from tandem.scheduler.controller import Controller
from tandem.scheduler.placements import placement
from tandem.v1 import scheduler_pb2, scheduler_pb2_grpc


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def GetPlacement(
        self, request: scheduler_pb2.GetPlacementRequest, context: grpc.ServicerContext
    ) -> scheduler_pb2.GetPlacementResponse:
        if not request.pod_namespace or not request.pod_name:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "pod_namespace and pod_name are required")
        pod = self.controller.caches.pods.get(f"{request.pod_namespace}/{request.pod_name}")
        if pod is None:
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no Pod {request.pod_namespace}/{request.pod_name} with this scheduler's name in scope",
            )
            raise AssertionError("abort raises")
        return scheduler_pb2.GetPlacementResponse(placement=placement(self.controller, pod))

    def ListPlacements(
        self, request: scheduler_pb2.ListPlacementsRequest, context: grpc.ServicerContext
    ) -> scheduler_pb2.ListPlacementsResponse:
        pods = [
            p
            for p in self.controller.caches.pods.items()
            if not request.pod_namespace or p["metadata"]["namespace"] == request.pod_namespace
        ]
        pods.sort(key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))
        return scheduler_pb2.ListPlacementsResponse(placements=[placement(self.controller, p) for p in pods])
