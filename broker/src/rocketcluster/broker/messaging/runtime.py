"""MessagingRuntime: the messaging layer of one broker, wired together.

It owns the services (send, pop, timers, transactions, clients, filters) over one
MessageStore and runs their background tasks; the gRPC servicer and the admin API
both talk to it. Keeping it separate from the store lets several client-facing
processes share one store later (DESIGN §9).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.broker_config import BrokerProcessConfig
from rocketcluster.api.names import dlq_topic
from rocketcluster.api.stats import STATS_TOPIC
from rocketcluster.api.tls import ClientTls
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.ha.forward import Forwarder
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.backoff import backoff_policy
from rocketcluster.broker.messaging.clients import ClientRegistry
from rocketcluster.broker.messaging.codes import OK, Code, MessagingError
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.convert import copy_to, to_pb
from rocketcluster.broker.messaging.cross_group import CrossGroup
from rocketcluster.broker.messaging.filters import FilterCache
from rocketcluster.broker.messaging.notify import ArrivalNotifier
from rocketcluster.broker.messaging.pop import PopService
from rocketcluster.broker.messaging.pop_journal import JOURNAL_TOPIC
from rocketcluster.broker.messaging.pop_metrics import register_pop_metrics
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.messaging.revive import PopReviveService
from rocketcluster.broker.messaging.routes import RouteTable
from rocketcluster.broker.messaging.send import SendOutcome, SendService
from rocketcluster.broker.messaging.timers import TimerService
from rocketcluster.broker.messaging.trace import TRACE_TOPIC, TraceRecorder
from rocketcluster.broker.messaging.transactions import TransactionService
from rocketcluster.broker.metrics import BrokerMetrics, register_store_metrics
from rocketcluster.broker.stats import ReadRecorder, StatsPublisherService, StatsSources
from rocketcluster.broker.stats.collect import Identity
from rocketcluster.broker.store import (
    MessageStore,
    MessageToStore,
    PutResult,
    PutStatus,
    StoredMessage,
)
from rocketcluster.broker.tiered.factory import backend_from_spec
from rocketcluster.broker.tiered.metrics import fetch_observer, register_tier_metrics
from rocketcluster.broker.tiered.service import TieredStorage

if TYPE_CHECKING:
    from rocketcluster.broker.ha.role import RoleManager

log = logging.getLogger(__name__)

UPKEEP_SECONDS = 0.25
TRACE_STOP_FLUSH_S = 1.0
LONG_POLLING_ADVERTISED_S = 20


class MessagingRuntime:
    def __init__(
        self, config: BrokerProcessConfig, store: MessageStore, metrics: BrokerMetrics
    ) -> None:
        self.config = config
        self.store = store
        # Records of these topics keep the broker's own state: retention does not keep
        # them for consumer groups nor count them as deleted unconsumed.
        store.bookkeeping_topics = frozenset({JOURNAL_TOPIC, TRACE_TOPIC, STATS_TOPIC})
        self.metrics = metrics
        self.tuning = config.messaging
        self.store_host = config.client_endpoint
        self.registry = TopicRegistry(store.metadata, auto_create=config.auto_create_topics)
        self.registry.apply_declared(config.topics, config.consumer_groups)
        # What QueryRoute offers and whether this group takes sends: the config's until
        # the catalogue service installs the catalogue's (catalogue_sync.py).
        self.routes = RouteTable.from_config(config)
        self.notifier = ArrivalNotifier()
        store.add_dispatch_listener(self._dispatched)
        self.clients = ClientRegistry(self.tuning.client_expiry_ms / 1000)
        store.subscribers = self.clients.subscribers
        self.filters = FilterCache()
        self.send = SendService(
            store,
            self.registry,
            max_body=config.max_message_bytes,
            max_delay_s=self.tuning.max_delay_seconds,
        )
        self.reads = ReadRecorder(store.commitlog.segment_size)
        self.pop = PopService(
            store,
            self.notifier,
            self.tuning,
            self.dead_letter,
            self.reads,
            put=self.write_system,
            group_spec=self.registry.get_group,
            dead_lettered=self._dead_lettered,
            broker_group=config.group,
        )
        self.pop.recover()  # before any role: the journal after the saved snapshot
        # Server-side message traces (trace.py): send and POP record, the master
        # appends them to RMQ_SYS_TRACE_DATA; the admin API's DLQ resend calls
        # ``trace.record_resent``.
        self.trace = TraceRecorder(
            self.registry.get_topic,
            self._trace_identity,
            sample_every=config.trace_sample_every,
        )
        self.send.trace = self.trace
        self.pop.trace = self.trace
        self.revive = PopReviveService(self.pop, self.is_master)
        self.timers = TimerService(store, config.data_dir / "timers", self.is_master)
        self.transactions = TransactionService(
            store,
            config.data_dir / "transactions",
            self.clients,
            self.tuning,
            self._orphan_message,
            self.is_master,
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.role: RoleManager | None = None
        self.forwarder = Forwarder(ClientTls.of(config.tls))
        self.cross_group = CrossGroup(
            config.group,
            lambda: self.routes,
            self.forwarder,
            enabled=self.tuning.cross_group_receive,
        )
        self._register_gauges()
        self.tier = self._tiered_storage()
        self.stats = StatsPublisherService(
            StatsSources(
                store,
                self.registry,
                self.pop.states,
                self.reads,
                self.identity,
                self.tier.uploaded_below if self.tier is not None else None,
            ),
            self.write_system,
            self.is_master,
            interval_s=config.stats_interval_seconds,
            max_body=config.max_message_bytes,
        )

    def _tiered_storage(self) -> TieredStorage | None:
        """Tiered storage when the manifest turns it on: the store keeps what is not
        uploaded, receives read what local retention removed (DESIGN §4)."""
        spec = self.config.tiered_storage
        if not spec.enabled:
            return None
        tier = TieredStorage(
            spec,
            self.store,
            backend_from_spec(spec),
            cluster=self.config.cluster,
            group=self.config.group,
            writer=self.config.node_id,
            is_master=self.is_master,
            on_fetch=fetch_observer(self.metrics),
        )
        self.store.attach_tier(tier)
        self.pop.cold = tier
        register_tier_metrics(self.metrics, tier)
        return tier

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.timers.run(), name="timers"),
            loop.create_task(self.transactions.run(), name="transactions"),
            loop.create_task(self._upkeep(), name="messaging-upkeep"),
            loop.create_task(self.stats.run(), name="stats-publisher"),
            loop.create_task(self.revive.run(), name="pop-revive"),
            loop.create_task(self.trace.run(self.write_traces), name="trace-writer"),
        ]
        if self.role is None:  # a standalone broker is its group's master
            self.pop.promote()
        if self.tier is not None:
            self.tier.start()

    async def stop(self) -> None:
        if self.tier is not None:
            await self.tier.stop()
        with contextlib.suppress(TimeoutError):  # the last events, if the store takes them
            await asyncio.wait_for(self.trace.flush(self.write_traces), TRACE_STOP_FLUSH_S)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.pop.close()
        try:
            self.pop.persist()
        finally:
            self.timers.close()
            self.transactions.close()
            await self.forwarder.close()

    async def _upkeep(self) -> None:
        elapsed = 0.0
        while True:
            await asyncio.sleep(UPKEEP_SECONDS)
            elapsed += UPKEEP_SECONDS
            try:
                alive = self.clients.alive()
                self.pop.renew(alive)
                for client_id in self.clients.expired():
                    self.pop.release_client(client_id)
                if elapsed * 1000 >= self.tuning.consume_state_persist_ms:
                    elapsed = 0.0
                    self.pop.persist()
            except Exception:
                log.exception("messaging upkeep failed; retrying")

    # -- replication -----------------------------------------------------------

    def attach_role(self, role: RoleManager) -> None:
        self.role = role
        ha = role.ha_master
        if ha is not None:
            self.send.gate = ha
            self.store.add_write_listener(ha.data_written)
            self.trace.replication = lambda: (ha.replication.mode.value, sorted(ha.in_sync()))
        self._register_ha_gauges(role)

    def _register_ha_gauges(self, role: RoleManager) -> None:
        m = self.metrics
        roles = {"master": 1.0, "slave": 2.0, "no-master": 3.0, "starting": 0.0}
        m.gauge(
            "rocketmq_ha_role",
            "1 master, 2 slave, 3 no master, 0 starting",
            lambda: [({}, roles.get(role.role, 0.0))],
        )
        m.gauge(
            "rocketmq_ha_master_epoch",
            "Master epoch of the group as this broker knows it",
            lambda: [({}, float(role.view["masterEpoch"] if role.view else 0))],
        )
        m.gauge(
            "rocketmq_ha_min_in_sync_replicas",
            "The group's configured minInSyncReplicas (writes are refused below it)",
            lambda: [({}, float(self.config.replication.min_in_sync_replicas))],
        )
        m.gauge(
            "rocketmq_ha_confirm_offset",
            "Offset every in-sync replica holds",
            lambda: [({}, float(self.store.confirm_offset or 0))],
        )
        m.gauge(
            "rocketmq_ha_sync_state_set_size",
            "In-sync replicas (as the master counts them)",
            lambda: [
                (
                    {},
                    float(
                        len(role.ha_master.in_sync())
                        if role.ha_master and role.ha_master.active
                        else 0
                    ),
                )
            ],
        )

        def lag() -> list[tuple[dict[str, str], float]]:
            ha = role.ha_master
            if ha is None or not ha.active:
                return []
            end = self.store.commitlog.committed_offset
            return [
                ({"slave_id": str(s.broker_id)}, float(max(0, end - s.ack_offset)))
                for s in ha.slaves.values()
            ]

        m.gauge(
            "rocketmq_ha_slave_ack_lag_bytes",
            "Bytes the master holds that a slave has not acked",
            lag,
        )
        m.gauge(
            "rocketmq_ha_replicated_bytes",
            "Bytes sent to slaves (master) or received (slave)",
            lambda: [
                (
                    {},
                    float(
                        (role.ha_master.replicated_bytes if role.ha_master else 0)
                        + role.received_bytes()
                    ),
                )
            ],
        )

    def is_master(self) -> bool:
        return self.role is None or self.role.is_master()

    def identity(self) -> Identity:
        cfg = self.config
        broker_id = self.role.broker_id if self.role is not None else cfg.broker_id
        return Identity(cfg.cluster, cfg.group, broker_id)

    async def write_system(self, records: Sequence[MessageToStore]) -> PutResult:
        """Store broker-made records the way sends are stored: refused without enough
        in-sync replicas, acknowledged once replicated (the stats snapshots)."""
        gate = self.send.gate
        refusal = gate.refuse_write() if gate is not None else None
        if refusal:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=refusal)
        # Bookkeeping may use the room above the disk-full ceiling: acks go on.
        result = await self.store.put_batch(records, bookkeeping=True)
        if result.ok and gate is not None:
            last = result.records[-1]
            replicated = await gate.wait_replicated(last.physical_offset + last.size)
            if replicated is not PutStatus.PUT_OK:
                return PutResult(replicated, result.records, f"replication: {replicated.value}")
        return result

    async def write_traces(self, records: Sequence[MessageToStore]) -> PutResult:
        """Append trace events (trace.py) on the master, without waiting for the
        replicas (they copy them as any record); refused, as sends are, without
        enough in-sync replicas. Slaves record nothing of their own."""
        if not self.is_master():
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason="not the master")
        gate = self.send.gate
        refusal = gate.refuse_write() if gate is not None else None
        if refusal:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, reason=refusal)
        self.registry.ensure_system_topic(TRACE_TOPIC)
        return await self.store.put_batch(records)

    def _trace_identity(self) -> tuple[str, str]:
        """(this broker's name, its broker group) for trace events."""
        identity = self.identity()
        return f"{identity.broker_group}-{identity.broker_id}", identity.broker_group

    def forward_to(self) -> str | None:
        """The master's client endpoint when requests must be forwarded there; None on
        the master. Without a known master the request cannot be served here."""
        role = self.role
        if role is None or role.is_master():
            return None
        if not role.master_client_endpoint:
            raise MessagingError(
                Code.HA_NOT_AVAILABLE,
                f"broker group {self.config.group} has no master right now; retry shortly",
            )
        return role.master_client_endpoint

    def on_role(self, role: str) -> None:
        if role == "master":
            self.pop.promote()  # the replicated journal holds the consume state
            self.timers.wake()
            self.revive.wake()
        elif self.pop.master:
            self.pop.demote()

    def metadata_snapshot(self) -> dict[str, Any]:
        metadata = self.store.metadata
        return {
            "topics": [t.model_dump(by_alias=True) for t in self.registry.topics()],
            "groups": [g.model_dump(by_alias=True) for g in self.registry.groups()],
            "offsets": [[g, t, q, o] for (g, t, q), o in metadata.all_offsets().items()],
        }

    def apply_metadata(self, data: dict[str, Any]) -> None:
        """A slave adopts its master's topics, groups and consumer offsets."""
        if self.is_master():
            return
        self.registry.apply_declared(
            [TopicSpec.model_validate(t) for t in data.get("topics", [])],
            [ConsumerGroupSpec.model_validate(g) for g in data.get("groups", [])],
            revive=False,
        )
        for group, topic, qid, offset in data.get("offsets", []):
            self.store.metadata.commit_offset(group, topic, int(qid), int(offset))

    # -- hooks -----------------------------------------------------------------

    def _dispatched(self, topics: set[str]) -> None:
        self.notifier.notify(topics)
        if JOURNAL_TOPIC in topics and not self.pop.master:
            self.pop.replay()  # a slave keeps the consume state its master records
        if prop.TIMER_TOPIC in topics:
            self.timers.wake()

    def after_send(self, outcomes: Sequence[SendOutcome]) -> None:
        """Produce metrics, from the outcomes (reading the request's messages again
        would copy every body out of the protobuf)."""
        per_topic: dict[str, tuple[int, int]] = {}
        for outcome in outcomes:
            if outcome.code == OK:
                count, size = per_topic.get(outcome.topic, (0, 0))
                per_topic[outcome.topic] = (count + 1, size + outcome.size)
        for topic, (count, size) in per_topic.items():
            self.metrics.produced(topic, count, size)

    def dead_letter(self, group: str, msg: StoredMessage, attempts: int) -> MessageToStore:
        """The copy of ``msg`` for ``%DLQ%<group>`` (the topic is created as system
        topics are); PopService stores it with the journal record of the move."""
        topic = self.registry.ensure_system_topic(dlq_topic(group))
        return copy_to(
            msg,
            topic.name,
            0,
            extra={
                prop.ORIGIN_TOPIC: msg.topic,
                prop.ORIGIN_GROUP: group,
                prop.DLQ_DELIVERY_ATTEMPTS: str(attempts),
            },
        )

    def _dead_lettered(self, group: str, msg: StoredMessage, attempts: int) -> None:
        self.metrics.dead_lettered(msg.topic, group)
        log.info(
            "message %s of %s moved to %s after %d attempts",
            msg.msg_id,
            msg.topic,
            dlq_topic(group),
            attempts,
        )

    def _orphan_message(self, half: StoredMessage, topic: str) -> pb.Message:
        message = to_pb(
            half,
            namespace="",
            receipt_handle="",
            attempt=1,
            store_host=self.store_host,
            invisible_ms=0,
        )
        message.topic.name = topic
        message.system_properties.message_type = pb.MessageType.TRANSACTION
        for key in (prop.REAL_TOPIC, prop.REAL_QUEUE_ID):
            message.user_properties.pop(key, None)
        return message

    # -- protocol answers --------------------------------------------------------

    def install_routes(self, routes: RouteTable) -> None:
        """Serve ``routes`` from now on (one snapshot: requests never see half of it)."""
        self.routes = routes
        self.send.write_refusal = routes.write_refusal

    def broker_pb(self, group: str | None = None) -> pb.Broker:
        return self.routes.broker(group)

    def settings_reply(self, client_id: str, settings: pb.Settings) -> pb.Settings:
        """What the client gets back on Telemetry: its settings, with the server's
        limits and policies filled in (the push consumer waits for this)."""
        self.clients.apply_settings(client_id, settings)
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.on = False
        if settings.client_type == pb.ClientType.PRODUCER:
            reply.publishing.max_body_size = self.config.max_message_bytes
            reply.publishing.validate_message_type = True
            if not settings.HasField("backoff_policy"):
                reply.backoff_policy.max_attempts = 3
                reply.backoff_policy.exponential_backoff.initial.FromMilliseconds(10)
                reply.backoff_policy.exponential_backoff.max.FromSeconds(1)
                reply.backoff_policy.exponential_backoff.multiplier = 2
        elif settings.HasField("subscription"):
            group = self.registry.get_group(settings.subscription.group.name)
            fifo = bool(group and group.fifo)
            attempts = group.max_delivery_attempts if group else 16
            reply.subscription.fifo = fifo
            reply.subscription.receive_batch_size = 32
            reply.subscription.long_polling_timeout.FromSeconds(
                min(LONG_POLLING_ADVERTISED_S, self.tuning.long_polling_max_ms // 1000)
            )
            reply.backoff_policy.CopyFrom(backoff_policy(attempts, fifo))
        return reply

    # -- gauges ------------------------------------------------------------------

    def _register_gauges(self) -> None:
        m = self.metrics
        m.gauge(
            "rocketmq_consumer_lag_messages",
            "Messages not yet acknowledged: in flight plus ready (the master's view; "
            "slaves hold a replica of it and export none)",
            self._lag,
        )
        m.gauge(
            "rocketmq_consumer_lag_latency",
            "Age in seconds of the oldest unacked message",
            self._lag_latency,
        )
        m.gauge(
            "rocketmq_consumer_inflight_messages",
            "Messages delivered and invisible now, not yet acknowledged",
            self._inflight,
        )
        m.gauge(
            "rocketmq_consumer_ready_messages",
            "Messages a receive would be given now: never delivered, or visible again",
            self._ready,
        )
        register_store_metrics(m, self.store)
        register_pop_metrics(m, self.pop, self.revive)
        self.cross_group.register_metrics(m)
        m.gauge(
            "rocketmq_topic_number", "Topics", lambda: [({}, float(len(self.registry.topics())))]
        )
        m.gauge(
            "rocketmq_consumer_group_number",
            "Consumer groups",
            lambda: [({}, float(len(self.registry.groups())))],
        )
        trace = self.trace
        m.counter(
            "rocketcluster_trace_events_total",
            "Message trace events recorded (buffered for RMQ_SYS_TRACE_DATA), by type",
            lambda: [({"type": k}, float(v)) for k, v in trace.recorded.items()],
        )
        m.counter(
            "rocketcluster_trace_events_dropped_total",
            "Message trace events lost: the buffer was full, or the append failed",
            lambda: [({"reason": k}, float(v)) for k, v in trace.dropped.items()],
        )
        m.gauge(
            "rocketmq_timer_pending_messages",
            "Delay messages waiting",
            lambda: [({}, float(self.timers.pending()))],
        )

    def _per_group_topic(self) -> dict[tuple[str, str], list[Any]]:
        """The consumption states by consumer group and topic — on the master only:
        a slave's are a replica of the master's, and exporting both would count every
        message once per replica in a sum over the group."""
        grouped: dict[tuple[str, str], list[Any]] = {}
        if not self.pop.master:
            return grouped
        for (group, topic, qid), state in self.pop.states().items():
            grouped.setdefault((group, topic), []).append((qid, state))
        return grouped

    def _per_state(
        self, value: Callable[[QueueConsumeState, int, int], int]
    ) -> list[tuple[dict[str, str], float]]:
        """``value(state, queue end, now ms)`` summed per consumer group and topic."""
        now = int(time.time() * 1000)
        return [
            (
                {"topic": topic, "consumer_group": group},
                float(sum(value(s, self.store.queue_offsets(topic, q)[1], now) for q, s in states)),
            )
            for (group, topic), states in self._per_group_topic().items()
        ]

    def _lag(self) -> list[tuple[dict[str, str], float]]:
        return self._per_state(lambda s, end, now: s.lag(end))

    def _inflight(self) -> list[tuple[dict[str, str], float]]:
        return self._per_state(lambda s, end, now: s.inflight_count(now))

    def _ready(self) -> list[tuple[dict[str, str], float]]:
        return self._per_state(lambda s, end, now: s.ready(end, now))

    def _lag_latency(self) -> list[tuple[dict[str, str], float]]:
        now = time.time()
        out = []
        for (group, topic), states in self._per_group_topic().items():
            oldest = 0.0
            for qid, state in states:
                cq = self.store.queues.get(topic, qid)
                entry = None if cq is None else cq.get(state.committed)
                if entry is not None and entry.physical_offset >= self.store.commitlog.min_offset:
                    msg = self.store.read_message(
                        entry.physical_offset, entry.size, count_cache=False
                    )
                    oldest = max(oldest, now - msg.store_timestamp / 1000)
            out.append(({"topic": topic, "consumer_group": group}, oldest))
        return out
