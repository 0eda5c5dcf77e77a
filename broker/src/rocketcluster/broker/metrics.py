"""BrokerMetrics: Prometheus metrics named as Apache RocketMQ 5 names them.

Counters move per request (by the batch, never per message); gauges that describe
state (lag, in-flight, storage) are computed when Prometheus scrapes, from the live
objects, so they cannot drift; so are counters the store keeps as plain integers
(page-cache reads, retention). Every series carries ``cluster``, ``node_type``,
``node_id`` and, on brokers, ``group``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from rocketcluster.broker.store import MessageStore

RPC_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)
# fdatasync: ~0.1-1 ms on NVMe, ~5-20 ms on network or spinning disks, seconds when
# the device is saturated.
FLUSH_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

# A young collection takes well under 10 ms; a full one over 100,000 queues can take
# most of a second (see rocketcluster.broker.collector).
GC_PAUSE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

GaugeSource = Callable[[], Iterable[tuple[dict[str, str], float]]]
_FAMILIES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily}


class _StateCollector(Collector):
    """Families read from live objects at scrape time (gauges, and counters kept as
    plain integers elsewhere); a source with nothing to say yields no sample."""

    def __init__(self, base: dict[str, str]) -> None:
        self._base = base
        self._families: list[tuple[str, str, str, GaugeSource]] = []

    def add(self, kind: str, name: str, doc: str, source: GaugeSource) -> None:
        if kind not in _FAMILIES:
            raise ValueError(f"metric kind {kind!r}: use one of {sorted(_FAMILIES)}")
        self._families.append((kind, name, doc, source))

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        for kind, name, doc, source in self._families:
            samples = list(source())
            keys = sorted({k for labels, _ in samples for k in labels})
            family = _FAMILIES[kind](name, doc, labels=[*self._base, *keys])
            for labels, value in samples:
                family.add_metric([*self._base.values(), *(labels.get(k, "") for k in keys)], value)
            yield family


class BrokerMetrics:
    def __init__(
        self, cluster: str, node_id: str, node_type: str = "broker", group: str = ""
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        base = {"cluster": cluster, "node_type": node_type, "node_id": node_id}
        if group:
            # The broker group, so dashboards and alerts can aggregate per group
            # whatever the scrape set-up adds as target labels.
            base["group"] = group
        self._base = base
        self._children: dict[tuple[Any, ...], Any] = {}
        names = list(base)
        self.messages_in = Counter(
            "rocketmq_messages_in", "Messages produced", [*names, "topic"], registry=self.registry
        )
        self.throughput_in = Counter(
            "rocketmq_throughput_in", "Bytes produced", [*names, "topic"], registry=self.registry
        )
        self.messages_out = Counter(
            "rocketmq_messages_out",
            "Messages delivered to consumers",
            [*names, "topic", "consumer_group"],
            registry=self.registry,
        )
        self.throughput_out = Counter(
            "rocketmq_throughput_out",
            "Bytes delivered to consumers",
            [*names, "topic", "consumer_group"],
            registry=self.registry,
        )
        self.send_to_dlq = Counter(
            "rocketmq_send_to_dlq_messages",
            "Messages moved to a dead-letter queue",
            [*names, "topic", "consumer_group"],
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "rocketmq_rpc_latency",
            "Latency of client RPCs in seconds",
            [*names, "protocol_type", "request_code", "response_code"],
            buckets=RPC_BUCKETS,
            registry=self.registry,
        )
        self.flush_latency = Histogram(
            "rocketmq_storage_flush_latency",
            "Seconds each commit-log flush (fdatasync, one per group commit) took",
            [*names, "flush_type"],
            buckets=FLUSH_BUCKETS,
            registry=self.registry,
        )
        self.gc_pause = Histogram(
            "rocketcluster_python_gc_pause_seconds",
            "Seconds each collection of Python's cyclic garbage collector held the process",
            [*names, "generation"],
            buckets=GC_PAUSE_BUCKETS,
            registry=self.registry,
        )
        self.state = _StateCollector(base)
        self.registry.register(self.state)

    def _child(self, metric: Any, *values: str) -> Any:
        """``metric`` with the base labels and ``values``, looked up once: resolving
        labels in prometheus_client costs microseconds, and this runs per request."""
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*self._base.values(), *values)
        return child

    def produced(self, topic: str, count: int, size: int) -> None:
        self._child(self.messages_in, topic).inc(count)
        self._child(self.throughput_in, topic).inc(size)

    def delivered(self, topic: str, group: str, deliveries: Sequence[Any]) -> None:
        self._child(self.messages_out, topic, group).inc(len(deliveries))
        self._child(self.throughput_out, topic, group).inc(
            sum(len(d.message.body) for d in deliveries)
        )

    def dead_lettered(self, topic: str, group: str) -> None:
        self._child(self.send_to_dlq, topic, group).inc()

    def observe_rpc(self, rpc: str, code: int, seconds: float) -> None:
        self._child(self.rpc_latency, "grpc", rpc, str(int(code))).observe(seconds)

    def observe_flush(self, flush_type: str, seconds: float) -> None:
        """One commit-log flush; called on the store's flush thread."""
        self._child(self.flush_latency, flush_type).observe(seconds)

    def observe_gc(self, generation: int, seconds: float) -> None:
        """One collection; called from whichever thread the collector ran in."""
        self._child(self.gc_pause, str(generation)).observe(seconds)

    def gauge(self, name: str, doc: str, source: GaugeSource) -> None:
        self.state.add("gauge", name, doc, source)

    def counter(self, name: str, doc: str, source: GaugeSource) -> None:
        """A counter read at scrape time from a count kept elsewhere (it must only
        grow); exposed as ``<name>_total``, whether or not ``name`` ends so."""
        self.state.add("counter", name, doc, source)

    def histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Callable[[float], None]:
        """A histogram with only the base labels; returns its ``observe``."""
        metric = Histogram(name, doc, list(self._base), buckets=buckets, registry=self.registry)
        return self._child(metric).observe  # type: ignore[no-any-return]

    def render(self) -> bytes:
        return generate_latest(self.registry)


def register_store_metrics(metrics: BrokerMetrics, store: MessageStore) -> None:
    """The store's metrics: flush timings as they happen, the rest at scrape time
    (each scrape costs one statvfs per disk gauge and one small read of the oldest
    record's header, whatever the traffic)."""
    flush_type = store.config.flush.value
    metrics._child(metrics.flush_latency, flush_type)  # the series exists before a flush
    store.add_flush_timing_listener(lambda seconds: metrics.observe_flush(flush_type, seconds))

    def one(value: float) -> list[tuple[dict[str, str], float]]:
        return [({}, value)]

    def disk(part: int) -> GaugeSource:
        def source() -> list[tuple[dict[str, str], float]]:
            space = store.disk_space()
            return [] if space is None else one(float(space[part]))

        return source

    def oldest_age() -> list[tuple[dict[str, str], float]]:
        stamp = store.commitlog.first_store_timestamp()
        if stamp is None:
            return []  # an empty log has no oldest message (no NaN, no fake zero)
        return one(max(0.0, time.time() - stamp / 1000))

    def cache_reads() -> list[tuple[dict[str, str], float]]:
        reads = store.commitlog.page_cache
        if not reads.supported:
            return []  # this filesystem cannot tell hits from misses (page_cache.py)
        return [({"result": "hit"}, float(reads.hits)), ({"result": "miss"}, float(reads.misses))]

    metrics.gauge(
        "rocketmq_storage_size",
        "Bytes of commit log on disk",
        lambda: one(float(store.commitlog.size_bytes())),
    )
    metrics.gauge(
        "rocketmq_storage_disk_free_bytes",
        "Bytes still available to the store on its volume (statvfs f_bavail)",
        disk(0),
    )
    metrics.gauge(
        "rocketmq_storage_disk_total_bytes", "Size in bytes of the store's volume", disk(1)
    )
    metrics.gauge(
        "rocketmq_storage_oldest_message_age",
        "Seconds since the oldest message still in the commit log was stored",
        oldest_age,
    )
    metrics.counter(
        "rocketmq_storage_page_cache_reads_total",
        "Commit-log message reads served to clients (deliveries, timers, transactions), "
        "by whether the page cache held the bytes",
        cache_reads,
    )
    metrics.counter(
        "rocketmq_storage_retention_deleted_bytes_total",
        "Commit-log bytes removed by retention",
        lambda: one(float(store.retention_deleted_bytes)),
    )
    metrics.counter(
        "rocketmq_storage_deleted_unconsumed_messages_total",
        "Messages retention removed that no consumer group had consumed (expired, or "
        "forced out of a full disk with diskFull: deleteOldest)",
        lambda: one(float(store.deleted_unconsumed_messages)),
    )
    metrics.gauge(
        "rocketmq_storage_retention_held_for_consumers_segments",
        "Commit-log segments the disk's fill level would delete but retention keeps "
        "because consumer groups have not consumed them (diskFull: reject)",
        lambda: one(float(store.retention_held_for_consumers)),
    )
    metrics.gauge(
        "rocketmq_storage_disk_full_ratio",
        "Fill ratio of the store's volume above which the broker refuses new messages",
        lambda: one(float(store.config.disk_full_ratio)),
    )
    metrics.gauge(
        "rocketmq_storage_retention_seconds",
        "Configured retention of the commit log, in seconds",
        lambda: one(float(store.config.retention_hours) * 3600),
    )
