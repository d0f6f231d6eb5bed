"""Issue 20: the cleanup `helm uninstall` runs first, checked on `helm template` output (no cluster).
A pre-delete hook Job runs tandem-uninstall with the syncer's Slurm token and nothing else secret;
its ServiceAccount and least-privilege RBAC are hook resources made before it; it runs with the
Deployments' security defaults; `uninstall.cleanup=false` removes all of it. Needs the lab's helm
(`make tools`); skipped without."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.lab.test_helm_chart import (
    FULLNAME,
    HELM,
    NS,
    Doc,
    _helm_template,
    container,
    deployment,
    render,
)

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="no helm: `make tools` builds it")

NAME = f"{FULLNAME}-uninstall"
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")


def cleanup_objects(docs: list[Doc]) -> list[Doc]:
    return [
        d for d in docs if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "uninstall"
    ]


def hook_job(docs: list[Doc]) -> Doc:
    (job,) = [d for d in cleanup_objects(docs) if d["kind"] == "Job"]
    return job


Rule = tuple[str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def rules(docs: list[Doc]) -> list[Rule]:
    """Every rule the cleanup's Roles and ClusterRoles grant, one resource a rule: (kind, namespace,
    (resource,), verbs, resourceNames)."""
    out: list[Rule] = []
    for d in cleanup_objects(docs):
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        for r in d["rules"]:
            for resource in r["resources"]:
                out.append(
                    (
                        d["kind"],
                        d["metadata"].get("namespace", ""),
                        (resource,),
                        tuple(r["verbs"]),
                        tuple(r.get("resourceNames", ())),
                    )
                )
    return out


@pytest.fixture(scope="module")
def docs() -> list[Doc]:
    return render()


def test_the_cleanup_is_a_pre_delete_hook_job_made_after_its_rbac(docs: list[Doc]) -> None:
    job = hook_job(docs)
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-delete"
    assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    job_weight = int(annotations["helm.sh/hook-weight"])
    others = [d for d in cleanup_objects(docs) if d["kind"] != "Job"]
    assert sorted({d["kind"] for d in others}) == sorted(RBAC_KINDS)
    for d in others:
        a = d["metadata"]["annotations"]
        assert a["helm.sh/hook"] == "pre-delete", d["metadata"]["name"]
        assert a["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        assert int(a["helm.sh/hook-weight"]) < job_weight, d["metadata"]["name"]


def test_the_job_runs_tandem_uninstall_as_its_own_service_account(docs: list[Doc]) -> None:
    job = hook_job(docs)
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == NAME
    assert spec["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    (sa,) = [d for d in cleanup_objects(docs) if d["kind"] == "ServiceAccount"]
    assert sa["metadata"]["name"] == NAME
    for binding in (d for d in cleanup_objects(docs) if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NS}]
    c = container(job)
    assert c["command"] == ["tandem-uninstall"]
    args = c["args"]
    for expected in (
        f"--scheduler-name={NS}-t",
        f"--release-namespace={NS}",
        f"--scheduler-deployment={FULLNAME}-scheduler",
        f"--syncer-deployment={FULLNAME}-syncer",
        "--slurm-user=tandem",  # global.slurm.syncerUser: the user whose drains are Tandem's
        "--slurm-api-base=http://slurm-controller:6820",
        "--timeout=4m",
    ):
        assert expected in args, (expected, args)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["TANDEM_ANNOTATION_PREFIX"] == "sunk.coreweave.com/"


def test_the_job_holds_the_syncers_slurm_token_and_no_other_secret(docs: list[Doc]) -> None:
    spec = hook_job(docs)["spec"]["template"]["spec"]
    secrets = [v for v in spec["volumes"] if "secret" in v or "projected" in v]
    assert secrets == [
        {
            "name": "slurm-token",
            "secret": {
                "secretName": "tandem-slurm-tokens",
                "defaultMode": 0o440,
                "items": [{"key": "syncer", "path": "token"}],
            },
        }
    ]
    assert "--slurm-token-file=/etc/tandem/slurm-token/token" in container(hook_job(docs))["args"]


def test_the_job_has_the_deployments_security_defaults(docs: list[Doc]) -> None:
    job = hook_job(docs)
    scheduler = deployment(docs, "scheduler")
    assert (
        job["spec"]["template"]["spec"]["securityContext"]
        == scheduler["spec"]["template"]["spec"]["securityContext"]
    )
    assert container(job)["securityContext"] == container(scheduler)["securityContext"]
    assert container(job)["securityContext"]["readOnlyRootFilesystem"] is True
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_its_rbac_is_what_the_cleanup_does_and_no_more(docs: list[Doc]) -> None:
    slurmd_ns = NS  # global.slurmdNamespace blank: the release namespace
    assert sorted(rules(docs)) == sorted(
        [
            (
                "Role",
                NS,
                ("deployments/scale",),
                ("get", "patch"),
                (f"{FULLNAME}-scheduler", f"{FULLNAME}-syncer"),
            ),
            ("Role", NS, ("pods",), ("list",), ()),
            ("ClusterRole", "", ("nodes",), ("get", "list", "patch"), ()),
            ("ClusterRole", "", ("nodes/status",), ("patch",), ()),
            ("ClusterRole", "", ("pods",), ("get", "list", "delete"), ()),
            ("Role", slurmd_ns, ("pods",), ("list", "patch"), ()),
        ]
    )
    for d in cleanup_objects(docs):
        for r in d.get("rules", []):
            assert "*" not in r["verbs"] and "*" not in r["resources"]
            assert "secrets" not in r["resources"] and "create" not in r["verbs"]


def test_in_namespace_scope_placeholder_pods_are_reachable_only_where_the_scheduler_watched() -> None:
    docs = render(
        "scheduler.scope.type=namespace",
        "scheduler.scope.namespaces=team-a\\,team-b",
        "global.slurmdNamespace=slurm",
    )
    pod_rules = [r for r in rules(docs) if r[2] == ("pods",)]
    assert sorted(pod_rules) == sorted(
        [
            ("Role", NS, ("pods",), ("list",), ()),
            ("Role", "team-a", ("pods",), ("get", "list", "delete"), ()),
            ("Role", "team-b", ("pods",), ("get", "list", "delete"), ()),
            ("Role", "slurm", ("pods",), ("list", "patch"), ()),
        ]
    )
    assert "--slurmd-namespace=slurm" in container(hook_job(docs))["args"]


def test_a_release_without_a_scheduler_scales_only_the_syncer() -> None:
    docs = render("scheduler.enabled=false")
    args = container(hook_job(docs))["args"]
    assert not any(a.startswith("--scheduler-deployment") for a in args)
    scale = [r for r in rules(docs) if r[2] == ("deployments/scale",)]
    assert scale == [("Role", NS, ("deployments/scale",), ("get", "patch"), (f"{FULLNAME}-syncer",))]


def test_the_timeout_reaches_the_command_and_bounds_the_job() -> None:
    job = hook_job(render("uninstall.timeout=90s"))
    assert "--timeout=90s" in container(job)["args"]
    assert job["spec"]["activeDeadlineSeconds"] == 150
    assert hook_job(render("uninstall.timeout=3m"))["spec"]["activeDeadlineSeconds"] == 240


@pytest.mark.parametrize("bad", ["4h", "0s", "4", "soon"])
def test_a_timeout_that_is_not_seconds_or_minutes_is_refused(bad: str) -> None:
    res = _helm_template(f"uninstall.timeout={bad}")
    assert res.returncode != 0 and "/uninstall/timeout" in res.stderr, res.stderr


def test_cleanup_false_renders_no_pre_delete_hook_at_all() -> None:
    docs = render("uninstall.cleanup=false")
    assert cleanup_objects(docs) == []
    hooks = [(d["metadata"].get("annotations") or {}).get("helm.sh/hook", "") for d in docs]
    assert not [h for h in hooks if "pre-delete" in h]


def test_the_cleanups_writes_are_held_by_the_syncers_admission_policy(docs: list[Doc]) -> None:
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"].endswith("syncer-writes")
    ]
    (condition,) = policy["spec"]["matchConditions"]
    assert f'"system:serviceaccount:{NS}:{NAME}"' in condition["expression"]
    assert f'"system:serviceaccount:{NS}:{FULLNAME}-syncer"' in condition["expression"]


def test_placement_values_reach_the_job() -> None:
    toleration: dict[str, Any] = {"key": "infra", "operator": "Exists", "effect": "NoSchedule"}
    docs = render(
        "uninstall.nodeSelector.pool=infra",
        "uninstall.tolerations[0].key=infra",
        "uninstall.tolerations[0].operator=Exists",
        "uninstall.tolerations[0].effect=NoSchedule",
    )
    spec = hook_job(docs)["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "infra"}
    assert spec["tolerations"] == [toleration]
