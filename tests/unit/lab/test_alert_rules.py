"""Issue 41: the chart's alerts, evaluated by Prometheus' own promtool on the rule as the chart
renders it with its defaults: the rules are valid (`promtool check rules`), and every alert fires
in one case and stays quiet in another (`promtool test rules` on tests/unit/alert_tests.yml).
Needs the lab's helm (`make tools`; skipped without) and Debian's promtool, which the lab installs
with its Prometheus (devstack.prometheus) and so does this test."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack import prometheus
from devstack.config import REPO_ROOT, default_state_dir

HELM = default_state_dir() / "bin" / "helm"
CASES = Path(__file__).with_name("alert_tests.yml")
# The annotations each case compares; the description and runbook are long prose, which the
# chart's own tests read (tests/integration/test_helm.py).
COMPARED_ANNOTATIONS = ("summary",)

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="no helm: `make tools` builds it")


@pytest.fixture(scope="module")
def promtool() -> Path:
    prometheus.ensure_installed()
    return prometheus.PROMTOOL


def _rendered_groups(*sets: str) -> list[dict[str, Any]]:
    argv = [str(HELM), "template", "tandem", str(REPO_ROOT / "helm" / "tandem"), "--namespace", "tandem"]
    argv += [a for s in ("monitoring.prometheusRule.enabled=true", *sets) for a in ("--set", s)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True)
    groups: list[dict[str, Any]] = prometheus.rule_groups([d for d in yaml.safe_load_all(out.stdout) if d])[
        "groups"
    ]
    return groups


@pytest.fixture(scope="module")
def groups() -> list[dict[str, Any]]:
    """The PrometheusRule's groups with the chart's defaults (production `for` durations)."""
    return _rendered_groups()


def _alerts(groups: list[dict[str, Any]]) -> set[str]:
    return {r["alert"] for g in groups for r in g["rules"] if "alert" in r}


def _run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_promtool_accepts_the_rendered_rules(
    promtool: Path, groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "tandem.rules.yml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    res = _run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(_alerts(groups))} rules found" in res.stdout


def test_every_alert_fires_and_stays_quiet_as_its_cases_say(
    promtool: Path, groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    groups = copy.deepcopy(groups)
    for group in groups:
        for rule in group["rules"]:
            rule["annotations"] = {
                k: v for k, v in rule.get("annotations", {}).items() if k in COMPARED_ANNOTATIONS
            }
    (tmp_path / "tandem.rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(CASES, tmp_path / CASES.name)
    res = _run(promtool, "test", "rules", CASES.name, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_every_alert_has_a_firing_and_a_quiet_case(groups: list[dict[str, Any]]) -> None:
    cases = [c for test in yaml.safe_load(CASES.read_text())["tests"] for c in test["alert_rule_test"]]
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    alerts = _alerts(groups)
    assert len(alerts) >= 7
    assert alerts - firing == set(), "alerts without a firing case"
    assert alerts - quiet == set(), "alerts without a quiet case"
    assert (firing | quiet) <= alerts, "cases for alerts the chart does not have"


def test_the_lab_shortens_every_for_and_nothing_else(groups: list[dict[str, Any]]) -> None:
    """The lab's value (monitoring.prometheusRule.forOverride) changes the alerts' `for` only;
    the defaults keep the production durations."""
    short = _rendered_groups(f"monitoring.prometheusRule.forOverride={prometheus.ALERT_FOR}")
    production = {r["alert"]: r for g in groups for r in g["rules"]}
    assert {a: r.get("for") for a, r in production.items() if "for" in r} == {
        "TandemLeaderMissing": "5m",
        "TandemNodeLockedWhileIdle": "10m",
        "TandemSubmitErrors": "15m",
        "TandemSlurmApiErrors": "10m",
    }
    for rule in (r for g in short for r in g["rules"]):
        expected = dict(production[rule["alert"]])
        if "for" in expected:
            expected["for"] = prometheus.ALERT_FOR
        assert rule == expected
