"""Issue 5: the stack's services run as the chart's ServiceAccounts under the chart's RBAC (so the
rest of the suite passing shows the rules are enough), and what they must not do is denied."""

from __future__ import annotations

import json

import pytest

from devstack import identities, kube, services
from devstack.config import StackConfig
from tests.integration import helpers as h

pytestmark = [pytest.mark.integration, pytest.mark.parallel]

MAIN = identities.MAIN


def test_the_services_call_the_api_as_their_chart_service_accounts(stack_cfg: StackConfig) -> None:
    for name in services.KUBE_CLIENTS:
        out = kube.kubectl(
            stack_cfg, "auth", "whoami", "-o", "json", kubeconfig=services.kubeconfig(stack_cfg, name)
        )
        user = json.loads(out)["status"]["userInfo"]
        assert user["username"] == f"system:serviceaccount:tandem:{name}"
        assert "system:masters" not in user.get("groups", [])


@pytest.mark.parametrize(
    ("component", "request_", "allowed"),
    [
        # What each one needs.
        ("scheduler", ("create", "pods", "--subresource=binding", "-n", "default"), True),
        ("scheduler", ("watch", "pods", "--all-namespaces"), True),
        ("scheduler", ("patch", "pods", "--subresource=status", "-n", "default"), True),
        ("scheduler", ("watch", "podgroups.scheduling.k8s.io", "--all-namespaces"), True),
        (
            "scheduler",
            ("patch", "podgroups.scheduling.k8s.io", "--subresource=status", "-n", "default"),
            True,
        ),
        ("scheduler", ("update", "podgroups.scheduling.k8s.io", "-n", "default"), False),
        # GPUs by claim (issue 23): read the claims and the Nodes' devices, allocate a claim.
        ("scheduler", ("watch", "resourceclaims.resource.k8s.io", "--all-namespaces"), True),
        ("scheduler", ("watch", "resourceslices.resource.k8s.io"), True),
        (
            "scheduler",
            ("patch", "resourceclaims.resource.k8s.io", "--subresource=status", "-n", "default"),
            True,
        ),
        ("scheduler", ("patch", "resourceclaims.resource.k8s.io", "--subresource=binding"), True),
        # nvidia.com/gpu through DRA: the claim made for the Pod, and a stale one deleted.
        ("scheduler", ("create", "resourceclaims.resource.k8s.io", "-n", "default"), True),
        ("scheduler", ("delete", "resourceclaims.resource.k8s.io", "-n", "default"), True),
        ("scheduler", ("create", "resourceclaimtemplates.resource.k8s.io", "-n", "default"), False),
        ("scheduler", ("create", "resourceslices.resource.k8s.io"), False),
        ("scheduler", ("update", "leases/tandem-scheduler", "-n", "tandem"), True),
        ("syncer", ("create", "pods", "--subresource=eviction", "-n", "default"), True),
        ("syncer", ("patch", "nodes"), True),
        ("syncer", ("patch", "pods", "-n", "tandem-slurm"), True),
        ("syncer", ("watch", "resourceslices.resource.k8s.io"), True),
        ("syncer", ("patch", "resourceslices.resource.k8s.io"), False),
        # GPU health both ways (issue 37): Slurm drains naming GPUs taint them through rules of its own.
        ("syncer", ("create", "devicetaintrules.resource.k8s.io"), True),
        ("syncer", ("update", "devicetaintrules.resource.k8s.io"), False),
        # Slurm's topology (issue 38), published in the release's one ConfigMap of it.
        ("syncer", ("update", "configmaps/tandem-topology", "-n", "tandem"), True),
        ("syncer", ("update", "configmaps/tandem-policy", "-n", "tandem"), False),
        # What none of them may do.
        ("scheduler", ("list", "secrets", "--all-namespaces"), False),
        ("syncer", ("list", "secrets", "--all-namespaces"), False),
        ("scheduler", ("get", "secrets", "-n", "tandem"), False),
        ("scheduler", ("delete", "nodes"), False),
        ("syncer", ("delete", "nodes"), False),
        ("scheduler", ("patch", "nodes"), False),
        ("syncer", ("delete", "pods", "-n", "default"), False),
        ("syncer", ("patch", "pods", "-n", "default"), False),
        # kubectl auth can-i names a resource as TYPE/NAME (`leases other-lease` is an error: no).
        ("scheduler", ("update", "leases/other-lease", "-n", "tandem"), False),
        ("scheduler", ("create", "clusterrolebindings"), False),
        ("hooks", ("get", "pods", "-n", "tandem"), False),
        ("hooks", ("create", "tokenreviews.authentication.k8s.io"), False),
        ("hooks", ("get", "/openid/v1/jwks"), True),  # the published keys only (issue 50)
    ],
)
def test_least_privilege(
    stack_cfg: StackConfig, component: str, request_: tuple[str, ...], allowed: bool
) -> None:
    assert identities.can_i(stack_cfg, MAIN, component, *request_) is allowed


def test_namespace_scope_grants_nothing_outside_its_namespaces(stack_cfg: StackConfig) -> None:
    team = h.TEAM_A
    identities.ensure_release_rbac(stack_cfg, team)
    assert identities.can_i(
        stack_cfg, team, "scheduler", "create", "pods", "--subresource=binding", "-n", "team-a"
    )
    assert not identities.can_i(stack_cfg, team, "scheduler", "list", "pods", "-n", "default")
    assert not identities.can_i(stack_cfg, team, "scheduler", "list", "pods", "--all-namespaces")
