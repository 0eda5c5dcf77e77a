"""The entry point: arguments, errors that say what to do, and a whole run from a
synthetic input snapshot to report.html, summary.json and Parquet results."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from rocketcluster.e2e.report_compare import comparable_run, plot_rows
from rocketcluster.jobs import tables
from rocketcluster.jobs.pipeline import check_jobs, run_directory
from rocketcluster.jobs.run import EXIT_BAD_INPUT, main
from rocketcluster.jobs.session import JavaMissingError, find_java
from rocketcluster.jobs.synthetic import BEHAVIOURS, Shape, write_snapshot

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def test_a_source_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", "/tmp/unused"]) == EXIT_BAD_INPUT
    assert "give --controller http://HOST:8080" in capsys.readouterr().err


def test_unknown_jobs_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--inputs", "/nonexistent", "--jobs", "lag,latency"]) == EXIT_BAD_INPUT
    assert "unknown job(s) latency" in capsys.readouterr().err
    with pytest.raises(ValueError, match="none given"):
        check_jobs([])
    assert check_jobs(["lag", "lag", "tiering"]) == ["lag", "tiering"]


def test_missing_java_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="apt-get install openjdk-17-jre-headless"):
        find_java()
    fake = tmp_path / "jdk" / "bin"
    fake.mkdir(parents=True)
    (fake / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert find_java() == fake / "java"


def test_run_directories_are_stamped_and_latest_follows(tmp_path: Path) -> None:
    first = run_directory(tmp_path, 1_764_115_200_000)
    second = run_directory(tmp_path, 1_764_115_260_000)
    assert first.name == "20251126T000000Z" and second.name == "20251126T000100Z"
    assert (tmp_path / "latest").resolve() == second.resolve()


def test_a_snapshot_that_is_not_one_is_refused(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "queue_stats").mkdir()
    assert main(["--inputs", str(tmp_path), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    assert "consumer_stats/, segment_stats/, events/ missing" in capsys.readouterr().err
    for table in tables.INPUTS:
        (tmp_path / table).mkdir(exist_ok=True)
    assert main(["--inputs", str(tmp_path), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    assert "queue_stats is not a Parquet dataset" in capsys.readouterr().err


def test_a_whole_run_from_a_snapshot(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyspark.sql.types import DateType, StructType

    now_ms = int(time.time() * 1000)
    shape = Shape(consumer_groups=len(BEHAVIOURS), broker_groups=1, topics=1, queues=2,
                  snapshots=40, segments=12, events=60)  # fmt: skip
    write_snapshot(tmp_path / "inputs", shape, now_ms)
    out = tmp_path / "reports"
    args = ["--inputs", str(tmp_path / "inputs"), "--out", str(out), "--cluster", "synthetic"]
    assert main([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["meta"]["cluster"] == "synthetic"
    assert summary["meta"]["generatedAt"] == now_ms  # "now" is the snapshot's newest time
    latest = out / "latest"
    assert (latest / "report.html").stat().st_size > 10_000
    assert json.loads((latest / "summary.json").read_text())["meta"]["jobs"] == [
        "lag",
        "sss-history",
        "tiering",
    ]
    for table in tables.RESULTS:  # written by Spark or by the driver: the same types
        written = spark.read.parquet(str(latest / "parquet" / table)).schema
        wanted = cast(StructType, StructType.fromDDL(tables.RESULT_SCHEMAS[table]))
        fields = [(f.name, f.dataType) for f in written.fields]
        if table == tables.LAG_POINTS:  # it grows with the input: partitioned by day
            assert fields.pop() == ("day", DateType())
            day = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y-%m-%d")
            assert (latest / "parquet" / table / f"day={day}").is_dir()
        assert fields == [(f.name, f.dataType) for f in wanted.fields], table
    groups: Any = spark.read.parquet(str(latest / "parquet" / tables.LAG_GROUPS)).toPandas()
    status = dict(zip(groups["consumer_group"], groups["status"], strict=True))
    assert status["group-0"] == "OK"  # keeps up
    assert status["group-1"] == "WARN"  # falls behind
    assert status["group-2"] == "STOP"  # stopped: no progress, nothing in flight
    assert status["group-3"] == "STALL"  # in flight, no progress
    assert status["group-4"] == "REWIND"

    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("health report synthetic")
    assert any(line.strip().startswith("group-2: STOP") for line in lines)
    assert lines[-1].startswith("report: ")


def test_a_run_continues_the_last_one_and_equals_a_full_run(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half the history, then the rest on top of the state it left: the same report,
    table for table, as one run over the whole history; the second run reads only the
    snapshots after the first one's marks."""
    now_ms = 1_764_115_200_000
    shape = Shape(consumer_groups=len(BEHAVIOURS), broker_groups=2, topics=1, queues=2,
                  snapshots=60, segments=12, events=80)  # fmt: skip
    write_snapshot(tmp_path / "inputs", shape, now_ms)
    half = now_ms - 25 * shape.interval_ms
    base = ["--inputs", str(tmp_path / "inputs"), "--cluster", "synthetic", "--json"]
    steps = tmp_path / "steps"
    assert main([*base, "--out", str(steps), "--now", str(half)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["meta"]["incremental"] is False
    marks = json.loads((steps / "history" / "state" / "meta.json").read_text())["high_water"]
    assert marks == {"broker-0": half, "broker-1": half}
    assert main([*base, "--out", str(steps)]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["meta"]["incremental"] is True
    assert main([*base, "--out", str(tmp_path / "whole")]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert whole["meta"]["incremental"] is False
    continued = comparable_run(steps / "latest")
    assert continued == comparable_run(tmp_path / "whole" / "latest")
    statuses = {g["consumer_group"]: g["status"] for g in second["lag"]["groups"]}
    assert statuses == {"group-0": "OK", "group-1": "WARN", "group-2": "STOP",
                        "group-3": "STALL", "group-4": "REWIND"}  # fmt: skip
    # The plot's buckets: those before the first run's end kept, the rest recomputed.
    assert plot_rows(steps / "history") == plot_rows(tmp_path / "whole" / "history")
    # The plot's state holds a few rows per consumer group and bucket, whatever the
    # history's length: 2 broker groups x 5 consumer groups x 60 snapshots' buckets.
    assert len(plot_rows(steps / "history")) <= 2 * 5 * 60


def test_old_runs_are_pruned_newest_kept(tmp_path: Path) -> None:
    from rocketcluster.jobs.pipeline import prune_runs

    for minute in range(5):
        run_directory(tmp_path, 1_764_115_200_000 + minute * 60_000)
    (tmp_path / "notes").mkdir()  # not a run: never touched
    gone = prune_runs(tmp_path, 2)
    assert [p.name for p in gone] == [f"20251126T00{m:02d}00Z" for m in range(3)]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["20251126T000300Z", "20251126T000400Z", "latest", "notes"]
    assert prune_runs(tmp_path, 0) == []


def test_rocketctl_report_says_how_to_start_a_cluster_and_reruns_snapshots(
    spark: SparkSession, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from rocketcluster.ctl.cli import main as rocketctl

    runner = CliRunner()
    answer = runner.invoke(rocketctl, ["report", "--dir", str(tmp_path / "none")])
    assert answer.exit_code == 1
    assert "no local cluster runs in" in answer.output and "rocketctl local up" in answer.output

    shape = Shape(consumer_groups=2, broker_groups=1, topics=1, queues=1, snapshots=12,
                  segments=4, events=10)  # fmt: skip
    write_snapshot(tmp_path / "inputs", shape, int(time.time() * 1000))
    out = tmp_path / "reports"
    args = ["report", "--inputs", str(tmp_path / "inputs"), "--out", str(out), "--jobs", "lag"]
    answer = runner.invoke(rocketctl, args)
    assert answer.exit_code == 0, answer.output
    assert "group-0: OK" in answer.output and "group-1: WARN" in answer.output
    assert "SyncStateSet" not in answer.output  # only the jobs asked for
    assert (out / "latest" / "report.html").is_file()
    bad = runner.invoke(rocketctl, ["report", "--inputs", str(tmp_path), "--jobs", "nope"])
    assert bad.exit_code == 1 and "unknown job(s) nope" in bad.output
