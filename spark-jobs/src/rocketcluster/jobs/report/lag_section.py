"""The consumer lag section: a badge per group, lag over time in messages and in
time, and every queue worst first with the job's reason sentence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rocketcluster.jobs.report import fmt
from rocketcluster.jobs.report import html as h
from rocketcluster.jobs.report.frames import (
    State,
    Table,
    as_int,
    is_null,
    severity,
    table,
    unusable_note,
)
from rocketcluster.jobs.report.headline import anchor
from rocketcluster.jobs.report.plots import MAX_LAG_LINES, group_series, lag_plot
from rocketcluster.jobs.tables import LAG_GROUPS, LAG_POINTS, LAG_QUEUES

MAX_QUEUE_ROWS: Final = 1000

HOWTO: Final = (
    (
        h.badge("OK"),
        "The consumer caught up at least once in the window (lag was zero at some "
        "snapshot), or its lag went down. Nothing to do.",
    ),
    (
        h.badge("WARN"),
        "The consumer is committing, but lag never went down across the window: it is "
        "slower than the producers. Watch it; add consumers if it keeps growing.",
    ),
    (
        h.badge("STALL"),
        "The consumer is connected but its committed offset did not move while messages "
        "waited: stuck on a message (poison message, long processing, a lock).",
    ),
    (
        h.badge("STOP"),
        "No commit for longer than the window spans while messages wait: the consumer "
        "is down or gone. Check that its processes run.",
    ),
    (
        h.badge("REWIND"),
        "The committed offset went backwards: someone reset it, or the consumer "
        "re-reads. Intended after a replay; a bug otherwise.",
    ),
    (
        h.badge("ERR"),
        "The evaluation itself found something wrong (offsets out of range, no usable "
        "snapshot). Read the reason.",
    ),
    (
        "Lag in messages",
        "Messages stored in a queue but not yet consumed: max offset \u2212 committed offset.",
    ),
    (
        "Lag in time",
        "How old the oldest unconsumed message is: snapshot time \u2212 store time of the "
        "message at the committed offset (exact, not interpolated).",
    ),
    (
        "Group status",
        "The worst status of its queues; the headline lists every group not OK.",
    ),
)


def _state_note(t: Table, empty: str) -> str | None:
    return unusable_note(t, "lag", empty)


def _worst_first(groups: Any) -> Any:
    ranked = groups.assign(_sev=[severity(s) for s in groups["status"]])
    return ranked.sort_values(
        ["_sev", "max_lag_ms", "lag_messages", "consumer_group"],
        ascending=[False, False, False, True],
    )


def _last_counts(points: Table) -> dict[str, tuple[int, int]]:
    """Per group, in-flight and retry counts at each queue's last snapshot, summed."""
    if not points.ready:
        return {}
    frame = points.frame.sort_values("time")
    last = frame.groupby(["consumer_group", "broker_group", "topic", "queue_id"]).tail(1)
    sums = last.groupby("consumer_group")[["inflight", "retry"]].sum()
    return {str(g): (as_int(r.inflight), as_int(r.retry)) for g, r in sums.iterrows()}


def _cards(groups: Any, counts: Mapping[str, tuple[int, int]]) -> str:
    cards = []
    for r in groups.itertuples():
        status = str(r.status).upper()
        worst = ""
        if not is_null(r.worst_topic):
            worst = f" · worst {r.worst_topic}/{as_int(r.worst_queue_id)} @ {r.worst_broker_group}"
        extra = ""
        if str(r.consumer_group) in counts:
            inflight, retry = counts[str(r.consumer_group)]
            extra = f" · in flight {fmt.count(inflight)} · retry {fmt.count(retry)}"
        reason = "" if is_null(r.reason) else str(r.reason)
        cards.append(
            f'<div class="card s-{h.esc(status.lower())}" '
            f'id="{h.esc(anchor("lag", str(r.consumer_group)))}">'
            f'<div>{h.badge(status)} <span class="name">{h.esc(r.consumer_group)}</span></div>'
            f'<div class="facts">lag {fmt.count(r.lag_messages)} messages · '
            f"{fmt.duration(r.max_lag_ms)} behind · {fmt.plural(as_int(r.queues), 'queue')}"
            f"{h.esc(worst)}{h.esc(extra)}</div>"
            f'<div class="reason">{h.esc(reason)}</div></div>'
        )
    return f'<div class="cards" data-cards="lag-groups">{"".join(cards)}</div>'


def _plots(points: Table, order: Sequence[str], statuses: Mapping[str, str], window: Any) -> str:
    note = _state_note(
        points,
        "No lag snapshots fell in the window, so there is no lag over time to plot.",
    )
    if note is not None:
        return note
    frame = points.frame
    present = set(frame["consumer_group"].astype(str))
    ranked = [g for g in order if g in present]
    rest = sorted(present - set(ranked))
    shown = (ranked + rest)[:MAX_LAG_LINES]
    cut = ""
    if len(present) > len(shown):
        cut = f" Only the {len(shown)} worst of {len(present)} groups are drawn."
    by_group = frame.assign(consumer_group=frame["consumer_group"].astype(str))
    messages = group_series(by_group, shown, "lag_messages", "sum")
    times = group_series(by_group, shown, "lag_ms", "max")
    return h.figure(
        "lag-messages",
        lag_plot(messages, statuses, kind="messages", window=window),
        "Lag in messages per consumer group, summed over its queues (each queue's "
        f"latest snapshot carried forward). The legend gives each group's status.{cut}",
        label="Consumer lag in messages over time, one line per consumer group",
    ) + h.figure(
        "lag-time",
        lag_plot(times, statuses, kind="time", window=window),
        "Lag in time per consumer group: the age of the oldest unconsumed message in "
        f"its worst queue. A line rising at 45° is a consumer that stopped.{cut}",
        label="Consumer lag in time over time, one line per consumer group",
    )


def _queue_table(queues: Table) -> str:
    note = _state_note(queues, "No queue of any consumer group had stats in the window.")
    if note is not None:
        return note
    frame = queues.frame
    ranked = frame.assign(_sev=[severity(s) for s in frame["status"]]).sort_values(
        ["_sev", "lag_ms", "lag_messages", "consumer_group", "topic", "queue_id"],
        ascending=[False, False, False, True, True, True],
    )
    total = len(ranked)
    ranked = ranked.head(MAX_QUEUE_ROWS)
    rows = []
    classes = []
    for r in ranked.itertuples():
        status = str(r.status).upper()
        rows.append(
            [
                h.Cell(h.badge(status), -severity(status)),
                h.text(r.consumer_group),
                h.text(r.topic),
                h.text(f"{r.broker_group} · {as_int(r.queue_id)}"),
                h.number(fmt.count(r.lag_messages), as_int(r.lag_messages)),
                h.number(fmt.duration(r.lag_ms), as_int(r.lag_ms)),
                h.text("" if is_null(r.reason) else r.reason),
                h.number(fmt.count(r.points), as_int(r.points)),
            ]
        )
        classes.append("" if status == "OK" else "bad")
    cut = ""
    if total > len(ranked):
        cut = h.note(
            f"{fmt.count(len(ranked))} of {fmt.count(total)} queues shown, the worst "
            "first; the Parquet output has them all."
        )
    filt = (
        '<div class="filter" data-filter-for="lag-queues">'
        '<input type="search" placeholder="filter: group, topic, broker…" '
        'aria-label="filter the queue table">'
        '<label><input type="checkbox"> problems only</label></div>'
    )
    headers = [
        "Status",
        "Consumer group",
        "Topic",
        "Broker group · queue",
        "Lag (messages)",
        "Lag (time)",
        "Reason",
        "Snapshots",
    ]
    return filt + h.table(headers, rows, name="lag-queues", row_classes=classes) + cut


def lag_section(results: Mapping[str, Any], window: tuple[int, int] | None) -> str:
    """The whole section, whatever state its three tables are in."""
    groups = table(results, LAG_GROUPS)
    queues = table(results, LAG_QUEUES)
    points = table(results, LAG_POINTS)
    head = '<section id="lag" data-section="lag"><h2>Consumer lag</h2>'
    if all(t.state is State.MISSING for t in (groups, queues, points)):
        return (
            head
            + h.note(
                "The lag job was not run: this run has no lag tables, so consumer lag "
                "was not checked.",
                kind="missing",
            )
            + "</section>"
        )
    parts = [head, h.howto("lag statuses (Burrow's rules, adapted)", HOWTO)]
    note = _state_note(
        groups,
        "No consumer groups had stats in the window: no group had committed an offset "
        "that a stats snapshot saw.",
    )
    statuses: dict[str, str] = {}
    order: list[str] = []
    if note is None:
        ranked = _worst_first(groups.frame)
        statuses = {
            str(g): str(s).upper()
            for g, s in zip(ranked["consumer_group"], ranked["status"], strict=True)
        }
        order = [str(g) for g in ranked["consumer_group"]]
        parts.append(_cards(ranked, _last_counts(points)))
    else:
        parts.append(note)
    parts.append("<h3>Lag over time</h3>")
    parts.append(_plots(points, order, statuses, window))
    parts.append("<h3>Queues, worst first</h3>")
    parts.append(_queue_table(queues))
    parts.append("</section>")
    return "".join(parts)
