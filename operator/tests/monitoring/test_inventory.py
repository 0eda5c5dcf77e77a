"""The inventory the Prometheus suite checks: every dashboard target, alert and signal
once, runnable without Grafana, naming only metrics the processes export; the
expected-empty list names real sources only."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from rocketcluster.operator.monitoring import alerts, inventory, packaged


def test_every_query_is_listed_once() -> None:
    queries = inventory.queries()
    sources = [q.source for q in queries]
    assert len(sources) == len(set(sources))
    targets = sum(
        len(p.get("targets", [])) for b in packaged.dashboards().values() for p in b["panels"]
    )
    kinds = [s.split(":", 1)[0] for s in sources]
    assert kinds.count("dashboard") == targets
    assert kinds.count("alert") == kinds.count("alert-signal") == len(alerts.alerts())
    assert kinds.count("metric") == len(inventory.METRICS)


def test_queries_hold_no_grafana_variables() -> None:
    for query in inventory.queries():
        assert "$" not in query.expr, query


def test_queries_select_only_exported_metrics() -> None:
    allowed = {*inventory.METRICS, "up"}
    for query in inventory.queries():
        names = set(re.findall(r"\b(rocketmq_\w+)", query.expr))
        if re.search(r"\bup\{", query.expr):
            names.add("up")
        assert names <= allowed, f"{query.source}: {sorted(names - allowed)}"


def test_expected_empty_names_real_sources_with_reasons() -> None:
    sources = {q.source for q in inventory.queries()}
    for source, reason in inventory.EXPECTED_EMPTY.items():
        assert source in sources, source
        assert len(reason) > 20


def test_alert_signals_are_expected_to_have_data_unless_said_why() -> None:
    """A signal is what a healthy cluster has data for: only the tiered ones are
    excused (the monitored cluster runs without tiered storage)."""
    excused = {s for s in inventory.EXPECTED_EMPTY if s.startswith("alert-signal:")}
    assert excused == {
        "alert-signal:RocketMQTieredUploadLagHigh",
        "alert-signal:RocketMQTieredBackendDown",
        "alert-signal:RocketMQTieredRetentionHeld",
    }


def test_exactly_the_tiered_queries_are_excused_for_lack_of_tiering() -> None:
    """Every query of a rocketmq_tiered_* metric may stay empty on the monitored
    cluster, and nothing else for that reason."""
    tiered = {
        q.source
        for q in inventory.queries()
        if "rocketmq_tiered_" in q.expr and not q.source.startswith("alert:")
    }
    tiered |= {f"alert:{a.name}" for a in alerts.alerts() if "rocketmq_tiered_" in a.signal}
    reason = inventory.EXPECTED_EMPTY["metric:rocketmq_tiered_backend_up"]
    assert "without spec.tieredStorage" in reason
    assert {s for s, r in inventory.EXPECTED_EMPTY.items() if r == reason} == tiered
    board = {q.source for q in inventory.dashboard_queries() if inventory.TIERED_BOARD in q.source}
    assert len(board) >= 13 and board <= tiered


def test_variables_become_match_everything() -> None:
    expr = 'rate(x{cluster=~"$cluster", topic=~"${topic}"}[$__rate_interval])'
    assert inventory.plain(expr) == 'rate(x{cluster=~".*", topic=~".*"}[1m])'


def test_an_unknown_variable_is_an_error_that_says_where() -> None:
    with pytest.raises(inventory.UnknownVariable, match=r"panel X: \$node is not one of"):
        inventory.plain('x{node=~"$node"}', "panel X")


def test_the_operator_runs_without_the_dashboard_builder() -> None:
    """grafana-foundation-sdk is a development dependency: the operator, rendering every
    monitoring object, and the inventory must not import it."""
    code = (
        "import sys\n"
        "import rocketcluster.operator.main\n"
        "from rocketcluster.api.cluster import RocketCluster\n"
        "from rocketcluster.operator.monitoring import inventory\n"
        "from rocketcluster.operator.render import render_cluster\n"
        "c = RocketCluster.model_validate({'metadata': {'name': 'x'}, 'spec': {'monitoring': "
        "{'serviceMonitor': True, 'prometheusRule': True, 'grafanaDashboards': True}}})\n"
        "assert len(render_cluster(c)) > 10 and inventory.queries()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('grafana_foundation_sdk'))\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
