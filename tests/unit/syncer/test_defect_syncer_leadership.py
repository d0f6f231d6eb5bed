"""The syncer's side of the lease. The Service routes to the Pod labelled leader, so a replica that
lost the lease, or restarted, must drop the label; and a leader serves only once Slurm and
Kubernetes are read (an empty mirror would call busy nodes idle), not after a wait that timed out."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tandem.kube import JSON, KubeError
from tandem.syncer import main as syncer_main


class FakeKube:
    """Records the merge patches sent to it, and the other steps in the same list."""

    def __init__(self, steps: list[str], refusals: int = 0) -> None:
        self.steps = steps
        self.patches: list[tuple[str, JSON]] = []
        self.refusals = refusals

    def merge_patch(self, path: str, body: Any) -> JSON:
        self.patches.append((path, body))
        if self.refusals:
            self.refusals -= 1
            self.steps.append("refused")
            raise KubeError(403, "Forbidden", "denied by a ValidatingAdmissionPolicy")
        self.steps.append(f"label {body['metadata']['labels'][syncer_main.LEADER_LABEL]}")
        return {}


@pytest.fixture(autouse=True)
def in_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "syncer-0")
    monkeypatch.setenv("POD_NAMESPACE", "tandem")


def leadership(
    synced: Callable[[float], bool], stop: threading.Event | None = None
) -> tuple[syncer_main.Leadership, FakeKube, list[str]]:
    steps: list[str] = []
    kube = FakeKube(steps)

    def serve(active: bool) -> None:
        steps.append(f"serve {active}")

    def record_synced(timeout: float) -> bool:
        steps.append("wait")
        return synced(timeout)

    lead = syncer_main.Leadership(kube, record_synced, serve, stop or threading.Event())  # type: ignore[arg-type]
    return lead, kube, steps


def answers(*values: bool) -> Callable[[float], bool]:
    it = iter(values)
    return lambda _timeout: next(it)


def test_a_syncer_that_loses_its_lease_drops_its_leader_label() -> None:
    lead, kube, steps = leadership(answers(True))
    lead.lead()
    lead.on_lost()
    assert steps == ["wait", "serve True", "label true", "serve False", "label None"]
    assert kube.patches[-1] == (
        "/api/v1/namespaces/tandem/pods/syncer-0",
        {"metadata": {"labels": {syncer_main.LEADER_LABEL: None}}},
    )
    assert lead.lost.is_set() and not lead.leading.is_set()


def test_a_leader_whose_label_was_refused_asks_again_until_it_is_reachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by `helm install` (issue 20): the chart's admission policy refused the label, the
    syncer logged it once and led unreachable forever (no Service endpoint, the scheduler waiting
    on its job stream, every prolog failing)."""
    monkeypatch.setattr(syncer_main, "LABEL_RETRY_SECONDS", 0.001)
    steps: list[str] = []
    kube = FakeKube(steps, refusals=2)
    lead = syncer_main.Leadership(
        kube,  # type: ignore[arg-type]
        lambda _t: True,
        lambda active: steps.append(f"serve {active}"),
        threading.Event(),
    )
    lead.lead()
    assert steps == ["serve True", "refused", "refused", "label true"]


def test_a_leader_that_loses_its_lease_while_refused_stops_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(syncer_main, "LABEL_RETRY_SECONDS", 0.001)
    steps: list[str] = []
    kube = FakeKube(steps, refusals=1)
    lead = syncer_main.Leadership(
        kube,  # type: ignore[arg-type]
        lambda _t: True,
        lambda active: steps.append(f"serve {active}"),
        threading.Event(),
    )
    original = kube.merge_patch

    def lose_after_refusal(path: str, body: Any) -> JSON:
        """The lease is lost between the refused label and the next try."""
        try:
            return original(path, body)
        finally:
            lead.lost.set()

    kube.merge_patch = lose_after_refusal  # type: ignore[method-assign]
    lead.lead()
    assert steps == ["serve True", "refused"]


def test_a_starting_syncer_drops_a_stale_leader_label() -> None:
    lead, kube, _ = leadership(answers())
    lead.standby()
    assert kube.patches == [
        (
            "/api/v1/namespaces/tandem/pods/syncer-0",
            {"metadata": {"labels": {syncer_main.LEADER_LABEL: None}}},
        )
    ]


def test_a_leader_serves_only_once_slurm_and_kubernetes_are_read(caplog: pytest.LogCaptureFixture) -> None:
    lead, _, steps = leadership(answers(False, False, True))
    with caplog.at_level(logging.WARNING, logger="tandem.syncer"):
        lead.lead()
    assert steps == ["wait", "wait", "wait", "serve True", "label true"]
    assert [r.message for r in caplog.records].count(
        "leader waits for its first Slurm poll and Kubernetes lists"
    ) == 2
    assert lead.leading.is_set()


def test_a_leader_that_never_syncs_stops_without_serving() -> None:
    stop = threading.Event()

    def never(_timeout: float) -> bool:
        if steps.count("wait") == 3:
            stop.set()
        return False

    lead, kube, steps = leadership(never, stop)
    lead.lead()
    assert steps == ["wait", "wait", "wait"] and kube.patches == []
    assert not lead.leading.is_set()


def test_a_lease_lost_while_the_leader_waits_for_sync_is_never_labelled_leader() -> None:
    # The start runs on its own thread, so the elector may report the loss before it is done.
    def lost_meanwhile(_timeout: float) -> bool:
        if steps.count("wait") == 1:
            lead.on_lost()
            return False
        return True

    lead, _, steps = leadership(lost_meanwhile)
    lead.lead()
    assert "serve True" not in steps and "label true" not in steps
    assert not lead.leading.is_set()
