"""The health report's entry point: ``python -m rocketcluster.jobs.run`` here and in
``rocketctl report``, ``spark-submit .../rocketcluster/jobs/run.py`` in the CronJob the
operator renders. Prints a few readable lines (``--json``: the summary) and writes
``OUT/<UTC time>/{report.html, summary.json, parquet/}`` with ``OUT/latest`` beside.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rocketcluster.jobs.config import JobsConfig, load_config
from rocketcluster.jobs.inputs import LiveCluster
from rocketcluster.jobs.pipeline import HOUR_MS, JOB_NAMES, RunOutcome, RunPlan, check_jobs
from rocketcluster.jobs.session import JavaMissingError, SparkSettings, spark_session

if TYPE_CHECKING:
    import pandas as pd

EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
DEFAULT_KEEP = 168  # a week of hourly reports


@dataclass(frozen=True)
class ReportRequest:
    out: Path
    jobs: Sequence[str] = JOB_NAMES
    live: LiveCluster | None = None
    inputs: Path | None = None
    save_inputs: bool = False
    config: JobsConfig | None = None
    history_hours: float | None = None
    master: str | None = "local[2]"
    cluster: str = ""
    now_ms: int | None = None
    keep: int = DEFAULT_KEEP
    full: bool = False  # read the whole window even when an earlier run's state serves


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rocketcluster.jobs.run",
        description="Consumer lag, SyncStateSet history and tiering candidates of a "
        "rocketcluster, as Parquet, summary.json and one self-contained report.html.",
    )
    parser.add_argument(
        "--controller",
        action="append",
        default=[],
        metavar="URL",
        help="controller admin endpoint, http://HOST:8080 (repeatable)",
    )
    parser.add_argument(
        "--inputs",
        type=Path,
        metavar="DIR",
        help="read a Parquet input snapshot instead of a live cluster",
    )
    parser.add_argument(
        "--save-inputs",
        action="store_true",
        help="also write the inputs read, as a snapshot under the run",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"), metavar="DIR")
    parser.add_argument(
        "--jobs", default=",".join(JOB_NAMES), help=f"comma-separated, from {', '.join(JOB_NAMES)}"
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="YAML/JSON: price table, lag window, tiering minimum age",
    )
    parser.add_argument(
        "--history-hours",
        type=float,
        metavar="H",
        help="how far back to read (default from the config: 24)",
    )
    parser.add_argument(
        "--master", default="local[2]", help="Spark master; 'none' leaves it to spark-submit"
    )
    parser.add_argument("--cluster", default="", help="the cluster's name, for the title")
    parser.add_argument(
        "--keep",
        type=int,
        default=DEFAULT_KEEP,
        metavar="N",
        help="keep the newest N runs under --out, delete older (0: all)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="read the whole window again instead of continuing the last run's state",
    )
    parser.add_argument("--now", type=int, metavar="MS", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser.parse_args(argv)


def request_from(args: argparse.Namespace) -> ReportRequest:
    if not args.controller and args.inputs is None:
        raise ValueError("give --controller http://HOST:8080 (a live cluster) or --inputs DIR")
    return ReportRequest(
        out=args.out,
        jobs=check_jobs([j.strip() for j in args.jobs.split(",") if j.strip()]),
        live=LiveCluster(args.controller) if args.controller else None,
        inputs=args.inputs,
        save_inputs=args.save_inputs,
        config=load_config(args.config) if args.config else None,
        history_hours=args.history_hours,
        master=None if args.master.lower() == "none" else args.master,
        cluster=args.cluster,
        now_ms=args.now,
        keep=args.keep,
        full=args.full,
    )


def run_report(
    request: ReportRequest, progress: Callable[[str], None] = lambda _: None
) -> RunOutcome:
    """Start Spark, read what is new since the last run (or the whole window), run the
    jobs, write the report and the state the next run continues."""
    from rocketcluster.jobs.history import History
    from rocketcluster.jobs.inputs import read_live, read_parquet, save_inputs
    from rocketcluster.jobs.pipeline import (
        latest_time,
        plan_state,
        prune_runs,
        run_directory,
        run_jobs,
        since_marks,
    )

    # Absolute: executors of a standalone or Kubernetes master resolve a relative path
    # against their own working directory.
    request = replace(
        request,
        out=request.out.resolve(),
        inputs=None if request.inputs is None else request.inputs.resolve(),
    )
    config = request.config or JobsConfig()
    hours = request.history_hours if request.history_hours is not None else config.history_hours
    progress(f"starting Spark ({request.master or 'as spark-submit chose'})")
    started = time.monotonic()
    spark = spark_session(SparkSettings(master=request.master))
    spark_s = time.monotonic() - started
    now_ms = request.now_ms or int(time.time() * 1000)
    history = History(request.out / "history")
    missing: list[str] = []
    if request.inputs is not None:
        progress(f"reading the snapshot {request.inputs}")
        snapshot = read_parquet(spark, request.inputs)
        now_ms = request.now_ms or latest_time(snapshot) or now_ms
        since_ms = now_ms - int(hours * HOUR_MS)
        plan = RunPlan(request.jobs, now_ms, since_ms, config, request.cluster)
        prior = plan_state(history, plan, full=request.full)
        inputs = since_marks(snapshot, since_ms, now_ms, prior.high_water if prior else {})
    elif request.live is not None:
        since_ms = now_ms - int(hours * HOUR_MS)
        plan = RunPlan(request.jobs, now_ms, since_ms, config, request.cluster)
        prior = plan_state(history, plan, full=request.full)
        where = ", ".join(request.live.controllers) or ", ".join(request.live.broker_admin)
        what = "what is new" if prior else "the window"
        progress(f"reading {what} from the cluster through {where}")
        read = read_live(spark, request.live, since_ms, prior.high_water if prior else None)
        inputs, missing = read.tables, read.missing
        for problem in missing:
            progress(f"could not read: {problem}")
    else:
        raise ValueError("nothing to read: give a live cluster or an input snapshot")
    directory = run_directory(request.out, now_ms)
    if request.save_inputs:
        save_inputs(inputs, directory / "inputs")
    outcome = run_jobs(
        plan, inputs, directory, progress, history=history, prior=prior, missing=missing
    )
    outcome.timings_s["spark_start"] = round(spark_s, 3)
    prune_runs(request.out, request.keep)
    return outcome


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _lag_lines(groups: pd.DataFrame) -> list[str]:
    if groups.empty:
        return ["lag: no consumer group had stats in the window"]
    lines = [f"lag: {len(groups)} consumer group(s)"]
    from rocketcluster.jobs.lag import SEVERITY

    ranked = groups.sort_values("status", key=lambda s: s.map(SEVERITY), ascending=False)
    for row in ranked.itertuples():
        lines.append(f"  {row.consumer_group}: {row.status} — {row.reason}")
    return lines


def _sss_lines(groups: pd.DataFrame) -> list[str]:
    if groups.empty:
        return ["SyncStateSet: no controller events in the window"]
    lines = ["SyncStateSet:"]
    for row in groups.itertuples():
        lines.append(
            f"  {row.broker_group}: {row.elections} election(s), "
            f"{row.time_without_master_ms / 1000:.2f} s without master, "
            f"{row.unclean_elections} unclean, {row.flaps} flap(s), "
            f"{row.sss_changes} set change(s)"
        )
    return lines


def _tiering_lines(candidates: pd.DataFrame) -> list[str]:
    segments = candidates[candidates["level"] == "segment"] if not candidates.empty else candidates
    if segments.empty:
        return ["tiering: nothing old enough to move"]
    untiered = segments[~segments["tiered"].astype(bool)]
    gib = untiered["bytes"].sum() / 2**30
    saving = untiered["monthly_saving"].sum()
    return [
        f"tiering: {len(untiered)} segment(s) to move, {gib:.2f} GiB, "
        f"saves ${saving:,.2f}/month ({len(segments) - len(untiered)} already tiered)"
    ]


def readable(outcome: RunOutcome) -> list[str]:
    from rocketcluster.jobs import tables

    meta = outcome.summary["meta"]
    took = sum(v for k, v in outcome.timings_s.items() if k != "spark_start")
    lines = [
        f"health report {meta['cluster'] or ''} — {_when(meta['observedStart'])} to "
        f"{_when(meta['generatedAt'])}, jobs took {took:.1f} s "
        f"(Spark start {outcome.timings_s.get('spark_start', 0):.1f} s)".replace("  ", " ")
    ]
    r = outcome.results
    if tables.LAG_GROUPS in r:
        lines += _lag_lines(r[tables.LAG_GROUPS])
    if tables.SSS_GROUPS in r:
        lines += _sss_lines(r[tables.SSS_GROUPS])
    if tables.TIERING_CANDIDATES in r:
        lines += _tiering_lines(r[tables.TIERING_CANDIDATES])
    for problem in meta.get("missing") or []:
        lines.append(f"not read (retried, then left out): {problem}")
    lines.append(f"report: {outcome.report}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    progress = _to_stderr if sys.stderr.isatty() else _nowhere
    try:
        outcome = run_report(request_from(args), progress)
    except (JavaMissingError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeError as exc:  # the cluster did not answer (ClusterUnreachableError)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if args.json:
        answer = {**outcome.summary, "report": str(outcome.report)}
        print(json.dumps(answer, indent=2, default=str))
    else:
        print("\n".join(readable(outcome)))
    return 0


def _to_stderr(message: str) -> None:
    print(f"… {message}", file=sys.stderr)


def _nowhere(_: str) -> None:
    """Progress goes to a terminal only: a CronJob's log keeps the result lines."""


if __name__ == "__main__":
    sys.exit(main())
