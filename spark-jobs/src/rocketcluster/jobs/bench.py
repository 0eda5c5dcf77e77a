"""The health jobs' benchmark: Spark's start-up, then every job over a synthetic
history of about a million snapshot rows in ``local[2]``, timed separately (issue 15:
the jobs should take under 60 s once Spark is up)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rocketcluster.jobs.config import JobsConfig
from rocketcluster.jobs.pipeline import HOUR_MS, JOB_NAMES, RunPlan, run_directory, run_jobs
from rocketcluster.jobs.session import SparkSettings, spark_session
from rocketcluster.jobs.synthetic import shape_for, write_snapshot

GOAL_S = 60.0


def run_spark_bench(work_dir: Path, rows: int = 1_000_000) -> dict[str, Any]:
    from rocketcluster.jobs.inputs import read_parquet

    now_ms = int(time.time() * 1000)
    shape = shape_for(rows)
    started = time.monotonic()
    counts = write_snapshot(work_dir / "inputs", shape, now_ms)
    generate_s = time.monotonic() - started

    started = time.monotonic()
    spark = spark_session(SparkSettings())
    spark.range(1).count()  # the first job also pays for the JVM's warm-up
    spark_start_s = time.monotonic() - started
    try:
        started = time.monotonic()
        inputs = read_parquet(spark, work_dir / "inputs")
        history_ms = shape.snapshots * shape.interval_ms
        plan = RunPlan(JOB_NAMES, now_ms, now_ms - history_ms - HOUR_MS, JobsConfig(), "bench")
        outcome = run_jobs(plan, inputs, run_directory(work_dir / "reports", now_ms))
        total_s = time.monotonic() - started
    finally:
        spark.stop()
    return {
        "rows": sum(counts.values()),
        "rows_per_table": counts,
        "snapshots": shape.snapshots,
        "generate_s": round(generate_s, 2),
        "spark_start_s": round(spark_start_s, 2),
        "jobs_s": round(total_s, 2),
        "per_job_s": outcome.timings_s,
        "goal_s": GOAL_S,
        "within_goal": total_s < GOAL_S,
        "report_bytes": outcome.report.stat().st_size,
    }
