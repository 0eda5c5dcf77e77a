"""Conversions between the v2 protocol's Message and the store's records."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import NamedTuple

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.broker.messaging import properties as prop
from rocketcluster.broker.messaging.codes import Code, MessagingError
from rocketcluster.broker.store.record import (
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    MessageToStore,
    StoredMessage,
    SysFlag,
    encode_properties,
)


class SentFields(NamedTuple):
    """What SendService read from a message while validating it."""

    message_id: str
    body: bytes
    tag: str
    keys: Sequence[str]
    message_group: str


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


_SEP = NAME_VALUE_SEPARATOR
_END = PROPERTY_SEPARATOR
_TYPE_TEXT: dict[int, str] = {t: str(t) for t in _TYPE_FLAGS}


def record_of(
    msg: pb.Message,
    sp: pb.SystemProperties,
    topic: str,
    queue_id: int,
    message_type: int,
    fields: SentFields,
    extra: dict[str, str] | None = None,
) -> MessageToStore:
    """The record stored for ``msg`` (already validated; ``fields`` are the values the
    validation read, so no protobuf field is read twice: each read builds a Python
    object, and this runs for every message of every SendMessage).

    The property text is built directly, in the order a property map would have
    (user properties, then the system ones, then ``extra``): every name is distinct
    (users cannot use reserved names), so this is what ``encode_properties`` of that
    map gives. The separator count check stands in for its per-value check."""
    message_id, body, tag, keys, group = fields
    user = msg.user_properties
    text = "".join([f"{k}{_SEP}{v}{_END}" for k, v in user.items()]) if user else ""
    text += f"{prop.MESSAGE_ID}{_SEP}{message_id}{_END}"
    count = (len(user) if user else 0) + 2
    if tag:
        text += f"{prop.TAGS}{_SEP}{tag}{_END}"
        count += 1
    if keys:
        text += f"{prop.KEYS}{_SEP}{KEY_SEPARATOR.join(keys)}{_END}"
        count += 1
    if group:
        text += f"{prop.MESSAGE_GROUP}{_SEP}{group}{_END}"
        count += 1
    born_host = sp.born_host
    if born_host:
        text += f"{prop.BORN_HOST}{_SEP}{born_host}{_END}"
        count += 1
    trace = sp.trace_context
    if trace:
        text += f"{prop.TRACE_CONTEXT}{_SEP}{trace}{_END}"
        count += 1
    text += f"{prop.MESSAGE_TYPE}{_SEP}{_TYPE_TEXT.get(message_type) or message_type}{_END}"
    if extra:
        text += "".join([f"{k}{_SEP}{v}{_END}" for k, v in extra.items()])
        count += len(extra)
    if text.count(_SEP) != count or text.count(_END) != count:
        raise MessagingError(
            Code.BAD_REQUEST,
            "a property name or value (born host, trace context …) holds NUL, \\x01 or "
            "\\x02, which cannot be stored",
        )
    born = sp.born_timestamp  # unset: 0 s, 0 ns
    return MessageToStore(
        topic,
        queue_id,
        body,
        text.encode(),
        zlib.crc32(tag.encode()) if tag else 0,
        _TYPE_FLAGS.get(message_type, 0),
        born.seconds * 1000 + born.nanos // 1_000_000,
        tuple([k for k in keys if k]) if keys else (),
        message_id,
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
