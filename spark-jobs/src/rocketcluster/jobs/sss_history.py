"""SyncStateSet history per broker group, from the controller's event history: who was
in the in-sync set when, who was master when, elections, unclean ones, time without a
master, flaps.

Each event carries the group's state *after* it (master, epochs, SyncStateSet), so a
group's history is a step function: the state of an event holds from its time until the
next event of the group. The rules the arithmetic follows:

- Events are ordered by their Raft ``index`` (times come from whichever controller led,
  so they may step back at a leader change: a time earlier than the one before is taken
  as that one, and states never last a negative time). An index seen twice is one event.
  Events without a group or without the group's state (``sync_state_set`` null) are
  skipped; so are events after ``now_ms``.
- The window is ``(window_start_ms, now_ms]``. The state at its start is the last event
  at or before ``window_start_ms``; a group whose events all lie before the window keeps
  that state the whole window. A group first seen inside the window is observed from its
  first event, and ``window_start`` of its row says so.
- ``master_id`` null (or not a broker id, i.e. < 1: ApplyBrokerId hands out 1, 2, ...)
  means no master. Master intervals are runs of one master and one master epoch (a
  re-election of the same broker starts a new interval); a run without master is one
  interval whatever epochs the failed elections in it raised (it carries the first).
- An *election* is an ElectMaster event that produced a master (unclean if flagged). A
  *master change* is a master different from the last master the group had before (the
  group's first master ever is not a change; A, none, A is no change; A, none, B is one).
  A *SyncStateSet change* is an event whose set has other members than the one before it.
- A *join* is a replica entering the set at an event inside the window, a *leave* leaving
  it. The first event the history shows for a group is its starting point, not a join.
  A *flap* is a leave followed by a rejoin, both inside the window: with transitions
  alternating, flaps = leaves - (1 if the replica's last transition was a leave). An
  election shrinks the set to the new master, so each replica that catches up again
  afterwards counts one flap: that is the churn a failover causes, and it is meant.
- Membership intervals are maximal runs in the set, clipped to the window; ``open`` is
  true when the replica is still in the set at ``now_ms`` (``end`` is then ``now_ms``).
  Zero-length runs are dropped unless open. Time in sync is the total length of a
  replica's intervals; the ratio divides it by the observed window (the group's row's
  ``window_end - window_start``), 1.0 or 0.0 by membership at ``now_ms`` when that is 0.
- Replicas listed are every broker id the group's events name up to ``now_ms`` (as
  event broker, as master or in a set), so a replica that never got in sync shows 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from rocketcluster.jobs import frames, tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

GROUP: Final = "broker_group"
SSS_TABLES: Final = (
    tables.SSS_INTERVALS,
    tables.SSS_MASTERS,
    tables.SSS_REPLICAS,
    tables.SSS_GROUPS,
)
_NULLABLE: Final = {tables.SSS_MASTERS: ["master_id"]}
_TABLE_COLUMN: Final = "_table"


def _check_window(window_start_ms: int, now_ms: int) -> None:
    if window_start_ms > now_ms:
        raise frames.InputError(
            f"the window starts ({window_start_ms}) after it ends ({now_ms}): "
            "window_start_ms must not be later than now_ms"
        )


# -- the pure core ----------------------------------------------------------------------


def evaluate_history(
    events: pd.DataFrame, *, window_start_ms: int, now_ms: int
) -> dict[str, pd.DataFrame]:
    """The four SSS tables for every group in ``events`` (rows in any order)."""
    _check_window(window_start_ms, now_ms)
    frames.require_columns(events.columns, tables.EVENTS, "sss-history")
    usable = events.dropna(subset=[GROUP, "index", "time", "sync_state_set"])
    usable = usable[usable[GROUP] != ""]
    parts: dict[str, list[pd.DataFrame]] = {t: [] for t in SSS_TABLES}
    for name, group in usable.groupby(GROUP, sort=True):
        for table, frame in _group_history(str(name), group, window_start_ms, now_ms).items():
            parts[table].append(frame)
    return {
        t: frames.typed(pd.concat(parts[t], ignore_index=True), t, _NULLABLE.get(t, ()))
        if parts[t]
        else frames.empty(t, _NULLABLE.get(t, ()))
        for t in SSS_TABLES
    }


def _group_history(name: str, ev: pd.DataFrame, ws: int, now: int) -> dict[str, pd.DataFrame]:
    ev = ev.sort_values(["index", "time"], kind="stable").drop_duplicates("index")
    eff = np.maximum.accumulate(ev["time"].to_numpy(np.int64))
    keep = eff <= now
    if not keep.any():
        return {}
    ev, eff = ev[keep].reset_index(drop=True), eff[keep]
    sets = ev["sync_state_set"].to_list()
    replicas, member = _membership(ev, sets)
    master = _masters(ev["master_id"])
    epoch = ev["master_epoch"].fillna(0).to_numpy(np.int64)

    inside = eff > ws
    before = np.flatnonzero(~inside)
    rows = np.r_[before[-1:], np.flatnonzero(inside)].astype(np.int64)  # segment -> event
    starts = np.maximum(eff[rows], ws)
    ends = np.r_[starts[1:], now]
    length = ends - starts
    observed_start = int(starts[0])

    # transitions at events inside the window (never at the group's first event)
    counted = inside.copy()
    counted[0] = False
    prev, cur = member[:-1][counted[1:]], member[1:][counted[1:]]
    joins = (~prev & cur).sum(axis=0)
    leaves = (prev & ~cur).sum(axis=0)
    flaps = leaves - _last_is_leave(prev, cur)

    seg_member = member[rows]
    in_sync = (seg_member * length[:, None]).sum(axis=0)
    span = now - observed_start
    at_now = seg_member[-1]
    ratio = in_sync / span if span > 0 else at_now.astype(np.float64)

    intervals = _intervals(name, replicas, seg_member, starts, ends)
    masters, without, without_runs = _master_runs(name, master[rows], epoch[rows], starts, ends)

    command = ev["command"].fillna("").to_numpy()
    unclean = ev["unclean"].fillna(False).to_numpy(bool)
    elected = (command == "ElectMaster") & (master > 0) & inside
    last_master = pd.Series(np.where(master > 0, master, np.nan)).ffill().shift(1)
    changed = (master > 0) & last_master.notna().to_numpy() & (master != last_master.to_numpy())
    set_changed = np.r_[False, (member[1:] != member[:-1]).any(axis=1)]

    replica_rows = pd.DataFrame(
        {
            GROUP: name,
            "broker_id": replicas,
            "time_in_sync_ms": in_sync,
            "in_sync_ratio": ratio,
            "joins": joins,
            "leaves": leaves,
            "flaps": flaps,
        }
    )
    group_row = pd.DataFrame(
        {
            GROUP: [name],
            "window_start": [observed_start],
            "window_end": [now],
            "elections": [int(elected.sum())],
            "master_changes": [int((changed & inside).sum())],
            "unclean_elections": [int((elected & unclean).sum())],
            "time_without_master_ms": [without],
            "without_master_intervals": [without_runs],
            "flaps": [int(flaps.sum())],
            "sss_changes": [int((set_changed & inside).sum())],
        }
    )
    return {
        tables.SSS_INTERVALS: intervals,
        tables.SSS_MASTERS: masters,
        tables.SSS_REPLICAS: replica_rows,
        tables.SSS_GROUPS: group_row,
    }


def _membership(ev: pd.DataFrame, sets: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Every replica the events name, and a bool matrix event x replica: in the set."""
    lengths = np.fromiter((len(s) for s in sets), dtype=np.int64, count=len(sets))
    flat = np.concatenate(sets).astype(np.int64) if lengths.sum() else np.zeros(0, np.int64)
    named = [flat]
    for column in ("broker_id", "master_id"):
        values = ev[column].dropna().to_numpy(np.int64)
        named.append(values[values > 0])
    replicas = np.unique(np.concatenate(named))
    member = np.zeros((len(sets), len(replicas)), dtype=bool)
    if len(flat):
        member[np.repeat(np.arange(len(sets)), lengths), np.searchsorted(replicas, flat)] = True
    return replicas, member


def _masters(master_id: pd.Series) -> np.ndarray:
    """Master ids with every "no master" spelling (null, 0, -1) as -1."""
    values = master_id.fillna(-1).to_numpy(np.int64)
    return np.where(values > 0, values, -1)


def _last_is_leave(prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """Per replica: 1 when its last transition in these rows was a leave."""
    moved = prev != cur
    out = np.zeros(prev.shape[1], dtype=np.int64)
    for r in range(prev.shape[1]):
        at = np.flatnonzero(moved[:, r])
        if len(at) and prev[at[-1], r]:
            out[r] = 1
    return out


def _runs(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last index of each run of equal consecutive values."""
    change = np.r_[True, key[1:] != key[:-1]]
    first = np.flatnonzero(change)
    return first, np.r_[first[1:], len(key)] - 1


def _intervals(
    name: str, replicas: np.ndarray, member: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> pd.DataFrame:
    parts = []
    final = len(starts) - 1
    for r, broker in enumerate(replicas):
        first, last = _runs(member[:, r])
        inside = member[first, r]
        first, last = first[inside], last[inside]
        is_open = last == final
        keep = (ends[last] > starts[first]) | is_open
        parts.append(
            pd.DataFrame(
                {
                    GROUP: name,
                    "broker_id": int(broker),
                    "start": starts[first[keep]],
                    "end": ends[last[keep]],
                    "open": is_open[keep],
                }
            )
        )
    columns = [GROUP, "broker_id", "start", "end", "open"]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


def _master_runs(
    name: str, master: np.ndarray, epoch: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[pd.DataFrame, int, int]:
    """Master intervals, and the time and number of intervals without one."""
    # A run without master ignores the epochs its failed elections raised.
    key = np.where(master > 0, master * (1 << 32) + epoch, -1)
    first, last = _runs(key)
    length = ends[last] - starts[first]
    keep = (length > 0) | (last == len(starts) - 1)
    first, last, length = first[keep], last[keep], length[keep]
    who = master[first]
    masters = pd.DataFrame(
        {
            GROUP: name,
            "master_id": pd.array(np.where(who > 0, who, 0), dtype="Int64"),
            "master_epoch": epoch[first],
            "start": starts[first],
            "end": ends[last],
        }
    )
    masters.loc[who <= 0, "master_id"] = pd.NA
    none = who <= 0
    return masters, int(length[none].sum()), int(none.sum())


def sss_summary(results: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """The JSON summary: per group its counts, current master and replicas' in-sync
    ratios; totals over all groups."""
    groups = results[tables.SSS_GROUPS]
    replicas = results[tables.SSS_REPLICAS]
    masters = results[tables.SSS_MASTERS]
    j = frames.jsonable
    out = []
    for g in groups.sort_values(GROUP).itertuples(index=False):
        mine = masters[(masters[GROUP] == g.broker_group) & (masters["end"] == g.window_end)]
        current = mine.sort_values("start").tail(1)["master_id"].tolist()
        reps = replicas[replicas[GROUP] == g.broker_group].sort_values("broker_id")
        out.append(
            {
                GROUP: j(g.broker_group),
                "window_start": j(g.window_start),
                "window_end": j(g.window_end),
                "master": j(current[0]) if current else None,
                "elections": j(g.elections),
                "master_changes": j(g.master_changes),
                "unclean_elections": j(g.unclean_elections),
                "time_without_master_ms": j(g.time_without_master_ms),
                "without_master_intervals": j(g.without_master_intervals),
                "flaps": j(g.flaps),
                "sss_changes": j(g.sss_changes),
                "in_sync_ratio": {
                    str(j(r.broker_id)): round(float(r.in_sync_ratio), 4)
                    for r in reps.itertuples(index=False)
                },
            }
        )
    totals = {
        c: j(groups[c].sum()) if len(groups) else 0
        for c in (
            "elections",
            "master_changes",
            "unclean_elections",
            "time_without_master_ms",
            "flaps",
            "sss_changes",
        )
    }
    return {"groups": out, "totals": {"groups": len(groups), **totals}}


# -- the Spark shell ---------------------------------------------------------------------


def run_sss_history(
    events: DataFrame, *, window_start_ms: int, now_ms: int
) -> dict[str, DataFrame]:
    """SSS_INTERVALS, SSS_MASTERS, SSS_REPLICAS and SSS_GROUPS as Spark DataFrames.

    One pandas pass per bucket of whole broker groups computes all four tables into one
    long frame (a ``_table`` column says which row is which), cached, then split."""
    from pyspark.sql import functions as F

    _check_window(window_start_ms, now_ms)
    frames.spark_columns(events, tables.EVENTS, "sss-history")
    # Events after now stay: ordered by index, they also end the history of the events
    # that follow them (see the module's rules), which the core decides.
    usable = events.dropna(subset=[GROUP, "index", "time", "sync_state_set"]).where(
        F.col(GROUP) != ""
    )
    columns = tables.column_names(tables.INPUT_SCHEMAS[tables.EVENTS])
    combined = (
        frames.by_key(usable.select(*columns), [GROUP])
        .groupBy(frames.BUCKET_COLUMN)
        .applyInPandas(_history_bucket(window_start_ms, now_ms), schema=_combined_ddl())
        .cache()
    )
    return {
        t: combined.where(F.col(_TABLE_COLUMN) == t).select(*frames.result_columns(t))
        for t in SSS_TABLES
    }


def _combined_fields() -> list[tuple[str, str]]:
    fields: dict[str, str] = {_TABLE_COLUMN: "string"}
    for t in SSS_TABLES:
        for name, kind in frames.ddl_fields(tables.RESULT_SCHEMAS[t]):
            if fields.setdefault(name, kind) != kind:
                raise TypeError(f"{name} is {kind} in {t} but {fields[name]} elsewhere")
    return list(fields.items())


def _combined_ddl() -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in _combined_fields())


def _history_bucket(ws: int, now: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def evaluate(pdf: pd.DataFrame) -> pd.DataFrame:
        results = evaluate_history(pdf, window_start_ms=ws, now_ms=now)
        parts = [r.assign(**{_TABLE_COLUMN: t}) for t, r in results.items() if len(r)]
        names = [n for n, _ in _combined_fields()]
        if not parts:
            return pd.DataFrame({n: [] for n in names})
        long = pd.concat(parts, ignore_index=True)
        for name, kind in _combined_fields():
            if kind in ("int", "long") and name in long:
                long[name] = long[name].astype("Int64")
            elif kind == "boolean" and name in long:
                long[name] = long[name].astype("boolean")
        return long.reindex(columns=names)

    return evaluate
