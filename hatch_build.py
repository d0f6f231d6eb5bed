"""Generate the gRPC stubs from proto/ whenever the package is built (wheel, editable install, or
`make proto`), so a wheel built from a clean checkout is complete: the stubs are never committed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

PROTO_ROOT = "proto"
OUT = "libs"


def generate(root: Path) -> list[Path]:
    """Run protoc (grpcio-tools) over every .proto; returns the generated files."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    protos = sorted(str(p.relative_to(root)) for p in (root / PROTO_ROOT).rglob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {root / PROTO_ROOT}")
    include = str(Path(protoc.__file__).parent / "_proto")  # google/protobuf/*.proto
    args = [
        "grpc_tools.protoc",
        f"-I{root / PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={root / OUT}",
        f"--grpc_python_out={root / OUT}",
        f"--pyi_out={root / OUT}",
        *(str(root / p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(protos)}")
    return sorted((root / OUT).rglob("*_pb2*.py*"))


class CustomBuildHook(BuildHookInterface[Any]):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        generate(Path(self.root))


if __name__ == "__main__":
    for path in generate(Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()):
        print(path)
