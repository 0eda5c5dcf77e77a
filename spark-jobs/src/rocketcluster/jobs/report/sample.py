"""A report from synthetic results with known content: every lag status, a failover
with a gap without master, an unclean election, flapping replicas, tiered and local
candidates. It previews the report without a cluster or Spark, and the tests render
it; ``python -m rocketcluster.jobs.report.sample OUT.html [SHOT.png]`` writes one.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pandas as pd

from rocketcluster.jobs.report.frames import severity
from rocketcluster.jobs.tables import (
    LAG_GROUPS,
    LAG_POINTS,
    LAG_QUEUES,
    RESULT_SCHEMAS,
    SSS_GROUPS,
    SSS_INTERVALS,
    SSS_MASTERS,
    SSS_REPLICAS,
    TIERING_CANDIDATES,
    column_names,
)

HOUR: Final = 3_600_000
STEP: Final = 30_000  # a stats snapshot every 30 s
MIN: Final = 60_000
GIB: Final = 1 << 30

# group → (status, reason, topic, broker groups and queues, lag shape)
Shape = Callable[[int, random.Random], tuple[int, int]]  # step → (lag messages, lag ms)


def _ok(i: int, rng: random.Random) -> tuple[int, int]:
    lag = 0 if i % 7 == 0 else rng.randint(0, 40)
    return lag, lag * 20


def _warn(i: int, rng: random.Random) -> tuple[int, int]:
    return 100 + i * 300 + rng.randint(0, 50), 1_000 + i * 3_000


def _stop(i: int, rng: random.Random) -> tuple[int, int]:
    if i < 40:
        return rng.randint(0, 30), rng.randint(0, 800)
    return (i - 40) * 1_500, (i - 40) * STEP + 400


def _stall(i: int, rng: random.Random) -> tuple[int, int]:
    if i < 60:
        return rng.randint(0, 10), rng.randint(0, 300)
    return 40 + (i - 60) * 2, (i - 60) * STEP + 1_000


def _rewind(i: int, rng: random.Random) -> tuple[int, int]:
    if i < 80:
        return rng.randint(0, 20), rng.randint(0, 500)
    return max(0, 20_000 - (i - 80) * 350), max(0, 38 * MIN - (i - 80) * 55_000)


def _err(i: int, rng: random.Random) -> tuple[int, int]:
    return 0, 0


@dataclass(frozen=True)
class Group:
    name: str
    status: str
    reason: str
    topic: str
    queues: Sequence[tuple[str, int]]
    shape: Shape
    bad_queues: int = 1  # how many of its queues have the group's status


GROUPS: Final = (
    Group(
        "orders-fast",
        "OK",
        "lag was zero at 18 of 120 snapshots",
        "orders",
        [("broker-0", 0), ("broker-0", 1), ("broker-1", 0), ("broker-1", 1)],
        _ok,
    ),
    Group(
        "orders-slow",
        "WARN",
        "lag grew at every snapshot, from 100 to 36,000 messages per queue (6 min "
        "behind): the consumer is slower than the producers",
        "orders",
        [("broker-0", 0), ("broker-0", 1), ("broker-1", 0), ("broker-1", 1)],
        _warn,
        bad_queues=4,
    ),
    Group(
        "billing",
        "STOP",
        "no commit for 40 min while 120,000 messages wait in this queue: the consumer is down",
        "payments",
        [("broker-0", 0), ("broker-1", 0)],
        _stop,
        bad_queues=2,
    ),
    Group(
        "audit-log",
        "STALL",
        "committed offset stuck at 12,044 for 30 min on payments/1 while 158 messages wait",
        "payments",
        [("broker-1", 1), ("broker-0", 1)],
        _stall,
    ),
    Group(
        "replayer",
        "REWIND",
        "committed offset went back from 58,000 to 38,000 on orders/0 at 40 min into the window",
        "orders",
        [("broker-0", 0)],
        _rewind,
    ),
    Group(
        "metrics-etl",
        "ERR",
        "committed offset 9,120 is past the queue's max offset 8,000 on metrics/0: "
        "offsets reset on the broker?",
        "metrics",
        [("broker-2", 0)],
        _err,
    ),
)


def _frame(name: str, rows: list[dict[str, Any]]) -> Any:
    return pd.DataFrame(rows, columns=column_names(RESULT_SCHEMAS[name]))


def _lag(start: int, end: int, rng: random.Random) -> dict[str, Any]:
    steps = (end - start) // STEP
    points, queues, groups = [], [], []
    for g in GROUPS:
        last: list[dict[str, Any]] = []
        for qi, (broker, queue) in enumerate(g.queues):
            bad = qi < g.bad_queues
            shape = g.shape if bad else _ok
            committed = 10_000 + qi * 1_000
            row: dict[str, Any] = {}
            for i in range(steps + 1):
                lag, lag_ms = shape(i, rng)
                committed += rng.randint(100, 200)
                row = {
                    "time": start + i * STEP + rng.randint(0, 900),
                    "broker_group": broker,
                    "consumer_group": g.name,
                    "topic": g.topic,
                    "queue_id": queue,
                    "committed_offset": committed,
                    "max_offset": committed + lag,
                    "lag_messages": lag,
                    "lag_ms": lag_ms,
                    "inflight": rng.randint(0, 16) if lag else 0,
                    "retry": 3 if g.status == "STALL" and bad and i > 60 else 0,
                }
                points.append(row)
            status = g.status if bad else "OK"
            queues.append(
                {
                    "broker_group": broker,
                    "consumer_group": g.name,
                    "topic": g.topic,
                    "queue_id": queue,
                    "status": status,
                    "reason": g.reason if bad else "lag was zero at 17 of 120 snapshots",
                    "lag_messages": row["lag_messages"],
                    "lag_ms": row["lag_ms"],
                    "window_start": start,
                    "window_end": end,
                    "points": steps + 1,
                }
            )
            last.append(queues[-1])
        worst = max(last, key=lambda q: (severity(q["status"]), q["lag_ms"]))
        groups.append(
            {
                "consumer_group": g.name,
                "status": g.status,
                "reason": g.reason,
                "queues": len(last),
                "lag_messages": sum(q["lag_messages"] for q in last),
                "max_lag_ms": max(q["lag_ms"] for q in last),
                "worst_topic": worst["topic"],
                "worst_queue_id": worst["queue_id"],
                "worst_broker_group": worst["broker_group"],
            }
        )
    return {
        LAG_POINTS: _frame(LAG_POINTS, points),
        LAG_QUEUES: _frame(LAG_QUEUES, queues),
        LAG_GROUPS: _frame(LAG_GROUPS, groups),
    }


@dataclass(frozen=True)
class BrokerGroup:
    name: str
    # broker id → in-set intervals as (start, end) offsets from the window start
    in_set: dict[int, list[tuple[int, int]]]
    # (master id or None, epoch, start offset, end offset)
    masters: list[tuple[int | None, int, int, int]]
    elections: int
    unclean: int


def _broker_groups(span: int) -> list[BrokerGroup]:
    fail = 25 * MIN  # broker-0: master 0 killed; broker 1 takes over after 0.31 s
    kill = 30 * MIN  # broker-1: master 0 dies; broker 1, out of sync, elected unclean
    unclean_at = kill + 2 * MIN + 5_000
    flaps = [(0, 12 * MIN), (12 * MIN + 20_000, 31 * MIN), (31 * MIN + 9_000, 47 * MIN)]
    flaps.append((47 * MIN + 15_000, span))
    return [
        BrokerGroup(
            "broker-0",
            {
                0: [(0, fail), (40 * MIN, span)],
                1: [(0, span)],
                2: [(0, span)],
            },
            [(0, 1, 0, fail), (None, 1, fail, fail + 310), (1, 2, fail + 310, span)],
            elections=1,
            unclean=0,
        ),
        BrokerGroup(
            "broker-1",
            {0: [(0, kill)], 1: [(0, 10 * MIN), (unclean_at, span)]},
            [(0, 2, 0, kill), (None, 2, kill, unclean_at), (1, 3, unclean_at, span)],
            elections=1,
            unclean=1,
        ),
        BrokerGroup(
            "broker-2",
            {0: [(0, span)], 1: flaps},
            [(0, 1, 0, span)],
            elections=0,
            unclean=0,
        ),
        BrokerGroup(
            "broker-3",
            {0: [(0, span)], 1: [(0, span)], 2: [(0, span)]},
            [(2, 4, 0, span)],
            elections=0,
            unclean=0,
        ),
    ]


def _sss(start: int, end: int) -> dict[str, Any]:
    span = end - start
    intervals, masters, replicas, groups = [], [], [], []
    for bg in _broker_groups(span):
        flaps_total = 0
        for broker_id, spans in bg.in_set.items():
            for a, b in spans:
                intervals.append(
                    {
                        "broker_group": bg.name,
                        "broker_id": broker_id,
                        "start": start + a,
                        "end": start + b,
                        "open": b == span,
                    }
                )
            in_sync = sum(b - a for a, b in spans)
            leaves = sum(1 for _, b in spans if b < span)
            joins = sum(1 for a, _ in spans if a > 0)
            flaps = min(joins, leaves)
            flaps_total += flaps
            replicas.append(
                {
                    "broker_group": bg.name,
                    "broker_id": broker_id,
                    "time_in_sync_ms": in_sync,
                    "in_sync_ratio": in_sync / span,
                    "joins": joins,
                    "leaves": leaves,
                    "flaps": flaps,
                }
            )
        without = [(a, b) for m, _, a, b in bg.masters if m is None]
        for master_id, epoch, a, b in bg.masters:
            masters.append(
                {
                    "broker_group": bg.name,
                    "master_id": master_id,
                    "master_epoch": epoch,
                    "start": start + a,
                    "end": start + b,
                }
            )
        groups.append(
            {
                "broker_group": bg.name,
                "window_start": start,
                "window_end": end,
                "elections": bg.elections,
                "master_changes": bg.elections,
                "unclean_elections": bg.unclean,
                "time_without_master_ms": sum(b - a for a, b in without),
                "without_master_intervals": len(without),
                "flaps": flaps_total if bg.name == "broker-2" else 0,
                "sss_changes": sum(
                    (a > 0) + (b < span) for spans in bg.in_set.values() for a, b in spans
                ),
            }
        )
    masters_frame = _frame(SSS_MASTERS, masters).astype({"master_id": "Int64"})
    return {
        SSS_INTERVALS: _frame(SSS_INTERVALS, intervals),
        SSS_MASTERS: masters_frame,
        SSS_REPLICAS: _frame(SSS_REPLICAS, replicas),
        SSS_GROUPS: _frame(SSS_GROUPS, groups),
    }


def _tiering(rng: random.Random) -> dict[str, Any]:
    rows = []
    price = 0.08 - 0.023  # local disk vs object storage, per GiB-month
    topics = ["orders", "payments", "metrics", "audit", "clickstream"]
    for rank in range(1, 21):
        level = "queue" if rank % 3 == 1 else "segment"
        size = int(GIB * (2_000 / rank) * rng.uniform(0.7, 1.3))
        rows.append(
            {
                "rank": rank,
                "level": level,
                "broker_group": f"broker-{rank % 3}",
                "topic": topics[rank % len(topics)],
                "queue_id": rank % 4,
                "segment": None if level == "queue" else 1_000 + rank,
                "bytes": size,
                "messages": size // 1_024,
                "age_ms": int((30 - rank) * 86_400_000 * rng.uniform(0.8, 1.0)),
                "idle_ms": int((20 - rank / 2) * 86_400_000),
                "score": round(1 / rank, 4),
                "monthly_saving": round(size / GIB * price, 2),
                "tiered": rank in (2, 5, 9),
            }
        )
    frame = _frame(TIERING_CANDIDATES, rows).astype({"segment": "Int64"})
    return {TIERING_CANDIDATES: frame}


def sample_results(now_ms: int, *, seed: int = 15) -> dict[str, Any]:
    """Every result table for a one-hour window ending at ``now_ms``."""
    rng = random.Random(seed)
    start = now_ms - HOUR
    return {**_lag(start, now_ms, rng), **_sss(start, now_ms), **_tiering(rng)}


def sample_summary() -> dict[str, Any]:
    """A summary of the shape the jobs write (the report shows it as it is)."""
    return {
        "lag": {"groups": len(GROUPS), "not_ok": len(GROUPS) - 1},
        "sss": {"broker_groups": 4, "elections": 2, "unclean_elections": 1},
        "tiering": {"currency": "$", "price_per_gib_month": {"local": 0.08, "object": 0.023}},
    }


SAMPLE_NOW: Final = 1_767_268_800_000  # 2026-01-01 12:00:00 UTC: a stable sample


def main(argv: Sequence[str]) -> int:
    """Write the sample report, and a screenshot of it if a PNG path is given."""
    from rocketcluster.jobs.report import render_report, write_report

    if not argv:
        print("usage: python -m rocketcluster.jobs.report.sample OUT.html [SHOT.png]")
        return 2
    html = render_report(
        sample_results(SAMPLE_NOW),
        sample_summary(),
        cluster="demo",
        generated_at_ms=SAMPLE_NOW + 42_000,
    )
    path = write_report(Path(argv[0]), html)
    print(f"{path}: {len(html):,} bytes")
    if len(argv) > 1:
        from rocketcluster.jobs.report.browser import check_in_browser

        check = check_in_browser(path, Path(argv[1]))
        print(check)
        return 0 if check.ok else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
