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
    from pyspark.sql import DataFrame

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
    time = p["time"].to_numpy(np.int64)
    committed = p["committed_offset"].to_numpy(np.int64)
    n_rows = len(p)
    new_key = np.r_[True, code[1:] != code[:-1]]
    key_start = np.flatnonzero(new_key)
    key_end = np.r_[key_start[1:], n_rows] - 1
    # Since when the committed offset has held its current value, over all history.
    run_start = new_key | np.r_[True, committed[1:] != committed[:-1]]
    run_first = np.maximum.accumulate(np.where(run_start, np.arange(n_rows), 0))
    since = time[run_first[key_end]]
    # The window: the last window_points snapshots of each key.
    sizes = key_end - key_start + 1
    from_end = np.repeat(key_end, sizes) - np.arange(n_rows)
    w = p[from_end < window_points].reset_index(drop=True)
    gid = np.repeat(np.arange(len(key_start)), np.minimum(sizes, window_points))
    return _judge(w, gid, since, now_ms)


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


def run_lag(
    consumer_stats: DataFrame, *, now_ms: int, window_points: int = DEFAULT_WINDOW_POINTS
) -> dict[str, DataFrame]:
    """LAG_POINTS, LAG_QUEUES and LAG_GROUPS as Spark DataFrames.

    The input is cleaned, spread over buckets of whole queues and cached once; the
    points (a local aggregation: the buckets already hold whole queues) and the queue
    statuses (one pandas call per bucket) both read that cache without another shuffle.
    LAG_QUEUES is cached too: LAG_GROUPS is computed from it."""
    from pyspark.sql import functions as F

    _check_parameters(now_ms, window_points)
    frames.spark_columns(consumer_stats, tables.CONSUMER_STATS, "lag")
    clean = (
        consumer_stats.dropna(subset=[*KEY, "time", "committed_offset", "max_offset"])
        .where(F.col("time") <= F.lit(now_ms))
        .fillna(0, subset=["min_offset", "inflight", "retry"])
        .select(*EVAL_COLUMNS, "retry")
    )
    keyed = frames.by_key(clean, KEY).cache()
    points = _spark_points(keyed)
    queues = (
        keyed.select(frames.BUCKET_COLUMN, *EVAL_COLUMNS)
        .groupBy(frames.BUCKET_COLUMN)
        .applyInPandas(
            _queues_bucket(now_ms, window_points),
            schema=tables.RESULT_SCHEMAS[tables.LAG_QUEUES],
        )
        .cache()
    )
    groups = (
        frames.by_key(queues, ["consumer_group"])
        .groupBy(frames.BUCKET_COLUMN)
        .applyInPandas(_groups_bucket, schema=tables.RESULT_SCHEMAS[tables.LAG_GROUPS])
    )
    return {tables.LAG_POINTS: points, tables.LAG_QUEUES: queues, tables.LAG_GROUPS: groups}


def _spark_points(keyed: DataFrame) -> DataFrame:
    """The per-row part in Spark SQL: merge duplicates, lag in messages and in time."""
    from pyspark.sql import functions as F

    merged = [F.max(c).alias(c) for c in _MERGED]
    deduped = keyed.groupBy(frames.BUCKET_COLUMN, *KEY, "time").agg(*merged)
    lag = F.greatest(F.col("max_offset") - F.col("committed_offset"), F.lit(0))
    lag_ms = F.when(
        (lag > 0) & F.col("committed_store_time").isNotNull(),
        F.greatest(F.col("time") - F.col("committed_store_time"), F.lit(0)),
    ).otherwise(F.lit(0))
    return deduped.select(
        "*", lag.cast("long").alias("lag_messages"), lag_ms.cast("long").alias("lag_ms")
    ).select(*frames.result_columns(tables.LAG_POINTS))


def _queues_bucket(now_ms: int, window_points: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def evaluate(pdf: pd.DataFrame) -> pd.DataFrame:
        return evaluate_queues(pdf[EVAL_COLUMNS], now_ms=now_ms, window_points=window_points)

    return evaluate


def _groups_bucket(pdf: pd.DataFrame) -> pd.DataFrame:
    return evaluate_groups(pdf.drop(columns=[frames.BUCKET_COLUMN]))
