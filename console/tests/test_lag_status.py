"""The console's live status agrees with the health report's: the same Burrow-style
rules, judged by ``rocketcluster.console.lag_status`` (plain Python, per queue) and by
the Spark lag job's pandas path (``rocketcluster.jobs.lag``), on generated histories
that reach every rule."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from rocketcluster.api.stats import LagStatus
from rocketcluster.console.lag_status import Point, evaluate
from rocketcluster.jobs.lag import evaluate_queues

NOW = 10_000_000


@st.composite
def histories(draw: st.DrawFn) -> list[Point]:
    n = draw(st.integers(1, 14))
    step = draw(st.sampled_from([1000, 30_000]))
    start = NOW - n * step - draw(st.integers(0, 5 * step))
    committed = draw(st.integers(0, 50))
    top = committed + draw(st.integers(0, 50))
    low = draw(st.integers(0, committed + 3))
    points = []
    for i in range(n):
        top += draw(st.integers(0, 20))
        move = draw(st.sampled_from(["stay", "stay", "advance", "catch-up", "back"]))
        if move == "advance":
            committed = min(top, committed + draw(st.integers(1, 15)))
        elif move == "catch-up":
            committed = top
        elif move == "back":
            committed = max(0, committed - draw(st.integers(1, 10)))
        inflight = draw(st.sampled_from([0, 0, 3]))
        cst = start + i * step - draw(st.integers(0, 9000)) if committed < top else None
        points.append(Point(start + i * step, committed, low, top, cst, inflight))
    return points


def _spark(points: list[Point]) -> tuple[str, int, int]:
    rows = pd.DataFrame(
        [
            {
                "time": p.time,
                "cluster": "c",
                "broker_group": "g",
                "broker_id": 1,
                "consumer_group": "billing",
                "topic": "orders",
                "queue_id": 0,
                "committed_offset": p.committed,
                "min_offset": p.min_offset,
                "max_offset": p.max_offset,
                "committed_store_time": p.committed_store_time,
                "inflight": p.inflight,
                "retry": 0,
            }
            for p in points
        ]
    )
    out = evaluate_queues(rows, now_ms=NOW, window_points=10).iloc[0]
    return str(out["status"]), int(out["lag_messages"]), int(out["lag_ms"])


@settings(max_examples=300, deadline=None)
@given(histories())
def test_the_console_and_the_spark_job_judge_alike(points: list[Point]) -> None:
    mine = evaluate(points, NOW)
    assert (mine.status.value, mine.lag, mine.lag_ms) == _spark(points)


def test_each_rule_is_reached() -> None:
    t = [NOW - 10_000 + i * 1000 for i in range(10)]
    assert evaluate([Point(t[0], 5, 6, 10)], NOW).status is LagStatus.ERR
    assert evaluate([Point(t[0], 10, 0, 10), Point(t[1], 10, 0, 12)], NOW).status is LagStatus.OK
    assert evaluate([Point(t[0], 8, 0, 10), Point(t[1], 6, 0, 12)], NOW).status is LagStatus.REWIND
    stopped = [Point(x, 5, 0, 9) for x in t[:3]]
    assert evaluate(stopped, t[2] + 60_000).status is LagStatus.STOP
    stalled = [Point(x, 5, 0, 9, inflight=2) for x in t[:3]]
    verdict = evaluate(stalled, t[2] + 60_000)
    assert verdict.status is LagStatus.STALL and "in flight" in verdict.reason
    growing = [Point(x, 5 + i, 0, 10 + 3 * i) for i, x in enumerate(t)]
    assert evaluate(growing, NOW).status is LagStatus.WARN
    shrinking = [Point(x, 5 + 3 * i, 0, 40 + i) for i, x in enumerate(t)]
    assert evaluate(shrinking, NOW).status is LagStatus.OK
