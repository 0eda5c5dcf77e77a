"""BrokerMetrics: Prometheus metrics named as Apache RocketMQ 5 names them.

Counters move per request (by the batch, never per message); gauges that describe
state (lag, in-flight, storage) are computed when Prometheus scrapes, from the live
objects, so they cannot drift. Every series carries ``cluster``, ``node_type`` and
``node_id``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

RPC_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30)

GaugeSource = Callable[[], Iterable[tuple[dict[str, str], float]]]


class _StateCollector(Collector):
    def __init__(self, base: dict[str, str]) -> None:
        self._base = base
        self._gauges: list[tuple[str, str, GaugeSource]] = []

    def add(self, name: str, doc: str, source: GaugeSource) -> None:
        self._gauges.append((name, doc, source))

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for name, doc, source in self._gauges:
            samples = list(source())
            keys = sorted({k for labels, _ in samples for k in labels})
            family = GaugeMetricFamily(name, doc, labels=[*self._base, *keys])
            for labels, value in samples:
                family.add_metric([*self._base.values(), *(labels.get(k, "") for k in keys)], value)
            yield family


class BrokerMetrics:
    def __init__(self, cluster: str, node_id: str, node_type: str = "broker") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        base = {"cluster": cluster, "node_type": node_type, "node_id": node_id}
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

    def gauge(self, name: str, doc: str, source: GaugeSource) -> None:
        self.state.add(name, doc, source)

    def render(self) -> bytes:
        return generate_latest(self.registry)
