"""The ``rocketcluster`` PySpark data source: a running cluster as the jobs' input tables.

    spark.dataSource.register(RocketClusterDataSource)
    spark.read.format("rocketcluster").option("controller", "http://10.0.0.5:8080")
         .option("table", "consumer_stats").load().where("time >= 1764115200000")

Stats tables read the brokers' stats topic (one partition per broker group and range of
its queue offsets, so groups and long histories read in parallel); ``events`` reads the
controllers' history (one partition per broker group). Filters on ``time`` and
``broker_group`` are pushed down: a lower time bound becomes the first stats offset to
read (the broker finds it by store time), a group filter drops whole partitions. Every
pushed filter is still applied exactly to the rows, so results never depend on how far
the push-down got. Rows leave as Arrow record batches.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType

from rocketcluster.api.auth import ADMIN_TOKEN_ENV
from rocketcluster.api.stats import StatsSnapshot
from rocketcluster.jobs import failpoints, tables
from rocketcluster.jobs.cluster import (
    ClusterUnreachableError,
    ControllerApi,
    GroupReplicas,
    first_answering,
    read_stored,
    stats_offset_range,
)

SOURCE_NAME = "rocketcluster"
SNAPSHOTS_PER_PARTITION = 2000
BATCH_ROWS = 10_000
# A partition whose replicas do not answer is tried again this many times, after these
# pauses (seconds), from where it stopped; then it is reported, not failed.
RETRY_PAUSES_S: tuple[float, ...] = (1.0, 2.0, 4.0)
# The column the source adds to every table: null on data rows; a row of its own, with
# the partition's broker group, says what could not be read and why.
READ_ERROR = "read_error"
_ROW_LISTS = {
    tables.QUEUE_STATS: "queues",
    tables.CONSUMER_STATS: "consumers",
    tables.SEGMENT_STATS: "segments",
}


class SourceOptionError(ValueError):
    """The data source was given options it cannot work with."""


# -- the pure part: rows and bounds ---------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What the pushed filters allow: a time range (inclusive ms) and a set of groups."""

    since_ms: int | None = None
    until_ms: int | None = None
    groups: frozenset[str] | None = None

    def keeps_time(self, time_ms: int) -> bool:
        return (self.since_ms is None or time_ms >= self.since_ms) and (
            self.until_ms is None or time_ms <= self.until_ms
        )

    def keeps_group(self, group: str) -> bool:
        return self.groups is None or group in self.groups

    def narrowed(self, f: Filter) -> Bounds | None:
        """These bounds with ``f`` applied, or None when ``f`` cannot be pushed."""
        pushable = EqualTo | In | GreaterThan | GreaterThanOrEqual | LessThan | LessThanOrEqual
        if not isinstance(f, pushable):  # IsNull, Not, StringContains, ...: Spark's
            return None
        column = f.attribute
        if column == ("broker_group",):
            if isinstance(f, EqualTo) and isinstance(f.value, str):
                wanted = frozenset({f.value})
            elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
                wanted = frozenset(f.value)
            else:
                return None
            groups = wanted if self.groups is None else self.groups & wanted
            return Bounds(self.since_ms, self.until_ms, groups)
        if column != ("time",) or not isinstance(f.value, int) or isinstance(f.value, bool):
            return None
        value = int(f.value)
        if isinstance(f, GreaterThanOrEqual | GreaterThan):
            low = value + (1 if isinstance(f, GreaterThan) else 0)
            return Bounds(max(low, self.since_ms or low), self.until_ms, self.groups)
        if isinstance(f, LessThanOrEqual | LessThan):
            high = value - (1 if isinstance(f, LessThan) else 0)
            return Bounds(self.since_ms, min(high, self.until_ms or high), self.groups)
        return None


def snapshot_rows(snapshot: StatsSnapshot, table: str) -> Iterator[dict[str, Any]]:
    """The rows ``table`` gets from one snapshot: its per-queue/consumer/segment rows,
    each with the snapshot's key (time, cluster, broker group, broker id)."""
    key = {
        "time": snapshot.time,
        "cluster": snapshot.cluster,
        "broker_group": snapshot.broker_group,
        "broker_id": snapshot.broker_id,
    }
    for row in getattr(snapshot, _ROW_LISTS[table]):
        yield {**key, **row.model_dump()}


def event_row(event: Mapping[str, Any]) -> dict[str, Any]:
    """A controller history entry (state.py ``_record``) as an ``events`` row."""
    detail = event.get("detail") or {}
    # A registration names its broker; an election's command names the master it
    # chose as ``newMaster`` (controller/state.py keeps the command as the detail).
    broker_id = detail.get("brokerId", detail.get("newMaster"))
    sss = event.get("syncStateSet")
    return {
        "time": int(event["time"]),
        "index": int(event["index"]),
        "broker_group": str(event.get("group", "")),
        "command": str(event.get("command", "")),
        "reason": str(event.get("reason", "")),
        "broker_id": None if broker_id is None else int(broker_id),
        "master_id": event.get("masterId"),
        "master_epoch": event.get("masterEpoch"),
        "sync_state_set": None if sss is None else [int(b) for b in sss],
        "sync_state_set_epoch": event.get("syncStateSetEpoch"),
        "unclean": bool(detail.get("unclean", False)),
    }


def record_batches(
    rows: Iterable[Mapping[str, Any]], schema: pa.Schema, size: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    names = schema.names
    chunk: list[Mapping[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield _batch(chunk, names, schema)
            chunk = []
    if chunk:
        yield _batch(chunk, names, schema)


def _batch(chunk: list[Mapping[str, Any]], names: list[str], schema: pa.Schema) -> pa.RecordBatch:
    columns = {name: [row.get(name) for row in chunk] for name in names}
    return pa.RecordBatch.from_pydict(columns, schema=schema)


# -- the Spark side ------------------------------------------------------------------


@dataclass(frozen=True)
class StatsPartition(InputPartition):
    group: str
    admin: tuple[str, ...]
    start: int
    end: int
    # Set when the run could not even plan this group's reads.
    unplanned: str = ""


@dataclass(frozen=True)
class EventsPartition(InputPartition):
    group: str


def read_marks(options: Mapping[str, str]) -> tuple[int | None, dict[str, int]]:
    """Options ``since`` (epoch ms: read snapshots at or after) and ``sinceByGroup``
    (JSON ``{"group": ms}``: only snapshots newer than that, per broker group: where an
    earlier run stopped)."""
    raw = options.get("since", "")
    try:
        since = int(raw) if raw else None
        marks = json.loads(options.get("sinceByGroup", "{}") or "{}")
        if not isinstance(marks, dict):
            raise ValueError("not an object")
        return since, {str(k): int(v) for k, v in marks.items()}
    except (ValueError, TypeError) as exc:
        raise SourceOptionError(
            f'options since (epoch ms) and sinceByGroup ({{"group": ms}}): {exc}'
        ) from exc


def _options(options: Mapping[str, str]) -> tuple[str, list[str], dict[str, list[str]]]:
    table = options.get("table", "")
    if table not in tables.INPUT_SCHEMAS:
        raise SourceOptionError(f"option table={table!r}: choose one of {', '.join(tables.INPUTS)}")
    controllers = [c.strip() for c in options.get("controller", "").split(",") if c.strip()]
    try:
        broker_admin = json.loads(options.get("brokerAdmin", "{}") or "{}")
    except json.JSONDecodeError as exc:
        raise SourceOptionError(f"option brokerAdmin is not JSON: {exc}") from exc
    if not isinstance(broker_admin, dict):
        raise SourceOptionError('option brokerAdmin: a JSON object {"group": ["host:8080"]}')
    if not controllers and not broker_admin:
        raise SourceOptionError(
            "option controller: give the controller admin URL(s) (or brokerAdmin for a "
            "cluster without controllers)"
        )
    return table, controllers, broker_admin


def admin_token(options: Mapping[str, str]) -> str | None:
    """The admin token when the cluster's security.auth is on: option adminToken, else
    $ROCKETCLUSTER_ADMIN_TOKEN (the health report CronJob sets it from the Secret)."""
    return options.get("adminToken") or os.environ.get(ADMIN_TOKEN_ENV) or None


class RocketClusterDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        table, _, _ = _options(self.options)
        return f"{tables.INPUT_SCHEMAS[table]}, {READ_ERROR} string"

    def reader(self, schema: StructType) -> DataSourceReader:
        table, controllers, broker_admin = _options(self.options)
        reader = ClusterReader(table, controllers, broker_admin, schema)
        reader.token = admin_token(self.options)
        since, reader.marks = read_marks(self.options)
        if since is not None:
            reader.bounds = Bounds(since_ms=since)
        return reader


class ClusterReader(DataSourceReader):
    def __init__(
        self,
        table: str,
        controllers: Sequence[str],
        broker_admin: Mapping[str, Sequence[str]],
        schema: StructType,
    ) -> None:
        self.table = table
        self.controllers = list(controllers)
        self.broker_admin = {k: list(v) for k, v in broker_admin.items()}
        self.schema = schema
        self.bounds = Bounds()
        self.token: str | None = None  # security.auth (admin_token)
        self.marks: dict[str, int] = {}  # per group: read only snapshots newer than

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for f in filters:
            narrowed = self.bounds.narrowed(f)
            if narrowed is None:
                yield f
            else:
                self.bounds = narrowed

    def partitions(self) -> Sequence[InputPartition]:
        if self.controllers:
            known = ControllerApi(self.controllers, token=self.token).groups(self.broker_admin)
        else:  # a single broker without controllers: no events, its own stats
            known = [GroupReplicas(n, tuple(a)) for n, a in sorted(self.broker_admin.items())]
        groups = [g for g in known if self.bounds.keeps_group(g.name)]
        if self.table == tables.EVENTS and not self.controllers:
            return [EventsPartition("")]
        if self.table == tables.EVENTS:
            return [EventsPartition(g.name) for g in groups] or [EventsPartition("")]
        found: list[InputPartition] = []
        for group in groups:
            found.extend(self._stats_partitions(group))
        return found or [StatsPartition("", (), 0, 0)]

    def _stats_partitions(self, group: GroupReplicas) -> list[StatsPartition]:
        since = self.bounds.since_ms
        if group.name in self.marks:
            since = max(since or 0, self.marks[group.name] + 1)
        try:
            with first_answering(group, self.token) as admin:
                start, end = stats_offset_range(admin, since)
        except ClusterUnreachableError as exc:
            return [StatsPartition(group.name, group.admin, 0, 0, unplanned=str(exc))]
        return [
            StatsPartition(group.name, group.admin, lo, min(lo + SNAPSHOTS_PER_PARTITION, end))
            for lo in range(start, end, SNAPSHOTS_PER_PARTITION)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = tables.arrow_schema(f"{tables.INPUT_SCHEMAS[self.table]}, {READ_ERROR} string")
        if isinstance(partition, EventsPartition):
            rows: Iterable[dict[str, Any]] = self._event_rows(partition)
        else:
            assert isinstance(partition, StatsPartition)
            rows = self._stats_rows(partition)
        return record_batches(rows, schema)

    def _event_rows(self, partition: EventsPartition) -> Iterator[dict[str, Any]]:
        if not partition.group:
            return
        failpoints.reading(self.table, partition.group)
        api = ControllerApi(self.controllers, token=self.token)
        problem = ""
        for pause in (*RETRY_PAUSES_S, None):
            try:
                events = api.events(self.bounds.since_ms or 0, partition.group)
                break
            except ClusterUnreachableError as exc:
                problem = str(exc)
                if pause is None:
                    yield unreadable(partition.group, f"controller events: {problem}")
                    return
                time.sleep(pause)
        for event in events:
            row = event_row(event)
            if self.bounds.keeps_time(row["time"]):
                yield row

    def _stats_rows(self, partition: StatsPartition) -> Iterator[dict[str, Any]]:
        if partition.unplanned:
            yield unreadable(partition.group, f"{self.table}: {partition.unplanned}")
            return
        if partition.start >= partition.end:
            return
        failpoints.reading(self.table, f"{partition.group} {partition.start}")
        group = GroupReplicas(partition.group, partition.admin)
        mark = self.marks.get(partition.group)
        position = partition.start
        for pause in (*RETRY_PAUSES_S, None):
            try:
                with first_answering(group, self.token) as admin:
                    for stored in read_stored(admin, position, partition.end):
                        position = stored.offset + 1
                        snapshot = stored.snapshot
                        if (
                            self.bounds.keeps_time(snapshot.time)
                            and self.bounds.keeps_group(snapshot.broker_group)
                            and (mark is None or snapshot.time > mark)
                        ):
                            yield from snapshot_rows(snapshot, self.table)
                return
            except ClusterUnreachableError as exc:
                if pause is None:
                    where = f"stats offsets {position}-{partition.end - 1}"
                    yield unreadable(partition.group, f"{self.table} {where}: {exc}")
                    return
                time.sleep(pause)


def unreadable(group: str, why: str) -> dict[str, Any]:
    """The row that reports a partition the run could not read."""
    return {"broker_group": group, READ_ERROR: why}
