"""The scale benchmark, tiny: every size runs a real broker through its topics, both
clients' sends and a restart, and every measure is there and plausible. Behaviour,
not speed: the goals are judged by the benchmark, not asserted here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocketcluster.broker.metrics import BrokerMetrics
from rocketcluster.ctl.bench.scale_bench import broker_view, run_scale_bench
from rocketcluster.ctl.cli import main

pytestmark = pytest.mark.slow


def test_the_scale_bench_writes_every_measure_per_size(tmp_path: Path) -> None:
    out = tmp_path / "results"
    args = ["bench", "scale", "--sizes", "8,64", "--out", str(out), "--work-dir", str(tmp_path)]
    args += ["--min-sends", "24"]  # the baseline's 8 queues: three rounds
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    [path] = list(out.glob("scale-*.json"))
    data = json.loads(path.read_text())
    base, row = data["sizes"]
    assert (base["queues"], row["queues"]) == (8, 64)
    assert row["topics"] == 8
    assert data["min_sends"] == 24
    assert (base["lean"]["sends"], base["official"]["sends"]) == (24, 24)
    assert (row["lean"]["sends"], row["official"]["sends"]) == (64, 64)  # one round
    assert all(slow["ms"] > 100 for slow in row["official"]["slow_sends"])
    assert row["official"]["warm"]["sends"] == 64 - 8  # the first send to each topic left out
    for size in (base, row):  # the broker's own count of what the clients sent
        assert size["broker"]["rpcs"]["SendMessage"]["count"] >= 2 * size["lean"]["sends"]
        assert size["broker"]["rpcs"]["QueryRoute"]["count"] >= 500
    for size in (base, row):
        assert size["data_bytes"] > size["queues"] * 2 * 512  # both clients' messages
        for at in ("before_sends", "after_sends", "after_restart"):
            assert size[at]["disk_bytes"] > 0 and size[at]["rss_bytes"] > 0
            assert size[at]["fds"] > 0
        assert size["after_sends"]["commitlog_bytes"] > 0
        for client in ("lean", "official"):
            assert 0 < size[client]["p50_ms"] <= size[client]["p99_ms"] <= size[client]["max_ms"]
        assert size["recovery_s"] >= 0 and size["ready_after_restart_s"] > 0
        for lookup in ("route", "heartbeat"):
            took = size["lookups"][lookup]
            assert 0 < took["p50_ms"] <= took["p99_ms"] <= took["max_ms"]
        assert size["listings"]["topics_s"] > 0 and size["listings"]["queues_s"] > 0
    assert base["goals_met"] == {}  # the baseline
    assert set(row["goals_met"]) == {
        "disk",
        "rss",
        "recovery",
        "fds",
        "lean_p99",
        "lean_max",
        "official_p99",
        "official_max",
        "route_p99",
        "heartbeat_p99",
    }
    assert "baseline" in result.output and "counted_mb" in result.output


def test_sizes_below_one_topic_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 8 queues"):
        run_scale_bench(tmp_path, (4,))
    result = CliRunner().invoke(main, ["bench", "scale", "--sizes", "8,many"])
    assert result.exit_code == 2 and "--sizes" in result.output


def test_the_broker_view_counts_what_the_broker_served_between_two_scrapes() -> None:
    metrics = BrokerMetrics("c1", "b-0")
    metrics.observe_rpc("SendMessage", 0, 0.002)
    before = metrics.render().decode()
    for seconds in (0.001, 0.05, 0.2, 1.5):
        metrics.observe_rpc("SendMessage", 0, seconds)
    metrics.observe_rpc("Heartbeat", 0, 0.003)
    metrics.observe_gc(2, 0.3)
    view = broker_view(before, metrics.render().decode())
    assert view["rpcs"]["SendMessage"] == {
        "count": 4,
        "seconds": 1.751,
        "over_100ms": 2,
        "over_1000ms": 1,
    }
    assert view["rpcs"]["Heartbeat"]["count"] == 1
    assert view["rpcs"]["QueryRoute"] == {
        "count": 0,
        "seconds": 0.0,
        "over_100ms": 0,
        "over_1000ms": 0,
    }
    assert view["gc_pauses"] == {
        "gen2": {"count": 1, "seconds": 0.3, "over_100ms": 1, "over_1000ms": 0}
    }
