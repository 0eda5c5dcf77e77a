"""The tiering job: the latest snapshot, both levels, age and idle time, the score and its
ranking, savings from the price table, and the Spark path agreeing with the pure core."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pytest

from rocketcluster.api.stats import STATS_TOPIC
from rocketcluster.jobs import tables
from rocketcluster.jobs.config import GIB, MIB, PriceTable
from rocketcluster.jobs.frames import InputError
from rocketcluster.jobs.tiering import (
    evaluate_tiering,
    monthly_saving,
    run_tiering,
    score,
    tiering_summary,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

H = 3_600_000
D = 24 * H
NOW = 100 * D


def slice_(
    bg: str,
    topic: str,
    queue: int,
    segment: int,
    nbytes: int,
    newest: int | None,
    *,
    read: int | None = None,
    tiered: bool = False,
    t: int = NOW,
) -> dict[str, Any]:
    return {
        "time": t,
        "cluster": "c",
        "broker_group": bg,
        "broker_id": 1,
        "topic": topic,
        "queue_id": queue,
        "segment": segment,
        "bytes": nbytes,
        "messages": nbytes // 1_000,
        "min_store_time": None if newest is None else newest - D,
        "max_store_time": newest,
        "last_read_time": read,
        "tiered": tiered,
    }


def queue(
    bg: str, topic: str, q: int, *, tail: int | None, read: int | None, t: int = NOW
) -> dict[str, Any]:
    return {
        "time": t,
        "cluster": "c",
        "broker_group": bg,
        "broker_id": 1,
        "topic": topic,
        "queue_id": q,
        "min_offset": 0,
        "max_offset": 100,
        "head_store_time": None,
        "tail_store_time": tail,
        "last_read_time": read,
    }


def cluster() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Broker group b0: segment 0 (A and B, 30 days old), segment 1 (A, tiered), segment 2
    (A, an hour old); an older snapshot that must not count; b1 with one stats segment."""
    segments = [
        slice_("b0", "A", 0, 0, 2 * GIB, NOW - 30 * D),
        slice_("b0", "B", 0, 0, GIB, NOW - 30 * D, read=NOW - 2 * D),
        slice_("b0", "A", 0, GIB, GIB, NOW - 10 * D, tiered=True),
        slice_("b0", "A", 0, 2 * GIB, GIB, NOW - H),
        slice_("b0", "A", 0, 0, 99 * GIB, NOW - 90 * D, t=NOW - 1_000),  # older snapshot
        slice_("b0", "A", 0, 0, 99 * GIB, NOW - 90 * D, t=NOW + 1_000),  # after now
        slice_("b1", STATS_TOPIC, 0, 0, GIB // 2, NOW - 5 * D, t=NOW - 7),
    ]
    queues = [
        queue("b0", "A", 0, tail=NOW - H, read=NOW - 5 * D),
        queue("b0", "B", 0, tail=NOW - 30 * D, read=None),
        queue("b1", STATS_TOPIC, 0, tail=NOW - 5 * D, read=NOW - 3 * D, t=NOW - 7),
    ]
    return pd.DataFrame(segments), pd.DataFrame(queues)


def candidates(**kw: Any) -> pd.DataFrame:
    segments, queues = cluster()
    return evaluate_tiering(segments, queues, now_ms=NOW, prices=PriceTable(), **kw)[
        tables.TIERING_CANDIDATES
    ]


def test_score_and_saving_formulas() -> None:
    assert score(np.array([GIB]), np.array([0]), np.array([0])).tolist() == [1.0]
    month = score(np.array([GIB]), np.array([30 * D]), np.array([30 * D]))[0]
    assert month == pytest.approx((1 + math.log2(31)) ** 2)
    # grows with each of size, age and idleness
    base = score(np.array([GIB]), np.array([D]), np.array([D]))[0]
    assert score(np.array([2 * GIB]), np.array([D]), np.array([D]))[0] > base
    assert score(np.array([GIB]), np.array([2 * D]), np.array([D]))[0] > base
    assert score(np.array([GIB]), np.array([D]), np.array([2 * D]))[0] > base

    prices = PriceTable(
        local_gb_month=0.08,
        object_gb_month=0.0125,
        put_per_1000=0.005,
        upload_part_bytes=8 * MIB,
        amortize_months=10,
        retrieval_per_gb=0.01,
    )
    saved = monthly_saving(np.array([10 * GIB, 10 * GIB]), np.array([D, 60 * D]), prices)
    uploads = 1_280 * 0.005 / 1000 / 10  # 10 GiB in 8 MiB parts, spread over 10 months
    assert saved[0] == pytest.approx(10 * 0.0675 - uploads - 10 * 0.01)  # read lately
    assert saved[1] == pytest.approx(10 * 0.0675 - uploads)


def test_known_candidates_and_ranks() -> None:
    got = candidates()
    columns = ["rank", "level", "broker_group", "topic", "queue_id", "segment", "bytes"]
    assert [tuple(None if pd.isna(v) else v for v in r) for r in got[columns].to_numpy()] == [
        (1, "segment", "b0", None, None, 0, 3 * GIB),
        (2, "segment", "b1", None, None, 0, GIB // 2),
        (3, "segment", "b0", None, None, GIB, GIB),  # tiered: after the rest
        (1, "queue", "b0", "B", 0, None, GIB),
        (2, "queue", "b1", STATS_TOPIC, 0, None, GIB // 2),  # the stats topic is data too
    ]
    top = got.iloc[0]
    assert (top["age_ms"], top["idle_ms"]) == (30 * D, 2 * D)  # B was read 2 days ago
    assert top["score"] == pytest.approx(3 * (1 + math.log2(31)) * (1 + math.log2(3)))
    assert top["monthly_saving"] == pytest.approx(3 * (0.08 - 0.023))
    assert not top["tiered"]
    tiered = got.iloc[2]
    assert tiered["tiered"]
    assert tiered["monthly_saving"] == 0.0
    # queue A is left out: its tail is an hour old; queue B was never read by queue_stats
    # but its slice was, two days ago
    b = got.iloc[3]
    assert (b["age_ms"], b["idle_ms"]) == (30 * D, 2 * D)
    stats = got.iloc[4]
    assert (stats["age_ms"], stats["idle_ms"]) == (5 * D, 3 * D)


def test_never_read_is_idle_since_written() -> None:
    segments = pd.DataFrame([slice_("b0", "A", 0, 0, GIB, NOW - 7 * D)])
    queues = pd.DataFrame([queue("b0", "A", 0, tail=NOW - 7 * D, read=None)])
    got = evaluate_tiering(segments, queues, now_ms=NOW, prices=PriceTable())[
        tables.TIERING_CANDIDATES
    ]
    assert got["idle_ms"].tolist() == [7 * D, 7 * D]


def test_min_age_leaves_young_data_out() -> None:
    assert len(candidates(min_age_ms=0)) == 7  # 3 segments + 1 young + A, B, stats queues
    young = candidates(min_age_ms=0)
    assert set(young[young["level"] == "queue"]["topic"]) == {"A", "B", STATS_TOPIC}
    assert set(candidates(min_age_ms=6 * D)["bytes"]) == {3 * GIB, GIB}
    assert candidates(min_age_ms=365 * D).empty


def test_a_partly_tiered_segment_saves_on_the_rest() -> None:
    segments = pd.DataFrame(
        [
            slice_("b0", "A", 0, 0, 3 * GIB, NOW - 9 * D, tiered=True),
            slice_("b0", "A", 1, 0, GIB, NOW - 9 * D),
            slice_("b0", "A", 1, 0, GIB, NOW - 9 * D),  # the same slice twice counts once
        ]
    )
    queues = pd.DataFrame([queue("b0", "A", 0, tail=None, read=None)])
    got = evaluate_tiering(segments, queues, now_ms=NOW, prices=PriceTable())[
        tables.TIERING_CANDIDATES
    ]
    seg = got[got["level"] == "segment"].iloc[0]
    assert (seg["bytes"], bool(seg["tiered"])) == (4 * GIB, False)
    assert seg["monthly_saving"] == pytest.approx(1 * (0.08 - 0.023))
    per_queue = got[got["level"] == "queue"].set_index("queue_id")
    assert bool(per_queue.loc[0, "tiered"]) and per_queue.loc[0, "monthly_saving"] == 0.0
    assert per_queue.loc[1, "monthly_saving"] == pytest.approx(0.08 - 0.023)


def test_summary_totals_count_each_byte_once() -> None:
    summary = tiering_summary({tables.TIERING_CANDIDATES: candidates()})
    json.dumps(summary)
    assert summary["candidate_bytes"] == 3 * GIB + GIB // 2
    assert summary["monthly_saving"] == pytest.approx(3.5 * (0.08 - 0.023))
    assert (summary["already_tiered_segments"], summary["already_tiered_bytes"]) == (1, GIB)
    assert [q["topic"] for q in summary["top_queues"]] == ["B", STATS_TOPIC]


def test_bad_input_is_refused_with_the_reason() -> None:
    segments, queues = cluster()
    with pytest.raises(InputError, match="missing: bytes"):
        evaluate_tiering(segments.drop(columns="bytes"), queues, now_ms=NOW, prices=PriceTable())
    with pytest.raises(InputError, match="min_age_ms must not be negative"):
        evaluate_tiering(segments, queues, now_ms=NOW, prices=PriceTable(), min_age_ms=-1)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    columns = tables.column_names(tables.RESULT_SCHEMAS[tables.TIERING_CANDIDATES])
    out = frame[columns].sort_values(["level", "rank"]).reset_index(drop=True)
    for c in ("rank", "queue_id", "segment", "bytes", "messages", "age_ms", "idle_ms"):
        out[c] = out[c].astype("Int64")
    out["topic"] = out["topic"].where(out["topic"].notna(), None)
    out["tiered"] = out["tiered"].astype(bool)
    return out


def test_spark_path_gives_the_pure_answers(spark: SparkSession) -> None:
    segments, queues = cluster()
    prices = PriceTable(put_per_1000=0.005, retrieval_per_gb=0.01)
    expected = evaluate_tiering(segments, queues, now_ms=NOW, prices=prices, min_age_ms=D)
    seg = spark.createDataFrame(segments, schema=tables.INPUT_SCHEMAS[tables.SEGMENT_STATS])
    qs = spark.createDataFrame(queues, schema=tables.INPUT_SCHEMAS[tables.QUEUE_STATS])
    got = run_tiering(seg, qs, now_ms=NOW, prices=prices, min_age_ms=D)
    result = got[tables.TIERING_CANDIDATES]
    assert result.columns == tables.column_names(tables.RESULT_SCHEMAS[tables.TIERING_CANDIDATES])
    pd.testing.assert_frame_equal(
        _sorted(result.toPandas()), _sorted(expected[tables.TIERING_CANDIDATES])
    )
