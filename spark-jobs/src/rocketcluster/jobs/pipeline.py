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
from typing import TYPE_CHECKING, Any, cast

from rocketcluster.api.cluster import ALL_HEALTH_JOBS
from rocketcluster.jobs import frames, tables
from rocketcluster.jobs.config import JobsConfig
from rocketcluster.jobs.history import (
    DAY_COLUMN,
    LAG_PARTS,
    PARTS_SCHEMA,
    QUEUE_LATEST,
    SEGMENT_LATEST,
    History,
    StateMeta,
    merge_high_water,
)

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


def plan_state(history: History, plan: RunPlan, *, full: bool = False) -> StateMeta | None:
    """The state this run continues: the last run's, when its settings are this run's
    and it is not older than the window (else None: read the whole window)."""
    found = history.prepare()
    if full or found is None:
        return None
    wanted = StateMeta(
        run="",
        window_points=plan.config.window_points,
        bucket_ms=plot_bucket_ms(plan.window_start_ms, plan.now_ms),
        cluster=plan.cluster,
        jobs=tuple(plan.jobs),
    )
    if not found.compatible(wanted):
        return None
    if found.high_water and max(found.high_water.values()) < plan.window_start_ms:
        return None
    return found


def since_marks(
    inputs: Mapping[str, DataFrame], since_ms: int, now_ms: int, marks: Mapping[str, int]
) -> dict[str, DataFrame]:
    """Rows of a snapshot's tables in the window (up to now: a report of a past moment
    leaves the later rows to the next run) and, for a broker group with a mark, newer
    than it (events: the window's, as the controllers' history is read)."""
    from functools import reduce

    from pyspark.sql import functions as F

    out = {}
    floor = since_ms
    if marks:
        # Every group past its mark: a lower bound Parquet's statistics skip files by.
        # Unless a group the state does not know has snapshots since (a group new
        # since the last run): that one is read over the whole window.
        bound = max(since_ms, min(marks.values()) + 1)
        stats = [f for t, f in inputs.items() if t != tables.EVENTS]
        names = reduce(
            lambda a, b: a.unionByName(b),
            (f.where(F.col("time") >= F.lit(bound)).select("broker_group") for f in stats),
        )
        if {r[0] for r in names.distinct().collect()} <= set(marks):
            floor = bound
    for table, frame in inputs.items():
        low = since_ms if table == tables.EVENTS else floor
        keep = (F.col("time") >= F.lit(low)) & (F.col("time") <= F.lit(now_ms))
        if table != tables.EVENTS:
            for group, mark in sorted(marks.items()):
                keep = keep & ((F.col("broker_group") != F.lit(group)) | (F.col("time") > mark))
        out[table] = frame.where(keep)
    return out


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


def write_by_day(frame: pd.DataFrame, directory: Path, table: str) -> None:
    """A result that spans days, already on the driver, as a Parquet dataset
    partitioned by the UTC day of its ``time`` (``day=YYYY-MM-DD/``)."""
    import pandas as pd

    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    stamps = pd.to_datetime(frame["time"].astype("int64"), unit="ms", utc=True)
    days = stamps.dt.strftime("%Y-%m-%d")
    for day in sorted(set(days)):
        write_result(frame[days == day], directory / f"{DAY_COLUMN}={day}", table)


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


PLOT_POINTS = 1500


def plot_bucket_ms(window_start_ms: int, now_ms: int) -> int:
    """The plot's bucket: the window cut into PLOT_POINTS, on a grid of absolute times
    (so that the buckets of an earlier run stay valid in the next)."""
    return max(1000, (now_ms - window_start_ms) // PLOT_POINTS)


@dataclass
class _Run:
    """One run's context: the plan, where it writes, what an earlier run left."""

    plan: RunPlan
    inputs: Mapping[str, DataFrame]
    directory: Path
    history: History
    prior: StateMeta | None

    @property
    def stamp(self) -> str:
        return self.directory.name

    def prior_state(self, table: str) -> DataFrame | None:
        if self.prior is None:
            return None
        spark = next(iter(self.inputs.values())).sparkSession
        return self.history.read_state(spark, table)


def _run_lag(run: _Run) -> dict[str, pd.DataFrame]:
    from pyspark.sql import functions as F

    from rocketcluster.jobs.lag import LAG_SUMS, LAG_TAILS, lag_tables

    plan, ws = run.plan, run.plan.window_start_ms
    prior_tails = run.prior_state(LAG_TAILS)
    if prior_tails is not None:
        prior_tails = prior_tails.where(F.col("time") >= F.lit(ws))
    found = lag_tables(
        run.inputs[tables.CONSUMER_STATS],
        now_ms=plan.now_ms,
        window_points=plan.config.window_points,
        prior_tails=prior_tails,
        window_start_ms=ws,
    )
    found[LAG_TAILS].write.parquet(str(run.history.next_path(LAG_TAILS)))
    plot = _plot(run, found[LAG_SUMS])
    queues = found[tables.LAG_QUEUES].toPandas()
    groups = found[tables.LAG_GROUPS].toPandas()
    write_result(queues, run.directory / "parquet" / tables.LAG_QUEUES, tables.LAG_QUEUES)
    write_result(groups, run.directory / "parquet" / tables.LAG_GROUPS, tables.LAG_GROUPS)
    return {tables.LAG_POINTS: plot, tables.LAG_QUEUES: queues, tables.LAG_GROUPS: groups}


def _plot(run: _Run, sums: DataFrame) -> pd.DataFrame:
    """Lag per consumer group over the window, a point per plot bucket: per broker
    group the largest sum over its queues that one of its snapshots saw in the bucket
    (LAG_SUMS: a broker's snapshot covers all of its queues at one moment), summed
    over broker groups (ages: the largest). The per-broker-group maxima are the state:
    a bucket the new snapshots fall in takes the larger of its old and new maxima, so a
    run continuing another draws what one run over both would.

    Written by the driver (a point per consumer group and bucket: small) to the state
    and, partitioned by day, as this run's LAG_POINTS."""
    from pyspark.sql import functions as F

    from rocketcluster.jobs.lag import PLOTTED

    plan = run.plan
    bucket = plot_bucket_ms(plan.window_start_ms, plan.now_ms)
    label = F.col("time") - F.col("time") % bucket + bucket  # the bucket's end
    pick = [(F.max if c == "lag_ms" else F.sum) for c in PLOTTED]
    per_broker = sums.groupBy("consumer_group", "broker_group", "broker_id", label.alias("time"))
    parts = per_broker.agg(*(f(c).alias(c) for f, c in zip(pick, PLOTTED, strict=True)))
    parts = parts.groupBy("consumer_group", "broker_group", "time").agg(
        *(F.max(c).alias(c) for c in PLOTTED)
    )
    prior = run.prior_state(LAG_PARTS)
    if prior is not None:
        parts = (
            parts.unionByName(prior)
            .groupBy("consumer_group", "broker_group", "time")
            .agg(*(F.max(c).alias(c) for c in PLOTTED))
        )
    kept = parts.where(F.col("time") > F.lit(plan.window_start_ms)).select(
        *tables.column_names(PARTS_SCHEMA)
    )
    kept.write.parquet(str(run.history.next_path(LAG_PARTS)))
    kept = run.history.read_next(kept.sparkSession, LAG_PARTS)
    plot = kept.groupBy("consumer_group", "time").agg(
        F.lit("*").alias("broker_group"),
        F.lit("*").alias("topic"),
        F.lit(-1).alias("queue_id"),
        *(f(c).alias(c) for f, c in zip(pick, PLOTTED, strict=True)),
    )
    rows = plot.orderBy("consumer_group", "time").toPandas()
    typed = frames.typed(cast("pd.DataFrame", rows), tables.LAG_POINTS)
    write_by_day(typed, run.directory / "parquet" / tables.LAG_POINTS, tables.LAG_POINTS)
    return typed


def _run_sss(run: _Run) -> dict[str, pd.DataFrame]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from rocketcluster.jobs.sss_history import run_sss_history

    plan, ws = run.plan, run.plan.window_start_ms
    events = run.inputs[tables.EVENTS]
    prior = run.prior_state(tables.EVENTS)
    if prior is not None:
        events = prior.unionByName(events)
    # One row per replicated change; of the changes before the window only the last
    # of each group (the group's state when the window starts).
    events = events.dropDuplicates(["broker_group", "index"])
    latest_before = F.max(F.when(F.col("time") <= F.lit(ws), F.col("index"))).over(
        Window.partitionBy("broker_group")
    )
    events = (
        events.withColumn("_last_before", latest_before)
        .where((F.col("time") > F.lit(ws)) | (F.col("index") == F.col("_last_before")))
        .drop("_last_before")
        .cache()
    )
    events.write.parquet(str(run.history.next_path(tables.EVENTS)))
    found = run_sss_history(events, window_start_ms=ws, now_ms=plan.now_ms)
    mine: dict[str, pd.DataFrame] = {}
    for table, frame in found.items():
        mine[table] = frame.toPandas()
        write_result(mine[table], run.directory / "parquet" / table, table)
    # The report marks unclean elections at their times: those events only.
    mine[tables.EVENTS] = events.where(F.col("unclean")).toPandas()
    return mine


def _run_tiering(run: _Run) -> dict[str, pd.DataFrame]:
    from rocketcluster.jobs.tiering import latest_snapshots, run_tiering

    plan = run.plan
    latest = {}
    for table, state in (
        (tables.SEGMENT_STATS, SEGMENT_LATEST),
        (tables.QUEUE_STATS, QUEUE_LATEST),
    ):
        frame = run.inputs[table]
        prior = run.prior_state(state)
        if prior is not None:
            frame = prior.unionByName(frame)
        latest[table] = latest_snapshots(frame, plan.now_ms).cache()
        latest[table].write.parquet(str(run.history.next_path(state)))
    found = run_tiering(
        latest[tables.SEGMENT_STATS],
        latest[tables.QUEUE_STATS],
        now_ms=plan.now_ms,
        prices=plan.config.prices,
        min_age_ms=int(plan.config.min_age_hours * HOUR_MS),
    )
    frame = found[tables.TIERING_CANDIDATES].toPandas()
    write_result(
        frame, run.directory / "parquet" / tables.TIERING_CANDIDATES, tables.TIERING_CANDIDATES
    )
    return {tables.TIERING_CANDIDATES: frame}


def _read_marks(inputs: Mapping[str, DataFrame]) -> tuple[dict[str, int], int | None]:
    """Per broker group the newest snapshot time among the new rows, and the oldest
    time of any new row: one Spark job over the inputs' key columns."""
    from functools import reduce

    from pyspark.sql import functions as F

    stats = [inputs[t] for t in (tables.QUEUE_STATS, tables.CONSUMER_STATS, tables.SEGMENT_STATS)]
    keys = reduce(
        lambda a, b: a.unionByName(b),
        (f.select("broker_group", F.col("time").cast("long")) for f in stats),
    ).where(F.col("broker_group").isNotNull() & F.col("time").isNotNull())
    rows = keys.groupBy("broker_group").agg(F.max("time"), F.min("time")).collect()
    events = inputs[tables.EVENTS].agg(F.min("time")).first()
    oldest = [int(r[2]) for r in rows]
    if events is not None and events[0] is not None:
        oldest.append(int(events[0]))
    return {str(r[0]): int(r[1]) for r in rows}, (min(oldest) if oldest else None)


def run_jobs(
    plan: RunPlan,
    inputs: Mapping[str, DataFrame],
    directory: Path,
    progress: Callable[[str], None] = lambda _: None,
    *,
    history: History,
    prior: StateMeta | None = None,
    missing: Sequence[str] = (),
) -> RunOutcome:
    """Run ``plan.jobs`` over ``inputs`` — the window's snapshots, or with ``prior``
    only those taken since that state; write every result under ``directory`` and the
    next state under ``history``. ``missing``: what could not be read (the report
    says so)."""
    from rocketcluster.jobs.lag import lag_summary
    from rocketcluster.jobs.report import render_report, write_report
    from rocketcluster.jobs.sss_history import sss_summary
    from rocketcluster.jobs.tiering import tiering_summary

    summarizers = {"lag": lag_summary, "sss-history": sss_summary, "tiering": tiering_summary}
    runners = {"lag": _run_lag, "sss-history": _run_sss, "tiering": _run_tiering}
    run = _Run(plan, inputs, directory, history, prior)
    history.next_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, pd.DataFrame] = {}
    summary: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name in plan.jobs:
        progress(f"running {name}")
        started = time.monotonic()
        mine = runners[name](run)
        results.update(mine)
        summary[name] = summarizers[name](mine)
        timings[name] = round(time.monotonic() - started, 3)
    read, oldest = _read_marks(inputs)
    held_back = {m.split(" ", 1)[0] for m in missing}
    first_seen = oldest if prior is None or prior.first_seen is None else prior.first_seen
    if oldest is not None and first_seen is not None:
        first_seen = min(first_seen, oldest)
    meta = StateMeta(
        run=run.stamp,
        window_points=plan.config.window_points,
        bucket_ms=plot_bucket_ms(plan.window_start_ms, plan.now_ms),
        cluster=plan.cluster,
        jobs=tuple(plan.jobs),
        high_water=merge_high_water(prior.high_water if prior else {}, read, held_back),
        first_seen=first_seen,
    )
    history.commit(meta)
    observed = plan.window_start_ms if first_seen is None else max(plan.window_start_ms, first_seen)
    summary["meta"] = {
        "cluster": plan.cluster,
        "generatedAt": plan.now_ms,
        "windowStart": plan.window_start_ms,
        "observedStart": observed,
        "jobs": list(plan.jobs),
        "jobSeconds": timings,
        "incremental": prior is not None,
        "missing": list(missing),
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
