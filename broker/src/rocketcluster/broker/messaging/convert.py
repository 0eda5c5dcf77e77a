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

_TYPE_FLAGS = {
    pb.MessageType.NORMAL: SysFlag.NONE,
    pb.MessageType.FIFO: SysFlag.FIFO,
    pb.MessageType.DELAY: SysFlag.DELAY,
    pb.MessageType.TRANSACTION: SysFlag.TRANSACTION_PREPARED,
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
    props = dict(msg.user_properties)
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
    return MessageToStore(
        topic=topic,
        queue_id=queue_id,
        body=msg.body,
        properties=encode_properties(props),
        tags_code=tags_code(sp.tag or None),
        sys_flag=int(_TYPE_FLAGS.get(message_type, SysFlag.NONE)),
        born_timestamp=timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else 0,
        keys=tuple(k for k in sp.keys if k),
        msg_id=sp.message_id,
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


def _ts(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


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
) -> pb.Message:
    """A delivered message, with every system property the official clients read.

    Built with constructor keywords in one go: this runs for every delivered message.
    """
    props = stored.properties
    user = {k: v for k, v in props.items() if k not in prop.RESERVED}
    fields: dict[str, object] = {
        "message_id": stored.msg_id,
        "receipt_handle": receipt_handle,
        "delivery_attempt": attempt,
        "body_encoding": _IDENTITY,
        "body_digest": pb.Digest(type=_CRC32, checksum=f"{stored.body_crc:08X}"),
        "store_host": store_host,
        "queue_id": stored.queue_id,
        "queue_offset": stored.queue_offset,
        "message_type": message_type_of(stored),
        "store_timestamp": _ts(stored.store_timestamp),
        "born_timestamp": _ts(stored.born_timestamp),
        "invisible_duration": Duration(
            seconds=invisible_ms // 1000, nanos=(invisible_ms % 1000) * 1_000_000
        ),
    }
    born_host = props.get(prop.BORN_HOST)
    if born_host:
        fields["born_host"] = born_host
    tag = props.get(prop.TAGS)
    if tag:
        fields["tag"] = tag
    if stored.keys:
        fields["keys"] = stored.keys
    group = props.get(prop.MESSAGE_GROUP)
    if group:
        fields["message_group"] = group
    delivery = props.get(prop.DELIVERY_TIMESTAMP)
    if delivery and delivery.isdigit():
        fields["delivery_timestamp"] = _ts(int(delivery))
    trace = props.get(prop.TRACE_CONTEXT)
    if trace:
        fields["trace_context"] = trace
    return pb.Message(
        topic=pb.Resource(resource_namespace=namespace, name=stored.topic),
        user_properties=user,
        system_properties=pb.SystemProperties(**fields),
        body=stored.body,
    )
