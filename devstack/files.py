"""Files the lab writes whole: a secret is created with its mode from the first byte.

Writing a file and then `chmod`-ing it leaves a moment in which anyone on the machine may open it
(the root Slurm JWT, an admin kubeconfig, a private key), and an open descriptor keeps reading
after the chmod. Here the bytes go to a new file opened with its final mode (O_EXCL: never a file
someone else made), which then replaces the old one: a reader sees the old file or the new one,
never a half-written one.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE = 0o600


def write_whole(path: Path, data: str | bytes, mode: int = PRIVATE) -> None:
    """Replace `path` with `data`, the new file created with `mode` (the umask aside, then set)."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits the caller wants (0o644 for others)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    tmp.replace(path)
