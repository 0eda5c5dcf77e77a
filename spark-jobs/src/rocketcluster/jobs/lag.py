"""Consumer lag per group/topic/queue, in messages and in time, with a Burrow-style
status per queue and per consumer group.

Lag in messages is ``max(0, max_offset - committed_offset)``. Lag in time is exact, not
interpolated as kafka-lag-exporter must: the broker reports the store time of the
message at the committed offset (the oldest one not consumed), so
``lag_ms = time - committed_store_time`` while there is lag, else 0 (also 0 when that
store time is unknown, and never negative).

Burrow evaluates the last N commits of a partition; we evaluate the last
``window_points`` snapshots of a queue (broker_group, consumer_group, topic, queue_id).
A snapshot is taken whether or not the consumer committed, so Burrow's "time since the
last commit" becomes "time since the committed offset last changed": the first snapshot
(in the whole history read) showing the current offset. Rules, first match wins:

1. ERR    the latest committed offset is below the queue's min offset: retention
          deleted messages the group never read.
2. OK     lag was 0 at some point of the window.
3. OK     a single snapshot with lag: not enough evidence for a trend (said so).
4. REWIND the committed offset went backwards between two consecutive snapshots.
5. STOP   the offset did not move across the window, nothing is in flight in the
          latest snapshot, and now - (time the offset last changed) > the window's
          span (Burrow: now - last commit > last - first).
6. STALL  the offset did not move and the consumer is active (messages in flight: it
          takes them and does not acknowledge them), or it is idle but not yet for
          longer than the window's span (too early to call it stopped).
7. WARN   the offset moved and lag did not shrink in earnest: the falls between
          consecutive snapshots add up to at most DIP_SHARE of the rises (constant lag
          counts, as in Burrow: the consumer keeps pace, never catches up).
8. OK     otherwise.

Burrow's rule 7 is "lag never decreased between two consecutive snapshots". One pause
of the producers (a failover, a slow disk, a loaded machine) then lets the lag dip by a
message or two while the consumer acknowledges, and a consumer falling hundreds of
messages behind reads OK. Weighing the falls against the rises keeps Burrow's verdict
on monotone series and stops a dip from hiding a trend; lag that swings up and down
(a bursty producer, a consumer working in batches) still reads OK.

A group's status is the worst of its queues (OK < WARN < REWIND < STALL < STOP < ERR).

Snapshots newer than ``now_ms`` are ignored (a report is "as of now", and tests can
evaluate history as of a past moment). Rows without a time, committed offset or max
offset cannot be evaluated and are dropped; two snapshots of one queue at the same time
(a stats message read twice, or two brokers of a group reporting at once around a
failover) are merged into one holding the greatest of each number (offsets and store
times only grow, so that is the newer view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from rocketcluster.api.stats import LAG_SEVERITY, LagStatus
from rocketcluster.jobs import frames, tables
from rocketcluster.jobs.frames import count, duration, plural

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

KEY: Final = ["broker_group", "consumer_group", "topic", "queue_id"]
DEFAULT_WINDOW_POINTS: Final = 10
# Rule 7: falls of lag up to this share of its rises over the window are noise.
DIP_SHARE: Final = 0.1
# The consumer_stats columns the queue evaluation reads.
EVAL_COLUMNS: Final = [
    *KEY,
    "time",
    "committed_offset",
    "min_offset",
    "max_offset",
    "committed_store_time",
    "inflight",
]
# Two rows for one queue at one time are merged: the greatest of each number.
_MERGED: Final = [
    "committed_offset",
    "min_offset",
    "max_offset",
    "committed_store_time",
    "inflight",
    "retry",
]


SEVERITY: Final = LAG_SEVERITY


def _check_parameters(now_ms: int, window_points: int) -> None:
    if window_points < 1:
        raise frames.InputError(f"window_points must be at least 1, not {window_points}")
    if now_ms < 0:
        raise frames.InputError(f"now_ms must be an epoch time in ms, not {now_ms}")


# -- the pure core ----------------------------------------------------------------------


def lag_points(consumer_stats: pd.DataFrame, *, now_ms: int) -> pd.DataFrame:
    """Snapshots as lag points (LAG_POINTS columns plus ``min_offset``), cleaned and
    de-duplicated as the module says, sorted by queue and time."""
    frames.require_columns(consumer_stats.columns, tables.CONSUMER_STATS, "lag")
    points, _ = _prepare(consumer_stats, now_ms)
    return points[[*frames.result_columns(tables.LAG_POINTS), "min_offset"]]


def evaluate_queues(
    consumer_stats: pd.DataFrame, *, now_ms: int, window_points: int
) -> pd.DataFrame:
    """LAG_QUEUES from consumer_stats rows (any order, many queues at once; only the
    columns in EVAL_COLUMNS are read)."""
    _check_parameters(now_ms, window_points)
    if not set(EVAL_COLUMNS) <= set(consumer_stats.columns):
        frames.require_columns(consumer_stats.columns, tables.CONSUMER_STATS, "lag")
    p, code = _prepare(consumer_stats, now_ms)
    if p.empty:
        return frames.empty(tables.LAG_QUEUES)
    tails = p.assign(since=_since(p, code))
    return evaluate_tails(tails[_from_end(code) < window_points], now_ms=now_ms)


def _since(p: pd.DataFrame, code: np.ndarray) -> np.ndarray:
    """Per row: since when its queue's committed offset has held its latest value (the
    time of the queue's last change, its first snapshot counting as one)."""
    committed = p["committed_offset"].to_numpy(np.int64)
    time = p["time"].to_numpy(np.int64)
    n_rows = len(p)
    new_key = np.r_[True, code[1:] != code[:-1]]
    key_start = np.flatnonzero(new_key)
    key_end = np.r_[key_start[1:], n_rows] - 1
    run_start = new_key | np.r_[True, committed[1:] != committed[:-1]]
    run_first = np.maximum.accumulate(np.where(run_start, np.arange(n_rows), 0))
    return np.repeat(time[run_first[key_end]], key_end - key_start + 1)


def _from_end(code: np.ndarray) -> np.ndarray:
    """Per row (sorted by queue and time): how many later rows its queue has."""
    new_key = np.r_[True, code[1:] != code[:-1]]
    key_start = np.flatnonzero(new_key)
    key_end = np.r_[key_start[1:], len(code)] - 1
    sizes = key_end - key_start + 1
    return np.asarray(np.repeat(key_end, sizes) - np.arange(len(code)))


def evaluate_tails(tails: pd.DataFrame, *, now_ms: int) -> pd.DataFrame:
    """LAG_QUEUES from each queue's window (its last points, as :func:`_prepare` makes
    them, in any order) with a ``since`` column: when the queue's committed offset took
    its latest value. The window is all a queue's status needs once ``since`` is
    known, which is what lets the Spark path and an incremental run keep only it."""
    if tails.empty:
        return frames.empty(tables.LAG_QUEUES)
    order = tails.sort_values([*KEY, "time"], kind="stable").reset_index(drop=True)
    gid = order.groupby(KEY, sort=False).ngroup().to_numpy()
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    since = order["since"].to_numpy(np.int64)[first]
    return _judge(order, gid, since, now_ms)


def _prepare(stats: pd.DataFrame, now_ms: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Clean rows sorted by (queue, time), duplicates merged, lag computed; and the
    queue code of each row. Vectorised: one hash grouping, one sort, no string sort."""
    df = stats.dropna(subset=[*KEY, "time", "committed_offset", "max_offset"])
    df = df[df["time"].to_numpy() <= now_ms]
    codes = df.groupby(KEY, sort=False).ngroup().to_numpy()
    time = df["time"].to_numpy(np.int64)
    order = np.lexsort((time, codes))
    code, time = codes[order], time[order]
    numbers = {
        "time": time,
        "committed_offset": df["committed_offset"].to_numpy(np.int64)[order],
        "min_offset": df["min_offset"].fillna(0).to_numpy(np.int64)[order],
        "max_offset": df["max_offset"].to_numpy(np.int64)[order],
        "committed_store_time": df["committed_store_time"].to_numpy(np.float64)[order],
        "inflight": df["inflight"].fillna(0).to_numpy(np.int64)[order],
        "retry": (df["retry"].fillna(0).to_numpy(np.int64)[order] if "retry" in df else 0),
    }
    keys = df[KEY].iloc[order]
    first = np.r_[True, (code[1:] != code[:-1]) | (time[1:] != time[:-1])]
    if not first.all():  # the same queue twice at one time: keep the greatest of each
        starts = np.flatnonzero(first)
        for name, values in numbers.items():
            if isinstance(values, np.ndarray):
                numbers[name] = np.fmax.reduceat(values, starts) if len(values) else values
        keys, code = keys.iloc[starts], code[starts]
    out = keys.reset_index(drop=True).assign(**numbers)
    lag = np.maximum(out["max_offset"].to_numpy() - out["committed_offset"].to_numpy(), 0)
    store = out["committed_store_time"].to_numpy()
    behind = (lag > 0) & ~np.isnan(store)
    age = np.where(behind, out["time"].to_numpy() - np.nan_to_num(store), 0)
    out["lag_messages"] = lag
    out["lag_ms"] = np.maximum(age, 0).astype(np.int64)
    return out, code


def _judge(w: pd.DataFrame, gid: np.ndarray, since: np.ndarray, now_ms: int) -> pd.DataFrame:
    """The rules, vectorised over the windows of many queues (rows grouped by ``gid``)."""
    groups = len(since)
    first = np.flatnonzero(np.r_[True, gid[1:] != gid[:-1]])
    last = np.r_[first[1:], len(gid)] - 1
    n = last - first + 1
    time = w["time"].to_numpy(np.int64)
    committed = w["committed_offset"].to_numpy(np.int64)
    lag = w["lag_messages"].to_numpy(np.int64)
    pair = gid[1:] == gid[:-1]
    step = committed[1:] - committed[:-1]
    lag_step = lag[1:] - lag[:-1]
    pair_gid = gid[1:][pair]
    rewinds = np.bincount(pair_gid[step[pair] < 0], minlength=groups)
    steps = lag_step[pair]
    rose = np.bincount(pair_gid, weights=np.maximum(steps, 0), minlength=groups)
    fell = np.bincount(pair_gid, weights=np.maximum(-steps, 0), minlength=groups)
    shrank = fell > DIP_SHARE * rose
    zeros = np.bincount(gid[lag == 0], minlength=groups)
    latest = w.iloc[last].reset_index(drop=True)
    span = time[last] - time[first]
    advanced = committed[last] - committed[first]
    idle_for = now_ms - since
    inflight = latest["inflight"].to_numpy(np.int64)
    moved = advanced != 0
    status = np.select(
        [
            latest["committed_offset"].to_numpy() < latest["min_offset"].to_numpy(),
            zeros > 0,
            n == 1,
            rewinds > 0,
            ~moved & (inflight == 0) & (idle_for > span),
            ~moved,
            ~shrank,
        ],
        ["ERR", "OK", "OK", "REWIND", "STOP", "STALL", "WARN"],
        default="OK",
    )
    facts = pd.DataFrame(
        {
            "status": status,
            "n": n,
            "zeros": zeros,
            "span": span,
            "advanced": advanced,
            "idle_for": idle_for,
            "first_lag": lag[first],
            "lag": latest["lag_messages"].to_numpy(np.int64),
            "lag_ms": latest["lag_ms"].to_numpy(np.int64),
            "committed": latest["committed_offset"].to_numpy(np.int64),
            "min_offset": latest["min_offset"].to_numpy(np.int64),
            "inflight": inflight,
            "rewinds": rewinds,
            "fell": fell.astype(np.int64),
        }
    )
    facts = facts.join(_worst_rewinds(gid, pair, step, committed, first), how="left")
    out = latest[KEY].copy()
    out["status"] = status
    out["reason"] = [_queue_reason(row) for row in facts.itertuples(index=False)]
    out["lag_messages"] = facts["lag"]
    out["lag_ms"] = facts["lag_ms"]
    out["window_start"] = time[first]
    out["window_end"] = time[last]
    out["points"] = n
    return frames.typed(out.sort_values(KEY, kind="stable"), tables.LAG_QUEUES)


def _worst_rewinds(
    gid: np.ndarray, pair: np.ndarray, step: np.ndarray, committed: np.ndarray, first: np.ndarray
) -> pd.DataFrame:
    """Per window with a rewind: the largest step back, its offsets and snapshot number."""
    at = np.flatnonzero(pair & (step < 0))
    if len(at) == 0:
        return pd.DataFrame(columns=["back_from", "back_to", "back_at"], dtype="int64")
    steps = pd.DataFrame({"gid": gid[at + 1], "step": step[at], "at": at})
    worst = steps.sort_values(["gid", "step", "at"]).drop_duplicates("gid").set_index("gid")
    pos = worst["at"].to_numpy()
    return pd.DataFrame(
        {
            "back_from": committed[pos],
            "back_to": committed[pos + 1],
            "back_at": pos - first[worst.index.to_numpy()] + 1,
        },
        index=worst.index,
    )


def _queue_reason(f: Any) -> str:
    lag = f"{plural(f.lag, 'message')} ({duration(f.lag_ms)}) behind"
    over = f"over {f.n} snapshots ({duration(f.span)})"
    if f.status == "ERR":
        lost = f.min_offset - f.committed
        return (
            f"committed offset {count(f.committed)} is below the queue's min offset "
            f"{count(f.min_offset)}: retention deleted {plural(lost, 'message')} the "
            "group never read"
        )
    if f.status == "OK" and f.zeros > 0:
        if f.lag == 0:
            return f"caught up (lag 0 at {f.zeros} of {f.n} snapshots)"
        return f"caught up at {f.zeros} of {f.n} snapshots; now {lag}"
    if f.status == "OK" and f.n == 1:
        return f"only one snapshot so far, {lag}: not enough to judge a trend"
    if f.status == "REWIND":
        more = f"; {f.rewinds} steps back in the window" if f.rewinds > 1 else ""
        return (
            f"committed offset went back from {count(f.back_from)} to {count(f.back_to)} "
            f"({plural(f.back_from - f.back_to, 'message')}) between snapshots "
            f"{int(f.back_at)} and {int(f.back_at) + 1} of {f.n}{more}"
        )
    if f.status == "STOP":
        return (
            f"no progress for {duration(f.idle_for)}, {plural(f.lag, 'message')} behind "
            f"(oldest {duration(f.lag_ms)} old), nothing in flight"
        )
    if f.status == "STALL" and f.inflight > 0:
        return (
            f"offset stuck at {count(f.committed)} for {duration(f.idle_for)}, {lag}, "
            f"while {plural(f.inflight, 'message')} are in flight: the consumer takes "
            "messages and does not acknowledge them"
        )
    if f.status == "STALL":
        return (
            f"offset stuck at {count(f.committed)} for {duration(f.idle_for)}, {lag}, "
            f"nothing in flight; not yet longer than the window's {duration(f.span)}"
        )
    if f.status == "WARN" and f.first_lag == f.lag:
        return (
            f"lag stayed at {plural(f.lag, 'message')} {over} while the offset advanced "
            f"{count(f.advanced)}: keeping pace, never catching up"
        )
    if f.status == "WARN":
        dips = f"; it fell by only {count(f.fell)} in between" if f.fell else ""
        return (
            f"lag grew {count(f.first_lag)} → {plural(f.lag, 'message')} {over} while the "
            f"offset advanced {count(f.advanced)}{dips}"
        )
    return (
        f"consuming: lag {count(f.first_lag)} → {count(f.lag)} {over}, offset advanced "
        f"{count(f.advanced)}; {lag}"
    )


def evaluate_groups(queues: pd.DataFrame) -> pd.DataFrame:
    """LAG_GROUPS from LAG_QUEUES rows (many consumer groups at once)."""
    if queues.empty:
        return frames.empty(tables.LAG_GROUPS)
    q = queues.assign(severity=queues["status"].map(SEVERITY).astype("int64"))
    q = q.sort_values(
        [
            "consumer_group",
            "severity",
            "lag_ms",
            "lag_messages",
            "broker_group",
            "topic",
            "queue_id",
        ],
        ascending=[True, False, False, False, True, True, True],
        kind="stable",
    )
    by = q.groupby("consumer_group", sort=False)
    worst = by.head(1).set_index("consumer_group")
    totals = by.agg(
        queues=("status", "size"),
        lag_messages=("lag_messages", "sum"),
        max_lag_ms=("lag_ms", "max"),
    )
    is_worst = q["severity"] == by["severity"].transform("max")
    in_worst = is_worst.groupby(q["consumer_group"], sort=False).sum()
    out = totals.join(worst[["status", "reason", "topic", "queue_id", "broker_group"]])
    out["in_worst"] = in_worst
    out["reason"] = [_group_reason(row) for row in out.itertuples()]
    out = out.rename(
        columns={
            "topic": "worst_topic",
            "queue_id": "worst_queue_id",
            "broker_group": "worst_broker_group",
        }
    ).reset_index()
    return frames.typed(out.sort_values("consumer_group"), tables.LAG_GROUPS)


def _group_reason(g: Any) -> str:
    where = f"{g.topic} queue {g.queue_id} on {g.broker_group}"
    if g.queues == 1:
        return f"{where} {g.status}: {g.reason}"
    if g.status == "OK" and g.lag_messages == 0:
        return f"all {g.queues} queues OK and caught up"
    if g.status == "OK":
        return f"all {g.queues} queues OK; most behind: {where}: {g.reason}"
    return f"{g.in_worst} of {g.queues} queues {g.status}; worst: {where}: {g.reason}"


def run_lag_pandas(
    consumer_stats: pd.DataFrame, *, now_ms: int, window_points: int = DEFAULT_WINDOW_POINTS
) -> dict[str, pd.DataFrame]:
    """The whole job on pandas: what the Spark path computes, on a small input."""
    _check_parameters(now_ms, window_points)
    points = lag_points(consumer_stats, now_ms=now_ms)
    queues = evaluate_queues(consumer_stats, now_ms=now_ms, window_points=window_points)
    return {
        tables.LAG_POINTS: frames.typed(points, tables.LAG_POINTS),
        tables.LAG_QUEUES: queues,
        tables.LAG_GROUPS: evaluate_groups(queues),
    }


def lag_summary(results: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The JSON summary: every group's status and reason, counts per status, totals."""
    queues = results[tables.LAG_QUEUES]
    groups = results[tables.LAG_GROUPS]
    ordered = groups.assign(severity=groups["status"].map(SEVERITY)).sort_values(
        ["severity", "max_lag_ms", "consumer_group"], ascending=[False, False, True]
    )
    j = frames.jsonable
    return {
        "groups": [
            {
                "consumer_group": j(g.consumer_group),
                "status": j(g.status),
                "reason": j(g.reason),
                "queues": j(g.queues),
                "lag_messages": j(g.lag_messages),
                "max_lag_ms": j(g.max_lag_ms),
            }
            for g in ordered.itertuples(index=False)
        ],
        "groups_by_status": _by_status(groups["status"]),
        "queues_by_status": _by_status(queues["status"]),
        "totals": {
            "groups": len(groups),
            "queues": len(queues),
            "lag_messages": j(queues["lag_messages"].sum()) if len(queues) else 0,
            "max_lag_ms": j(queues["lag_ms"].max()) if len(queues) else 0,
        },
    }


def _by_status(status: pd.Series) -> dict[str, int]:
    counts = status.value_counts()
    return {s.value: int(counts.get(s.value, 0)) for s in LagStatus}


# -- the Spark shell ---------------------------------------------------------------------


# The columns of a queue's window kept between runs (history.py): its points as
# :func:`_prepare` makes them, and since when its committed offset has held.
TAIL_SCHEMA: Final = (
    "broker_group string, consumer_group string, topic string, queue_id int, time long, "
    "committed_offset long, min_offset long, max_offset long, committed_store_time long, "
    "inflight long, retry long, lag_messages long, lag_ms long, since long"
)


def run_lag(
    consumer_stats: DataFrame, *, now_ms: int, window_points: int = DEFAULT_WINDOW_POINTS
) -> dict[str, DataFrame]:
    """LAG_POINTS (merged, as the pure core gives them), LAG_QUEUES and LAG_GROUPS as
    Spark DataFrames, from the whole history (see :func:`lag_tables`)."""
    found = lag_tables(consumer_stats, now_ms=now_ms, window_points=window_points)
    points = spark_points(consumer_stats, now_ms).select(*frames.result_columns(tables.LAG_POINTS))
    return {
        tables.LAG_POINTS: points,
        tables.LAG_QUEUES: found[tables.LAG_QUEUES],
        tables.LAG_GROUPS: found[tables.LAG_GROUPS],
    }


LAG_TAILS: Final = "lag_tails"


QID: Final = "_queue"  # a 64-bit hash of KEY: what the per-queue shuffle carries


def lag_tables(
    consumer_stats: DataFrame,
    *,
    now_ms: int,
    window_points: int = DEFAULT_WINDOW_POINTS,
    prior_tails: DataFrame | None = None,
    window_start_ms: int | None = None,
) -> dict[str, DataFrame]:
    """LAG_QUEUES and LAG_GROUPS of the snapshots ``consumer_stats``, continuing the
    windows ``prior_tails`` (a previous run's LAG_TAILS) when given. LAG_TAILS: each
    queue's last ``window_points`` points with ``since``, for the next run. LAG_SUMS:
    per consumer group, broker group, broker and snapshot time, the sums over its
    queues (the plot's input, a few rows per snapshot instead of one per queue).

    Every per-snapshot step is Spark SQL, and a queue travels as a 64-bit hash of its
    four key columns (two of 100 million queues share one with odds of about 3e-4), its
    names joined back to its last points alone. A whole window is read without a
    shuffle (:func:`_history_points`); a run continuing another merges the new rows
    with the prior windows in one small shuffle (:func:`_last_points`). Only the windows
    (``window_points`` rows a queue, whatever the history's length) reach Python, where
    the pure rules judge them a bucket of queues at a time. An offset that has held
    since before the report's window counts from the window's start."""
    from pyspark.sql import functions as F

    _check_parameters(now_ms, window_points)
    frames.spark_columns(consumer_stats, tables.CONSUMER_STATS, "lag")
    clean = _clean(consumer_stats, now_ms)
    queue_hash = F.xxhash64(*KEY).alias(QID)
    keys = clean.select(*KEY)
    if prior_tails is None:  # the whole window: no shuffle of every row
        rows = clean.select(queue_hash, "broker_group", "time", *_MERGED)
        last = _history_points(rows, window_points, window_start_ms)
    else:  # what is new since the last run and its tails: few rows, one shuffle
        rows = clean.select(queue_hash, "time", *_MERGED, F.lit(None).cast("long").alias("prior"))
        prior = prior_tails.where(F.col("time") <= F.lit(now_ms))
        keys = keys.unionByName(prior.select(*KEY))
        rows = rows.unionByName(
            prior.select(queue_hash, "time", *_MERGED, F.col("since").alias("prior"))
        )
        last = _last_points(rows, window_points, window_start_ms)
    names = keys.distinct().select(queue_hash, *KEY)  # a row a queue: small
    tails = (
        last.join(names, on=QID).select(*KEY, "time", *_MERGED, *_lag_columns(), "since").cache()
    )
    queues = (
        frames.by_key(tails, KEY)
        .groupBy(frames.BUCKET_COLUMN)
        .applyInPandas(_tails_bucket(now_ms), schema=tables.RESULT_SCHEMAS[tables.LAG_QUEUES])
        .cache()
    )
    groups = (
        frames.by_key(queues, ["consumer_group"])
        .groupBy(frames.BUCKET_COLUMN)
        .applyInPandas(_groups_bucket, schema=tables.RESULT_SCHEMAS[tables.LAG_GROUPS])
    )
    sums = (
        clean.select("*", *_lag_columns())
        .groupBy("consumer_group", "broker_group", "broker_id", "time")
        .agg(*((F.max if c == "lag_ms" else F.sum)(c).alias(c) for c in PLOTTED))
    )
    return {
        tables.LAG_QUEUES: queues,
        tables.LAG_GROUPS: groups,
        LAG_TAILS: tails,
        LAG_SUMS: sums,
    }


def _last_points(rows: DataFrame, window_points: int, window_start_ms: int | None) -> DataFrame:
    """Each queue's last ``window_points`` points, merged, with ``since``: one shuffle
    and one sort of the rows by queue, and two passes over that order (a window
    operator costs about half a microsecond a row here, so they are few).

    Ordered by time and offset, a change is a row whose time and offset both differ
    from the row before (a queue's first row is one unless an earlier run knew it: its
    since comes along). Kept: the last ``2 * window_points`` rows of a queue, then
    merged per time (duplicates: the largest of each number, as :func:`_prepare`) and
    cut to the last ``window_points`` times — exact unless a queue has more than
    ``window_points`` duplicates among its last rows. A stale duplicate (one of two
    brokers reporting at the same millisecond with an older offset) can count as a
    change and make ``since`` later than the pure rules' (never earlier)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ordered = Window.partitionBy(QID).orderBy("time", "committed_offset")
    queue = Window.partitionBy(QID)
    before = F.lag("time").over(ordered)
    previous = F.lag("committed_offset").over(ordered)
    changed = F.when(before.isNull(), F.col("prior").isNull()).otherwise(
        (F.col("time") != before) & (F.col("committed_offset") != previous)
    )
    marked = rows.select(
        "*",
        F.when(changed, F.col("time")).alias("_change"),
        F.row_number().over(ordered).alias("_row"),
    )
    since = F.greatest(F.max("prior").over(queue), F.max("_change").over(queue))
    if window_start_ms is not None:
        since = F.greatest(since, F.lit(window_start_ms))
    later_rows = F.count(F.lit(1)).over(queue) - F.col("_row")
    near = marked.select(QID, "time", *_MERGED, since.alias("since"), later_rows.alias("_later"))
    merged = (
        near.where(F.col("_later") < F.lit(2 * window_points))
        .groupBy(QID, "time")
        .agg(*(F.max(c).alias(c) for c in _MERGED), F.max("since").alias("since"))
    )
    newest = F.row_number().over(Window.partitionBy(QID).orderBy(F.col("time").desc()))
    return (
        merged.select("*", newest.alias("_newest"))
        .where(F.col("_newest") <= F.lit(window_points))
        .drop("_newest")
    )


def _history_points(rows: DataFrame, window_points: int, window_start_ms: int | None) -> DataFrame:
    """:func:`_last_points` of a whole history, without shuffling or sorting it: a
    broker's snapshot covers all of its queues at one moment, so a queue's last points
    are (nearly always) at its broker group's last ``window_points`` snapshot times.
    Every pass over the history is a map-side filter through a broadcast table and an
    aggregation that leaves a row or two per queue:

    1. per broker group, its snapshot times (an aggregation): the ``window_points``-th
       newest is the group's cut;
    2. the rows at or after the cut (a broadcast join); a queue seen at fewer times
       there (one that missed snapshots, or is new) takes its newest older rows too;
    3. merged per time (duplicates: the largest of each number), the last
       ``window_points`` times kept: the tails; since when the offset holds, where it
       changed within them, is read off them;
    4. for a queue whose offset held across its whole tail, the history before the
       tail (a broadcast join with the tails' offsets): the last time with another
       offset, then the first time after it; none: the queue's first time.

    A stale duplicate (one of two brokers reporting the same millisecond with an older
    offset) can count as a change and make ``since`` later (never earlier) than the
    pure rules'."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    n = F.lit(window_points)
    times = rows.select("broker_group", "time").distinct()
    newest_first = Window.partitionBy("broker_group").orderBy(F.col("time").desc())
    cut = (
        times.select("broker_group", "time", F.row_number().over(newest_first).alias("_n"))
        .where(F.col("_n") <= n)
        .groupBy("broker_group")
        .agg(F.min("time").alias("_cut"))
    )
    recent = (
        rows.join(F.broadcast(cut), on="broker_group")
        .where(F.col("time") >= F.col("_cut"))
        .cache()  # a few rows a queue; read twice
    )
    seen = recent.groupBy(QID).agg(
        F.countDistinct("time").alias("_times"), F.min("_cut").alias("_cut")
    )
    short = seen.where(F.col("_times") < n).select(QID, "_cut").cache()
    newest = Window.partitionBy(QID).orderBy(F.col("time").desc())
    near = recent.select(QID, "time", *_MERGED)
    if not short.isEmpty():  # another pass over the history only when a queue needs it
        older = rows.join(F.broadcast(short), on=QID).where(F.col("time") < F.col("_cut"))
        older = older.select("*", F.dense_rank().over(newest).alias("_n")).where(F.col("_n") <= n)
        near = near.unionByName(older.select(QID, "time", *_MERGED))
    merged = near.groupBy(QID, "time").agg(*(F.max(c).alias(c) for c in _MERGED))
    tails = (
        merged.select("*", F.row_number().over(newest).alias("_n"))
        .where(F.col("_n") <= n)
        .drop("_n")
    )
    ordered = Window.partitionBy(QID).orderBy("time")
    previous = F.lag("committed_offset").over(ordered)
    facts = (
        tails.select(
            QID,
            "time",
            "committed_offset",
            F.when(
                previous.isNotNull() & (F.col("committed_offset") != previous), F.col("time")
            ).alias("_change"),
        )
        .groupBy(QID)
        .agg(
            F.max("_change").alias("_change"),
            F.min("time").alias("_first"),
            F.max_by("committed_offset", "time").alias("_held"),
        )
        .cache()
    )
    held = facts.where(F.col("_change").isNull()).select(QID, "_first", "_held")
    before = rows.join(F.broadcast(held), on=QID).where(F.col("time") < F.col("_first"))
    other = before.groupBy(QID).agg(
        F.max(F.when(F.col("committed_offset") != F.col("_held"), F.col("time"))).alias("_other"),
        F.min("time").alias("_oldest"),
    )
    moved = other.where(F.col("_other").isNotNull()).select(QID, "_other")
    after = (
        rows.join(F.broadcast(moved), on=QID)
        .where(F.col("time") > F.col("_other"))
        .groupBy(QID)
        .agg(F.min("time").alias("_after"))
    )
    since = F.coalesce(
        F.col("_change"),
        F.when(F.col("_other").isNotNull(), F.least(F.col("_after"), F.col("_first"))),
        F.least(F.col("_oldest"), F.col("_first")),
        F.col("_first"),
    )
    if window_start_ms is not None:
        since = F.greatest(since, F.lit(window_start_ms))
    found = (
        facts.join(other, on=QID, how="left")
        .join(after, on=QID, how="left")
        .select(QID, since.alias("since"))
    )
    return tails.join(found, on=QID)


LAG_SUMS: Final = "lag_sums"
# The numbers the plot draws: counts add up over queues, the age of the oldest message
# does not (its maximum).
PLOTTED: Final = ("committed_offset", "max_offset", "lag_messages", "lag_ms", "inflight", "retry")


def _clean(consumer_stats: DataFrame, now_ms: int) -> DataFrame:
    """Rows the rules can use (as :func:`_prepare` keeps them), at or before now."""
    from pyspark.sql import functions as F

    return (
        consumer_stats.dropna(subset=[*KEY, "time", "committed_offset", "max_offset"])
        .where(F.col("time") <= F.lit(now_ms))
        .fillna(0, subset=["min_offset", "inflight", "retry"])
    )


def _lag_columns() -> list[Column]:
    """Lag in messages and in time of a row, as :func:`_prepare` computes them."""
    from pyspark.sql import functions as F

    lag = F.greatest(F.col("max_offset") - F.col("committed_offset"), F.lit(0))
    lag_ms = F.when(
        (lag > 0) & F.col("committed_store_time").isNotNull(),
        F.greatest(F.col("time") - F.col("committed_store_time"), F.lit(0)),
    ).otherwise(F.lit(0))
    return [lag.cast("long").alias("lag_messages"), lag_ms.cast("long").alias("lag_ms")]


def spark_points(consumer_stats: DataFrame, now_ms: int) -> DataFrame:
    """The per-row part in Spark SQL: clean rows, merge a queue's duplicates at one
    time, lag in messages and in time."""
    from pyspark.sql import functions as F

    deduped = (
        _clean(consumer_stats, now_ms)
        .groupBy(*KEY, "time")
        .agg(*(F.max(c).alias(c) for c in _MERGED))
    )
    return deduped.select(*KEY, "time", *_MERGED, *_lag_columns())


def _tails_bucket(now_ms: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def evaluate(pdf: pd.DataFrame) -> pd.DataFrame:
        return evaluate_tails(pdf.drop(columns=[frames.BUCKET_COLUMN]), now_ms=now_ms)

    return evaluate


def _groups_bucket(pdf: pd.DataFrame) -> pd.DataFrame:
    return evaluate_groups(pdf.drop(columns=[frames.BUCKET_COLUMN]))
