"""The tier's object format: one object holds a run of consecutive messages of one
topic/queue — queue offsets ``[start, end)`` — exactly as the commit log holds them.

Layout: ``MAGIC | u32 header length | header (JSON) | records``. The records are the
commit log's own bytes, CRCs included, so a reader checks every one of them and a
corrupt object is found, never served. The header says what the object covers
(offsets, store times, commit-log positions) so the tier's catalogue can be rebuilt
from the objects alone after a failover or a lost disk: reading the first few KiB of
an object is enough.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Final

from rocketcluster.broker.store import record

MAGIC: Final = b"RCT1"
_LENGTH: Final = struct.Struct(">I")
PREFIX_SIZE: Final = len(MAGIC) + _LENGTH.size
# What a reader fetches first to learn an object's header (headers are a few hundred
# bytes; a longer one is fetched whole on a second read).
HEADER_PROBE_BYTES: Final = 4096
_ANY_SPACE: Final = 1 << 62  # records in an object never end a commit-log segment
# Of a record's header (record.HEADER): total size, magic, queue id, queue offset,
# commit-log offset, store time.
_SUMMARY: Final = struct.Struct(">II8xI4xQQ8xQ")


class SegmentFormatError(ValueError):
    """Bytes that are not a well-formed tier object (or not the one expected)."""


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    topic: str
    queue_id: int
    start: int  # first queue offset
    end: int  # one past the last queue offset
    records_bytes: int
    min_store_time: int  # ms since the epoch
    max_store_time: int
    min_physical: int  # commit-log offsets of the first and the last record
    max_physical: int
    writer: str = ""  # the broker that uploaded it (node id and master epoch)

    @property
    def count(self) -> int:
        return self.end - self.start

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> SegmentHeader:
        try:
            return cls(**data)  # type: ignore[arg-type]
        except TypeError as exc:
            raise SegmentFormatError(f"bad segment header: {exc}") from exc


def encode_segment(
    topic: str, queue_id: int, records: Sequence[bytes | memoryview], writer: str = ""
) -> tuple[SegmentHeader, bytes]:
    """One object from raw commit-log records of ``topic``/``queue_id`` with
    consecutive queue offsets (checked: a gap or a stranger is a bug upstream)."""
    if not records:
        raise ValueError("a segment holds at least one message")
    # What a segment must say of itself, and what proves the records are the ones
    # meant: one small unpack per record (this runs for every uploaded message).
    fields = [_SUMMARY.unpack_from(r, 0) for r in records]
    start = fields[0][3]
    offsets = [f[3] for f in fields]
    if offsets != list(range(start, start + len(records))):
        raise ValueError(f"queue offsets are not consecutive from {start}: {offsets[:8]}...")
    lengths = list(map(len, records))
    if [f[0] for f in fields] != lengths or {(f[1], f[2]) for f in fields} != {
        (record.MESSAGE_MAGIC, queue_id)
    }:
        raise ValueError(f"a record of another queue or a torn record from offset {start}")
    times = [f[5] for f in fields]
    header = SegmentHeader(
        topic=topic,
        queue_id=queue_id,
        start=start,
        end=start + len(records),
        records_bytes=sum(lengths),
        min_store_time=min(times),
        max_store_time=max(times),
        min_physical=fields[0][4],
        max_physical=fields[-1][4],
        writer=writer,
    )
    head = json.dumps(header.to_json(), separators=(",", ":")).encode()
    return header, b"".join([MAGIC, _LENGTH.pack(len(head)), head, *records])


def header_length(prefix: bytes) -> int:
    """Bytes an object's header takes (prefix included), from its first bytes."""
    if len(prefix) < PREFIX_SIZE or prefix[: len(MAGIC)] != MAGIC:
        raise SegmentFormatError("not a tier segment (bad magic)")
    (length,) = _LENGTH.unpack_from(prefix, len(MAGIC))
    return PREFIX_SIZE + int(length)


def decode_header(data: bytes) -> SegmentHeader:
    """The header of an object from its first bytes (at least :func:`header_length`)."""
    end = header_length(data)
    if len(data) < end:
        raise SegmentFormatError(f"header of {end} bytes, {len(data)} given")
    try:
        parsed = json.loads(data[PREFIX_SIZE:end])
    except ValueError as exc:
        raise SegmentFormatError(f"bad segment header: {exc}") from exc
    if not isinstance(parsed, dict):
        raise SegmentFormatError("bad segment header: not an object")
    return SegmentHeader.from_json(parsed)


def decode_segment(data: bytes) -> tuple[SegmentHeader, list[record.StoredMessage]]:
    """Every message of an object, each record's CRCs checked, and the header checked
    against what the records say."""
    header = decode_header(data)
    view = memoryview(data)
    pos = header_length(data)
    messages = []
    while pos < len(data):
        if len(data) - pos < record.HEADER_SIZE:
            raise SegmentFormatError(f"torn record at byte {pos}")
        physical = record.HEADER.unpack_from(view, pos)[7]
        check = record.check_record(view, pos, physical, _ANY_SPACE)
        if check.kind != record.RecordKind.MESSAGE:
            raise SegmentFormatError(f"record at byte {pos}: {check.reason or 'not a message'}")
        messages.append(record.decode(view, pos))
        pos += check.size
    expected = list(range(header.start, header.end))
    if [m.queue_offset for m in messages] != expected or any(
        m.topic != header.topic or m.queue_id != header.queue_id for m in messages
    ):
        raise SegmentFormatError(
            f"records disagree with the header ({header.topic}/{header.queue_id} "
            f"[{header.start}, {header.end}))"
        )
    return header, messages
