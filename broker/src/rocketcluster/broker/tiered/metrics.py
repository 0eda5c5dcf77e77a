"""``rocketmq_tiered_*``: what the tier costs and how far behind it is.

Computed at scrape time from the live objects (so they cannot drift), except the
cold-read latency histogram, observed per segment fetched. Only brokers with tiered
storage on export them; the upload lag is reported by every replica (a slave's lag
says how much its own retention must hold back)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rocketcluster.broker.metrics import BrokerMetrics, GaugeSource
from rocketcluster.broker.tiered.service import TieredStorage

# A ranged GET: ~1 ms from a local volume, 10-100 ms from S3, seconds when it struggles.
FETCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def fetch_observer(metrics: BrokerMetrics) -> Callable[[float], None]:
    """Where the tier reports each segment fetch's seconds (made before the tier, which
    takes it as ``on_fetch``)."""
    return metrics.histogram(
        "rocketmq_tiered_fetch_latency",
        "Seconds to fetch and decode one segment from the tier (cold reads, lookups)",
        FETCH_BUCKETS,
    )


def register_tier_metrics(metrics: BrokerMetrics, tier: TieredStorage) -> None:
    up = tier.uploader.counters
    rd = tier.reader.counters
    lag = _Lag(tier)
    single: list[tuple[str, str, str, Callable[[], float]]] = [
        (
            "gauge",
            "rocketmq_tiered_upload_lag_bytes",
            "Commit-log bytes from the oldest message not yet in the tier to the newest "
            "dispatched one (what local retention must keep)",
            lambda: lag.now()[0],
        ),
        (
            "gauge",
            "rocketmq_tiered_upload_lag_seconds",
            "Seconds the oldest message not yet in the tier has waited since it was stored",
            lambda: lag.now()[1],
        ),
        (
            "gauge",
            "rocketmq_tiered_size_bytes",
            "Bytes of this group's segments in the tier",
            lambda: sum(t.bytes for t in tier.catalog),
        ),
        (
            "gauge",
            "rocketmq_tiered_segments",
            "This group's segments in the tier",
            lambda: sum(len(t.segments) for t in tier.catalog),
        ),
        (
            "counter",
            "rocketmq_tiered_uploaded_bytes_total",
            "Bytes uploaded to the tier",
            lambda: up.bytes,
        ),
        (
            "counter",
            "rocketmq_tiered_uploaded_messages_total",
            "Messages uploaded to the tier",
            lambda: up.messages,
        ),
        (
            "counter",
            "rocketmq_tiered_cold_reads_total",
            "Reads served from the tier (receives, lookups), from the cache or the backend",
            lambda: rd.reads,
        ),
        (
            "counter",
            "rocketmq_tiered_cold_read_messages_total",
            "Messages served from the tier",
            lambda: rd.messages,
        ),
        (
            "counter",
            "rocketmq_tiered_fallbacks_total",
            "Tier reads that failed and were served from the local disk instead (or waited)",
            lambda: rd.fallbacks,
        ),
        (
            "gauge",
            "rocketmq_tiered_backend_up",
            "1 while the tier's backend answers, 0 while it fails (uploads wait, retention holds)",
            lambda: 1.0 if tier.healthy else 0.0,
        ),
        (
            "gauge",
            "rocketmq_tiered_retention_held_segments",
            "Commit-log segments local retention wants to delete but keeps because their "
            "messages are not in the tier yet (disk pressure from a slow or failing tier)",
            lambda: tier.store.retention_held_by_tier,
        ),
    ]
    for kind, name, doc, read in single:
        register = metrics.gauge if kind == "gauge" else metrics.counter
        register(name, doc, _one(read))
    metrics.counter(
        "rocketmq_tiered_backend_errors_total",
        "Failed calls to the tier's backend, by operation",
        lambda: [
            ({"operation": "upload"}, float(up.errors)),
            ({"operation": "read"}, float(rd.errors)),
        ],
    )


def _one(read: Callable[[], float]) -> GaugeSource:
    return lambda: [({}, float(read()))]


class _Lag:
    """The upload lag, computed once per scrape for its two gauges (it walks every
    queue): kept for a second."""

    def __init__(self, tier: TieredStorage) -> None:
        self._tier = tier
        self._at = -1.0
        self._value = (0, 0.0)

    def now(self) -> tuple[int, float]:
        clock = time.monotonic()
        if clock - self._at > 1.0:
            self._value, self._at = self._tier.lag(), clock
        return self._value
