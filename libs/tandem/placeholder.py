"""How a placeholder job names its Pod. The job's name is the only link both services can read
back from Slurm after a crash, so it is built and parsed here and nowhere else."""

from __future__ import annotations

from dataclasses import dataclass

_PREFIX = "tandem:"


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def job_name(pod: PodRef) -> str:
    return f"{_PREFIX}{pod.namespace}/{pod.name}/{pod.uid}"


def parse_job_name(name: str) -> PodRef | None:
    """The Pod a placeholder job stands for; None for any other job."""
    if not name.startswith(_PREFIX):
        return None
    parts = name[len(_PREFIX) :].split("/")
    if len(parts) != 3 or not all(parts):
        return None
    return PodRef(*parts)
