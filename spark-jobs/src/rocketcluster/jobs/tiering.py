"""Tiering candidates: which data should move from the brokers' disks to object storage,
ranked, with what that would save a month.

Read from the latest snapshot of each broker group (the newest ``time`` at or before
``now_ms`` in segment_stats, and in queue_stats for the queues' last reads). A segment
row of segment_stats is one queue's share of one commit-log segment (a *slice*); the
same slice listed twice in one snapshot counts once (the greatest of each number).

Two levels, ranked separately (``rank`` restarts at 1 for each):

- ``segment``: one row per commit-log segment of a broker group, summing its slices
  (``topic``/``queue_id`` null). Local retention drops whole segments, so this is the
  level at which disk is actually freed.
- ``queue``: one row per topic/queue of a broker group, summing all its slices
  (``segment`` null): a cold queue as a whole, e.g. a topic nobody writes any more. Its
  newest message also counts the queue's tail (queue_stats ``tail_store_time``) and its
  last read the queue's own (queue_stats ``last_read_time``).

The levels overlap (a cold queue's bytes are also in its segments' rows): totals come
from one level, the segments (see :func:`tiering_summary`).

- ``age_ms`` = now - the newest store time in the row (an unknown store time counts as
  new); rows younger than ``min_age_ms`` are left out.
- ``idle_ms`` = now - the later of the last read and the newest write: data never read
  has been idle since it was written.
- ``score`` = GB x (1 + log2(1 + age in days)) x (1 + log2(1 + idle days)): savings grow
  with size, so size counts linearly; age and idleness multiply it, logarithmically, so a
  month-old idle GB (score ~36) outranks a fresh one (1) but not 40 GB written a day
  ago. Rows the tier already holds in full (``tiered``) are listed, flagged, and ranked
  after the rest: there is nothing left to do for them.
- ``monthly_saving`` (see :func:`monthly_saving`) counts only bytes not yet tiered.

The system stats topic (``api.stats.STATS_TOPIC``) is included: it is data on the same
disks, trimmed by the same retention; the health jobs read it, so its recent segments
look busy and only its old ones rank.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from rocketcluster.jobs import frames, tables
from rocketcluster.jobs.config import GIB, MS_PER_HOUR, PriceTable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

DEFAULT_MIN_AGE_MS: Final = 24 * MS_PER_HOUR
MS_PER_DAY: Final = 24 * MS_PER_HOUR
RECENT_READ_MS: Final = 30 * MS_PER_DAY
SLICE: Final = ["broker_group", "topic", "queue_id", "segment"]
_SLICE_NUMBERS: Final = ["bytes", "messages", "max_store_time", "last_read_time", "tiered"]
# What each level sums up, before scoring (the input of rank_candidates).
CANDIDATE_COLUMNS: Final = [
    "level",
    "broker_group",
    "topic",
    "queue_id",
    "segment",
    "bytes",
    "untiered_bytes",
    "messages",
    "newest",
    "last_read",
    "tiered",
]
_NULLABLE: Final = ["topic", "queue_id", "segment"]


def _check(now_ms: int, min_age_ms: int) -> None:
    if now_ms < 0:
        raise frames.InputError(f"now_ms must be an epoch time in ms, not {now_ms}")
    if min_age_ms < 0:
        raise frames.InputError(f"min_age_ms must not be negative, not {min_age_ms}")


# -- the pure core ----------------------------------------------------------------------


def score(nbytes: np.ndarray, age_ms: np.ndarray, idle_ms: np.ndarray) -> np.ndarray:
    """The ranking score of the module's docstring."""
    gb = np.asarray(nbytes, dtype=np.float64) / GIB
    age_days = np.maximum(np.asarray(age_ms, dtype=np.float64), 0) / MS_PER_DAY
    idle_days = np.maximum(np.asarray(idle_ms, dtype=np.float64), 0) / MS_PER_DAY
    return np.asarray(gb * (1 + np.log2(1 + age_days)) * (1 + np.log2(1 + idle_days)))


def monthly_saving(
    untiered_bytes: np.ndarray, idle_ms: np.ndarray, prices: PriceTable
) -> np.ndarray:
    """GB x (local - object price), less the one-off upload requests spread over
    ``amortize_months`` and, for data read in the last 30 days, one read back a month.
    Negative when tiering would cost more than it saves."""
    nbytes = np.asarray(untiered_bytes, dtype=np.float64)
    gb = nbytes / GIB
    storage = gb * (prices.local_gb_month - prices.object_gb_month)
    requests = np.ceil(nbytes / prices.upload_part_bytes)
    upload = requests * prices.put_per_1000 / 1000 / prices.amortize_months
    recent = np.asarray(idle_ms) < RECENT_READ_MS
    retrieval = np.where(recent, gb * prices.retrieval_per_gb, 0.0)
    return np.asarray(storage - upload - retrieval)


def latest(frame: pd.DataFrame, now_ms: int) -> pd.DataFrame:
    """The rows of each broker group's newest snapshot at or before now."""
    df = frame.dropna(subset=["broker_group", "time"])
    df = df[df["time"].to_numpy() <= now_ms]
    newest = df.groupby("broker_group")["time"].transform("max")
    return df[df["time"] == newest]


def candidates(
    segment_stats: pd.DataFrame, queue_stats: pd.DataFrame, *, now_ms: int, min_age_ms: int
) -> pd.DataFrame:
    """Both levels' rows (CANDIDATE_COLUMNS), unscored, young ones left out."""
    seg = latest(segment_stats, now_ms).dropna(subset=SLICE)
    seg = seg.assign(
        bytes=seg["bytes"].fillna(0).astype("int64"),
        messages=seg["messages"].fillna(0).astype("int64"),
        max_store_time=seg["max_store_time"].astype("float64"),  # null: unknown
        last_read_time=seg["last_read_time"].astype("float64"),
        tiered=seg["tiered"].astype("boolean").fillna(False).astype(bool),
    )
    slices = seg.groupby(SLICE, as_index=False)[_SLICE_NUMBERS].max()
    slices["untiered_bytes"] = slices["bytes"].where(~slices["tiered"], 0)
    sums = {
        "bytes": ("bytes", "sum"),
        "untiered_bytes": ("untiered_bytes", "sum"),
        "messages": ("messages", "sum"),
        "newest": ("max_store_time", "max"),
        "last_read": ("last_read_time", "max"),
        "tiered": ("tiered", "all"),
    }
    segments = slices.groupby(["broker_group", "segment"], as_index=False).agg(**sums)
    queues = slices.groupby(["broker_group", "topic", "queue_id"], as_index=False).agg(**sums)
    qtimes = ["tail_store_time", "last_read_time"]
    q = latest(queue_stats, now_ms)
    q = q.assign(**{c: q[c].astype("float64") for c in qtimes})
    q = q.groupby(["broker_group", "topic", "queue_id"])[qtimes].max()
    queues = queues.join(q, on=["broker_group", "topic", "queue_id"])
    queues["newest"] = queues[["newest", "tail_store_time"]].max(axis=1)
    queues["last_read"] = queues[["last_read", "last_read_time"]].max(axis=1)
    both = pd.concat(
        [segments.assign(level="segment"), queues.assign(level="queue")], ignore_index=True
    ).reindex(columns=CANDIDATE_COLUMNS)
    age = now_ms - both["newest"].fillna(now_ms)
    return both[age.to_numpy() >= min_age_ms].reset_index(drop=True)


def rank_candidates(cands: pd.DataFrame, *, now_ms: int, prices: PriceTable) -> pd.DataFrame:
    """TIERING_CANDIDATES from CANDIDATE_COLUMNS rows: scored, saved, ranked per level."""
    if cands.empty:
        return frames.empty(tables.TIERING_CANDIDATES, _NULLABLE)
    c = cands.reset_index(drop=True)
    newest = c["newest"].astype("float64").fillna(now_ms).to_numpy()
    last_read = np.fmax(c["last_read"].astype("float64").to_numpy(), newest)
    c["age_ms"] = np.maximum(now_ms - newest, 0).astype(np.int64)
    c["idle_ms"] = np.maximum(now_ms - last_read, 0).astype(np.int64)
    c["score"] = score(c["bytes"].to_numpy(), c["age_ms"].to_numpy(), c["idle_ms"].to_numpy())
    tiered = c["tiered"].astype(bool).to_numpy()
    saving = monthly_saving(c["untiered_bytes"].to_numpy(), c["idle_ms"].to_numpy(), prices)
    c["monthly_saving"] = np.where(tiered, 0.0, saving)
    c["tiered"] = tiered
    c = c.sort_values(
        ["level", "tiered", "score", "bytes", "broker_group", "segment", "topic", "queue_id"],
        ascending=[False, True, False, False, True, True, True, True],
        kind="stable",
        na_position="first",
    )
    c["rank"] = c.groupby("level", sort=False).cumcount() + 1
    return frames.typed(c, tables.TIERING_CANDIDATES, _NULLABLE)


def evaluate_tiering(
    segment_stats: pd.DataFrame,
    queue_stats: pd.DataFrame,
    *,
    now_ms: int,
    prices: PriceTable,
    min_age_ms: int = DEFAULT_MIN_AGE_MS,
) -> dict[str, pd.DataFrame]:
    """The whole job on pandas: what the Spark path computes, on a small input."""
    _check(now_ms, min_age_ms)
    frames.require_columns(segment_stats.columns, tables.SEGMENT_STATS, "tiering")
    frames.require_columns(queue_stats.columns, tables.QUEUE_STATS, "tiering")
    cands = candidates(segment_stats, queue_stats, now_ms=now_ms, min_age_ms=min_age_ms)
    return {tables.TIERING_CANDIDATES: rank_candidates(cands, now_ms=now_ms, prices=prices)}


def tiering_summary(results: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The JSON summary. Totals come from the segment level only (the queue level
    counts the same bytes again); the top queues are listed for the report."""
    c = results[tables.TIERING_CANDIDATES]
    j = frames.jsonable
    seg = c[c["level"] == "segment"]
    todo = seg[~seg["tiered"].astype(bool)]
    done = seg[seg["tiered"].astype(bool)]
    queues = c[c["level"] == "queue"].sort_values("rank")
    return {
        "segments": len(seg),
        "candidate_bytes": j(todo["bytes"].sum()) if len(todo) else 0,
        "monthly_saving": float(todo["monthly_saving"].sum()),
        "already_tiered_segments": len(done),
        "already_tiered_bytes": j(done["bytes"].sum()) if len(done) else 0,
        "queues": len(queues),
        "top_queues": [
            {
                "rank": j(q.rank),
                "broker_group": j(q.broker_group),
                "topic": j(q.topic),
                "queue_id": j(q.queue_id),
                "bytes": j(q.bytes),
                "age_ms": j(q.age_ms),
                "idle_ms": j(q.idle_ms),
                "monthly_saving": float(q.monthly_saving),
                "tiered": bool(q.tiered),
            }
            for q in queues.head(10).itertuples(index=False)
        ],
    }


# -- the Spark shell ---------------------------------------------------------------------


def run_tiering(
    segment_stats: DataFrame,
    queue_stats: DataFrame,
    *,
    now_ms: int,
    prices: PriceTable,
    min_age_ms: int = DEFAULT_MIN_AGE_MS,
) -> dict[str, DataFrame]:
    """TIERING_CANDIDATES as a Spark DataFrame: the latest snapshots and the sums per
    segment and per queue in Spark SQL; scoring and ranking (rows per segment or queue,
    not per slice) in one pandas call through :func:`rank_candidates`."""
    from pyspark.sql import functions as F

    _check(now_ms, min_age_ms)
    frames.spark_columns(segment_stats, tables.SEGMENT_STATS, "tiering")
    frames.spark_columns(queue_stats, tables.QUEUE_STATS, "tiering")
    seg = (
        latest_snapshots(segment_stats, now_ms)
        .dropna(subset=SLICE)
        .fillna(0, subset=["bytes", "messages"])
        .fillna(False, subset=["tiered"])
    )
    slices = seg.groupBy(*SLICE).agg(*[F.max(c).alias(c) for c in _SLICE_NUMBERS])
    slices = slices.withColumn(
        "untiered_bytes", F.when(F.col("tiered"), F.lit(0)).otherwise(F.col("bytes"))
    )
    sums = [
        F.sum("bytes").alias("bytes"),
        F.sum("untiered_bytes").alias("untiered_bytes"),
        F.sum("messages").alias("messages"),
        F.max("max_store_time").alias("newest"),
        F.max("last_read_time").alias("last_read"),
        F.bool_and("tiered").alias("tiered"),
    ]
    segments = slices.groupBy("broker_group", "segment").agg(*sums)
    qkey = ["broker_group", "topic", "queue_id"]
    qstats = (
        latest_snapshots(queue_stats, now_ms)
        .groupBy(*qkey)
        .agg(F.max("tail_store_time").alias("tail"), F.max("last_read_time").alias("qread"))
    )
    queues = (
        slices.groupBy(*qkey)
        .agg(*sums)
        .join(qstats, on=qkey, how="left")
        .withColumn("newest", F.greatest("newest", "tail"))
        .withColumn("last_read", F.greatest("last_read", "qread"))
    )
    both = (
        segments.withColumn("level", F.lit("segment"))
        .unionByName(queues.withColumn("level", F.lit("queue")), allowMissingColumns=True)
        .select(*CANDIDATE_COLUMNS)
    )
    age = F.lit(now_ms) - F.coalesce(F.col("newest"), F.lit(now_ms))
    young_left_out = both.where(age >= F.lit(min_age_ms))
    schema = tables.RESULT_SCHEMAS[tables.TIERING_CANDIDATES]

    def rank(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        parts = list(batches)
        cands = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        yield rank_candidates(cands, now_ms=now_ms, prices=prices)

    return {tables.TIERING_CANDIDATES: young_left_out.coalesce(1).mapInPandas(rank, schema)}


def latest_snapshots(frame: DataFrame, now_ms: int) -> DataFrame:
    """The rows of each broker group's newest snapshot at or before now."""
    from pyspark.sql import functions as F

    rows = frame.dropna(subset=["broker_group", "time"]).where(F.col("time") <= F.lit(now_ms))
    newest = rows.groupBy("broker_group").agg(F.max("time").alias("time"))
    return rows.join(F.broadcast(newest), on=["broker_group", "time"])
