"""SendService: validate messages, choose queues, store them.

Checks follow the Java proxy: body present and within the limit (the topic's, else
the broker's), message group shorter than 64 bytes, tag without ``|``, keys not blank,
no reserved property names, the message type accepted by the topic, the topic's
produce rate. Tags, keys, message groups, ids and property names never hold control
characters (nothing the store or an index could misread), keys no whitespace (they
are stored space-separated). A message's type is TRANSACTION > DELAY
(delivery timestamp set) > FIFO (message group set) > NORMAL. Delay messages wait in
the timer topic and transaction halves in the half topic; everything else goes to its
queue (FIFO: the message group's hash picks the queue, so a group stays in order).
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.names import CONTROL_CHARACTERS, KEY_FORBIDDEN
from rocketcluster.api.topics import MessageType, TopicSpec
from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code, MessagingError, put_code
from rocketcluster.broker.messaging.convert import SentFields, record_of, timestamp_ms
from rocketcluster.broker.messaging.quota import ProduceQuota
from rocketcluster.broker.messaging.recent import RecentIds
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.messaging.timers import encode_recall_handle
from rocketcluster.broker.messaging.trace import TraceRecorder, now_ms
from rocketcluster.broker.store import (
    AppendedRecord,
    MessageStore,
    MessageToStore,
    PutResult,
    PutStatus,
)

MAX_MESSAGE_GROUP_BYTES = 64
MAX_NAME_CHARS = 255  # tags, keys, property names
MAX_MESSAGE_ID_CHARS = 128
_SEPARATORS = re.compile(r"[\x00-\x02]")  # NUL and the property separators
MAX_PROPERTIES_BYTES = 16 * 1024
DELIVERY_MS_THRESHOLD = 100_000_000_000  # larger numbers in .seconds are milliseconds

TYPE_NORMAL = int(pb.MessageType.NORMAL)
TYPE_FIFO = int(pb.MessageType.FIFO)
TYPE_DELAY = int(pb.MessageType.DELAY)
TYPE_TRANSACTION = int(pb.MessageType.TRANSACTION)
_RETRY_SAFE = frozenset({TYPE_NORMAL, TYPE_FIFO})  # a retry may be answered with the first copy
_ACCEPTS = {
    MessageType.NORMAL: {TYPE_NORMAL},
    MessageType.FIFO: {TYPE_FIFO},
    MessageType.DELAY: {TYPE_DELAY},
    MessageType.TRANSACTION: {TYPE_TRANSACTION},
    MessageType.MIXED: {TYPE_NORMAL, TYPE_FIFO, TYPE_DELAY, TYPE_TRANSACTION},
}


_new_tuple = tuple.__new__


def _has_control(text: str) -> bool:
    """Whether ``text`` holds a control character. ``isprintable`` (C, no regex call)
    answers the common case: no printable character is a control character, so only
    text that is not all printable is searched."""
    return not text.isprintable() and CONTROL_CHARACTERS.search(text) is not None


def accepted_types(topic: TopicSpec) -> list[int]:
    return sorted(int(t) for t in _ACCEPTS[topic.message_type])


class ReplicationGate(Protocol):
    def refuse_write(self) -> str | None: ...

    async def wait_replicated(self, end_offset: int) -> PutStatus: ...


@dataclass(slots=True)
class SendOutcome:
    code: int
    message: str
    message_id: str = ""
    transaction_id: str = ""
    offset: int = 0
    recall_handle: str = ""
    # For the produce metrics, when stored: the topic the producer named, body bytes.
    topic: str = ""
    size: int = 0


@dataclass(slots=True)
class _Prepared:
    msg: pb.Message
    record: MessageToStore
    message_type: int
    topic: str  # as the producer named it (the record may go to a system topic)
    transaction_id: str = ""
    recall_handle: str = ""


class SendService:
    def __init__(
        self, store: MessageStore, registry: TopicRegistry, *, max_body: int, max_delay_s: int
    ) -> None:
        self._store = store
        self._registry = registry
        self._max_body = max_body
        self._max_delay_ms = max_delay_s * 1000
        self._round_robin = itertools.count()
        self.gate: ReplicationGate | None = None
        # Set while the catalogue write-disables this group (a drain): every send is
        # refused with FORBIDDEN, RocketMQ's NO_PERMISSION, which clients retry on
        # another queue; receives, acks and offsets go on.
        self.write_refusal: str | None = None
        self.recent = RecentIds()
        self.quota = ProduceQuota()
        # Server-side message traces (trace.py); None: nothing is traced.
        self.trace: TraceRecorder | None = None
        store.dispatcher.record_listeners.append(self.recent.record)

    async def send(
        self,
        messages: list[pb.Message],
        client_id: str,
        *,
        queue_id: int | None = None,
        peer: str = "",
    ) -> list[SendOutcome]:
        """Store ``messages`` (one batch per request); one outcome per message.
        ``queue_id``: the queue of every message instead of the one chosen for it (the
        admin API's test message). ``peer``: the client's address (traces)."""
        peers = {client_id: peer} if peer else None
        return await self._send([(m, client_id) for m in messages], queue_id, peers)

    async def send_requests(
        self,
        requests: Sequence[tuple[Sequence[pb.Message], str]],
        peers: dict[str, str] | None = None,
    ) -> list[list[SendOutcome]]:
        """Several requests' messages (each with its client id) stored as one batch —
        one append, one flush or replication wait — and their outcomes per request.
        A front process hands the store process many one-message requests at once:
        what each request would pay alone (a task, an append, a wait) is paid once.
        ``peers``: each client id's address (traces)."""
        outcomes = await self._send(
            [(m, client) for batch, client in requests for m in batch], None, peers
        )
        out, at = [], 0
        for batch, _ in requests:
            out.append(outcomes[at : at + len(batch)])
            at += len(batch)
        return out

    async def _send(
        self,
        messages: list[tuple[pb.Message, str]],
        queue_id: int | None = None,
        peers: dict[str, str] | None = None,
    ) -> list[SendOutcome]:
        refusal = self.write_refusal
        if refusal is not None:
            return [
                SendOutcome(Code.FORBIDDEN, refusal, m.system_properties.message_id)
                for m, _ in messages
            ]
        prepared: list[_Prepared | SendOutcome] = []
        good: list[_Prepared] = []
        recent = self.recent
        trace = self.trace
        arrived = now_ms() if trace is not None else 0
        traced: list[tuple[int, str]] = []  # (index in good, client id)
        for msg, client_id in messages:
            try:
                item = self._prepare(msg, client_id, queue_id)
            except MessagingError as exc:
                prepared.append(
                    SendOutcome(exc.code, exc.message, msg.system_properties.message_id)
                )
                continue
            record = item.record
            if item.message_type in _RETRY_SAFE:
                landed = recent.get(record.topic, record.msg_id)
                if landed is not None:  # a retry of a send that was stored already
                    recent.duplicates += 1
                    prepared.append(
                        SendOutcome(
                            Code.OK,
                            "OK (already stored)",
                            record.msg_id,
                            item.transaction_id,
                            landed.queue_offset,
                            item.recall_handle,
                            item.topic,
                            len(record.body),
                        )
                    )
                    continue
            prepared.append(item)
            good.append(item)
            if trace is not None and trace.wants(item.topic, record.msg_id):
                traced.append((len(good) - 1, client_id))
        if not good:  # every item is an outcome already
            return [p for p in prepared if isinstance(p, SendOutcome)]
        gate = self.gate
        refusal = gate.refuse_write() if gate is not None else None
        if refusal:
            return [
                p
                if isinstance(p, SendOutcome)
                else SendOutcome(Code.HA_NOT_AVAILABLE, refusal, p.record.msg_id)
                for p in prepared
            ]
        result = await self._store.put_batch([p.record for p in good])
        if traced and trace is not None and result.records:
            times = (arrived, result.store_timestamp)  # the time written in the records
            _trace_stored(trace, traced, good, result.records, peers or {}, times)
        if result.ok and gate is not None:
            last = result.records[-1]
            replicated = await gate.wait_replicated(last.physical_offset + last.size)
            if replicated is not PutStatus.PUT_OK:
                result = PutResult(replicated, result.records, f"replication: {replicated.value}")
            elif traced and trace is not None:
                for i, _ in traced:
                    trace.replicated(good[i].record.msg_id, good[i].topic)
        if not result.ok:
            code = put_code(result.status)
            return [
                p
                if isinstance(p, SendOutcome)
                else SendOutcome(code, result.reason, p.record.msg_id)
                for p in prepared
            ]
        stored = iter(result.records)
        outcomes: list[SendOutcome] = []
        for p in prepared:
            if isinstance(p, SendOutcome):
                outcomes.append(p)
                continue
            record = p.record
            outcomes.append(
                SendOutcome(
                    Code.OK,
                    "OK",
                    record.msg_id,
                    p.transaction_id,
                    next(stored).queue_offset,
                    p.recall_handle,
                    p.topic,
                    len(record.body),
                )
            )
        return outcomes

    def _prepare(
        self, msg: pb.Message, client_id: str, chosen_queue: int | None = None
    ) -> _Prepared:
        # Every check is guarded by a cheap test of the common case, and every field is
        # read once (each read of a protobuf field builds a Python object): this runs
        # for each message of each SendMessage.
        topic = self._registry.require_topic(msg.topic.name)
        sp = msg.system_properties
        message_id = sp.message_id
        if not message_id:
            raise MessagingError(Code.ILLEGAL_MESSAGE_ID, "message_id is required")
        body = msg.body
        body_size = len(body)
        if not body_size:
            raise MessagingError(Code.MESSAGE_BODY_EMPTY, "message body is empty")
        max_body = self._max_body
        if topic.max_message_bytes is not None and topic.max_message_bytes < max_body:
            max_body = topic.max_message_bytes
        if body_size > max_body:
            raise MessagingError(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body of {body_size} bytes exceeds the limit of {max_body} "
                f"bytes for topic {topic.name!r}: split the message or store the payload "
                "elsewhere and send a reference",
            )
        if len(message_id) > MAX_MESSAGE_ID_CHARS or _has_control(message_id):
            raise MessagingError(
                Code.ILLEGAL_MESSAGE_ID,
                f"message_id must be at most {MAX_MESSAGE_ID_CHARS} printable characters",
            )
        tag = sp.tag
        if tag and (
            "|" in tag or not tag.strip() or len(tag) > MAX_NAME_CHARS or _has_control(tag)
        ):
            raise MessagingError(
                Code.ILLEGAL_MESSAGE_TAG,
                f"tag {tag[:MAX_NAME_CHARS]!r} is not allowed: not blank, no '|' or control "
                f"characters, at most {MAX_NAME_CHARS} characters",
            )
        keys = sp.keys
        if keys:
            self._check_keys(keys)
        group = sp.message_group
        if group and (len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES or _has_control(group)):
            raise MessagingError(
                Code.ILLEGAL_MESSAGE_GROUP,
                f"message group must be shorter than {MAX_MESSAGE_GROUP_BYTES} bytes, without "
                "control characters",
            )
        if msg.user_properties:
            self._check_user_properties(msg)
        # TRANSACTION > DELAY (delivery timestamp set) > FIFO (message group) > NORMAL
        if sp.message_type == TYPE_TRANSACTION:
            message_type = TYPE_TRANSACTION
        elif sp.HasField("delivery_timestamp"):
            message_type = TYPE_DELAY
        elif group:
            message_type = TYPE_FIFO
        else:
            message_type = TYPE_NORMAL
        if message_type not in _ACCEPTS[topic.message_type]:
            raise MessagingError(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"topic {topic.name!r} accepts {topic.message_type.value} messages, not "
                f"{pb.MessageType.Name(message_type)}",
            )
        if topic.max_produce_rate is not None:  # most topics have no limit
            self.quota.admit(topic)  # last: a refused message takes no token
        if chosen_queue is not None:
            if not 0 <= chosen_queue < topic.queues:
                raise MessagingError(
                    Code.BAD_REQUEST, f"topic {topic.name!r} has no queue {chosen_queue}"
                )
            queue_id = chosen_queue
        elif group:
            queue_id = self.queue_for(topic, group)
        else:
            queue_id = next(self._round_robin) % topic.queues
        # Built in C (NamedTuple's own __new__ is Python code): once per message.
        fields = _new_tuple(SentFields, (message_id, body, tag, keys, group))
        if message_type == TYPE_DELAY:
            return self._prepare_delay(msg, sp, topic, queue_id, fields)
        if message_type == TYPE_TRANSACTION:
            txn_id = secrets.token_hex(16).upper()
            extra = {
                prop.REAL_TOPIC: topic.name,
                prop.REAL_QUEUE_ID: str(queue_id),
                prop.TRANSACTION_ID: txn_id,
                prop.PRODUCER_CLIENT: client_id,
            }
            half = self._registry.ensure_system_topic(prop.HALF_TOPIC)
            record = record_of(msg, sp, half.name, 0, message_type, fields, extra)
            return _Prepared(msg, record, message_type, topic.name, transaction_id=txn_id)
        return _Prepared(
            msg,
            record_of(msg, sp, topic.name, queue_id, message_type, fields),
            message_type,
            topic.name,
        )

    @staticmethod
    def _check_keys(keys: Sequence[str]) -> None:
        """Keys are stored space-separated and indexed: each one a single word."""
        for key in keys:
            if not key.strip() or len(key) > MAX_NAME_CHARS or KEY_FORBIDDEN.search(key):
                raise MessagingError(
                    Code.ILLEGAL_MESSAGE_KEY,
                    f"message key {key[:MAX_NAME_CHARS]!r} is not allowed: not blank, no "
                    f"whitespace or control characters, at most {MAX_NAME_CHARS} characters",
                )

    @staticmethod
    def _check_user_properties(msg: pb.Message) -> None:
        reserved = sorted(k for k in msg.user_properties if k in prop.RESERVED)
        if reserved:
            raise MessagingError(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"reserved property names: {', '.join(reserved)}"
            )
        for key, value in msg.user_properties.items():
            if not key.strip() or len(key) > MAX_NAME_CHARS or CONTROL_CHARACTERS.search(key):
                raise MessagingError(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                    f"property name {key[:MAX_NAME_CHARS]!r} is not allowed: not blank, no "
                    f"control characters, at most {MAX_NAME_CHARS} characters",
                )
            if _SEPARATORS.search(value):
                raise MessagingError(
                    Code.BAD_REQUEST,
                    f"property {key!r}: its value holds NUL, \\x01 or \\x02, which cannot be "
                    "stored",
                )
        size = sum(len(k) + len(v) for k, v in msg.user_properties.items())
        if size > MAX_PROPERTIES_BYTES:
            raise MessagingError(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"user properties of {size} bytes exceed {MAX_PROPERTIES_BYTES}",
            )

    def _prepare_delay(
        self,
        msg: pb.Message,
        sp: pb.SystemProperties,
        topic: TopicSpec,
        queue_id: int,
        fields: SentFields,
    ) -> _Prepared:
        deliver_ms = delivery_ms(sp)
        now = int(time.time() * 1000)
        if deliver_ms - now > self._max_delay_ms:
            raise MessagingError(
                Code.ILLEGAL_DELIVERY_TIME,
                f"delivery time is more than {self._max_delay_ms // 1000} s away",
            )
        extra = {prop.DELIVERY_TIMESTAMP: str(deliver_ms)}
        if deliver_ms <= now:  # already due: deliver it right away
            record = record_of(msg, sp, topic.name, queue_id, TYPE_DELAY, fields, extra)
            return _Prepared(msg, record, TYPE_DELAY, topic.name)
        extra |= {prop.REAL_TOPIC: topic.name, prop.REAL_QUEUE_ID: str(queue_id)}
        timer = self._registry.ensure_system_topic(prop.TIMER_TOPIC)
        record = record_of(msg, sp, timer.name, 0, TYPE_DELAY, fields, extra)
        handle = encode_recall_handle(topic.name, fields.message_id, deliver_ms)
        return _Prepared(msg, record, TYPE_DELAY, topic.name, recall_handle=handle)

    def queue_for(self, topic: TopicSpec, message_group: str) -> int:
        """The queue of a message: its message group's hash (FIFO), else the next in
        turn (also for dead letters the admin API resends: dead_letters.py)."""
        if message_group:
            return zlib.crc32(message_group.encode()) % topic.queues
        return next(self._round_robin) % topic.queues


def _trace_stored(
    trace: TraceRecorder,
    traced: list[tuple[int, str]],
    good: list[_Prepared],
    appended: list[AppendedRecord],
    peers: dict[str, str],
    times: tuple[int, int],
) -> None:
    """The ``sent`` and ``stored`` events of a batch's traced messages (``times``:
    when the request arrived, when the batch was appended)."""
    arrived, put_at = times
    for i, client_id in traced:
        item, where = good[i], appended[i]
        record = item.record
        trace.sent(
            record.msg_id,
            item.topic,
            client_id=client_id,
            client_address=peers.get(client_id, ""),
            born_timestamp=record.born_timestamp,
            at=arrived,
        )
        trace.stored(
            record.msg_id,
            item.topic,
            stored_topic=record.topic,
            queue_id=record.queue_id,
            queue_offset=where.queue_offset,
            physical_offset=where.physical_offset,
            store_timestamp=put_at,
        )


def delivery_ms(sp: pb.SystemProperties) -> int:
    """The client writes the user's number into ``.seconds``: the official examples
    pass seconds, the client's own tests milliseconds; a huge value is milliseconds."""
    seconds = sp.delivery_timestamp.seconds
    if seconds > DELIVERY_MS_THRESHOLD:
        return int(seconds)
    return timestamp_ms(sp.delivery_timestamp)
