"""Typed configuration from flags and environment variables, one frozen dataclass per service.

A field declares its flag, its environment variable and its help once; precedence is
flag > environment > default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tandem.mtls import TlsFiles

T = TypeVar("T")

_DURATION = re.compile(r"^(?P<num>\d+(\.\d+)?)(?P<unit>ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class Seconds(float):
    """A duration in seconds, written as `30s`, `1.5m`, `500ms` or a bare number of seconds."""

    @classmethod
    def parse(cls, text: str) -> Seconds:
        m = _DURATION.match(text.strip())
        if not m:
            raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 500ms, 2m)")
        return cls(float(m["num"]) * _UNIT_SECONDS[m["unit"]])


def option(default: Any, *, flag: str, env: str, help: str) -> Any:
    return dataclasses.field(default=default, metadata={"flag": flag, "env": env, "help": help})


@dataclass(frozen=True)
class LogSettings:
    """What every Tandem command takes."""

    log_level: str = option("info", flag="--log-level", env="TANDEM_LOG_LEVEL", help="log level")


@dataclass(frozen=True)
class ServiceSettings(LogSettings):
    """What every Tandem service takes: logging, tracing and its gRPC identity."""

    otlp_endpoint: str = option(
        "",
        flag="--otlp-endpoint",
        env="OTEL_EXPORTER_OTLP_ENDPOINT",
        help="OTLP/gRPC endpoint for traces, e.g. http://otel-collector:4317; empty = tracing off",
    )
    grpc_ca_file: str = option(
        "",
        flag="--grpc-ca-file",
        env="TANDEM_GRPC_CA_FILE",
        help="CA certificate (PEM) that signs every Tandem service's and operator's certificate",
    )
    grpc_cert_file: str = option(
        "",
        flag="--grpc-cert-file",
        env="TANDEM_GRPC_CERT_FILE",
        help="this service's certificate (PEM; its URI SAN spiffe://tandem/<identity> names it), to"
        " serve and to call",
    )
    grpc_key_file: str = option(
        "", flag="--grpc-key-file", env="TANDEM_GRPC_KEY_FILE", help="the private key of --grpc-cert-file"
    )

    def grpc_tls(self, service: str) -> TlsFiles:
        """The mutual-TLS files; a service without them does not start (there is no plaintext)."""
        return TlsFiles.required(self.grpc_ca_file, self.grpc_cert_file, self.grpc_key_file, service)


@dataclass(frozen=True)
class ClusterAccess(LogSettings):
    """How a process reaches the Kubernetes API and slurmrestd, as which Slurm user, and which
    slurmd Pods and scheduler name are Tandem's: the scheduler, the syncer and the uninstall
    cleanup (which serves nothing, so it takes no gRPC identity and no leader election)."""

    kubeconfig: str = option(
        "", flag="--kubeconfig", env="KUBECONFIG", help="kubeconfig file; empty means in-cluster"
    )
    slurm_api_base: str = option(
        "http://slurm-controller:6820",
        flag="--slurm-api-base",
        env="TANDEM_SLURM_API_BASE",
        help="slurmrestd base URL",
    )
    slurm_api_allow_plaintext: bool = option(
        False,
        flag="--slurm-api-allow-plaintext",
        env="TANDEM_SLURM_API_ALLOW_PLAINTEXT",
        help="accept an http:// --slurm-api-base: the service's Slurm token crosses the network in the"
        " clear (a loopback or a mesh that encrypts; the lab's slurmrestd is on 127.0.0.1)",
    )
    slurm_api_ca_file: str = option(
        "",
        flag="--slurm-api-ca-file",
        env="TANDEM_SLURM_API_CA_FILE",
        help="CA certificate (PEM) of an https:// slurmrestd; empty = the system's CAs",
    )
    slurm_user: str = option(
        "root",
        flag="--slurm-user",
        env="TANDEM_SLURM_USER",
        help="this service's own Slurm user, whom --slurm-token-file speaks for (never a job's default user)",
    )
    slurm_token_file: str = option(
        "",
        flag="--slurm-token-file",
        env="TANDEM_SLURM_TOKEN_FILE",
        help="a JWT for --slurm-user (scontrol token), read again when the file changes",
    )
    slurmd_namespace: str = option(
        "slurm",
        flag="--slurmd-namespace",
        env="TANDEM_SLURMD_NAMESPACE",
        help="namespace of the slurmd Pods (named after their Slurm nodes)",
    )
    scheduler_name: str = option(
        "",
        flag="--scheduler-name",
        env="TANDEM_SCHEDULER_NAME",
        help="spec.schedulerName of the Pods Tandem schedules",
    )


@dataclass(frozen=True)
class ClusterSettings(ServiceSettings, ClusterAccess):
    """What the scheduler and the syncer both need: the cluster (ClusterAccess), their gRPC
    identity and tracing (ServiceSettings), and leader election."""

    leader_elect: bool = option(
        False,
        flag="--leader-elect",
        env="TANDEM_LEADER_ELECT",
        help="run several replicas; only the holder of a Lease acts",
    )
    leader_election_namespace: str = option(
        "",
        flag="--leader-election-namespace",
        env="TANDEM_LEADER_ELECTION_NAMESPACE",
        help="namespace of the Lease (default: this Pod's namespace)",
    )
    gpu_products: str = option(
        "NVIDIA H100 80GB HBM3=h100,NVIDIA A100-SXM4-80GB=a100,NVIDIA A100 80GB PCIe=a100",
        flag="--gpu-products",
        env="TANDEM_GPU_PRODUCTS",
        help="NVML product name (a ResourceSlice's productName)=Slurm GRES type, comma-separated:"
        " what a GPU claim's productName selector asks Slurm for, and how a Node's devices are"
        " matched to its Slurm GRES",
    )


def load(cls: type[T], argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> T:
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(description=cls.__doc__)
    fields = [f for f in dataclasses.fields(cls) if "flag" in f.metadata]  # type: ignore[arg-type]
    for f in fields:
        parser.add_argument(
            f.metadata["flag"],
            dest=f.name,
            default=None,
            help=f"{f.metadata['help']} (env {f.metadata['env']}; default {f.default!r})",
        )
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for f in fields:
        raw = getattr(args, f.name)
        if raw is None:
            raw = environ.get(f.metadata["env"])
        if raw is None:
            continue
        try:
            values[f.name] = _convert(hints[f.name], raw)
        except ValueError as e:
            parser.error(f"{f.metadata['flag']} / {f.metadata['env']}: {e}")
    try:
        return cls(**values)
    except ValueError as e:  # a check of the settings together (a __post_init__): a usage error too
        parser.error(str(e))


def _convert(kind: Any, raw: str) -> Any:
    if isinstance(kind, types.UnionType):  # `X | None`: blank is None (not set)
        if not raw.strip():
            return None
        kind = next(k for k in typing.get_args(kind) if k is not type(None))
    if kind is bool:
        low = raw.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"not a boolean: {raw!r}")
    if kind is Seconds:
        return Seconds.parse(raw)
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    if typing.get_origin(kind) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def split_host_port(address: str) -> tuple[str, int]:
    """`:8000` -> ("", 8000) (all interfaces, as in a Pod); `127.0.0.1:8000` -> as written."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)
