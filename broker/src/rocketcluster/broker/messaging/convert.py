"""Conversions between the v2 protocol's Message and the store's records."""

from __future__ import annotations

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.store.record import (
    KEY_SEPARATOR,
    MessageToStore,
    StoredMessage,
    SysFlag,
    encode_properties,
    tags_code,
)

_TYPE_FLAGS: dict[int, int] = {
    pb.MessageType.NORMAL: int(SysFlag.NONE),
    pb.MessageType.FIFO: int(SysFlag.FIFO),
    pb.MessageType.DELAY: int(SysFlag.DELAY),
    pb.MessageType.TRANSACTION: int(SysFlag.TRANSACTION_PREPARED),
}


def timestamp_ms(ts: Timestamp) -> int:
    return int(ts.seconds) * 1000 + int(ts.nanos) // 1_000_000


def duration_ms(d: Duration) -> int:
    return int(d.seconds) * 1000 + int(d.nanos) // 1_000_000


def store_properties(
    msg: pb.Message, message_type: int, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The property map a stored record keeps for ``msg``."""
    sp = msg.system_properties
    user = msg.user_properties
    # dict() of a protobuf map goes through the generic Mapping protocol even when
    # the map is empty, which it usually is.
    props = dict(user) if user else {}
    props[prop.MESSAGE_ID] = sp.message_id
    if sp.tag:
        props[prop.TAGS] = sp.tag
    if sp.keys:
        props[prop.KEYS] = KEY_SEPARATOR.join(sp.keys)
    if sp.message_group:
        props[prop.MESSAGE_GROUP] = sp.message_group
    if sp.born_host:
        props[prop.BORN_HOST] = sp.born_host
    if sp.trace_context:
        props[prop.TRACE_CONTEXT] = sp.trace_context
    props[prop.MESSAGE_TYPE] = str(message_type)
    if extra:
        props.update(extra)
    return props


def to_store(
    msg: pb.Message,
    topic: str,
    queue_id: int,
    message_type: int,
    props: dict[str, str],
) -> MessageToStore:
    sp = msg.system_properties
    keys = sp.keys
    return MessageToStore(
        topic,
        queue_id,
        msg.body,
        encode_properties(props),
        tags_code(sp.tag),
        _TYPE_FLAGS.get(message_type, 0),
        timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0,
        tuple(k for k in keys if k) if keys else (),
        sp.message_id,
    )


def copy_to(
    stored: StoredMessage,
    topic: str,
    queue_id: int,
    drop: tuple[str, ...] = (),
    extra: dict[str, str] | None = None,
    sys_flag: int = 0,
) -> MessageToStore:
    """A stored message copied to another topic/queue (timers, transactions, DLQ)."""
    props = {k: v for k, v in stored.properties.items() if k not in drop}
    if extra:
        props.update(extra)
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        body=stored.body,
        properties=encode_properties(props),
        tags_code=stored.tags_code,
        sys_flag=sys_flag,
        born_timestamp=stored.born_timestamp,
        keys=stored.keys,
        msg_id=stored.msg_id,
    )


_FIFO = int(pb.MessageType.FIFO)
_NORMAL = int(pb.MessageType.NORMAL)


def message_type_of(stored: StoredMessage) -> int:
    raw = stored.properties.get(prop.MESSAGE_TYPE)
    if raw and raw.isdigit():
        return int(raw)
    if stored.sys_flag & SysFlag.FIFO:
        return _FIFO
    return _NORMAL


def _set_ts(ts: Timestamp, ms: int) -> None:
    ts.seconds = ms // 1000
    ts.nanos = (ms % 1000) * 1_000_000


_IDENTITY = int(pb.Encoding.IDENTITY)
_CRC32 = int(pb.DigestType.CRC32)


def to_pb(
    stored: StoredMessage,
    *,
    namespace: str,
    receipt_handle: str,
    attempt: int,
    store_host: str,
    invisible_ms: int,
    into: pb.Message | None = None,
) -> pb.Message:
    """A delivered message, with every system property the official clients read.

    Fills ``into`` (e.g. the ``message`` field of a ReceiveMessageResponse, so nothing
    is copied afterwards) or a new Message. Fields are set one by one: with upb that
    costs about a third of building nested messages from constructor keywords, and
    this runs for every delivered message.
    """
    message = pb.Message() if into is None else into
    props = stored.properties
    message.topic.name = stored.topic
    if namespace:
        message.topic.resource_namespace = namespace
    user = message.user_properties
    for key, value in props.items():
        if key not in prop.RESERVED:
            user[key] = value
    sp = message.system_properties
    sp.message_id = stored.msg_id
    sp.receipt_handle = receipt_handle
    sp.delivery_attempt = attempt
    sp.body_encoding = _IDENTITY
    digest = sp.body_digest
    digest.type = _CRC32
    digest.checksum = f"{stored.body_crc:08X}"
    sp.store_host = store_host
    sp.queue_id = stored.queue_id
    sp.queue_offset = stored.queue_offset
    sp.message_type = message_type_of(stored)
    _set_ts(sp.store_timestamp, stored.store_timestamp)
    _set_ts(sp.born_timestamp, stored.born_timestamp)
    invisible = sp.invisible_duration
    invisible.seconds = invisible_ms // 1000
    invisible.nanos = (invisible_ms % 1000) * 1_000_000
    born_host = props.get(prop.BORN_HOST)
    if born_host:
        sp.born_host = born_host
    tag = props.get(prop.TAGS)
    if tag:
        sp.tag = tag
    if stored.keys:
        sp.keys.extend(stored.keys)
    group = props.get(prop.MESSAGE_GROUP)
    if group:
        sp.message_group = group
    delivery = props.get(prop.DELIVERY_TIMESTAMP)
    if delivery and delivery.isdigit():
        _set_ts(sp.delivery_timestamp, int(delivery))
    trace = props.get(prop.TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    message.body = stored.body
    return message
