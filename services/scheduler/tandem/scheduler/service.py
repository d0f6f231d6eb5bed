"""The scheduler's gRPC API (proto/tandem/v1/scheduler.proto)."""

from __future__ import annotations

from tandem.v1 import scheduler_pb2_grpc


class SchedulerServicer(scheduler_pb2_grpc.SchedulerServiceServicer):  # type: ignore[misc]
    pass
