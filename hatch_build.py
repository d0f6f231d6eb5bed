"""Generate the gRPC stubs from proto/ whenever the package is built (wheel, editable install, or
`make proto`), so a wheel built from a clean checkout is complete: the stubs are never committed.
The build also writes which commit it was built from (`tandem/_build.json`, read by
tandem.buildinfo): TANDEM_COMMIT and TANDEM_DIRTY when the build is told (an image's build has no
.git), else git's own answer, else "unknown"."""

from __future__ import annotations

import importlib.util
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


BUILD_INFO = "libs/tandem/_build.json"


def write_build_info(root: Path) -> Path:
    """tandem.buildinfo's own code, loaded from its file: the package is not installed yet."""
    spec = importlib.util.spec_from_file_location("_tandem_buildinfo", root / "libs/tandem/buildinfo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    path = root / BUILD_INFO
    module.write(path, module.for_build(root))
    return path


class CustomBuildHook(BuildHookInterface[Any]):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        generate(Path(self.root))
        write_build_info(Path(self.root))


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    for path in [*generate(root), write_build_info(root)]:
        print(path)
