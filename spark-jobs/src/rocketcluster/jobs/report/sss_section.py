"""The SyncStateSet section: a timeline per broker group (who was in sync, who was
master, when there was none, which elections were unclean) and the job's per-group
and per-replica tables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report import html as h
from rocketcluster.jobs.report.frames import State, Table, as_int, is_null, table, unusable_note
from rocketcluster.jobs.report.headline import Problem, anchor, sss_line, sss_problems
from rocketcluster.jobs.report.plots import sss_timeline_plot
from rocketcluster.jobs.tables import (
    EVENTS,
    SSS_GROUPS,
    SSS_INTERVALS,
    SSS_MASTERS,
    SSS_REPLICAS,
)

LOW_SYNC: Final = 0.99  # a replica out of sync more than 1 % of the window is marked

HOWTO: Final = (
    (
        "SyncStateSet",
        "The replicas the controller counts as caught up with the master; only they can "
        "be elected cleanly. A replica leaves it when it falls behind or dies, and joins "
        "again once it has caught up.",
    ),
    ("Lanes", "One per replica: green while it was in the set, dark blue while master."),
    (
        "Election (dashed line)",
        "The controller appointed a new master (a new master epoch). One election after "
        "a master died is a failover working as designed.",
    ),
    (
        h.badge("NO MASTER"),
        "Shaded red: nobody was master, so producers to this group were refused. The "
        "shaded width is the failover's cost; on the headline it reads as time without "
        "master.",
    ),
    (
        h.badge("UNCLEAN"),
        "A red line: the new master was not in the SyncStateSet (unclean election "
        "allowed). Messages the old master had acknowledged may be lost.",
    ),
    (
        h.badge("FLAPS"),
        "A replica left and rejoined the set again and again: a slow disk, a busy node "
        "or a flaky network between it and the master.",
    ),
    (
        "In sync",
        "The share of the window a replica spent in the set; below 99 % it is marked.",
    ),
)


def _note(t: Table, empty: str) -> str | None:
    return unusable_note(t, "SyncStateSet history", empty)


def unclean_times(
    events: Any | None,
    group: str,
    intervals: Any,
    masters: Any,
    *,
    window_start: int,
    count: int,
) -> list[int]:
    """When this group's unclean elections happened. The controller's events say it
    exactly; without them, an election whose new master had no in-set interval
    reaching back before it was unclean. ``count`` (the job's own) caps the guess."""
    if events is not None and {"time", "broker_group", "unclean"} <= set(events.columns):
        mine = events[(events["broker_group"] == group) & events["unclean"].eq(True)]
        return sorted(int(t) for t in mine["time"])
    if count <= 0:
        return []
    found = []
    for r in masters.sort_values("start").itertuples():
        if is_null(r.master_id) or int(r.start) <= window_start:
            continue
        mine = intervals[intervals["broker_id"] == int(r.master_id)]
        before = mine[(mine["start"] < r.start) & (mine["end"].isna() | (mine["end"] >= r.start))]
        if before.empty:
            found.append(int(r.start))
    return found[:count]


def _group_names(*tables: Table) -> list[str]:
    names: set[str] = set()
    for t in tables:
        if t.ready:
            names |= {str(g) for g in t.frame["broker_group"]}
    return sorted(names)


def _timelines(
    results: Mapping[str, Any],
    names: Sequence[str],
    issues: Mapping[str, Problem],
    window: tuple[int, int] | None,
) -> str:
    groups = table(results, SSS_GROUPS)
    intervals = table(results, SSS_INTERVALS)
    masters = table(results, SSS_MASTERS)
    note = _note(intervals, "No replica was in any SyncStateSet in the window.")
    note = note or _note(masters, "No broker group had a master interval in the window.")
    if note is not None:
        return note
    events = results.get(EVENTS)
    rows = {str(r.broker_group): r for r in groups.frame.itertuples()} if groups.ready else {}
    parts = []
    for name in names:
        mine_i = intervals.frame[intervals.frame["broker_group"].astype(str) == name]
        mine_m = masters.frame[masters.frame["broker_group"].astype(str) == name]
        span = window or _span(mine_i, mine_m)
        row = rows.get(name)
        elections = as_int(row.elections) if row is not None else 0
        unclean = as_int(row.unclean_elections) if row is not None else 0
        without = as_int(row.time_without_master_ms) if row is not None else 0
        times = unclean_times(events, name, mine_i, mine_m, window_start=span[0], count=unclean)
        flaps = as_int(row.flaps) if row is not None else 0
        title = sss_line(name, elections, without, unclean, flaps)
        problem = issues.get(name)
        status = problem.status if problem is not None else "STABLE"
        parts.append(f'<h3 id="{h.esc(anchor("sss", name))}">{h.badge(status)} {h.esc(name)}</h3>')
        if mine_i.empty and mine_m.empty:
            parts.append(
                h.note(f"No membership or master interval of {h.esc(name)} in the window.")
            )
            continue
        located = ""
        if unclean and len(times) < unclean:
            located = f" {len(times)} of the {unclean} unclean elections could be placed in time."
        parts.append(
            h.figure(
                f"sss-timeline-{name}",
                sss_timeline_plot(name, mine_i, mine_m, times, window=span, title=title),
                f"{h.esc(title)}. {h.esc(_master_at_end(mine_m))}{located}",
                label=f"SyncStateSet timeline of broker group {name}",
            )
        )
    return "".join(parts)


def _master_at_end(masters: Any) -> str:
    """Who the window ended with: the first thing to know after a failover."""
    if masters.empty:
        return "No master interval in the window."
    last = masters.sort_values("start").iloc[-1]
    if is_null(last["master_id"]):
        return f"No master at the end of the window (since {fmt.utc(last['start'])})."
    return (
        f"Master at the end of the window: broker {int(last['master_id'])} "
        f"(epoch {as_int(last['master_epoch'])})."
    )


def _span(intervals: Any, masters: Any) -> tuple[int, int]:
    starts = [int(v) for v in (*intervals["start"], *masters["start"]) if not is_null(v)]
    ends = [int(v) for v in (*intervals["end"], *masters["end"]) if not is_null(v)]
    lo = min(starts, default=0)
    return lo, max([*ends, lo + 1])


def _groups_table(groups: Table, issues: Mapping[str, Problem], *, anchored: bool) -> str:
    """The job's per-group table; ``anchored`` rows carry the headline's link targets
    (when there are no timelines to carry them)."""
    note = _note(
        groups,
        "No broker group had controller events in the window: nothing was elected, joined or left.",
    )
    if note is not None:
        return note
    rows = []
    classes = []
    ids: list[str | None] = []
    sev = [issues[str(g)].severity if str(g) in issues else 0 for g in groups.frame["broker_group"]]
    frame = groups.frame.assign(_sev=sev).sort_values(
        ["_sev", "time_without_master_ms", "broker_group"], ascending=[False, False, True]
    )
    for r in frame.itertuples():
        name = str(r.broker_group)
        problem = issues.get(name)
        status = problem.status if problem is not None else "STABLE"
        rows.append(
            [
                h.text(name),
                h.Cell(h.badge(status), -(problem.severity if problem else 0)),
                h.number(fmt.count(r.elections), as_int(r.elections)),
                h.number(fmt.count(r.master_changes), as_int(r.master_changes)),
                h.number(fmt.count(r.unclean_elections), as_int(r.unclean_elections)),
                h.number(fmt.duration(r.time_without_master_ms), as_int(r.time_without_master_ms)),
                h.number(fmt.count(r.without_master_intervals), as_int(r.without_master_intervals)),
                h.number(fmt.count(r.flaps), as_int(r.flaps)),
                h.number(fmt.count(r.sss_changes), as_int(r.sss_changes)),
            ]
        )
        classes.append("bad" if problem is not None else "")
        ids.append(anchor("sss", name) if anchored else None)
    headers = [
        "Broker group",
        "Status",
        "Elections",
        "Master changes",
        "Unclean elections",
        "Time without master",
        "Gaps without master",
        "Flaps",
        "SyncStateSet changes",
    ]
    return h.table(headers, rows, name="sss-groups", row_ids=ids, row_classes=classes)


def _meter(ratio: float) -> str:
    width = max(0.0, min(1.0, ratio)) * 100
    low = " low" if ratio < LOW_SYNC else ""
    return f'<span class="meter{low}"><i style="width:{width:.1f}%"></i></span>'


def _replicas_table(replicas: Table) -> str:
    note = _note(replicas, "No replica was seen in the window.")
    if note is not None:
        return note
    rows = []
    classes = []
    frame = replicas.frame.sort_values(["broker_group", "broker_id"])
    for r in frame.itertuples():
        ratio = 0.0 if is_null(r.in_sync_ratio) else float(r.in_sync_ratio)
        rows.append(
            [
                h.text(r.broker_group),
                h.number(f"broker {as_int(r.broker_id)}", as_int(r.broker_id)),
                h.number(fmt.duration(r.time_in_sync_ms), as_int(r.time_in_sync_ms)),
                h.Cell(_meter(ratio) + h.esc(fmt.percent(ratio)), ratio, num=True),
                h.number(fmt.count(r.joins), as_int(r.joins)),
                h.number(fmt.count(r.leaves), as_int(r.leaves)),
                h.number(fmt.count(r.flaps), as_int(r.flaps)),
            ]
        )
        classes.append("bad" if ratio < LOW_SYNC or as_int(r.flaps) > 0 else "")
    headers = ["Broker group", "Replica", "Time in sync", "In sync", "Joins", "Leaves", "Flaps"]
    return h.table(headers, rows, name="sss-replicas", row_classes=classes)


def sss_section(results: Mapping[str, Any], window: tuple[int, int] | None) -> str:
    """The whole section, whatever state its four tables are in."""
    groups = table(results, SSS_GROUPS)
    replicas = table(results, SSS_REPLICAS)
    intervals = table(results, SSS_INTERVALS)
    masters = table(results, SSS_MASTERS)
    head = '<section id="sss" data-section="sss"><h2>SyncStateSet history</h2>'
    if all(t.state is State.MISSING for t in (groups, replicas, intervals, masters)):
        return (
            head
            + h.note(
                "The SyncStateSet history job was not run: this run has no SyncStateSet "
                "tables, so elections and replica sync were not checked.",
                kind="missing",
            )
            + "</section>"
        )
    issues = {p.subject: p for p in sss_problems(results, window[1] if window else None)}
    names = _group_names(groups, intervals, masters)
    names.sort(key=lambda n: (-(issues[n].severity if n in issues else 0), n))
    return "".join(
        [
            head,
            h.howto("the SyncStateSet timeline", HOWTO),
            "<h3>Broker groups</h3>",
            _groups_table(groups, issues, anchored=not (intervals.ready and masters.ready)),
            _timelines(results, names, issues, window),
            "<h3>Replicas</h3>",
            _replicas_table(replicas),
            "</section>",
        ]
    )
