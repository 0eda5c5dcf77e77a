"""The stats topic, read live: the last snapshots each broker group published (offsets
of every queue and consumer group every ``statsIntervalSeconds``), turned into
produce and consume rates and the Burrow-style status of each consumer queue.

The same history the Spark lag job reads, so the console's status and the health
report's agree; a page reads only the last window (``WINDOW_POINTS`` snapshots).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from rocketcluster.api.stats import DEFAULT_STATS_INTERVAL_SECONDS, StatsSnapshot
from rocketcluster.console.cluster import ClusterSnapshot
from rocketcluster.console.lag_status import WINDOW_POINTS, Point, Verdict, evaluate, merge
from rocketcluster.console.upstream import Upstream, UpstreamError

QueueKey = tuple[str, str, str, int]  # broker group, consumer group, topic, queue id
MAX_SNAPSHOT_MESSAGES = 1000


@dataclass
class LiveStats:
    """Per broker group: the snapshots read; derived: histories and rates."""

    consumers: dict[QueueKey, list[Point]] = field(default_factory=dict)
    # topic -> [(time, sum of the max offsets of its queues on one broker group)]
    produced: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    now_ms: int = 0

    def verdicts(self, group: str | None = None) -> dict[QueueKey, Verdict]:
        return {
            key: evaluate(points, self.now_ms)
            for key, points in self.consumers.items()
            if group is None or key[1] == group
        }

    def produce_rate(self, topic: str | None = None) -> float:
        """Messages per second stored over the window (a topic, or all of them)."""
        return sum(_rate(pts) for (_, t), pts in self.produced.items() if topic in (None, t))

    def consume_rate(self, group: str | None = None, topic: str | None = None) -> float:
        """Messages per second acknowledged over the window."""
        total = 0.0
        for (_, g, t, _), points in self.consumers.items():
            if group not in (None, g) or topic not in (None, t):
                continue
            pts = merge(points)
            total += _rate([(p.time, p.committed) for p in pts])
        return total


def _rate(points: list[tuple[int, int]]) -> float:
    pts = sorted(points)
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return 0.0
    return max(0.0, (pts[-1][1] - pts[0][1]) / ((pts[-1][0] - pts[0][0]) / 1000))


async def _snapshots(upstream: Upstream, admin: str, since_ms: int) -> list[StatsSnapshot]:
    start = await upstream.get(admin, "/v1/stats/offset", time=since_ms)
    page = await upstream.get(
        admin,
        "/v1/stats/snapshots",
        fromOffset=start["offset"],
        limit=MAX_SNAPSHOT_MESSAGES,
        rows="queues,consumers",  # not the segments (tiering): most of a snapshot's bytes
    )
    out = []
    for item in page.get("snapshots", []):
        try:
            out.append(StatsSnapshot.model_validate(item["snapshot"]))
        except (ValueError, KeyError, TypeError):
            continue  # a body of a newer format: the Spark job skips it too
    return out


async def read_live_stats(
    upstream: Upstream, cluster: ClusterSnapshot, interval_s: float | None = None
) -> LiveStats:
    """The last ``WINDOW_POINTS`` intervals of every broker group's snapshots."""
    now_ms = int(time.time() * 1000)
    interval = interval_s or _interval(cluster)
    since = now_ms - int((WINDOW_POINTS + 0.5) * interval * 1000)
    readers = cluster.readers()
    results = await upstream.gather([_snapshots(upstream, r.broker.admin, since) for r in readers])
    live = LiveStats(now_ms=now_ms)
    consumers: dict[QueueKey, list[Point]] = defaultdict(list)
    produced: dict[tuple[str, str], dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for reader, result in zip(readers, results, strict=True):
        if isinstance(result, UpstreamError):
            live.errors.append(f"stats of {reader.broker.group}: {result.reason}")
            continue
        for snap in result:
            for q in snap.queues:
                produced[(snap.broker_group, q.topic)][snap.time] += q.max_offset
            for c in snap.consumers:
                consumers[(snap.broker_group, c.consumer_group, c.topic, c.queue_id)].append(
                    Point(
                        snap.time,
                        c.committed_offset,
                        c.min_offset,
                        c.max_offset,
                        c.committed_store_time,
                        c.inflight,
                        c.retry,
                    )
                )
    live.consumers = dict(consumers)
    live.produced = {k: sorted(v.items()) for k, v in produced.items()}
    return live


def _interval(cluster: ClusterSnapshot) -> float:
    for b in cluster.brokers:
        value: Any = ((b.stats or {}).get("statsSnapshots") or {}).get("intervalSeconds")
        if isinstance(value, int | float) and value > 0:
            return float(value)
    return DEFAULT_STATS_INTERVAL_SECONDS


class LiveStatsCache:
    """The last read of the stats topic, shared by the pages for a few seconds.

    Snapshots arrive once per ``statsIntervalSeconds`` (30 s by default), and a read
    over many topics and groups parses thousands of rows: pages viewed one after
    another reuse it for ``max_age_s`` (at most half an interval), and requests that
    arrive together wait for one read. ``now_ms`` is always the request's own."""

    def __init__(self, max_age_s: float = 5.0) -> None:
        self._max_age_s = max_age_s
        self._read: tuple[float, LiveStats] | None = None
        self._lock = asyncio.Lock()

    async def get(self, upstream: Upstream, cluster: ClusterSnapshot) -> LiveStats:
        async with self._lock:
            now = time.monotonic()
            age = min(self._max_age_s, _interval(cluster) / 2)
            if self._read is None or now - self._read[0] > age or self._read[1].errors:
                self._read = (now, await read_live_stats(upstream, cluster))
            return replace(self._read[1], now_ms=int(time.time() * 1000))
