"""One lock budget: set at the top (the prolog), passed down with the call, each hop a margin
shorter, so no operator has to keep three timeouts in order by hand."""

from __future__ import annotations

import re
from unittest import mock

import pytest

from tandem import budget, scripts
from tandem.hooks import gateway
from tandem.hooks.routes import SyncerRoutes

REPO = scripts.DIR.parents[2]


@pytest.mark.parametrize(
    "path", [scripts.DIR / "prolog.sh", REPO / "helm" / "tandem" / "files" / "prolog.sh"]
)
def test_the_prologs_default_is_the_budgets(path: object) -> None:
    text = path.read_text()  # type: ignore[attr-defined]
    (default,) = re.findall(r"budget=\$\{TANDEM_LOCK_TIMEOUT:-(\d+)\}", text)
    assert float(default) == budget.LOCK_SECONDS


def test_each_hop_answers_before_its_caller_gives_up() -> None:
    prolog = budget.LOCK_SECONDS
    gateway_deadline = budget.below(prolog)
    syncer_wait = budget.lock_wait(gateway_deadline)
    assert syncer_wait < gateway_deadline < prolog
    # An operator's shorter prolog budget travels down as it is.
    assert budget.lock_wait(budget.below(20)) == 18
    # A cap below that wins; none above it does.
    assert budget.lock_wait(budget.below(20), cap=10) == 10
    assert budget.lock_wait(budget.below(20), cap=99) == 18
    # No deadline (an operator's grpcurl): what a default prolog's call would have left.
    assert budget.lock_wait(None) == budget.below(budget.below(budget.LOCK_SECONDS))


def test_the_gateway_gives_the_syncer_the_prologs_budget_less_a_margin() -> None:
    stub = mock.Mock()
    gw = gateway.HooksGateway("127.0.0.1:0", stub, call_timeout=5)
    gw.start()
    try:
        call = gw.routes.lock({"node": "gpu-001", "job": 7, "timeout": 40}, "")
        assert call.method is stub.AcquireNodeLock
        assert call.timeout == 39  # not capped by --call-timeout
        call = gw.routes.lock({"node": "gpu-001", "job": 7}, "")
        assert call.timeout == budget.below(budget.LOCK_SECONDS)
        # And so the call is started: with that deadline, waiting for the syncer to be reachable.
        gw.routes.start("/v1/lock", b'{"node": "gpu-001", "job": 7, "timeout": 40}', "", "t", print)
        assert stub.AcquireNodeLock.future.call_args.kwargs == {"timeout": 39, "wait_for_ready": True}
        with pytest.raises(gateway.BadRequest, match="at most 55"):
            gw.routes.lock({"node": "gpu-001", "job": 7, "timeout": 10**6}, "")
    finally:
        gw.stop()


def test_a_lock_may_not_ask_to_wait_longer_than_the_lock_budget() -> None:
    """Issue 50: a lock's `timeout` could be 600 s whatever the prologs wait, so one credential
    held its gateway slots ten times longer than any prolog would."""
    routes = SyncerRoutes(mock.Mock(), call_timeout=5, lock_budget=55)
    with pytest.raises(gateway.BadRequest, match="at most 55"):
        routes.lock({"node": "gpu-001", "job": 7, "timeout": 600}, "")
    assert routes.lock({"node": "gpu-001", "job": 7, "timeout": 55}, "").timeout == 54
    # An operator who gives prologs longer sets the budget with them.
    longer = SyncerRoutes(mock.Mock(), call_timeout=5, lock_budget=120)
    assert longer.lock({"node": "gpu-001", "job": 7, "timeout": 120}, "").timeout == 119
    assert longer.lock({"node": "gpu-001", "job": 7}, "").timeout == budget.below(budget.LOCK_SECONDS)
    # A terminating call still waits what its body says, up to the longest any call may.
    assert routes.terminating({"node": "gpu-001", "job": 7, "timeout": 300}, "ns/p", "t").timeout > 290
