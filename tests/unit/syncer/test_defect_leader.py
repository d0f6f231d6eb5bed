"""Leader election's defects: a slow start must not stop the lease from being renewed (a second
leader would take over mid-start), and a syncer that loses its lease, or restarts, must not keep
the label that routes the Service's calls to it."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any
from unittest import mock

from tandem.kube import JSON, KubeError
from tandem.leader import LeaderElector
from tandem.syncer import main as syncer_main


class FakeLeaseApi:
    """One Lease, with resourceVersion checks, counting renewals."""

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.puts = 0
        self.lock = threading.Lock()
        self.fail = False

    def get(self, path: str, params: Any = None) -> JSON:
        with self.lock:
            if self.fail:
                raise KubeError(0, "Unreachable", "down")
            if self.lease is None:
                raise KubeError(404, "NotFound", "no lease")
            return copy.deepcopy(self.lease)

    def post(self, path: str, body: JSON, params: Any = None) -> JSON:
        with self.lock:
            self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            return copy.deepcopy(self.lease)

    def request(self, method: str, path: str, body: JSON | None = None, **kw: Any) -> JSON:
        with self.lock:
            if self.fail:
                raise KubeError(0, "Unreachable", "down")
            assert self.lease is not None and body is not None
            self.puts += 1
            version = str(int(self.lease["metadata"]["resourceVersion"]) + 1)
            self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            return copy.deepcopy(self.lease)


def test_the_lease_is_renewed_while_the_leader_is_still_starting() -> None:
    api = FakeLeaseApi()
    elector = LeaderElector(api, "ns", "tandem", lease_seconds=2, renew_seconds=1.5, retry_seconds=0.1)  # type: ignore[arg-type]
    stop, lost, started = threading.Event(), mock.Mock(), threading.Event()

    def slow_start() -> None:
        started.set()
        stop.wait(3)  # longer than the lease: the syncer waiting for its first Slurm poll

    thread = threading.Thread(target=elector.run, args=(stop, slow_start, lost))
    thread.start()
    try:
        assert started.wait(2)
        renewals = api.puts
        time.sleep(1.0)
        assert api.puts >= renewals + 5, "the lease was not renewed during the start"
        lost.assert_not_called()
    finally:
        stop.set()
        thread.join(5)


def test_losing_the_lease_during_a_slow_start_still_says_so() -> None:
    api = FakeLeaseApi()
    elector = LeaderElector(api, "ns", "tandem", lease_seconds=2, renew_seconds=0.5, retry_seconds=0.1)  # type: ignore[arg-type]
    stop, lost = threading.Event(), threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop, lambda: stop.wait(5), lost.set))
    thread.start()
    try:
        time.sleep(0.3)
        api.fail = True
        assert lost.wait(3)
    finally:
        stop.set()
        thread.join(5)


def test_a_syncer_clears_its_leader_label(monkeypatch: Any) -> None:
    monkeypatch.setenv("POD_NAME", "syncer-0")
    monkeypatch.setenv("POD_NAMESPACE", "tandem")
    kube = mock.Mock()
    syncer_main.label_self_leader(kube, leader=False)
    path, patch = kube.merge_patch.call_args.args
    assert path.endswith("/namespaces/tandem/pods/syncer-0")
    assert patch == {"metadata": {"labels": {syncer_main.LEADER_LABEL: None}}}
