"""The syncer's gRPC API (proto/tandem/v1/syncer.proto)."""

from __future__ import annotations

from kubernetes import client

from tandem.slurm.rest import SlurmRestClient
from tandem.syncer.settings import SyncerSettings
from tandem.v1 import syncer_pb2_grpc


class SyncerServicer(syncer_pb2_grpc.SyncerServiceServicer):  # type: ignore[misc]
    def __init__(self, cfg: SyncerSettings, api: client.ApiClient, slurm: SlurmRestClient) -> None:
        self.cfg = cfg
        self.api = api
        self.slurm = slurm
