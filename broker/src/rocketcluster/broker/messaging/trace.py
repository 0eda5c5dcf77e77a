"""Server-side message traces: what happened to one message, kept in the cluster.

The broker records an *event* for each step of a traced message's life — ``sent``,
``stored``, ``replicated``, ``delivered``, ``acked``, ``expired``, ``dead-lettered``,
``resent`` — as one record of the system topic ``RMQ_SYS_TRACE_DATA`` (queue 0) whose
key is the traced message's id, so the key index finds a message's events
(``read_trace``), replication copies them to the slaves and retention trims them.

Recording stays off the hot paths: ``TraceRecorder.record`` appends a small tuple to a
bounded buffer (full: the event is dropped and counted); ``run`` encodes the buffer as
compact JSON and appends it through the store's normal put path, in batches, about
every ``FLUSH_INTERVAL_S`` — never waiting for replication (``write`` of
MessagingRuntime). Which messages are traced is the topic's ``trace`` (api/topics.py):
``all``, ``off``, or ``sampled``: a message id whose CRC-32 is a multiple of the
broker's ``traceSampleEvery``, so every event of a sampled message is recorded (on
every broker that sees it) or none. The broker's own topics (``RMQ_SYS_*``) and a
group's ``%RETRY%``/``%DLQ%`` topics are never traced as topics: a move to the DLQ is
an event of the original message.

An event's body (``time`` in epoch ms; ``broker`` the broker's name, ``group`` its
broker group; the rest per type, see ``TraceRecorder``)::

    {"type":"delivered","time":1767225600123,"broker":"g0-0","group":"g0",
     "messageId":"01AB…","topic":"orders","consumerGroup":"billing","clientId":"…",
     "attempt":1,"invisibleUntil":1767225630123,"queueId":2,"queueOffset":17}
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from rocketcluster.api.names import DLQ_PREFIX, RETRY_PREFIX, SYSTEM_TOPIC_PREFIX
from rocketcluster.api.topics import TopicSpec, TraceMode
from rocketcluster.broker.store import MessageToStore, PutResult, StoredMessage
from rocketcluster.broker.store.record import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
    encode_properties,
)

log = logging.getLogger(__name__)

TRACE_TOPIC: Final = f"{SYSTEM_TOPIC_PREFIX}TRACE_DATA"
TRACE_QUEUE: Final = 0
FLUSH_INTERVAL_S: Final = 0.05  # events of ~50 ms share one append
DEFAULT_CAPACITY: Final = 16_384  # events buffered at most (~3 MB); more are dropped
MAX_BATCH: Final = 1024  # events per append
# Traced deliveries remembered until their ack (an ack names queue and offset, not the
# message): beyond this many the oldest are forgotten, and their acks go unrecorded.
MAX_INFLIGHT: Final = 65_536
EVENT_TYPES: Final = (
    "sent",
    "stored",
    "replicated",
    "delivered",
    "acked",
    "expired",
    "dead-lettered",
    "resent",
)
_NOT_TRACED: Final = (SYSTEM_TOPIC_PREFIX, DLQ_PREFIX, RETRY_PREFIX)
_ID_MARK: Final = f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}".encode()
_END: Final = PROPERTY_SEPARATOR.encode()

# (type, time ms, traced message id, the type's fields)
Event = tuple[str, int, str, dict[str, Any]]
Write = Callable[[Sequence[MessageToStore]], Awaitable[PutResult]]
InflightKey = tuple[str, str, int, int]  # consumer group, topic, queue id, queue offset


def now_ms() -> int:
    return int(time.time() * 1000)


def sampled(message_id: str, every: int) -> bool:
    """Whether a ``sampled`` topic traces ``message_id``: a stable hash (CRC-32), so
    every broker and every event of the message decide alike."""
    return every <= 1 or zlib.crc32(message_id.encode()) % every == 0


def message_id_of(msg: StoredMessage) -> str:
    """The message's id without decoding all its properties when they are not yet
    (a receive through ConsumeService passes them on encoded)."""
    if msg._properties is not None:
        return msg.msg_id
    raw = msg.raw_properties
    at = raw.find(_ID_MARK)
    if at < 0:
        return ""
    if at > 0 and raw[at - 1 : at] != _END:  # inside another property's value
        return msg.msg_id
    start = at + len(_ID_MARK)
    end = raw.find(_END, start)
    return raw[start : end if end >= 0 else len(raw)].decode(errors="replace")


class TraceRecorder:
    """Buffers trace events (on the event loop) and appends them in batches.

    ``topic_spec`` answers a topic's spec (the registry); ``identity`` the broker's
    name and broker group, read when a batch is encoded; ``replication`` what a
    stored message still needs: None (standalone), or the mode ("sync"/"async") and
    the SyncStateSet ids (set by MessagingRuntime.attach_role)."""

    def __init__(
        self,
        topic_spec: Callable[[str], TopicSpec | None],
        identity: Callable[[], tuple[str, str]],
        *,
        sample_every: int = 100,
        capacity: int = DEFAULT_CAPACITY,
        interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._topic_spec = topic_spec
        self._identity = identity
        self.sample_every = sample_every
        self.capacity = capacity
        self.interval_s = interval_s
        self.replication: Callable[[], tuple[str, list[int]] | None] = lambda: None
        self._events: list[Event] = []
        self._ready = asyncio.Event()
        self._inflight: dict[InflightKey, str] = {}
        self.recorded: dict[str, int] = dict.fromkeys(EVENT_TYPES, 0)
        self.dropped: dict[str, int] = {"full": 0, "unstored": 0}
        self.written = 0

    # -- which messages ----------------------------------------------------------

    def topic_mode(self, topic: str) -> TraceMode | None:
        """The topic's trace mode; None when none of its messages is traced."""
        if topic.startswith(_NOT_TRACED):
            return None
        spec = self._topic_spec(topic)
        if spec is None or spec.trace is TraceMode.OFF:
            return None
        return spec.trace

    def wants(self, topic: str, message_id: str, mode: TraceMode | None = None) -> bool:
        """Whether the message ``message_id`` of ``topic`` is traced (``mode``: the
        topic's, when the caller has it already)."""
        if mode is None:
            mode = self.topic_mode(topic)
            if mode is None:
                return False
        if not message_id or " " in message_id:  # keys are stored space-separated
            return False
        return mode is TraceMode.ALL or sampled(message_id, self.sample_every)

    # -- events ------------------------------------------------------------------

    def record(self, kind: str, message_id: str, fields: dict[str, Any], at: int = 0) -> None:
        """Buffer one event of a traced message (dropped, and counted, when full)."""
        events = self._events
        if len(events) >= self.capacity:
            self.dropped["full"] += 1
            return
        events.append((kind, at or now_ms(), message_id, fields))
        self.recorded[kind] += 1
        if not self._ready.is_set():
            self._ready.set()

    def sent(
        self,
        message_id: str,
        topic: str,
        *,
        client_id: str,
        client_address: str,
        born_timestamp: int,
        at: int,
    ) -> None:
        """A producer's SendMessage reached this broker (``at``: when)."""
        self.record(
            "sent",
            message_id,
            {
                "topic": topic,
                "clientId": client_id,
                "clientAddress": client_address,
                "bornTimestamp": born_timestamp,
            },
            at,
        )

    def stored(
        self,
        message_id: str,
        topic: str,
        *,
        stored_topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
    ) -> None:
        """The message is in this broker's commit log. ``replication`` says what comes
        next: "sync" (a ``replicated`` event follows once the in-sync replicas hold
        it), "async" (slaves copy it without the send waiting: no event), "none"
        (a standalone broker)."""
        info = self.replication()
        fields: dict[str, Any] = {
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": queue_offset,
            "commitLogOffset": physical_offset,
            "storeTimestamp": store_timestamp,
            "replication": info[0] if info is not None else "none",
        }
        if stored_topic != topic:  # a delay or transaction message waits there first
            fields["storedTopic"] = stored_topic
        self.record("stored", message_id, fields)

    def replicated(self, message_id: str, topic: str) -> None:
        """Sync replication: the send's wait for the in-sync replicas completed now."""
        info = self.replication()
        if info is None or info[0] != "sync":
            return
        self.record("replicated", message_id, {"topic": topic, "syncStateSet": info[1]})

    def delivered(
        self,
        message_id: str,
        key: InflightKey,
        *,
        attempt: int,
        invisible_until: int,
        client_id: str,
    ) -> None:
        """A POP receive delivered the message (``key``: group, topic, queue, offset)."""
        group, topic, queue_id, offset = key
        inflight = self._inflight
        inflight.pop(key, None)
        if len(inflight) >= MAX_INFLIGHT:
            del inflight[next(iter(inflight))]
        inflight[key] = message_id
        self.record(
            "delivered",
            message_id,
            {
                "topic": topic,
                "consumerGroup": group,
                "clientId": client_id,
                "attempt": attempt,
                "invisibleUntil": invisible_until,
                "queueId": queue_id,
                "queueOffset": offset,
            },
        )

    def acked(self, key: InflightKey) -> None:
        """An ack of the delivery at ``key``; recorded when that delivery was traced
        (an ack carries no message id: the delivery's is remembered)."""
        message_id = self._inflight.pop(key, None)
        if message_id is not None:
            group, topic, queue_id, offset = key
            self.record(
                "acked",
                message_id,
                {
                    "topic": topic,
                    "consumerGroup": group,
                    "queueId": queue_id,
                    "queueOffset": offset,
                },
            )

    def expired(
        self, message_id: str, key: InflightKey, *, attempt: int, deadline: int | None
    ) -> None:
        """The delivery's invisibility ran out (``deadline``, the event's time) and
        the message waits for redelivery; None: it was made visible before that (its
        client went away, or a nack), now."""
        group, topic, queue_id, offset = key
        self.record(
            "expired",
            message_id,
            {
                "topic": topic,
                "consumerGroup": group,
                "attempt": attempt,
                "reason": "invisibility" if deadline is not None else "released",
                "queueId": queue_id,
                "queueOffset": offset,
            },
            deadline or 0,
        )

    def dead_lettered(self, message_id: str, key: InflightKey, *, dlq: str, attempts: int) -> None:
        group, topic, queue_id, offset = key
        self._inflight.pop(key, None)
        self.record(
            "dead-lettered",
            message_id,
            {
                "topic": topic,
                "consumerGroup": group,
                "dlqTopic": dlq,
                "attempts": attempts,
                "queueId": queue_id,
                "queueOffset": offset,
            },
        )

    def record_resent(
        self,
        message_id: str,
        *,
        topic: str,
        consumer_group: str,
        from_topic: str = "",
        new_message_id: str = "",
        by: str = "",
    ) -> bool:
        """A dead letter (or any message) sent again — the admin API's DLQ resend
        calls this. ``message_id`` is the original message's id (its trace), ``topic``
        where it was resent to, ``consumer_group`` the group it is for, ``from_topic``
        where it was read (the %DLQ% topic), ``new_message_id`` the copy's id when it
        differs, ``by`` who asked. Returns whether the event was recorded: only for a
        traced message (``topic``'s trace mode and the id's sample)."""
        if not self.wants(topic, message_id):
            return False
        fields: dict[str, Any] = {"topic": topic, "consumerGroup": consumer_group}
        if from_topic:
            fields["fromTopic"] = from_topic
        if new_message_id and new_message_id != message_id:
            fields["newMessageId"] = new_message_id
        if by:
            fields["by"] = by
        self.record("resent", message_id, fields)
        return True

    # -- writing -----------------------------------------------------------------

    def pending(self) -> int:
        return len(self._events)

    def take(self, limit: int = MAX_BATCH) -> list[MessageToStore]:
        """Up to ``limit`` buffered events as trace records (oldest first)."""
        events = self._events
        if not events:
            return []
        batch, self._events = events[:limit], events[limit:]
        broker, group = self._identity()
        return [_record(e, broker, group) for e in batch]

    async def flush(self, write: Write) -> int:
        """Append everything buffered now; returns how many events were stored."""
        stored = 0
        while self._events:
            records = self.take()
            try:
                result = await write(records)
            except Exception:
                log.exception("appending %d trace events failed", len(records))
                result = None
            if result is None or not result.ok:
                self.dropped["unstored"] += len(records)
                if result is not None:
                    log.debug("trace events not stored: %s", result.reason)
                continue
            stored += len(records)
        self.written += stored
        return stored

    async def run(self, write: Write) -> None:
        """Append buffered events until cancelled: after the first event of a quiet
        spell, wait ``interval_s`` so the events of that time share one append."""
        while True:
            await self._ready.wait()
            await asyncio.sleep(self.interval_s)
            self._ready.clear()
            try:
                await self.flush(write)
            except Exception:
                log.exception("trace writer failed; retrying")


def _record(event: Event, broker: str, group: str) -> MessageToStore:
    kind, at, message_id, fields = event
    body = {
        "type": kind,
        "time": at,
        "broker": broker,
        "group": group,
        "messageId": message_id,
        **fields,
    }
    return MessageToStore(
        TRACE_TOPIC,
        TRACE_QUEUE,
        json.dumps(body, separators=(",", ":")).encode(),
        encode_properties({PROPERTY_KEYS: message_id}),
        born_timestamp=at,
        keys=(message_id,),
    )


def decode_event(msg: StoredMessage) -> dict[str, Any] | None:
    """A trace record's event; None when the body is not one."""
    try:
        event = json.loads(msg.body)
    except ValueError:
        return None
    if not isinstance(event, dict) or "type" not in event or "time" not in event:
        return None
    return event


async def read_trace(
    lookup: Callable[[str], Awaitable[list[StoredMessage]]], message_id: str
) -> list[dict[str, Any]]:
    """The events this broker holds of ``message_id`` (``lookup``: trace records by
    key, local and tiered), by time; events of one time stay in the order they were
    stored."""
    found = await lookup(message_id)
    events = []
    for msg in found:
        event = decode_event(msg)
        if event is not None and event.get("messageId", message_id) == message_id:
            events.append((int(event["time"]), msg.physical_offset, event))
    events.sort(key=lambda e: (e[0], e[1]))
    return [e[2] for e in events]
