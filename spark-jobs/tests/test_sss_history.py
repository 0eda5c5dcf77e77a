"""The SyncStateSet history job: interval arithmetic with gaps, overlaps and window
clipping, elections and master changes, flaps, messy event streams, and the Spark path
agreeing with the pure core."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from rocketcluster.jobs import tables
from rocketcluster.jobs.frames import InputError
from rocketcluster.jobs.sss_history import evaluate_history, run_sss_history, sss_summary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def ev(
    t: int,
    index: int,
    command: str,
    master: int | None,
    sss: list[int] | None,
    epoch: int = 1,
    *,
    unclean: bool = False,
    group: str = "g1",
    broker: int | None = None,
) -> dict[str, Any]:
    return {
        "time": t,
        "index": index,
        "broker_group": group,
        "command": command,
        "reason": "",
        "broker_id": broker,
        "master_id": master,
        "master_epoch": epoch,
        "sync_state_set": sss,
        "sync_state_set_epoch": index,
        "unclean": unclean,
    }


def failover() -> list[dict[str, Any]]:
    """Three replicas; 2 drops out and comes back; master 1 dies, one election finds
    nobody, the next (unclean) makes 2 master; 3 catches up again."""
    return [
        ev(0, 1, "ApplyBrokerId", None, [], 0, broker=1),
        ev(10, 2, "ElectMaster", 1, [1], 1),
        ev(20, 3, "AlterSyncStateSet", 1, [1, 2, 3]),
        ev(100, 4, "AlterSyncStateSet", 1, [1, 3]),
        ev(150, 5, "AlterSyncStateSet", 1, [1, 2, 3]),
        ev(200, 6, "ElectMaster", None, [1, 2, 3], 2),
        ev(230, 7, "ElectMaster", 2, [2], 3, unclean=True),
        ev(260, 8, "AlterSyncStateSet", 2, [2, 3], 3),
    ]


def run(events: list[dict[str, Any]], ws: int, now: int) -> dict[str, pd.DataFrame]:
    return evaluate_history(pd.DataFrame(events), window_start_ms=ws, now_ms=now)


def rows(frame: pd.DataFrame, *columns: str) -> list[tuple[Any, ...]]:
    return [
        tuple(None if pd.isna(v) else v for v in r)
        for r in frame[list(columns)].itertuples(index=False)
    ]


def test_failover_known_answers() -> None:
    r = run(failover(), ws=50, now=300)
    assert rows(r[tables.SSS_INTERVALS], "broker_id", "start", "end", "open") == [
        (1, 50, 230, False),  # clipped at the window start, ends at the election
        (2, 50, 100, False),
        (2, 150, 300, True),  # a gap 100-150, then in the set to this day
        (3, 50, 230, False),
        (3, 260, 300, True),
    ]
    assert rows(r[tables.SSS_MASTERS], "master_id", "master_epoch", "start", "end") == [
        (1, 1, 50, 200),
        (None, 2, 200, 230),
        (2, 3, 230, 300),
    ]
    assert rows(
        r[tables.SSS_REPLICAS],
        "broker_id",
        "time_in_sync_ms",
        "in_sync_ratio",
        "joins",
        "leaves",
        "flaps",
    ) == [(1, 180, 0.72, 0, 1, 0), (2, 200, 0.8, 1, 1, 1), (3, 220, 0.88, 1, 1, 1)]
    group = r[tables.SSS_GROUPS].iloc[0].to_dict()
    assert group == {
        "broker_group": "g1",
        "window_start": 50,
        "window_end": 300,
        "elections": 1,  # the ElectMaster that found nobody is no election
        "master_changes": 1,
        "unclean_elections": 1,
        "time_without_master_ms": 30,
        "without_master_intervals": 1,
        "flaps": 2,
        "sss_changes": 4,  # 100, 150, 230, 260 (200 kept the set)
    }


def test_overlapping_memberships_are_counted_per_replica() -> None:
    # All three in the set at once: each replica's time counts on its own.
    r = run(failover(), ws=0, now=300)
    replicas = r[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas["time_in_sync_ms"].to_dict() == {1: 220, 2: 230, 3: 250}
    assert replicas["time_in_sync_ms"].sum() > 300
    # the group's first event is its starting point, not a join
    assert replicas["joins"].to_dict() == {1: 1, 2: 2, 3: 2}


def test_events_only_before_the_window_hold_all_along() -> None:
    r = run(failover()[:3], ws=1_000, now=2_000)
    assert rows(r[tables.SSS_INTERVALS], "broker_id", "start", "end", "open") == [
        (1, 1_000, 2_000, True),
        (2, 1_000, 2_000, True),
        (3, 1_000, 2_000, True),
    ]
    assert rows(r[tables.SSS_MASTERS], "master_id", "start", "end") == [(1, 1_000, 2_000)]
    replicas = r[tables.SSS_REPLICAS]
    assert replicas["in_sync_ratio"].tolist() == [1.0, 1.0, 1.0]
    assert (replicas[["joins", "leaves", "flaps"]].to_numpy() == 0).all()
    group = r[tables.SSS_GROUPS].iloc[0]
    assert (group["elections"], group["sss_changes"], group["window_start"]) == (0, 0, 1_000)


def test_a_group_first_seen_inside_the_window_is_observed_from_then() -> None:
    events = [ev(400, 1, "ElectMaster", 1, [1], 1), ev(500, 2, "AlterSyncStateSet", 1, [1, 2])]
    r = run(events, ws=0, now=1_000)
    assert r[tables.SSS_GROUPS]["window_start"].tolist() == [400]
    replicas = r[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas["time_in_sync_ms"].to_dict() == {1: 600, 2: 500}
    assert replicas["in_sync_ratio"].to_dict() == {1: 1.0, 2: 500 / 600}
    assert replicas["joins"].to_dict() == {1: 0, 2: 1}
    # the first master a group has is an election but not a change of master
    group = r[tables.SSS_GROUPS].iloc[0]
    assert (group["elections"], group["master_changes"]) == (1, 0)


def test_messy_streams_give_the_same_answer() -> None:
    clean = run(failover(), ws=50, now=300)
    events = failover()
    messy = [*reversed(events), events[3], events[6]]  # out of order, two read twice
    messy.append(ev(120, 9, "PutTopic", None, None))  # no group state: skipped
    messy.append(ev(120, 10, "AlterSyncStateSet", 1, [1], group=""))  # no group: skipped
    messy.append(ev(400, 11, "AlterSyncStateSet", 2, [2]))  # after now: ignored
    got = run(messy, ws=50, now=300)
    for table in clean:
        pd.testing.assert_frame_equal(got[table], clean[table])


def test_a_time_stepping_back_lasts_nothing() -> None:
    # index 3 says t=90 after index 2 at t=100 (a new leader's clock): it takes t=100.
    events = [
        ev(0, 1, "ElectMaster", 1, [1], 1),
        ev(100, 2, "AlterSyncStateSet", 1, [1, 2]),
        ev(90, 3, "AlterSyncStateSet", 1, [1, 2, 3]),
        ev(200, 4, "AlterSyncStateSet", 1, [1, 3]),
    ]
    r = run(events, ws=0, now=300)
    assert rows(r[tables.SSS_INTERVALS], "broker_id", "start", "end", "open") == [
        (1, 0, 300, True),
        (2, 100, 200, False),
        (3, 100, 300, True),
    ]


def test_every_no_master_spelling_and_failed_elections_make_one_gap() -> None:
    events = [
        ev(0, 1, "ElectMaster", 1, [1, 2], 1),
        ev(100, 2, "ElectMaster", None, [1, 2], 2),
        ev(110, 3, "ElectMaster", 0, [1, 2], 3),
        ev(120, 4, "ElectMaster", -1, [1, 2], 4),
        ev(150, 5, "ElectMaster", 1, [1], 5),  # the same broker again: no change
        ev(200, 6, "ElectMaster", 1, [1], 6),  # re-elected: a new interval, same master
    ]
    r = run(events, ws=0, now=300)
    assert rows(r[tables.SSS_MASTERS], "master_id", "master_epoch", "start", "end") == [
        (1, 1, 0, 100),
        (None, 2, 100, 150),
        (1, 5, 150, 200),
        (1, 6, 200, 300),
    ]
    group = r[tables.SSS_GROUPS].iloc[0]
    assert group["time_without_master_ms"] == 50
    assert group["without_master_intervals"] == 1
    assert (group["elections"], group["master_changes"]) == (2, 0)


def test_master_changes_count_a_different_master_only() -> None:
    events = [
        ev(0, 1, "ElectMaster", 1, [1, 2, 3], 1),
        ev(100, 2, "ElectMaster", None, [1, 2, 3], 2),
        ev(110, 3, "ElectMaster", 2, [2], 3),  # 1 -> none -> 2: a change
        ev(200, 4, "ElectMaster", 3, [3], 4, unclean=True),  # 2 -> 3: a change
    ]
    group = run(events, ws=50, now=300)[tables.SSS_GROUPS].iloc[0]
    assert (group["elections"], group["master_changes"], group["unclean_elections"]) == (2, 2, 1)


def test_flaps_are_leaves_followed_by_a_rejoin_inside_the_window() -> None:
    base = ev(0, 1, "ElectMaster", 1, [1, 2], 1)
    sets = [[1], [1, 2], [1], [1, 2], [1]]  # 2 leaves, joins, leaves, joins, leaves
    events = [base] + [
        ev(100 * (i + 1), i + 2, "AlterSyncStateSet", 1, s) for i, s in enumerate(sets)
    ]
    replicas = run(events, ws=50, now=1_000)[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas.loc[2, ["joins", "leaves", "flaps"]].tolist() == [2, 3, 2]
    # a window that starts between a leave and its rejoin does not see that flap
    replicas = run(events, ws=150, now=1_000)[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas.loc[2, ["joins", "leaves", "flaps"]].tolist() == [2, 2, 1]
    # an unfinished leave at the window's end is no flap yet
    replicas = run(events, ws=50, now=450)[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas.loc[2, ["joins", "leaves", "flaps"]].tolist() == [2, 2, 2]


def test_a_replica_that_never_got_in_sync_is_listed() -> None:
    events = [
        ev(0, 1, "ElectMaster", 1, [1], 1),
        ev(10, 2, "RegisterBroker", 1, [1], 1, broker=4),
    ]
    replicas = run(events, ws=0, now=100)[tables.SSS_REPLICAS].set_index("broker_id")
    assert replicas.loc[4, ["time_in_sync_ms", "in_sync_ratio"]].tolist() == [0, 0.0]


def test_groups_are_independent() -> None:
    other = [
        {**e, "broker_group": "g2", "index": e["index"] + 100, "time": e["time"] + 5}
        for e in failover()
    ]
    both = run([*failover(), *other], ws=50, now=300)
    alone = run(failover(), ws=50, now=300)
    g1 = both[tables.SSS_GROUPS].set_index("broker_group").loc["g1"]
    assert g1.to_dict() == alone[tables.SSS_GROUPS].set_index("broker_group").loc["g1"].to_dict()
    assert both[tables.SSS_GROUPS]["broker_group"].tolist() == ["g1", "g2"]


def test_summary_is_json() -> None:
    summary = sss_summary(run(failover(), ws=50, now=300))
    json.dumps(summary)
    (group,) = summary["groups"]
    assert group["master"] == 2
    assert group["in_sync_ratio"] == {"1": 0.72, "2": 0.8, "3": 0.88}
    assert summary["totals"]["unclean_elections"] == 1


def test_bad_input_is_refused_with_the_reason() -> None:
    with pytest.raises(InputError, match="window starts"):
        run(failover(), ws=10, now=5)
    with pytest.raises(InputError, match="missing: sync_state_set"):
        evaluate_history(
            pd.DataFrame(failover()).drop(columns="sync_state_set"),
            window_start_ms=0,
            now_ms=1,
        )


def test_no_usable_events_give_empty_tables() -> None:
    r = run([ev(500, 1, "ElectMaster", 1, [1])], ws=0, now=100)
    assert all(len(frame) == 0 for frame in r.values())


def _sorted(frame: pd.DataFrame, table: str) -> pd.DataFrame:
    columns = tables.column_names(tables.RESULT_SCHEMAS[table])
    key = [c for c in ("broker_group", "broker_id", "start") if c in columns]
    out = frame[columns].sort_values(key).reset_index(drop=True)
    for c in columns:
        if c != "in_sync_ratio" and out[c].dtype.kind in "iuf":  # Spark: int32, nulls as NaN
            out[c] = out[c].astype("Int64")
    return out


def test_spark_path_gives_the_pure_answers(spark: SparkSession) -> None:
    second = [
        {**e, "broker_group": "g2", "index": e["index"] + 100, "time": e["time"] * 2}
        for e in failover()
    ]
    events = pd.DataFrame([*failover(), *second, failover()[4]])
    expected = evaluate_history(events, window_start_ms=50, now_ms=300)
    frame = spark.createDataFrame(events, schema=tables.INPUT_SCHEMAS[tables.EVENTS])
    got = run_sss_history(frame, window_start_ms=50, now_ms=300)
    assert set(got) == set(expected)
    for table, result in got.items():
        assert result.columns == tables.column_names(tables.RESULT_SCHEMAS[table])
        pd.testing.assert_frame_equal(
            _sorted(result.toPandas(), table), _sorted(expected[table], table)
        )
