"""Burrow-style consumer status, live: the rules of the Spark lag job
(``rocketcluster.jobs.lag``: its docstring is the specification) applied to the last
snapshots of the stats topic a page just read, one queue at a time, in plain Python.

The Spark job judges millions of rows with vectorised pandas; a page judges a few
hundred queues, and the console image carries no pandas. ``console/tests`` checks that
both give the same status on the same histories.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from rocketcluster.api.stats import LAG_SEVERITY, LagStatus

DIP_SHARE: Final = 0.1  # as the Spark job: falls up to this share of the rises are noise
WINDOW_POINTS: Final = 10


SEVERITY: Final = LAG_SEVERITY


@dataclass(frozen=True, slots=True)
class Point:
    """One snapshot of one (broker group, consumer group, topic, queue)."""

    time: int
    committed: int
    min_offset: int
    max_offset: int
    committed_store_time: int | None = None
    inflight: int = 0
    retry: int = 0

    @property
    def lag(self) -> int:
        return max(0, self.max_offset - self.committed)

    @property
    def lag_ms(self) -> int:
        if self.lag == 0 or self.committed_store_time is None:
            return 0
        return max(0, self.time - self.committed_store_time)


@dataclass(frozen=True, slots=True)
class Verdict:
    status: LagStatus
    reason: str
    lag: int
    lag_ms: int
    points: int


def _span(ms: int) -> str:
    s = ms / 1000
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def merge(points: Iterable[Point]) -> list[Point]:
    """Time order; two points at one time merged into the greatest of each number
    (a stats message read twice, two brokers of a group reporting around a failover)."""
    by_time: dict[int, Point] = {}
    for point in points:
        p, q = point, by_time.get(point.time)
        if q is not None:
            p = Point(
                p.time,
                max(p.committed, q.committed),
                max(p.min_offset, q.min_offset),
                max(p.max_offset, q.max_offset),
                max(p.committed_store_time or 0, q.committed_store_time or 0) or None,
                max(p.inflight, q.inflight),
                max(p.retry, q.retry),
            )
        by_time[p.time] = p
    return [by_time[t] for t in sorted(by_time)]


def evaluate(history: Sequence[Point], now_ms: int, window: int = WINDOW_POINTS) -> Verdict:
    """The status of one queue from its history (any order, merged here): the rules
    judge the last ``window`` points; "since" is the first point of the history
    showing the latest committed offset."""
    pts = [p for p in merge(history) if p.time <= now_ms]
    if not pts:
        raise ValueError("no snapshot at or before now to judge")
    latest = pts[-1]
    since = latest.time
    for p in reversed(pts):
        if p.committed != latest.committed:
            break
        since = p.time
    w = pts[-window:]
    first = w[0]
    n = len(w)
    lags = [p.lag for p in w]
    behind = f"{latest.lag} messages ({_span(latest.lag_ms)}) behind"
    span = latest.time - first.time
    idle_for = now_ms - since
    if latest.committed < latest.min_offset:
        lost = latest.min_offset - latest.committed
        return Verdict(
            LagStatus.ERR,
            f"committed offset {latest.committed} is below the queue's min offset "
            f"{latest.min_offset}: retention deleted {lost} messages the group never read",
            latest.lag,
            latest.lag_ms,
            n,
        )
    zeros = sum(1 for lag in lags if lag == 0)
    if zeros:
        text = "caught up" if latest.lag == 0 else f"caught up at {zeros} of {n}; now {behind}"
        return Verdict(LagStatus.OK, text, latest.lag, latest.lag_ms, n)
    if n == 1:
        return Verdict(
            LagStatus.OK,
            f"only one snapshot so far, {behind}: not enough to judge a trend",
            latest.lag,
            latest.lag_ms,
            n,
        )
    backs = [
        (a.committed, b.committed) for a, b in itertools.pairwise(w) if b.committed < a.committed
    ]
    if backs:
        frm, to = min(backs, key=lambda ab: ab[1] - ab[0])
        return Verdict(
            LagStatus.REWIND,
            f"committed offset went back from {frm} to {to} ({frm - to} messages)",
            latest.lag,
            latest.lag_ms,
            n,
        )
    moved = latest.committed != first.committed
    if not moved and latest.inflight == 0 and idle_for > span:
        return Verdict(
            LagStatus.STOP,
            f"no progress for {_span(idle_for)}, {behind}, nothing in flight",
            latest.lag,
            latest.lag_ms,
            n,
        )
    if not moved:
        why = (
            f"while {latest.inflight} messages are in flight: the consumer takes messages "
            "and does not acknowledge them"
            if latest.inflight
            else f"nothing in flight; not yet longer than the window's {_span(span)}"
        )
        return Verdict(
            LagStatus.STALL,
            f"offset stuck at {latest.committed} for {_span(idle_for)}, {behind}, {why}",
            latest.lag,
            latest.lag_ms,
            n,
        )
    steps = [b - a for a, b in itertools.pairwise(lags)]
    rose = sum(s for s in steps if s > 0)
    fell = sum(-s for s in steps if s < 0)
    advanced = latest.committed - first.committed
    if not fell > DIP_SHARE * rose:
        return Verdict(
            LagStatus.WARN,
            f"lag grew {lags[0]} → {latest.lag} over {n} snapshots ({_span(span)}) while "
            f"the offset advanced {advanced}",
            latest.lag,
            latest.lag_ms,
            n,
        )
    return Verdict(
        LagStatus.OK,
        f"consuming: lag {lags[0]} → {latest.lag}, offset advanced {advanced}; {behind}",
        latest.lag,
        latest.lag_ms,
        n,
    )


def worst(verdicts: Iterable[Verdict]) -> LagStatus:
    return max((v.status for v in verdicts), key=SEVERITY.__getitem__, default=LagStatus.OK)
