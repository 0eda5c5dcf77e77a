"""The packed messages and receipts of ``ConsumeService`` (consume.proto), as plain bytes.

One ReceiveBatch reply carries every delivered message in one ``bytes`` field: per
message a fixed header, then its properties (RocketMQ's encoding: name \\x01 value
\\x02, the commit log's own) and its body. Both sides walk it with one
``struct.unpack_from`` per message and slices — no protobuf message, no per-message
frame (DESIGN §9). Layout, big-endian::

     0  u8   receipt version (RECEIPT_VERSION)  ┐
     1  u32  queue id                           │ the receipt: what AckBatch sends
     5  u64  queue offset                       │ back, 37 bytes, the same fields
    13  u32  delivery attempt                   │ (and bytes) as the text receipt
    17  u64  nonce                              │ handle of MessagingService
    25  u64  invisibility deadline, ms          ┘
    33  ...  (end of the receipt at 37)
    37  u64  born timestamp, ms
    45  u64  store timestamp, ms
    53  u32  queue id of the stored message     (as MessagingService's queue_id and
    57  u64  queue offset of the stored message  queue_offset: the record's own)
    65  u32  properties length
    69  u32  body length
    73  ...  properties, then body

The text receipt handle (for ChangeInvisibleDuration or an AckMessage to a broker
without ConsumeService) is base64url(receipt + topic + CRC32 of both), as the broker's
``messaging/receipt.py`` decodes it.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import Final, NamedTuple

RECEIPT: Final = struct.Struct(">BIQIQQ")
RECEIPT_VERSION: Final = 1
# A text handle that also names the broker group that delivered it (receipt.py).
GROUPED_TEXT_VERSION: Final = 2
HEADER: Final = struct.Struct(">BIQIQQQQIQII")
RECEIPT_SIZE: Final = RECEIPT.size  # 37
HEADER_SIZE: Final = HEADER.size  # 73

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"


class PackedMessage(NamedTuple):
    """One message of a packed batch, its properties still encoded."""

    receipt: bytes
    queue_id: int
    queue_offset: int
    attempt: int
    born_ms: int
    store_ms: int
    properties: bytes
    body: bytes


class MalformedBatch(ValueError):
    def __init__(self, what: str, position: int) -> None:
        super().__init__(f"packed batch is malformed at byte {position}: {what}")
        self.position = position


def pack_message(
    out: list[bytes],
    queue_id: int,
    queue_offset: int,
    attempt: int,
    nonce: int,
    deadline_ms: int,
    born_ms: int,
    store_ms: int,
    properties: bytes,
    body: bytes,
    message_queue_id: int | None = None,
    message_queue_offset: int | None = None,
) -> None:
    """Append one message's parts to ``out`` (joined once per batch by the caller);
    the stored message's queue id and offset are the receipt's unless given."""
    out.append(
        HEADER.pack(
            RECEIPT_VERSION,
            queue_id,
            queue_offset,
            attempt,
            nonce,
            deadline_ms,
            born_ms,
            store_ms,
            queue_id if message_queue_id is None else message_queue_id,
            queue_offset if message_queue_offset is None else message_queue_offset,
            len(properties),
            len(body),
        )
    )
    out.append(properties)
    out.append(body)


def unpack_messages(records: bytes, count: int) -> Iterator[PackedMessage]:
    """The ``count`` messages of ``records``; raises MalformedBatch on a short or
    overlong buffer."""
    view = memoryview(records)
    pos = 0
    end = len(records)
    unpack = HEADER.unpack_from
    for _ in range(count):
        if pos + HEADER_SIZE > end:
            raise MalformedBatch("truncated header", pos)
        _v, _rq, _ro, attempt, _nonce, _deadline, born, store, qid, qoff, plen, blen = unpack(
            view, pos
        )
        props_at = pos + HEADER_SIZE
        body_at = props_at + plen
        nxt = body_at + blen
        if nxt > end:
            raise MalformedBatch("truncated message", pos)
        yield PackedMessage(
            records[pos : pos + RECEIPT_SIZE],
            qid,
            qoff,
            attempt,
            born,
            store,
            records[props_at:body_at],
            records[body_at:nxt],
        )
        pos = nxt
    if pos != end:
        raise MalformedBatch(f"{end - pos} bytes after the last message", pos)


def encode_properties(properties: dict[str, str]) -> bytes:
    """RocketMQ's property encoding, unchecked: properties of a stored message had
    their separators checked when they were stored (store/record.py)."""
    return "".join([f"{k}\x01{v}\x02" for k, v in properties.items()]).encode()


def decode_properties(raw: bytes) -> dict[str, str]:
    result: dict[str, str] = {}
    if raw:
        for item in raw.decode().split(PROPERTY_SEPARATOR):
            if item:
                name, _, value = item.partition(NAME_VALUE_SEPARATOR)
                result[name] = value
    return result


def receipt_text(receipt: bytes, topic: str) -> str:
    """The text receipt handle of a packed receipt (MessagingService's form)."""
    body = receipt + topic.encode()
    crc = zlib.crc32(body).to_bytes(4, "big")
    return base64.urlsafe_b64encode(body + crc).decode().rstrip("=")


def receipt_of_text(text: str) -> bytes:
    """The packed receipt inside a text receipt handle (its first 37 bytes); the
    broker checks it (an unusable one is answered INVALID_RECEIPT_HANDLE). A handle
    that also names its broker group (version 2) packs as version 1: a packed receipt
    is acknowledged at the group that delivered it, so it needs no group."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raw = b""
    receipt = raw[:RECEIPT_SIZE].ljust(RECEIPT_SIZE, b"\0")
    if receipt[0] == GROUPED_TEXT_VERSION:
        receipt = bytes((RECEIPT_VERSION,)) + receipt[1:]
    return receipt


def pack_receipts(receipts: Iterable[bytes]) -> bytes:
    return b"".join(receipts)
