"""What every reconcile reads besides the caches and Slurm's jobs: the placeholder job's shape and
the current KillWait, tenant policy and topology, each read through its source."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem.scheduler import jobspec
from tandem.scheduler.killwait_source import KillWait
from tandem.scheduler.policy import BUILTIN, Policy
from tandem.topology import Topology


def _no_topology() -> Topology | str:
    return "the scheduler reads no topology (--topology-configmap)"


@dataclass
class ControllerSettings:
    """What every decision reads besides the caches and Slurm's jobs."""

    placeholder: jobspec.PlaceholderConfig
    # Slurm's KillWait now (tandem.scheduler.killwait_source: cached, read again now and then);
    # None until it is first known. killwait_source.fixed: as --slurm-kill-wait gives it.
    kill_wait: Callable[[], KillWait | None]
    policy: Callable[[], Policy] = lambda: BUILTIN
    # Slurm's topology as tandem-syncer publishes it, or why there is none.
    topology: Callable[[], Topology | str] = _no_topology
    reject_static_cpu: bool = False
