"""The jobs' four input tables, from a live cluster or from a Parquet snapshot of one.

A snapshot is a directory with one Parquet dataset per input table (``queue_stats/``,
``consumer_stats/``, ``segment_stats/``, ``events/``), written by ``--save-inputs``: a
report can be rerun later, elsewhere, or on a copy a user attached to a bug report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

from rocketcluster.jobs import tables
from rocketcluster.jobs.source import RocketClusterDataSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class InputsError(ValueError):
    """A Parquet snapshot that is missing a table or has the wrong columns."""


@dataclass(frozen=True)
class LiveCluster:
    controllers: Sequence[str]
    # Broker admin addresses per group, for deployments where they do not follow the
    # registered client address (DESIGN §3); empty for the usual case.
    broker_admin: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass
class LiveRead:
    """The input tables read from a cluster, and what could not be read (one sentence
    per partition: its broker group first)."""

    tables: dict[str, DataFrame]
    missing: list[str]


def read_live(
    spark: SparkSession,
    cluster: LiveCluster,
    since_ms: int,
    marks: Mapping[str, int] | None = None,
) -> LiveRead:
    """Every input table from the cluster: snapshots at or after ``since_ms``, and per
    broker group in ``marks`` only those newer than its mark (where the last run
    stopped). Each table is read once and kept on the executors (every job sees the
    same rows, the cluster is asked once); partitions that did not answer come back as
    ``missing``, not as a failed run."""
    from pyspark.sql import functions as F

    from rocketcluster.jobs.source import READ_ERROR

    spark.dataSource.register(RocketClusterDataSource)
    found = {}
    problems: list[str] = []
    events_since = since_ms if not marks else max(since_ms, min(marks.values()) - EVENTS_MARGIN_MS)
    for table in tables.INPUTS:
        reader = (
            spark.read.format(RocketClusterDataSource.name())
            .option("table", table)
            .option("controller", ",".join(cluster.controllers))
            .option(
                "brokerAdmin", json.dumps({k: list(v) for k, v in cluster.broker_admin.items()})
            )
            .option("since", str(events_since if table == tables.EVENTS else since_ms))
            .option("sinceByGroup", json.dumps(dict(marks or {}) if table != tables.EVENTS else {}))
        )
        frame = reader.load().localCheckpoint(eager=True)
        errors = frame.where(F.col(READ_ERROR).isNotNull()).select(READ_ERROR, "broker_group")
        problems += [f"{r[1]} {r[0]}" for r in errors.collect()]
        found[table] = frame.where(F.col(READ_ERROR).isNull()).drop(READ_ERROR)
    return LiveRead(found, problems)


# Controllers stamp events with the leader's clock, which may step back at a leader
# change: a run continuing an earlier one reads this much before its marks (duplicates
# are dropped by index).
EVENTS_MARGIN_MS = 600_000


def read_parquet(spark: SparkSession, directory: Path) -> dict[str, DataFrame]:
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import StructType

    missing = [t for t in tables.INPUTS if not (directory / t).exists()]
    if missing:
        raise InputsError(
            f"{directory} is not an input snapshot: {', '.join(m + '/' for m in missing)} "
            f"missing (a snapshot has {', '.join(tables.INPUTS)}; write one with --save-inputs)"
        )
    found = {}
    for table, ddl in tables.INPUT_SCHEMAS.items():
        path = directory / table
        try:
            frame = spark.read.parquet(str(path))
        except AnalysisException as exc:
            raise InputsError(f"{path} is not a Parquet dataset: {exc.getMessage()}") from exc
        wanted = cast(StructType, StructType.fromDDL(ddl))
        lacking = [f.name for f in wanted.fields if f.name not in frame.columns]
        if lacking:
            raise InputsError(f"{path} lacks the columns {', '.join(lacking)}")
        found[table] = frame.select(*[frame[f.name].cast(f.dataType) for f in wanted.fields])
    return found


def save_inputs(inputs: Mapping[str, DataFrame], directory: Path) -> Path:
    for table, frame in inputs.items():
        frame.write.mode("overwrite").parquet(str(directory / table))
    return directory
