"""Receipt handles: opaque to clients, self-describing and checked by the broker.

A handle names one delivery of one message: topic, queue, queue offset, delivery
attempt and a nonce that differs per delivery, plus a CRC so a garbled handle is
rejected as INVALID_RECEIPT_HANDLE instead of acknowledging the wrong message.
"""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Final, NamedTuple

_BODY: Final = struct.Struct(">BIQIQQ")  # version, queue id, offset, attempt, nonce, deadline
VERSION: Final = 1


class ReceiptHandle(NamedTuple):
    topic: str
    queue_id: int
    queue_offset: int
    attempt: int
    nonce: int
    deadline_ms: int

    def encode(self) -> str:
        topic = self.topic.encode()
        body = (
            _BODY.pack(
                VERSION,
                self.queue_id,
                self.queue_offset,
                self.attempt,
                self.nonce,
                self.deadline_ms,
            )
            + topic
        )
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
    if version != VERSION:
        raise InvalidReceiptHandle(f"receipt handle version {version} is unknown")
    try:
        topic = body[_BODY.size :].decode()
    except UnicodeDecodeError as exc:
        raise InvalidReceiptHandle("receipt handle topic is not UTF-8") from exc
    return ReceiptHandle(topic, qid, offset, attempt, nonce, deadline)
