"""Check and summarize a run of commit-log records in one pass (replication).

A slave receives its master's commit log as raw bytes, a frame of many records at a
time, and must check every record (sizes, position, both CRCs) and find what dispatch
needs: queue, queue offset, tags code, message id, keys. ``scan_batch`` does that with
one header unpack and two native CRCs per record (zlib-ng's, see crc.py), reads the
topic only when it changes and the message id straight out of the property bytes, and
files the record into a ``DispatchBatch`` (columns, no per-record object). The body is
never decoded.

Anything unusual (a blank record, a bad field) goes to ``record.check_record``, which
says precisely what is wrong: the fast path only ever accepts what it would accept.
"""

from __future__ import annotations

from typing import Final

from rocketcluster.api.names import topic_name_problem
from rocketcluster.broker.store import record
from rocketcluster.broker.store.consumequeue import CQ_UNIT
from rocketcluster.broker.store.crc import crc32 as fast_crc32
from rocketcluster.broker.store.dispatch_batch import DispatchBatch, QueueRun
from rocketcluster.broker.store.errors import CorruptRecordError

_ID_MARKER: Final = (record.PROPERTY_UNIQ_KEY + record.NAME_VALUE_SEPARATOR).encode()
_KEYS_MARKER: Final = (record.PROPERTY_KEYS + record.NAME_VALUE_SEPARATOR).encode()
_SEP: Final = ord(record.PROPERTY_SEPARATOR)


def property_bytes(data: bytes, marker: bytes, start: int, end: int) -> bytes | None:
    """The value of the property ``marker`` names (``name`` + \\x01) in the encoded
    properties ``data[start:end]``, or None: a match counts only at the start of a
    property (``record.property_value`` on bytes; UTF-8 never puts \\x01 or \\x02
    inside a character)."""
    found = data.find(marker, start, end)
    while found > start and data[found - 1] != _SEP:
        found = data.find(marker, found + 1, end)
    if found < 0:
        return None
    value = found + len(marker)
    stop = data.find(b"\x02", value, end)
    return data[value : end if stop < 0 else stop]


def scan_batch(data: bytes, offset: int, segment_size: int) -> DispatchBatch:
    """Check every record in ``data`` (copied from commit-log ``offset``) and return
    them as a DispatchBatch.

    Raises CorruptRecordError when a record fails its checks or ``data`` ends inside
    one: replication sends whole records only.
    """
    batch = DispatchBatch()
    phys_col = batch.phys
    ends = batch.ends
    ids = batch.ids
    run_of = batch.run_of
    runs = batch.runs
    unpack = record.HEADER.unpack_from
    pack = CQ_UNIT.pack
    crc32 = fast_crc32
    view = memoryview(data)
    magic_ok = record.MESSAGE_MAGIC
    header_size = record.HEADER_SIZE
    min_blank = record.END_FILE_MIN_BLANK_LENGTH
    id_marker = _ID_MARKER
    id_len = len(_ID_MARKER)
    n = len(data)
    pos = 0
    topic_raw = b""
    topic_len = -1  # no topic seen yet (b"" is a topic to reject)
    topic = ""
    by_queue: dict[int, QueueRun] = {}  # queue id -> its latest run, for the current topic
    queues_by_topic: dict[bytes, dict[int, QueueRun]] = {}
    k = 0
    seg_end = (offset // segment_size + 1) * segment_size - offset  # in data positions
    while pos < n:
        if n - pos >= header_size:
            (total, magic, rcrc, bcrc, qid, _f, qoff, phys, _b, _s, tags, tl, _r, pl, bl) = unpack(
                data, pos
            )
        else:
            magic = total = 0
        end = pos + total
        meta_end = pos + header_size + tl + pl if magic == magic_ok else 0
        if not (
            magic == magic_ok
            and header_size + tl + pl + bl == total
            and end + min_blank <= seg_end
            and end <= n
            and phys == offset + pos
            and crc32(view[pos + 12 : meta_end]) == rcrc
            and crc32(view[meta_end:end]) == bcrc
        ):
            pos = _not_a_plain_record(view, pos, offset, segment_size)
            seg_end = ((offset + pos) // segment_size + 1) * segment_size - offset
            continue
        t = pos + header_size
        if tl != topic_len or not data.startswith(topic_raw, t):
            topic_raw = data[t : t + tl]
            topic_len = tl
            topic = _checked_topic(topic_raw, offset + pos)
            by_queue = queues_by_topic.setdefault(topic_raw, {})
        ps = t + tl
        if data.startswith(id_marker, ps):
            stop = data.find(b"\x02", ps + id_len, meta_end)
            raw_id = data[ps + id_len : meta_end if stop < 0 else stop]
        else:
            raw_id = property_bytes(data, id_marker, ps, meta_end) or b""
        try:
            msg_id = raw_id.decode() if raw_id else ""
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(offset + pos, f"undecodable message id: {exc}") from exc
        run = by_queue.get(qid)
        if run is None or run.first_offset + len(run.units) != qoff:
            run = by_queue[qid] = QueueRun(topic, qid, qoff)
            run.number = len(runs)
            runs.append(run)
        run.units.append(pack(phys, total, tags))
        run.ids.append(msg_id)
        phys_col.append(phys)
        ends.append(phys + total)
        ids.append(msg_id)
        run_of.append(run.number)
        if data.find(_KEYS_MARKER, ps, meta_end) >= 0:
            keys = _keys(data, ps, meta_end, offset + pos)
            if keys:
                batch.keys[k] = keys
                batch.topic_of_keys[k] = topic
        k += 1
        pos = end
    return batch


def _not_a_plain_record(view: memoryview, pos: int, offset: int, segment_size: int) -> int:
    """The slow path: a blank record (returns the position after it) or a record that
    fails a check (raises with ``check_record``'s reason)."""
    absolute = offset + pos
    space_left = segment_size - absolute % segment_size
    check = record.check_record(view, pos, absolute, space_left)
    if check.kind == record.RecordKind.BLANK:
        if pos + check.size > len(view):
            raise CorruptRecordError(absolute, "blank record cut short")
        return pos + check.size
    if check.kind is None:
        raise CorruptRecordError(absolute, check.reason)
    raise AssertionError(f"record at {absolute} passes check_record but not the scan")


def _checked_topic(raw: bytes, absolute: int) -> str:
    try:
        topic = raw.decode()
    except UnicodeDecodeError as exc:  # CRC-valid, yet not text where text belongs
        raise CorruptRecordError(absolute, f"undecodable record: {exc}") from exc
    problem = topic_name_problem(topic)
    if problem:
        raise CorruptRecordError(absolute, f"topic {topic[:200]!r}: {problem}")
    return topic


def _keys(data: bytes, start: int, end: int, absolute: int) -> tuple[str, ...]:
    raw = property_bytes(data, _KEYS_MARKER, start, end)
    if not raw:
        return ()
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(absolute, f"undecodable keys: {exc}") from exc
    return tuple(k for k in text.split(record.KEY_SEPARATOR) if k)
