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


def read_live(spark: SparkSession, cluster: LiveCluster, since_ms: int) -> dict[str, DataFrame]:
    spark.dataSource.register(RocketClusterDataSource)
    found = {}
    for table in tables.INPUTS:
        reader = (
            spark.read.format(RocketClusterDataSource.name())
            .option("table", table)
            .option("controller", ",".join(cluster.controllers))
            .option(
                "brokerAdmin", json.dumps({k: list(v) for k, v in cluster.broker_admin.items()})
            )
        )
        # Read once: every job sees the same rows, and the cluster is asked only once.
        frame = reader.load().where(f"time >= {since_ms}")
        found[table] = frame.localCheckpoint(eager=True)
    return found


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
