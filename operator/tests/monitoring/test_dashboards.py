"""The dashboards, structurally: current with their generator, identical in the chart
and the operator package, faithful to Grafana's own model (a round trip through the
foundation SDK changes nothing), laid out in 24 columns with unique ids, every panel
with a unit and thresholds, every query on the data source variable and using only
variables the dashboard defines, every query valid PromQL (promtool parses them),
and the thresholds where the alerts fire."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from rocketcluster.operator.monitoring import alerts, generate, inventory, packaged
from rocketcluster.operator.monitoring.dashboards import all_dashboards

# The promtool fixture (conftest.py): promtool(*args, cwd=None) -> CompletedProcess.
Promtool = Callable[..., subprocess.CompletedProcess[str]]

BOARDS = packaged.dashboards()
# Row headers (type "row") group panels; they hold no query of their own.
PANELS = [(name, p) for name, b in BOARDS.items() for p in b["panels"] if p["type"] != "row"]
SELECT_VARIABLES = ("cluster", "group", "topic", "consumer_group")
_VARIABLE = re.compile(r"\$\{?(\w+)\}?")


def _ids(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}:{item[1]['title']}"


def test_generated_files_are_current() -> None:
    assert generate.stale(generate.files()) == [], (
        "run python -m rocketcluster.operator.monitoring.generate"
    )


def test_chart_and_package_ship_the_same_dashboards() -> None:
    chart = {p.name: p.read_text() for p in generate.CHART_DASHBOARDS.glob("*.json")}
    package = {p.name: p.read_text() for p in generate.PACKAGE_DASHBOARDS.glob("*.json")}
    assert chart == package
    assert sorted(chart) == sorted(all_dashboards())
    assert len(chart) == 7


def test_the_dashboards_the_issue_asks_for_exist() -> None:
    titles = {b["title"] for b in BOARDS.values()}
    assert titles == {
        "RocketCluster / Overview",
        "RocketCluster / Broker groups & replication",
        "RocketCluster / Clients",
        "RocketCluster / Consumer lag",
        "RocketCluster / Controller Raft",
        "RocketCluster / Store",
        "RocketCluster / Tiered storage",
    }


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_round_trip_through_grafanas_model_changes_nothing(name: str) -> None:
    board = BOARDS[name]
    back = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    assert back == board


def test_the_round_trip_would_catch_a_misspelt_field() -> None:
    board = json.loads(json.dumps(next(iter(BOARDS.values()))))
    board["panels"][0]["gridPoss"] = board["panels"][0].pop("gridPos")
    back = json.loads(json.dumps(Dashboard.from_json(board), cls=JSONEncoder))
    assert back != board


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_layout_fits_24_columns_without_overlap(name: str) -> None:
    panels = BOARDS[name]["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["w"] >= 1 and pos["h"] >= 1 and pos["x"] >= 0 and pos["y"] >= 0
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


@pytest.mark.parametrize(("name", "panel"), PANELS, ids=[_ids(p) for p in PANELS])
def test_every_panel_has_a_unit_thresholds_and_its_data_source(
    name: str, panel: dict[str, Any]
) -> None:
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults.get("unit"), "no unit"
    steps = defaults["thresholds"]["steps"]
    assert steps[0]["value"] is None and all(s["color"] for s in steps)
    values = [s["value"] for s in steps[1:]]
    assert values == sorted(values)
    if panel["type"] == "stat" and panel["options"]["colorMode"] != "none":
        assert len(steps) > 1 or defaults.get("mappings"), "coloured by what?"
    assert panel["description"]
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert panel["targets"]
    for target in panel["targets"]:
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert target["expr"].strip()


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_queries_use_only_defined_variables_as_regex_matchers(name: str) -> None:
    board = BOARDS[name]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "cluster" in variables
    used: set[str] = set()
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            for var in _VARIABLE.findall(target["expr"]):
                if var.startswith("__"):
                    assert var == "__rate_interval", target["expr"]
                    continue
                used.add(var)
                assert var in variables, f"{panel['title']}: ${var} is not defined"
                assert f'{var}=~"${var}"' in target["expr"], "variables may be All: use =~"
    for var in SELECT_VARIABLES:
        if var in variables:
            assert var in used, f"${var} is defined but no query uses it"
            query = variables[var]
            assert query["datasource"]["uid"] == "${datasource}"
            for inner in _VARIABLE.findall(query["query"]):
                assert inner in variables and inner != var
    for var in SELECT_VARIABLES[1:]:
        if var in variables:
            assert variables[var]["includeAll"] and variables[var]["allValue"] == ".*"


def test_every_query_is_valid_promql(tmp_path: Path, promtool: Promtool) -> None:
    """promtool parses each dashboard query (variables replaced as in the inventory)
    as a recording rule."""
    queries = inventory.dashboard_queries()
    rules = [{"record": f"dashboard:query_{i}", "expr": q.expr} for i, q in enumerate(queries)]
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


# Where a panel draws the level at which an alert fires.
ALERT_LEVELS = {
    "RocketMQReplicaAckLagHigh": (
        "rocketcluster-replication",
        "Slave ack lag",
        alerts.ACK_LAG_BYTES,
    ),
    "RocketMQConsumerLagGrowing": (
        "rocketcluster-consumer-lag",
        "Lag (time)",
        alerts.CONSUMER_LAG_SECONDS,
    ),
    "RocketMQFlushLatencyHigh": ("rocketcluster-store", "Flush latency", alerts.FLUSH_P99_SECONDS),
    "RocketMQDiskFillingUp": ("rocketcluster-store", "Disk free", alerts.DISK_FREE_RATIO),
    "RocketMQTieredUploadLagHigh": (
        "rocketcluster-tiered-storage",
        "Upload lag (time)",
        alerts.UPLOAD_LAG_SECONDS,
    ),
}


@pytest.mark.parametrize("alert", sorted(ALERT_LEVELS))
def test_panels_draw_the_alert_thresholds(alert: str) -> None:
    uid, title, level = ALERT_LEVELS[alert]
    (panel,) = [p for p in BOARDS[f"{uid}.json"]["panels"] if p["title"] == title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    assert level in [s["value"] for s in steps]
    assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"
    (rule,) = [a for a in alerts.alerts() if a.name == alert]
    assert repr(level) in rule.expr or str(int(level)) in rule.expr


def test_every_exported_metric_family_is_on_a_dashboard() -> None:
    text = "\n".join(t["expr"] for _, p in PANELS for t in p["targets"])
    families = {re.sub(r"_(bucket|count|sum|created)$", "", m) for m in inventory.METRICS}
    missing = sorted(f for f in families if f not in text)
    assert missing == []


def test_the_overview_has_a_canary_row_with_its_panels() -> None:
    panels = BOARDS["rocketcluster-overview.json"]["panels"]
    (row,) = [i for i, p in enumerate(panels) if p["type"] == "row"]
    assert panels[row]["title"] == "Canary"
    section = panels[row + 1 :]
    units = {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in section}
    assert units == {
        "Canary success by group": "percentunit",
        "Canary end-to-end latency": "s",
        "Canary probes by result": "ops",
        "Since the last good probe": "s",
    }
    (latency,) = [p for p in section if p["title"] == "Canary end-to-end latency"]
    assert [t["expr"].split(",")[0] for t in latency["targets"]] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.99",
    ]
    assert all(p["gridPos"]["y"] > panels[row]["gridPos"]["y"] for p in section)
