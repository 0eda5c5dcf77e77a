"""Synthetic input snapshots of a busy cluster, for the benchmark and for trying the
report without a cluster: consumer groups that keep up, fall behind, stop, stall and
rewind; broker groups whose SyncStateSet shrinks and grows with an election now and
then; commit-log segments of every age. Vectorised (numpy → Arrow → Parquet): a million
rows take a second or two, so the benchmark times the jobs, not the generator.
"""

from __future__ import annotations

from collections.abc import Callable
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
    # The step stopped and stalled groups freeze at (default: two thirds in); a
    # history extended later (write_snapshot's from_step) keeps its base's.
    frozen_from: int | None = None

    @property
    def frozen_step(self) -> int:
        return (self.snapshots * 2) // 3 if self.frozen_from is None else self.frozen_from

    @property
    def consumer_rows(self) -> int:
        return (
            self.consumer_groups * self.broker_groups * self.topics * self.queues * self.snapshots
        )


def shape_for(rows: int, hours: float | None = None) -> Shape:
    """A shape with about ``rows`` consumer_stats rows (the bulk of a snapshot history);
    with ``hours``, that many hours of snapshots 30 s apart, and as many queues as it
    takes (a history's length is a time, its width the cluster's size)."""
    base = Shape()
    if hours is None:
        per_snapshot = base.consumer_groups * base.broker_groups * base.topics * base.queues
        return Shape(snapshots=max(2, round(rows / per_snapshot)))
    snapshots = max(2, round(hours * HOUR_MS / base.interval_ms))
    per_queue = base.consumer_groups * base.broker_groups * base.topics
    queues = max(1, round(rows / snapshots / per_queue))
    return Shape(queues=queues, snapshots=snapshots)


def _schema(table: str) -> pa.Schema:
    return tables.arrow_schema(tables.INPUT_SCHEMAS[table])


def _consumer_stats(shape: Shape, now_ms: int, rng: np.random.Generator, steps: range) -> pa.Table:
    series = shape.consumer_groups * shape.broker_groups * shape.topics * shape.queues
    n = series * len(steps)
    step = np.repeat(np.arange(steps.start, steps.stop, dtype=np.int64), series)
    sid = np.tile(np.arange(series, dtype=np.int64), len(steps))
    cg = sid // (shape.broker_groups * shape.topics * shape.queues)
    rest = sid % (shape.broker_groups * shape.topics * shape.queues)
    bg, rest = rest // (shape.topics * shape.queues), rest % (shape.topics * shape.queues)
    topic, queue = rest // shape.queues, rest % shape.queues
    time = now_ms - (shape.snapshots - 1 - step) * shape.interval_ms
    rate = 50 + (sid % 7) * 10  # messages per snapshot interval, per queue
    max_offset = step * rate + rng.integers(0, 5, n)
    behaviour = cg % len(BEHAVIOURS)
    frozen_from = shape.frozen_step
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


def _queue_stats(shape: Shape, now_ms: int, steps: range) -> pa.Table:
    """The last 200 snapshots of ``steps`` (the tiering job reads the newest only)."""
    series = shape.broker_groups * shape.topics * shape.queues
    first = max(steps.start, steps.stop - 200)
    snapshots = steps.stop - first
    n = series * snapshots
    step = np.repeat(np.arange(first, steps.stop, dtype=np.int64), series)
    sid = np.tile(np.arange(series, dtype=np.int64), snapshots)
    bg, rest = sid // (shape.topics * shape.queues), sid % (shape.topics * shape.queues)
    time = now_ms - (shape.snapshots - 1 - step) * shape.interval_ms
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


def _events(shape: Shape, now_ms: int, rng: np.random.Generator, first_index: int = 0) -> pa.Table:
    """Per broker group, replicas 1..3 leave and rejoin the set; every tenth change an
    election moves the master (with a short time without one)."""
    rows: dict[str, list[object]] = {
        name: [] for name in tables.column_names(tables.INPUT_SCHEMAS[tables.EVENTS])
    }
    per_group = max(1, shape.events // shape.broker_groups)
    span = shape.snapshots * shape.interval_ms
    index = first_index
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


# Rows of consumer_stats generated and written at a time: a 1e8-row history never
# sits in memory whole.
CHUNK_ROWS = 4_000_000


def write_snapshot(
    directory: Path,
    shape: Shape,
    now_ms: int,
    seed: int = 1,
    *,
    from_step: int = 0,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, int]:
    """A Parquet input snapshot under ``directory``; the row count of each table.

    With ``from_step``, only snapshots ``from_step``.. of ``shape`` (whose newest is at
    ``now_ms``) are added beside what the directory holds: more history on top, as the
    next hour brings it (events in that span only, a new latest segment snapshot)."""
    rng = np.random.default_rng([seed, from_step])
    steps = range(from_step, shape.snapshots)
    series = shape.consumer_groups * shape.broker_groups * shape.topics * shape.queues
    per_chunk = max(1, CHUNK_ROWS // series)
    counts = dict.fromkeys(tables.INPUTS, 0)
    stats_dir = directory / tables.CONSUMER_STATS
    stats_dir.mkdir(parents=True, exist_ok=True)
    for start in range(steps.start, steps.stop, per_chunk):
        chunk = range(start, min(start + per_chunk, steps.stop))
        data = _consumer_stats(shape, now_ms, rng, chunk)
        pq.write_table(data, stats_dir / f"part-{start:07d}.parquet")
        counts[tables.CONSUMER_STATS] += data.num_rows
        progress(f"{counts[tables.CONSUMER_STATS]:,} consumer_stats rows written")
    events = max(2 * shape.broker_groups, shape.events * len(steps) // shape.snapshots)
    span = Shape(**{**shape.__dict__, "snapshots": len(steps), "events": events})
    rest = {
        tables.QUEUE_STATS: _queue_stats(shape, now_ms, steps),
        tables.SEGMENT_STATS: _segment_stats(shape, now_ms),
        tables.EVENTS: _events(span, now_ms, rng, first_index=from_step * shape.events),
    }
    for table, data in rest.items():
        (directory / table).mkdir(parents=True, exist_ok=True)
        pq.write_table(data, directory / table / f"part-{from_step:07d}.parquet")
        counts[table] = data.num_rows
    return counts
