"""Receipt handles: opaque to clients, self-describing and checked by the broker.

A handle names one delivery of one message: the broker group that delivered it, topic,
queue, queue offset, delivery attempt and a nonce that differs per delivery, plus a
CRC so a garbled handle is rejected as INVALID_RECEIPT_HANDLE instead of
acknowledging the wrong message.

The broker group is there because a receive can be answered from another group of
the cluster (cross_group.py): the client then acknowledges at the group it asked, and
that group passes the ack on to the one the handle names. Version 1 handles (no
group, minted before) still decode; they belong to whichever broker reads them.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Final, NamedTuple

_BODY: Final = struct.Struct(">BIQIQQ")  # version, queue id, offset, attempt, nonce, deadline
VERSION: Final = 1  # body + topic
GROUPED: Final = 2  # body + u8 group length + group + topic
MAX_GROUP_BYTES: Final = 255


class ReceiptHandle(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    attempt: int
    nonce: int
    deadline_ms: int
    group: str = ""  # the broker group that delivered it; "" in a version 1 handle

    def encode(self) -> str:
        topic = self.topic.encode()
        fields = (self.queue_id, self.queue_offset, self.attempt, self.nonce, self.deadline_ms)
        if self.group:
            group = self.group.encode()
            if len(group) > MAX_GROUP_BYTES:
                raise ValueError(f"broker group name longer than {MAX_GROUP_BYTES} bytes")
            body = _BODY.pack(GROUPED, *fields) + bytes((len(group),)) + group + topic
        else:
            body = _BODY.pack(VERSION, *fields) + topic
        crc = zlib.crc32(body).to_bytes(4, "big")
        return base64.urlsafe_b64encode(body + crc).decode().rstrip("=")


class InvalidReceiptHandle(ValueError):
    pass


def decode_handle(text: str) -> ReceiptHandle:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise InvalidReceiptHandle("receipt handle is not base64") from exc
    if len(raw) < _BODY.size + 4:
        raise InvalidReceiptHandle("receipt handle is too short")
    body, crc = raw[:-4], raw[-4:]
    if zlib.crc32(body).to_bytes(4, "big") != crc:
        raise InvalidReceiptHandle("receipt handle failed its checksum")
    version, qid, offset, attempt, nonce, deadline = _BODY.unpack_from(body)
    rest = body[_BODY.size :]
    group = b""
    if version == GROUPED:
        if not rest or len(rest) < 1 + rest[0]:
            raise InvalidReceiptHandle("receipt handle's broker group is cut short")
        group, rest = rest[1 : 1 + rest[0]], rest[1 + rest[0] :]
    elif version != VERSION:
        raise InvalidReceiptHandle(f"receipt handle version {version} is unknown")
    try:
        return ReceiptHandle(rest.decode(), qid, offset, attempt, nonce, deadline, group.decode())
    except UnicodeDecodeError as exc:
        raise InvalidReceiptHandle("receipt handle topic or group is not UTF-8") from exc
