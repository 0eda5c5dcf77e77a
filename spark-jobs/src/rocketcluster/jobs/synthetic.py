"""Synthetic input snapshots of a busy cluster, for the benchmark and for trying the
report without a cluster: consumer groups that keep up, fall behind, stop, stall and
rewind; broker groups whose SyncStateSet shrinks and grows with an election now and
then; commit-log segments of every age. Vectorised (numpy → Arrow → Parquet): a million
rows take a second or two, so the benchmark times the jobs, not the generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from rocketcluster.jobs import tables

# The behaviour of consumer group i is BEHAVIOURS[i % len(BEHAVIOURS)].
BEHAVIOURS = ("keeps-up", "falls-behind", "stopped", "stalled", "rewinds")
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Shape:
    consumer_groups: int = 10
    broker_groups: int = 2
    topics: int = 4
    queues: int = 8
    snapshots: int = 1563  # 10 groups x 2 x 4 x 8 queues x 1563 = about 1e6 rows
    interval_ms: int = 30_000
    segments: int = 200
    events: int = 2000

    @property
    def consumer_rows(self) -> int:
        return (
            self.consumer_groups * self.broker_groups * self.topics * self.queues * self.snapshots
        )


def shape_for(rows: int) -> Shape:
    """A shape with about ``rows`` consumer_stats rows (the bulk of a snapshot history)."""
    base = Shape()
    per_snapshot = base.consumer_groups * base.broker_groups * base.topics * base.queues
    return Shape(snapshots=max(2, round(rows / per_snapshot)))


def _schema(table: str) -> pa.Schema:
    return tables.arrow_schema(tables.INPUT_SCHEMAS[table])


def _consumer_stats(shape: Shape, now_ms: int, rng: np.random.Generator) -> pa.Table:
    series = shape.consumer_groups * shape.broker_groups * shape.topics * shape.queues
    n = series * shape.snapshots
    step = np.repeat(np.arange(shape.snapshots, dtype=np.int64), series)
    sid = np.tile(np.arange(series, dtype=np.int64), shape.snapshots)
    cg = sid // (shape.broker_groups * shape.topics * shape.queues)
    rest = sid % (shape.broker_groups * shape.topics * shape.queues)
    bg, rest = rest // (shape.topics * shape.queues), rest % (shape.topics * shape.queues)
    topic, queue = rest // shape.queues, rest % shape.queues
    time = now_ms - (shape.snapshots - 1 - step) * shape.interval_ms
    rate = 50 + (sid % 7) * 10  # messages per snapshot interval, per queue
    max_offset = step * rate + rng.integers(0, 5, n)
    behaviour = cg % len(BEHAVIOURS)
    frozen_from = (shape.snapshots * 2) // 3
    # Keeps up: caught up at every other snapshot, one message behind in between.
    committed = np.where(behaviour == 0, np.maximum(0, max_offset - step % 2), 0)
    committed = np.where(behaviour == 1, step * (rate * 7 // 10), committed)
    frozen = np.minimum(step, frozen_from) * rate
    committed = np.where(np.isin(behaviour, (2, 3)), frozen, committed)
    # Rewinds: every ninth snapshot the group is reset to half its offset.
    rewound = np.where(step % 9 == 8, step * rate // 2, step * rate - 10)
    committed = np.where(behaviour == 4, np.maximum(0, rewound), committed)
    committed = np.minimum(committed, max_offset)
    lag = max_offset - committed
    committed_store_time = np.where(
        lag > 0, time - (lag // np.maximum(rate, 1)) * shape.interval_ms, -1
    )
    inflight = np.where(behaviour == 3, 16, np.where(behaviour == 2, 0, rng.integers(0, 4, n)))
    columns = {
        "time": time,
        "cluster": np.full(n, "bench"),
        "broker_group": np.char.add("broker-", bg.astype(str)),
        "broker_id": np.ones(n, dtype=np.int32),
        "consumer_group": np.char.add("group-", cg.astype(str)),
        "topic": np.char.add("topic-", topic.astype(str)),
        "queue_id": queue.astype(np.int32),
        "committed_offset": committed,
        "min_offset": np.zeros(n, dtype=np.int64),
        "max_offset": max_offset,
        "committed_store_time": pa.array(committed_store_time, mask=committed_store_time < 0),
        "inflight": inflight.astype(np.int64),
        "retry": rng.integers(0, 3, n).astype(np.int64),
    }
    return pa.table(columns, schema=_schema(tables.CONSUMER_STATS))


def _queue_stats(shape: Shape, now_ms: int) -> pa.Table:
    series = shape.broker_groups * shape.topics * shape.queues
    snapshots = min(shape.snapshots, 200)
    n = series * snapshots
    step = np.repeat(np.arange(snapshots, dtype=np.int64), series)
    sid = np.tile(np.arange(series, dtype=np.int64), snapshots)
    bg, rest = sid // (shape.topics * shape.queues), sid % (shape.topics * shape.queues)
    time = now_ms - (snapshots - 1 - step) * shape.interval_ms
    columns = {
        "time": time,
        "cluster": np.full(n, "bench"),
        "broker_group": np.char.add("broker-", bg.astype(str)),
        "broker_id": np.ones(n, dtype=np.int32),
        "topic": np.char.add("topic-", (rest // shape.queues).astype(str)),
        "queue_id": (rest % shape.queues).astype(np.int32),
        "min_offset": np.zeros(n, dtype=np.int64),
        "max_offset": step * 60,
        "head_store_time": np.full(n, now_ms - 30 * 24 * HOUR_MS),
        "tail_store_time": time,
        "last_read_time": time - (sid % 5) * 24 * HOUR_MS,
    }
    return pa.table(columns, schema=_schema(tables.QUEUE_STATS))


def _segment_stats(shape: Shape, now_ms: int) -> pa.Table:
    per_segment = shape.topics * shape.queues
    n = shape.broker_groups * shape.segments * per_segment
    idx = np.arange(n, dtype=np.int64)
    bg = idx // (shape.segments * per_segment)
    seg = (idx // per_segment) % shape.segments
    q = idx % per_segment
    age_h = (shape.segments - seg) * 6  # one segment every 6 hours, the newest last
    newest = now_ms - (age_h - 6) * HOUR_MS
    columns = {
        "time": np.full(n, now_ms),
        "cluster": np.full(n, "bench"),
        "broker_group": np.char.add("broker-", bg.astype(str)),
        "broker_id": np.ones(n, dtype=np.int32),
        "topic": np.char.add("topic-", (q // shape.queues).astype(str)),
        "queue_id": (q % shape.queues).astype(np.int32),
        "segment": seg * (1 << 30),
        "bytes": (1 << 30) // per_segment + q * 1024,
        "messages": np.full(n, 40_000, dtype=np.int64),
        "min_store_time": now_ms - age_h * HOUR_MS,
        "max_store_time": newest,
        "last_read_time": np.where(seg % 3 == 0, now_ms - HOUR_MS, newest),
        "tiered": seg < shape.segments // 10,
    }
    return pa.table(columns, schema=_schema(tables.SEGMENT_STATS))


def _events(shape: Shape, now_ms: int, rng: np.random.Generator) -> pa.Table:
    """Per broker group, replicas 1..3 leave and rejoin the set; every tenth change an
    election moves the master (with a short time without one)."""
    rows: dict[str, list[object]] = {
        name: [] for name in tables.column_names(tables.INPUT_SCHEMAS[tables.EVENTS])
    }
    per_group = max(1, shape.events // shape.broker_groups)
    span = shape.snapshots * shape.interval_ms
    index = 0
    for g in range(shape.broker_groups):
        master, members = 1, [1, 2, 3]
        times = np.sort(rng.integers(now_ms - span, now_ms, per_group))
        for i, t in enumerate(times):
            index += 1
            if i % 10 == 9:
                command, master, unclean = "ElectMaster", (master % 3) + 1, i % 100 == 99
                members = [master]
            elif len(members) < 3:
                command, unclean = "AlterSyncStateSet", False
                members = sorted({*members, *(b for b in (1, 2, 3) if b not in members)})
            else:
                command, unclean = "AlterSyncStateSet", False
                members = sorted(b for b in members if b != (master % 3) + 1)
            for name, value in (
                ("time", int(t)),
                ("index", index),
                ("broker_group", f"broker-{g}"),
                ("command", command),
                ("reason", "synthetic"),
                ("broker_id", master),
                ("master_id", master),
                ("master_epoch", i // 10 + 1),
                ("sync_state_set", list(members)),
                ("sync_state_set_epoch", i + 1),
                ("unclean", unclean),
            ):
                rows[name].append(value)
    return pa.table(rows, schema=_schema(tables.EVENTS))


def write_snapshot(directory: Path, shape: Shape, now_ms: int, seed: int = 1) -> dict[str, int]:
    """A Parquet input snapshot under ``directory``; the row count of each table."""
    rng = np.random.default_rng(seed)
    built = {
        tables.CONSUMER_STATS: _consumer_stats(shape, now_ms, rng),
        tables.QUEUE_STATS: _queue_stats(shape, now_ms),
        tables.SEGMENT_STATS: _segment_stats(shape, now_ms),
        tables.EVENTS: _events(shape, now_ms, rng),
    }
    counts = {}
    for table, data in built.items():
        (directory / table).mkdir(parents=True, exist_ok=True)
        pq.write_table(data, directory / table / "part-0.parquet")
        counts[table] = data.num_rows
    return counts
