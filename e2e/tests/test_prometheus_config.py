"""The Prometheus driver's pure parts (configuration from cluster.json, API answers,
judging checks), the configuration checked by the real promtool, and one short run of
the real server scraping itself."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocketcluster.e2e.prometheus import (
    INSTALL_HINT,
    Check,
    ConfigError,
    Outcome,
    PrometheusAPIError,
    PrometheusServer,
    PrometheusUnavailable,
    PromQLError,
    find_binary,
    judge,
    metric_checks,
    prometheus_config,
    render_config,
)
from rocketcluster.e2e.prometheus.api import parse_query_response
from rocketcluster.e2e.prometheus.checks import duration_seconds, evaluate_until_data, family_expr
from rocketcluster.e2e.prometheus.config import scrape_targets
from rocketcluster.e2e.prometheus.server import free_loopback_port


def _state() -> dict[str, Any]:
    """What `rocketctl local up` writes for one group of three (cluster.json)."""

    def proc(name: str, role: str, host: str, **extra: str) -> dict[str, Any]:
        return {
            "name": name,
            "role": role,
            "pid": 1,
            "addresses": {"admin": f"{host}:8080", **extra},
        }

    return {
        "name": "ha",
        "processes": [
            *(proc(f"ha-controller-{i}", "controller", f"127.0.9.{i + 1}") for i in range(3)),
            *(proc(f"ha-broker-0-{i}", "broker", f"127.0.9.{i + 4}") for i in range(3)),
            proc("ha-endpoints", "proxy", "127.0.9.7", **{"ha-broker-0": "127.0.9.7:8081"}),
        ],
        "clientEndpoints": "127.0.9.7:8081",
    }


def _binary(name: str) -> Path:
    try:
        return find_binary(name)
    except PrometheusUnavailable as exc:
        pytest.fail(f"{exc} (`make debs` installs Debian's prometheus package)")


# -- configuration -------------------------------------------------------------------


def test_every_broker_and_controller_is_a_target_and_the_endpoints_process_is_not() -> None:
    targets = scrape_targets(_state())
    assert [(t.job, t.address, t.pod, t.cluster, t.group) for t in targets] == [
        *(
            ("rocketcluster-controller", f"127.0.9.{i + 1}:8080", f"ha-controller-{i}", "ha", "")
            for i in range(3)
        ),
        *(
            (
                "rocketcluster-broker",
                f"127.0.9.{i + 4}:8080",
                f"ha-broker-0-{i}",
                "ha",
                "ha-broker-0",
            )
            for i in range(3)
        ),
    ]


def test_config_has_one_job_per_component_and_the_rule_files(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    config = prometheus_config(_state(), rule_files=[rules], scrape_interval="2s")
    assert config["global"] == {
        "scrape_interval": "2s",
        "scrape_timeout": "2s",
        "evaluation_interval": "1s",
    }
    assert config["rule_files"] == [str(rules.resolve())]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"rocketcluster-broker", "rocketcluster-controller"}
    brokers = jobs["rocketcluster-broker"]["static_configs"]
    assert brokers[0] == {
        "targets": ["127.0.9.4:8080"],
        "labels": {"pod": "ha-broker-0-0", "cluster": "ha", "group": "ha-broker-0"},
    }
    controllers = jobs["rocketcluster-controller"]["static_configs"]
    assert controllers[0]["labels"] == {"pod": "ha-controller-0", "cluster": "ha"}
    # The processes' own cluster/group labels are kept, not renamed exported_*.
    assert all(j["honor_labels"] is True for j in jobs.values())
    assert yaml.safe_load(render_config(config)) == config


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({}, "no processes"),
        ({"processes": []}, "no processes"),
        ({"processes": [{"name": "x", "role": "broker"}]}, "lacks 'addresses'"),
        (
            {"processes": [{"name": "x", "role": "broker", "addresses": {"admin": "h:1"}}]},
            "no name",
        ),
        (
            {"processes": [{"name": "x", "role": "spark", "addresses": {"admin": "h:1"}}]},
            "role 'spark'; known roles: broker, controller, proxy",
        ),
        (
            {"processes": [{"name": "x", "role": "broker", "addresses": {"admin": "nohost"}}]},
            "want host:port",
        ),
        (
            {"processes": [{"name": "e", "role": "proxy", "addresses": {"admin": "h:1"}}]},
            "no broker or controller",
        ),
    ],
)
def test_bad_cluster_state_is_refused_with_what_to_pass(
    state: dict[str, Any], message: str
) -> None:
    named = state if message == "no name" else {"name": "c", **state}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        prometheus_config(named)


def test_promtool_accepts_the_generated_config(tmp_path: Path) -> None:
    import subprocess

    promtool = _binary("promtool")
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "g", "rules": [{"alert": "BrokerDown", "expr": "up == 0"}]}]}
        )
    )
    path = tmp_path / "prometheus.yml"
    path.write_text(render_config(prometheus_config(_state(), rule_files=[rules])))
    done = subprocess.run(
        [str(promtool), "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rules found" in done.stdout + done.stderr


def test_missing_binary_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PrometheusUnavailable, match="apt-get install -y prometheus"):
        find_binary("prometheus-that-is-not-there")
    assert "apt-get install" in INSTALL_HINT


# -- API answers ---------------------------------------------------------------------


def test_vector_matrix_and_scalar_answers_become_samples() -> None:
    vector = parse_query_response(
        "up",
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {"metric": {"job": "a"}, "value": [1.0, "1"]},
                    {"metric": {"job": "b"}, "value": [1.0, "NaN"]},
                ],
            },
        },
    )
    assert [s.labels["job"] for s in vector.samples] == ["a", "b"]
    assert vector.samples[0].value == 1.0 and vector.samples[1].is_nan
    matrix = parse_query_response(
        "up[1m]",
        {
            "status": "success",
            "data": {
                "resultType": "matrix",
                "result": [{"metric": {}, "values": [[1, "1"], [2, "5"]]}],
            },
        },
    )
    assert matrix.samples[0].value == 5.0
    scalar = parse_query_response(
        "1", {"status": "success", "data": {"resultType": "scalar", "result": [1, "1"]}}
    )
    assert scalar.samples[0].value == 1.0 and not scalar.empty
    empty = parse_query_response(
        "x", {"status": "success", "data": {"resultType": "vector", "result": []}}
    )
    assert empty.empty


def test_an_error_answer_raises_with_the_query_and_prometheus_message() -> None:
    with pytest.raises(PromQLError) as caught:
        parse_query_response(
            "rate(x[5m]",
            {"status": "error", "errorType": "bad_data", "error": "unclosed left parenthesis"},
        )
    assert caught.value.error_type == "bad_data"
    assert "unclosed left parenthesis" in str(caught.value)
    assert "rate(x[5m]" in str(caught.value)
    with pytest.raises(PrometheusAPIError, match="not a Prometheus API answer"):
        parse_query_response("x", "<html>")
    with pytest.raises(PrometheusAPIError, match="malformed vector"):
        parse_query_response(
            "x", {"status": "success", "data": {"resultType": "vector", "result": [{}]}}
        )


# -- judging -------------------------------------------------------------------------


def test_judge_lists_every_failure_and_keeps_expected_empty_apart() -> None:
    outcomes = [
        Outcome("ok", "a", 2),
        Outcome("broken", "rate(x[5m]", 0, error="bad_data: unclosed"),
        Outcome("empty", "b", 0),
        Outcome("nan", "c", 0, nan_series=3),
        Outcome("known-empty", "d", 0),
        Outcome("listed-but-data", "e", 1),
        Outcome("no-reason", "f", 0),
        Outcome("listed-but-broken", "g", 0, error="bad_data: x"),
    ]
    verdict = judge(
        outcomes,
        {
            "known-empty": "no tiered storage in the local cluster",
            "listed-but-data": "was empty once",
            "no-reason": " ",
            "listed-but-broken": "whatever",
        },
    )
    assert verdict.passed == 2
    assert verdict.failures == [
        "broken: PromQL error bad_data: unclosed",
        "empty: no data from b",
        "nan: no data (only NaN in 3 series) from c",
        "no-reason: listed as expected-empty without a reason",
        "listed-but-broken: PromQL error bad_data: x",
    ]
    assert verdict.still_empty == {"known-empty": "no tiered storage in the local cluster"}
    assert verdict.unexpectedly_with_data == ["listed-but-data"]
    report = verdict.report("queries")
    assert "5 failing" in report and "no tiered storage" in report


def test_family_expr_matches_every_suffix_and_refuses_bad_names() -> None:
    assert family_expr("rocketmq_rpc_latency") == (
        '{__name__=~"rocketmq_rpc_latency(_total|_bucket|_count|_sum|_created|_info)?"}'
    )
    assert [c.key for c in metric_checks(["a", "b_total"])] == ["a", "b_total"]
    with pytest.raises(ValueError, match="not a Prometheus metric name"):
        family_expr('up"} or vector(1) or {x="')


def test_evaluate_until_data_reasks_only_the_empty_until_they_fill() -> None:
    asked: list[str] = []
    fills_on_third = iter([0, 0, 1])

    def ask(check: Check) -> Outcome:
        asked.append(check.key)
        if check.key == "late":
            return Outcome("late", check.expr, next(fills_on_third))
        if check.key == "broken":
            return Outcome("broken", check.expr, 0, error="bad_data")
        return Outcome(check.key, check.expr, 1)

    checks = [Check("now", "a"), Check("late", "b"), Check("broken", "c")]
    outcomes = evaluate_until_data(checks, ask, timeout=30, interval=0)
    assert [o.has_data for o in outcomes] == [True, True, False]
    assert asked == ["now", "late", "broken", "late", "late"]


def test_evaluate_until_data_waits_not_for_expected_empty_but_asks_them_again() -> None:
    asked: list[str] = []

    def ask(check: Check) -> Outcome:
        asked.append(check.key)
        return Outcome(check.key, check.expr, 0)

    outcomes = evaluate_until_data(
        [Check("listed", "x")], ask, timeout=30, interval=0, may_stay_empty={"listed"}
    )
    assert not outcomes[0].has_data
    assert asked == ["listed", "listed"]


def test_evaluate_until_data_gives_up_at_the_deadline() -> None:
    outcomes = evaluate_until_data(
        [Check("never", "x")], lambda c: Outcome(c.key, c.expr, 0), timeout=0, interval=0
    )
    assert not outcomes[0].has_data


# -- the real server -----------------------------------------------------------------


def test_real_prometheus_starts_scrapes_itself_answers_and_stops(tmp_path: Path) -> None:
    binary = _binary("prometheus")
    port = free_loopback_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "self", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
        ],
    }
    server = PrometheusServer(tmp_path / "prom", render_config(config), binary=binary, port=port)
    server.start()
    pid = server.pid
    assert pid is not None
    try:
        with server.api() as api:
            assert [t.job for t in api.wait_targets_up(1, timeout=60)] == ["self"]
            up = api.wait_query('up{job="self"}', timeout=30)
            assert up.result_type == "vector"
            assert [s.value for s in up.samples] == [1.0]
            assert math.isclose(api.query("1 + 1").samples[0].value, 2.0)
            with pytest.raises(PromQLError, match="bad_data") as caught:
                api.query("rate(up[5m]")
            assert "rate(up[5m]" in str(caught.value)
            assert api.alerts() == []
            assert api.rules() == []
            with pytest.raises(PrometheusAPIError, match="returned no samples after 0s"):
                api.wait_query('up{job="nope"}', timeout=0)
            with pytest.raises(PrometheusAPIError, match="alert 'Nope' not firing after 0s"):
                api.wait_alert("Nope", timeout=0)
    finally:
        server.stop()
    assert server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


def test_a_config_prometheus_refuses_fails_start_with_its_log(tmp_path: Path) -> None:
    server = PrometheusServer(
        tmp_path / "prom",
        "scrape_configs: [{job_name: 1s, nonsense: true}]\n",
        binary=_binary("prometheus"),
    )
    with pytest.raises(PrometheusAPIError, match=r"exited with .* during start") as caught:
        server.start(timeout=60)
    assert "nonsense" in str(caught.value)
    assert server.pid is None


def test_durations_as_prometheus_writes_them() -> None:
    assert duration_seconds("") == 0
    assert duration_seconds("1m") == 60
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("500ms") == 0.5
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_seconds("1 minute")
