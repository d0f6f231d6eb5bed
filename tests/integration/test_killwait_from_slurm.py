"""Issue 21: the scheduler reads KillWait from Slurm (slurmrestd's /conf on Slurm 26.05, slurm.conf
on 24.11) and follows a change without a restart; a refusal says where the value came from.
Before, KillWait was the scheduler's own flag, whatever Slurm ran with."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from devstack import config
from devstack import slurm as devstack_slurm
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.usefixtures("clean")]

# The lab's scheduler reads Slurm again every 2 s (devstack/services.py --slurm-conf-refresh).
PICKED_UP = 15


def _source(cfg: StackConfig) -> str:
    return "Slurm's running configuration" if cfg.slurm_version >= "26" else f"slurm.conf at {cfg.slurm_conf}"


def _refusal(core: k8s.CoreV1Api, name: str) -> str | None:
    said = [e.message for e in h.events_for(core, name) if e.reason == "FailedValidation"]
    return said[-1] if said else None


@pytest.fixture
def kill_wait_restored(stack_cfg: StackConfig) -> Iterator[None]:
    yield
    devstack_slurm.set_kill_wait(stack_cfg, config.KILL_WAIT_SECONDS)


def test_a_killwait_changed_in_slurm_is_followed_and_cited(
    stack_cfg: StackConfig, core: k8s.CoreV1Api, kill_wait_restored: None
) -> None:
    refused = h.unique("grace40")
    h.create(core, h.tandem_pod(stack_cfg, refused, grace=40))
    message = h.wait_until("the grace period refused", lambda: _refusal(core, refused), 30)
    assert f"KillWait 30s minus 5s, KillWait from {_source(stack_cfg)}" in message, message

    devstack_slurm.set_kill_wait(stack_cfg, 60)

    def bound() -> str | None:
        # A refused Pod stays refused (refusals are final until recreated): each try is a new Pod.
        name = h.unique("grace40")
        h.create(core, h.tandem_pod(stack_cfg, name, grace=40))
        pod = h.wait_until(
            "judged",
            lambda: (p := h.get_pod(core, name)) and (p.spec.node_name or _refusal(core, name)) and p,
            20,
        )
        return name if pod.spec.node_name else None

    accepted = h.wait_until(
        "a grace period of 40 s accepted under KillWait 60", bound, PICKED_UP + 30, every=1
    )
    assert h.job_id_of(core, accepted)
