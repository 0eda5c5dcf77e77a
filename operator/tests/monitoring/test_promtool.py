"""The alert rules under the real promtool: the generated file checks; every alert
has unit tests in ``promtool/`` that show it firing and silent; those tests fail
when the alert is broken (so they test something); the rules the operator scopes to
one cluster fire for that cluster only."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocketcluster.operator.monitoring import alerts, generate

# The promtool fixture (conftest.py): promtool(*args, cwd=None) -> CompletedProcess.
Promtool = Callable[..., subprocess.CompletedProcess[str]]

PROMTOOL_DIR = Path(__file__).parent / "promtool"

TEST_FILES = sorted(PROMTOOL_DIR.glob("*.yaml"))
RULES_FILE = generate.RULES_FILE


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())
    return data


def _generated_alerts() -> list[str]:
    groups = _load(RULES_FILE)["groups"]
    return [r["alert"] for g in groups for r in g["rules"]]


def test_the_generated_rules_file_checks(promtool: Promtool) -> None:
    result = promtool("check", "rules", str(RULES_FILE))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts.alerts())} rules found" in result.stdout


@pytest.mark.parametrize("path", TEST_FILES, ids=[p.stem for p in TEST_FILES])
def test_promtool_unit_tests_pass(path: Path, promtool: Promtool) -> None:
    result = promtool("test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _cases(path: Path) -> list[dict[str, Any]]:
    return [case for test in _load(path)["tests"] for case in test["alert_rule_test"]]


def test_every_alert_is_tested_firing_and_silent() -> None:
    firing: dict[str, int] = {}
    silent: dict[str, int] = {}
    for path in TEST_FILES:
        assert _load(path)["rule_files"] == [
            "../../../../charts/rocketcluster-operator/rules/rocketcluster.rules.yaml"
        ], f"{path.name} must test the generated rules file"
        for case in _cases(path):
            into = firing if case.get("exp_alerts") else silent
            into[case["alertname"]] = into.get(case["alertname"], 0) + 1
    names = _generated_alerts()
    assert names == [a.name for a in alerts.alerts()]
    assert sorted(set(firing) | set(silent)) == sorted(names), "a test for an unknown alert"
    assert [n for n in names if n not in firing] == [], "alerts never shown firing"
    assert [n for n in names if n not in silent] == [], "alerts never shown silent"


def _break(rules: dict[str, Any], name: str) -> dict[str, Any]:
    """``rules`` with alert ``name`` reduced to a condition that never holds."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == name:
                rule["expr"] = "vector(0) > 1"
    return rules


@pytest.mark.parametrize("path", TEST_FILES, ids=[p.stem for p in TEST_FILES])
def test_the_unit_tests_fail_when_their_alert_is_broken(
    path: Path, tmp_path: Path, promtool: Promtool
) -> None:
    names = {case["alertname"] for case in _cases(path) if case.get("exp_alerts")}
    broken = _load(RULES_FILE)
    for name in names:
        broken = _break(broken, name)
    (tmp_path / "broken.rules.yaml").write_text(yaml.safe_dump(broken, sort_keys=False))
    test = _load(path)
    test["rule_files"] = ["broken.rules.yaml"]
    (tmp_path / path.name).write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", path.name, cwd=tmp_path)
    assert result.returncode != 0, f"{path.name} passes with {sorted(names)} broken"


SCOPED_TEST = Path(__file__).parent / "scoped" / "scoped_test.yaml"


def test_rules_scoped_to_a_cluster_ignore_the_others(tmp_path: Path, promtool: Promtool) -> None:
    """What the operator's PrometheusRule holds for cluster prod, in a Prometheus
    that also scrapes cluster stage."""
    scoped = {"groups": alerts.rule_groups({"cluster": "prod"}, name="rocketcluster-prod")}
    (tmp_path / "scoped.rules.yaml").write_text(yaml.safe_dump(scoped, sort_keys=False))
    (tmp_path / "scoped.yaml").write_text(SCOPED_TEST.read_text())
    check = promtool("check", "rules", "scoped.rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    result = promtool("test", "rules", "scoped.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "scope",
    [{"cluster": ""}, {"bad-label": "x"}, {"cluster": 3}],
    ids=["empty value", "bad label name", "not a string"],
)
def test_a_bad_scope_is_refused_with_the_reason(scope: dict[str, Any]) -> None:
    with pytest.raises(alerts.ScopeError, match="label"):
        alerts.alerts(scope)


def test_scope_values_are_escaped() -> None:
    (first, *_) = alerts.alerts({"cluster": 'we"ird\\name'})
    assert 'cluster="we\\"ird\\\\name"' in first.expr
