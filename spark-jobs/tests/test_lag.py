"""The lag job: lag arithmetic, every Burrow rule and their order, the group's worst-of,
the summary, and the Spark path agreeing with the pure core."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pytest

from rocketcluster.jobs import tables
from rocketcluster.jobs.frames import InputError
from rocketcluster.jobs.lag import (
    evaluate_groups,
    evaluate_queues,
    lag_points,
    lag_summary,
    run_lag,
    run_lag_pandas,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STEP = 30_000  # one snapshot every 30 s


def snap(
    t: int,
    committed: int,
    max_offset: int,
    *,
    group: str = "g",
    topic: str = "T",
    queue: int = 0,
    broker_group: str = "b0",
    min_offset: int = 0,
    store: int | None = None,
    inflight: int = 0,
    retry: int = 0,
) -> dict[str, Any]:
    return {
        "time": t,
        "cluster": "c",
        "broker_group": broker_group,
        "broker_id": 1,
        "consumer_group": group,
        "topic": topic,
        "queue_id": queue,
        "committed_offset": committed,
        "min_offset": min_offset,
        "max_offset": max_offset,
        "committed_store_time": store,
        "inflight": inflight,
        "retry": retry,
    }


def series(
    committed: list[int], max_offsets: list[int], *, start: int = 0, **kw: Any
) -> list[dict[str, Any]]:
    """One queue's snapshots, STEP apart from ``start``."""
    return [
        snap(start + i * STEP, c, m, **kw)
        for i, (c, m) in enumerate(zip(committed, max_offsets, strict=True))
    ]


def judge(rows: list[dict[str, Any]], now: int, window: int = 10) -> tuple[str, str]:
    queues = evaluate_queues(pd.DataFrame(rows), now_ms=now, window_points=window)
    assert len(queues) == 1
    return str(queues["status"][0]), str(queues["reason"][0])


# -- lag in messages and in time -----------------------------------------------------------


def test_lag_in_messages_and_exact_time() -> None:
    rows = [
        snap(100_000, 40, 100, store=70_000),  # 60 behind, oldest stored 30 s earlier
        snap(130_000, 100, 100, store=125_000),  # caught up: no time lag at all
        snap(160_000, 120, 100, store=150_000),  # committed past max (a race): 0, not -20
        snap(190_000, 100, 150, store=None),  # behind, store time unknown: 0 ms
        snap(220_000, 100, 150, store=230_000),  # store time after the snapshot: not < 0
    ]
    points = lag_points(pd.DataFrame(rows), now_ms=300_000)
    assert points["lag_messages"].tolist() == [60, 0, 0, 50, 50]
    assert points["lag_ms"].tolist() == [30_000, 0, 0, 0, 0]
    assert set(tables.column_names(tables.RESULT_SCHEMAS[tables.LAG_POINTS])) <= set(points)


def test_points_merge_duplicates_and_drop_unusable_rows() -> None:
    rows = [
        snap(0, 10, 50, store=-5_000, inflight=1),
        snap(0, 12, 50, store=-4_000, inflight=0),  # same queue, same time: merged
        snap(30_000, 20, 60),
        {**snap(60_000, 0, 60), "committed_offset": None},  # unusable
        snap(90_000, 30, 70),  # after now: ignored
    ]
    points = lag_points(pd.DataFrame(rows), now_ms=60_000)
    assert points["time"].tolist() == [0, 30_000]
    first = points.iloc[0]
    assert (first["committed_offset"], first["lag_messages"], first["inflight"]) == (12, 38, 1)
    assert first["lag_ms"] == 4_000


# -- the rules, one by one -------------------------------------------------------------------


def test_err_when_retention_passed_the_committed_offset() -> None:
    rows = series([0, 0, 0], [10, 0, 500], min_offset=0)
    rows[-1]["min_offset"] = 300
    status, reason = judge(rows, now=120_000)
    # ERR comes first, before "lag was 0 in the window"
    assert status == "ERR"
    assert "committed offset 0 is below the queue's min offset 300" in reason
    assert "300 messages the group never read" in reason


def test_ok_when_lag_was_zero_in_the_window() -> None:
    # Stuck for the rest of the window, but caught up at snapshot 1: Burrow says OK.
    rows = series([100] * 5, [100, 150, 150, 150, 150])
    status, reason = judge(rows, now=10 * 60_000)
    assert (status, reason) == ("OK", "caught up at 1 of 5 snapshots; now 50 messages (0ms) behind")


def test_ok_caught_up_everywhere() -> None:
    status, reason = judge(series([5, 9], [5, 9]), now=60_000)
    assert (status, reason) == ("OK", "caught up (lag 0 at 2 of 2 snapshots)")


def test_single_point_with_lag_is_ok_for_lack_of_evidence() -> None:
    status, reason = judge([snap(0, 10, 1_214, store=-60_000)], now=10 * 60_000)
    assert status == "OK"
    assert reason == (
        "only one snapshot so far, 1,204 messages (1m00s) behind: not enough to judge a trend"
    )


def test_rewind_names_the_biggest_step_back() -> None:
    rows = series([400, 500, 300, 290, 600], [700] * 5)
    status, reason = judge(rows, now=150_000)
    assert status == "REWIND"
    assert reason == (
        "committed offset went back from 500 to 300 (200 messages) between snapshots 2 and 3 "
        "of 5; 2 steps back in the window"
    )


def test_rewind_beats_stop_and_warn() -> None:
    # lag never falls and the offset ends where it started: REWIND is checked first
    rows = series([100, 90, 100], [200, 210, 220])
    assert judge(rows, now=10**9)[0] == "REWIND"


def test_stop_when_nothing_moves_and_nothing_is_in_flight() -> None:
    # The offset last changed at t=0; the window (last 5) spans 2 min; now is 6m12s on.
    rows = series([1_000, *[1_500] * 9], [2_704] * 10, store=-1)
    rows[-1]["committed_store_time"] = 0
    status, reason = judge(rows, now=6 * 60_000 + 12_000 + STEP, window=5)
    assert status == "STOP"
    assert reason == (
        "no progress for 6m12s, 1,204 messages behind (oldest 4m30s old), nothing in flight"
    )


def test_stall_when_messages_are_in_flight_but_never_acknowledged() -> None:
    rows = series([800] * 4, [1_000] * 4, inflight=32)
    status, reason = judge(rows, now=10 * 60_000)
    assert status == "STALL"
    assert reason.startswith("offset stuck at 800 for 10m00s, 200 messages (0ms) behind, while ")
    assert "32 messages are in flight" in reason


def test_idle_but_not_longer_than_the_window_is_stall_not_stop() -> None:
    # now is the last snapshot: now - window start == span, not longer (Burrow's >)
    rows = series([300] * 4, [400] * 4)
    status, reason = judge(rows, now=3 * STEP)
    assert status == "STALL"
    assert "nothing in flight; not yet longer than the window's 1m30s" in reason


def test_warn_when_lag_grows_while_the_offset_moves() -> None:
    rows = series([0, 100, 200, 300, 400], [120, 400, 600, 800, 1_300])
    status, reason = judge(rows, now=4 * STEP)
    assert status == "WARN"
    assert reason == (
        "lag grew 120 → 900 messages over 5 snapshots (2m00s) while the offset advanced 400"
    )


def test_warn_when_lag_stays_constant() -> None:
    rows = series([0, 50, 100], [70, 120, 170])
    status, reason = judge(rows, now=2 * STEP)
    assert status == "WARN"
    assert "lag stayed at 70 messages over 3 snapshots (1m00s)" in reason


def test_ok_when_lag_falls_somewhere() -> None:
    rows = series([0, 100, 250, 300], [200, 300, 350, 500])
    status, reason = judge(rows, now=3 * STEP)
    assert status == "OK"
    assert reason == (
        "consuming: lag 200 → 200 over 4 snapshots (1m30s), offset advanced 300; "
        "200 messages (0ms) behind"
    )


def test_warn_when_a_producer_pause_dips_the_lag_of_a_consumer_falling_behind() -> None:
    # The live report's slow consumer: ~40 messages a snapshot in, ~2 out; once the
    # producers paused and the lag dipped by 2. Burrow's rule read that as OK.
    committed = [100, 102, 104, 106, 108, 110, 112, 114]
    max_offsets = [657, 697, 737, 737, 777, 817, 857, 889]
    status, reason = judge(series(committed, max_offsets), now=7 * STEP)
    assert status == "WARN"
    assert reason == (
        "lag grew 557 → 775 messages over 8 snapshots (3m30s) while the offset advanced "
        "14; it fell by only 2 in between"
    )


def test_ok_when_lag_swings_up_and_down() -> None:
    # A bursty producer: lag rises and falls by similar amounts and ends higher.
    committed = [0, 100, 200, 300, 400, 500]
    max_offsets = [300, 500, 520, 700, 720, 850]
    assert judge(series(committed, max_offsets), now=5 * STEP)[0] == "OK"


def test_only_the_last_window_points_count() -> None:
    # lag 0 at snapshot 1, a rewind into snapshot 3, then steady growth
    committed = [10, 12, 5, 20, 30, 40]
    max_offsets = [10, 50, 60, 70, 90, 110]
    rows = series(committed, max_offsets)
    assert judge(rows, now=10**6, window=3)[0] == "WARN"
    assert judge(rows, now=10**6, window=4)[0] == "OK"  # 55 -> 50: lag fell once
    assert judge(rows, now=10**6, window=5)[0] == "REWIND"
    assert judge(rows, now=10**6, window=6)[0] == "OK"


def test_many_queues_at_once_equal_one_at_a_time() -> None:
    rng = np.random.default_rng(7)
    rows = []
    for q in range(40):
        committed = np.cumsum(rng.integers(-5, 30, 12)).clip(min=0)
        max_offsets = committed + rng.integers(0, 50, 12)
        rows += series(committed.tolist(), max_offsets.tolist(), queue=q, inflight=int(q % 3 == 0))
    rng.shuffle(rows)
    together = evaluate_queues(pd.DataFrame(rows), now_ms=10**6, window_points=5)
    for q in range(40):
        alone = evaluate_queues(
            pd.DataFrame([r for r in rows if r["queue_id"] == q]), now_ms=10**6, window_points=5
        )
        mine = together[together["queue_id"] == q].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone)


# -- groups and the summary -----------------------------------------------------------------


def test_group_takes_its_worst_queue() -> None:
    now = 10 * 60_000
    rows = [
        *series([100] * 3, [100] * 3, queue=0),  # OK
        *series([0, 10, 20], [100, 200, 300], queue=1),  # WARN
        *series([50] * 3, [80] * 3, queue=2, store=-1_000),  # STOP, 30 behind
        *series([50] * 3, [90] * 3, queue=3, store=-9_000),  # STOP, 40 behind, older
        *series([5] * 3, [5] * 3, queue=0, group="other"),
    ]
    results = run_lag_pandas(pd.DataFrame(rows), now_ms=now, window_points=10)
    groups = results[tables.LAG_GROUPS].set_index("consumer_group")
    g = groups.loc["g"]
    assert g["status"] == "STOP"
    assert (g["worst_queue_id"], g["worst_topic"], g["worst_broker_group"]) == (3, "T", "b0")
    assert (g["queues"], g["lag_messages"]) == (4, 0 + 280 + 30 + 40)
    assert g["max_lag_ms"] == 60_000 + 9_000
    assert g["reason"].startswith("2 of 4 queues STOP; worst: T queue 3 on b0: no progress for")
    other = groups.loc["other"]
    assert (other["status"], other["reason"]) == (
        "OK",
        "T queue 0 on b0 OK: caught up (lag 0 at 3 of 3 snapshots)",
    )


@pytest.mark.parametrize(
    ("statuses", "worst"),
    [
        (["OK", "WARN"], "WARN"),
        (["WARN", "REWIND"], "REWIND"),
        (["REWIND", "STALL"], "STALL"),
        (["STALL", "STOP"], "STOP"),
        (["STOP", "ERR"], "ERR"),
        (["OK", "WARN", "REWIND", "STALL", "STOP", "ERR"], "ERR"),
    ],
)
def test_severity_order(statuses: list[str], worst: str) -> None:
    queues = pd.DataFrame(
        {
            "broker_group": "b0",
            "consumer_group": "g",
            "topic": "T",
            "queue_id": range(len(statuses)),
            "status": statuses,
            "reason": [f"reason {s}" for s in statuses],
            "lag_messages": 10,
            "lag_ms": 1_000,
            "window_start": 0,
            "window_end": 1,
            "points": 3,
        }
    )
    groups = evaluate_groups(queues)
    assert groups["status"].tolist() == [worst]
    assert groups["reason"][0].endswith(f"reason {worst}")


def test_summary_is_json_with_counts_and_totals() -> None:
    rows = [
        *series([0, 10, 20], [100, 200, 300], queue=1),
        *series([5] * 3, [5] * 3, queue=0, group="fine"),
    ]
    summary = lag_summary(run_lag_pandas(pd.DataFrame(rows), now_ms=10**6))
    json.dumps(summary)
    assert summary["groups_by_status"] == {
        "OK": 1,
        "WARN": 1,
        "REWIND": 0,
        "STALL": 0,
        "STOP": 0,
        "ERR": 0,
    }
    assert [g["consumer_group"] for g in summary["groups"]] == ["g", "fine"]
    assert summary["totals"] == {"groups": 2, "queues": 2, "lag_messages": 280, "max_lag_ms": 0}


def test_bad_input_is_refused_with_the_reason() -> None:
    with pytest.raises(InputError, match="missing: committed_offset"):
        run_lag_pandas(pd.DataFrame(series([1], [2])).drop(columns="committed_offset"), now_ms=1)
    with pytest.raises(InputError, match="window_points must be at least 1"):
        run_lag_pandas(pd.DataFrame(series([1], [2])), now_ms=1, window_points=0)


def test_empty_input_gives_empty_tables() -> None:
    empty = pd.DataFrame(series([1], [2])).iloc[0:0]
    results = run_lag_pandas(empty, now_ms=1)
    assert all(len(frame) == 0 for frame in results.values())
    assert list(results[tables.LAG_GROUPS]) == tables.column_names(
        tables.RESULT_SCHEMAS[tables.LAG_GROUPS]
    )


# -- Spark ------------------------------------------------------------------------------------


def every_rule() -> list[dict[str, Any]]:
    """One consumer group per rule, spread over two broker groups and topics."""
    err = series([0, 0, 0], [10, 0, 500], group="err")
    err[-1]["min_offset"] = 300
    return [
        *err,
        *series([100] * 5, [100, 150, 150, 150, 150], group="ok-zero"),
        snap(0, 10, 1_214, store=-60_000, group="ok-single"),
        *series([400, 500, 300, 290, 600], [700] * 5, group="rewind", topic="U"),
        *series([1_500] * 6, [2_704] * 6, group="stop", store=-1, broker_group="b1"),
        *series([800] * 4, [1_000] * 4, group="stall", inflight=32),
        *series([0, 100, 200, 300, 400], [120, 400, 600, 800, 1_300], group="warn", queue=3),
        *series([0, 100, 250, 300], [200, 300, 350, 500], group="ok", queue=1),
        snap(0, 10, 20, group="ok", queue=1, store=-3),  # a duplicate: merged
        snap(10**7, 10, 20, group="ok", queue=1),  # after now: ignored
    ]


def _sorted(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    columns = tables.column_names(tables.RESULT_SCHEMAS[table])
    key = [
        c for c in ("consumer_group", "broker_group", "topic", "queue_id", "time") if c in columns
    ]
    out = frame[columns].sort_values(key).reset_index(drop=True)
    return out.astype({c: "int64" for c in columns if out[c].dtype.kind in "iu"})


def test_spark_path_gives_the_pure_answers(spark: SparkSession) -> None:
    now = 20 * 60_000
    rows = pd.DataFrame(every_rule())
    expected = run_lag_pandas(rows, now_ms=now, window_points=5)
    assert set(expected[tables.LAG_QUEUES]["status"]) == {
        "ERR",
        "OK",
        "REWIND",
        "STOP",
        "STALL",
        "WARN",
    }
    frame = spark.createDataFrame(rows, schema=tables.INPUT_SCHEMAS[tables.CONSUMER_STATS])
    got = run_lag(frame, now_ms=now, window_points=5)
    assert set(got) == {tables.LAG_POINTS, tables.LAG_QUEUES, tables.LAG_GROUPS}
    for table, result in got.items():
        assert result.columns == tables.column_names(tables.RESULT_SCHEMAS[table])
        pd.testing.assert_frame_equal(
            _sorted(result.toPandas(), table), _sorted(expected[table], table)
        )
