"""One health report run: inputs → the chosen jobs → Parquet, summary.json, report.html.

The jobs run on Spark DataFrames; only their results come back to the driver (as
pandas) for the summary and the report, and those are small: statuses per queue,
intervals per replica, ranked candidates. The driver writes those to Parquet itself
(one Spark job fewer per table: on a small cluster's report each job costs more than
its data). The one result that grows with the input, lag per snapshot, Spark writes
whole to Parquet and sums per consumer group and time for the report's plot.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocketcluster.api.cluster import ALL_HEALTH_JOBS
from rocketcluster.jobs import tables
from rocketcluster.jobs.config import JobsConfig

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import DataFrame

JOB_NAMES: tuple[str, ...] = ALL_HEALTH_JOBS  # the manifest's healthReports.jobs
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class RunPlan:
    jobs: Sequence[str]
    now_ms: int
    window_start_ms: int
    config: JobsConfig
    cluster: str = ""


@dataclass
class RunOutcome:
    directory: Path
    results: dict[str, pd.DataFrame]
    summary: dict[str, Any]
    timings_s: dict[str, float] = field(default_factory=dict)

    @property
    def report(self) -> Path:
        return self.directory / "report.html"


def check_jobs(jobs: Sequence[str]) -> list[str]:
    unknown = [j for j in jobs if j not in JOB_NAMES]
    if unknown or not jobs:
        raise ValueError(
            f"unknown job(s) {', '.join(unknown) or '(none given)'}: choose from "
            f"{', '.join(JOB_NAMES)}"
        )
    return list(dict.fromkeys(jobs))


def run_directory(out: Path, now_ms: int) -> Path:
    """``out/<UTC time>/``, and ``out/latest`` pointing at it."""
    stamp = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y%m%dT%H%M%SZ")
    directory = out / stamp
    directory.mkdir(parents=True, exist_ok=True)
    latest = out / "latest"
    tmp = out / f".latest-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(stamp)
    tmp.replace(latest)
    return directory


RUN_NAME = re.compile(r"^\d{8}T\d{6}Z$")


def prune_runs(out: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` run directories under ``out`` (a CronJob
    writes one an hour to a volume of fixed size); what was deleted. 0 keeps all."""
    if keep <= 0:
        return []
    runs = sorted(p for p in out.iterdir() if p.is_dir() and RUN_NAME.match(p.name))
    doomed = runs[:-keep]
    for run in doomed:
        shutil.rmtree(run)
    return doomed


def latest_time(inputs: Mapping[str, DataFrame]) -> int | None:
    """The newest time in the inputs: "now" for a report rerun from a snapshot."""
    return _time_range(inputs)[1]


def observed_since(inputs: Mapping[str, DataFrame], start_ms: int) -> int:
    """Where the report's time axes begin: the oldest row read, when the history is
    shorter than the window asked for (a young cluster), else the window's start."""
    oldest = _time_range(inputs)[0]
    return start_ms if oldest is None else max(start_ms, oldest)


def _time_range(inputs: Mapping[str, DataFrame]) -> tuple[int | None, int | None]:
    """The oldest and newest time over every input, in one Spark job."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not inputs:
        return None, None
    times = reduce(
        lambda a, b: a.unionByName(b),
        (f.select(F.col("time").cast("long")) for f in inputs.values()),
    )
    row = times.agg(F.min("time"), F.max("time")).first()
    if row is None:
        return None, None
    low, high = row[0], row[1]
    return (None if low is None else int(low)), (None if high is None else int(high))


def write_result(frame: pd.DataFrame, directory: Path, table: str) -> None:
    """A small result, already on the driver, as a Parquet dataset of one file with
    the table's Spark types (what ``frame.write.parquet`` would give, without a job)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    schema = tables.arrow_schema(tables.RESULT_SCHEMAS[table])
    arrow = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    pq.write_table(arrow, directory / "part-00000.parquet")


def _spark_jobs(
    plan: RunPlan, inputs: Mapping[str, DataFrame]
) -> dict[str, Callable[[], dict[str, DataFrame]]]:
    from rocketcluster.jobs.lag import run_lag
    from rocketcluster.jobs.sss_history import run_sss_history
    from rocketcluster.jobs.tiering import run_tiering

    cfg = plan.config
    return {
        "lag": lambda: run_lag(
            inputs[tables.CONSUMER_STATS], now_ms=plan.now_ms, window_points=cfg.window_points
        ),
        "sss-history": lambda: run_sss_history(
            inputs[tables.EVENTS], window_start_ms=plan.window_start_ms, now_ms=plan.now_ms
        ),
        "tiering": lambda: run_tiering(
            inputs[tables.SEGMENT_STATS],
            inputs[tables.QUEUE_STATS],
            now_ms=plan.now_ms,
            prices=cfg.prices,
            min_age_ms=int(cfg.min_age_hours * HOUR_MS),
        ),
    }


PLOT_POINTS = 1500


def lag_for_plot(points: DataFrame, window_start_ms: int, now_ms: int) -> DataFrame:
    """Lag per consumer group over time, for the report's plot: the window cut into
    PLOT_POINTS buckets; per queue the largest lag seen in a bucket, summed over the
    group's queues. Buckets rather than exact times because every broker takes its
    snapshots at its own moments: summing by exact time would add partial sums."""
    from pyspark.sql import functions as F

    bucket_ms = max(1000, (now_ms - window_start_ms) // PLOT_POINTS)
    bucketed = points.withColumn("time", F.col("time") - F.col("time") % bucket_ms + bucket_ms)
    keys = ("consumer_group", "broker_group", "topic", "queue_id", "time")
    per_queue = bucketed.groupBy(*keys).agg(*(F.max(c).alias(c) for c in _PLOTTED))
    # Across a group's queues counts add up; the age of the oldest message does not.
    return per_queue.groupBy("consumer_group", "time").agg(
        F.lit("*").alias("broker_group"),
        F.lit("*").alias("topic"),
        F.lit(-1).alias("queue_id"),
        *((F.max if c == "lag_ms" else F.sum)(c).alias(c) for c in _PLOTTED),
    )


_PLOTTED = ("committed_offset", "max_offset", "lag_messages", "lag_ms", "inflight", "retry")


def run_jobs(
    plan: RunPlan,
    inputs: Mapping[str, DataFrame],
    directory: Path,
    progress: Callable[[str], None] = lambda _: None,
) -> RunOutcome:
    """Run ``plan.jobs`` over ``inputs``; write every result under ``directory``."""
    from rocketcluster.jobs.lag import lag_summary
    from rocketcluster.jobs.report import render_report, write_report
    from rocketcluster.jobs.sss_history import sss_summary
    from rocketcluster.jobs.tiering import tiering_summary

    summarizers = {"lag": lag_summary, "sss-history": sss_summary, "tiering": tiering_summary}
    jobs = _spark_jobs(plan, inputs)
    results: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name in plan.jobs:
        progress(f"running {name}")
        started = time.monotonic()
        frames = jobs[name]()
        mine: dict[str, pd.DataFrame] = {}
        for table, frame in frames.items():
            path = directory / "parquet" / table
            if table == tables.LAG_POINTS:  # grows with the input: Spark writes it
                frame.write.mode("overwrite").parquet(str(path))
                mine[table] = lag_for_plot(frame, plan.window_start_ms, plan.now_ms).toPandas()
            else:
                mine[table] = frame.toPandas()
                write_result(mine[table], path, table)
        if name == "sss-history":  # the report marks unclean elections at their times
            mine[tables.EVENTS] = inputs[tables.EVENTS].toPandas()
        results.update(mine)
        summary[name] = summarizers[name](mine)
        timings[name] = round(time.monotonic() - started, 3)
    observed = observed_since(inputs, plan.window_start_ms)
    summary["meta"] = {
        "cluster": plan.cluster,
        "generatedAt": plan.now_ms,
        "windowStart": plan.window_start_ms,
        "observedStart": observed,
        "jobs": list(plan.jobs),
        "jobSeconds": timings,
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    html = render_report(
        results,
        summary,
        cluster=plan.cluster,
        generated_at_ms=plan.now_ms,
        window=(observed, plan.now_ms),
    )
    write_report(directory / "report.html", html)
    return RunOutcome(directory, results, summary, timings)
