"""What LeanClient.receive returns: a received message as plain values, and the
results of LeanClient.ack.

A LeanMessage is built straight from a packed batch (batch_codec.py) — a few slices,
no protobuf — and decodes its properties only when one is read. It answers the names
of the official ``apache.rocketmq.v2.Message`` that our tools read
(``msg.body``, ``msg.system_properties.message_id`` / ``queue_offset`` / ``receipt_handle``
…), so code written against either reads the same.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from rocketmq.grpc_protocol import definition_pb2 as pb

from rocketcluster.api.client.batch_codec import (
    decode_properties,
    encode_properties,
    receipt_of_text,
    receipt_text,
)

# The broker's system property names (broker/messaging/properties.py RESERVED; a test
# keeps the two equal): everything else in a message's properties is the user's.
TAGS: Final = "TAGS"
KEYS: Final = "KEYS"
MESSAGE_ID: Final = "UNIQ_KEY"
MESSAGE_GROUP: Final = "__SHARDINGKEY"
KEY_SEPARATOR: Final = " "
SYSTEM_PROPERTIES: Final = frozenset(
    {
        TAGS,
        KEYS,
        MESSAGE_ID,
        MESSAGE_GROUP,
        "__BORNHOST",
        "__STARTDELIVERTIME",
        "__TRACE",
        "REAL_TOPIC",
        "REAL_QID",
        "__TRANSACTIONID",
        "__PRODUCER",
        "__ORIGIN_TOPIC",
        "__ORIGIN_GROUP",
        "__DLQ_ATTEMPTS",
        "__MSGTYPE",
        "__RESEND_GROUP",
    }
)


class AckStatus(NamedTuple):
    code: int
    message: str


class AckEntry:
    """The result of acknowledging one message (``status.code`` 20000 is OK); the
    message id is read from the message only when asked for."""

    __slots__ = ("_source", "status")

    def __init__(self, source: LeanMessage | str, status: AckStatus) -> None:
        self._source = source
        self.status = status

    @property
    def message_id(self) -> str:
        source = self._source
        return source if isinstance(source, str) else source.message_id

    def __repr__(self) -> str:
        return f"AckEntry({self.message_id!r}, {self.status})"


ACK_OK: Final = AckStatus(pb.Code.OK, "OK")


class LeanMessage:
    """One delivered message. ``receipt`` is the packed receipt AckBatch takes."""

    __slots__ = (
        "_handle",
        "_properties",
        "_raw_properties",
        "body",
        "born_timestamp_ms",
        "delivery_attempt",
        "queue_id",
        "queue_offset",
        "receipt",
        "store_timestamp_ms",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        receipt: bytes,
        queue_id: int,
        queue_offset: int,
        delivery_attempt: int,
        born_timestamp_ms: int,
        store_timestamp_ms: int,
        raw_properties: bytes,
        body: bytes,
    ) -> None:
        self.topic = topic
        self.receipt = receipt
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.delivery_attempt = delivery_attempt
        self.born_timestamp_ms = born_timestamp_ms
        self.store_timestamp_ms = store_timestamp_ms
        self._raw_properties = raw_properties
        self.body = body
        self._properties: dict[str, str] | None = None
        self._handle: str | None = None

    @classmethod
    def from_pb(cls, message: pb.Message) -> LeanMessage:
        """From MessagingService's ReceiveMessage (a broker without ConsumeService)."""
        sp = message.system_properties
        props = dict(message.user_properties)
        props[MESSAGE_ID] = sp.message_id
        if sp.tag:
            props[TAGS] = sp.tag
        if sp.keys:
            props[KEYS] = KEY_SEPARATOR.join(sp.keys)
        if sp.message_group:
            props[MESSAGE_GROUP] = sp.message_group
        out = cls(
            message.topic.name,
            receipt_of_text(sp.receipt_handle),
            sp.queue_id,
            sp.queue_offset,
            sp.delivery_attempt,
            sp.born_timestamp.ToMilliseconds(),
            sp.store_timestamp.ToMilliseconds(),
            encode_properties(props),
            message.body,
        )
        out._properties = props
        out._handle = sp.receipt_handle
        return out

    @property
    def system_properties(self) -> LeanMessage:
        """The message itself: it carries the system properties' names directly."""
        return self

    @property
    def properties(self) -> dict[str, str]:
        """All properties, system ones included (decoded on first use)."""
        if self._properties is None:
            self._properties = decode_properties(self._raw_properties)
        return self._properties

    @property
    def user_properties(self) -> dict[str, str]:
        return {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTIES}

    @property
    def message_id(self) -> str:
        return self.properties.get(MESSAGE_ID, "")

    @property
    def tag(self) -> str:
        return self.properties.get(TAGS, "")

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def message_group(self) -> str:
        return self.properties.get(MESSAGE_GROUP, "")

    @property
    def receipt_handle(self) -> str:
        """The text receipt handle MessagingService takes (ChangeInvisibleDuration,
        AckMessage)."""
        if self._handle is None:
            self._handle = receipt_text(self.receipt, self.topic)
        return self._handle

    def __repr__(self) -> str:
        return (
            f"LeanMessage({self.topic!r}, queue {self.queue_id} @ {self.queue_offset}, "
            f"attempt {self.delivery_attempt}, {len(self.body)} bytes)"
        )
