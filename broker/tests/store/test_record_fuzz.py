"""Fuzzing the commit-log record decoder: random bytes, mutated valid records and
CRC-valid records with hostile contents. A fixed number of derandomized examples, so
a run is bounded and reproducible. Only the documented outcomes: ``check_record``
answers (never raises) and accepts only records whose CRCs check; the replication
scanner raises only CorruptRecordError and never passes on a record it cannot
decode or whose topic is not a valid name."""

from __future__ import annotations

import contextlib
import struct
import zlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketcluster.api.names import topic_name_problem
from rocketcluster.broker.store import record
from rocketcluster.broker.store.errors import CorruptRecordError
from rocketcluster.broker.store.record import HEADER, HEADER_SIZE, MessageToStore, RecordKind
from rocketcluster.broker.store.replica import scan_records

FUZZ = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
SEGMENT = 1 << 20
BASE = 8192


def stream(bodies: list[bytes]) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Valid records one after another from BASE: the bytes and (position, record)."""
    out: list[tuple[int, bytes]] = []
    pos = BASE
    for i, body in enumerate(bodies):
        msg = MessageToStore.build("fuzz", i % 4, body, tag="t", keys=("k",), msg_id=f"ID{i}")
        data = record.encode(msg, queue_offset=i, physical_offset=pos, store_timestamp=1)
        out.append((pos, data))
        pos += len(data)
    return b"".join(d for _, d in out), out


def crcs_check(view: bytes, pos: int) -> bool:
    """The CRCs of the record at ``pos``, recomputed apart from the decoder."""
    fields = HEADER.unpack_from(view, pos)
    total, record_crc, body_crc, tl, pl = fields[0], fields[2], fields[3], fields[11], fields[13]
    meta_end = pos + HEADER_SIZE + tl + pl
    return bool(
        zlib.crc32(view[pos + 12 : meta_end]) == record_crc
        and zlib.crc32(view[meta_end : pos + total]) == body_crc
    )


@FUZZ
@given(data=st.binary(max_size=2048), pos=st.integers(0, 64), space=st.integers(0, 1 << 16))
def test_random_bytes_are_answered_never_raised(data: bytes, pos: int, space: int) -> None:
    check = record.check_record(data, pos, BASE + pos, space)
    assert check.kind in (None, RecordKind.MESSAGE, RecordKind.BLANK)
    if check.kind is RecordKind.MESSAGE:
        assert crcs_check(data, pos)
    elif check.kind is None:
        assert check.reason


@FUZZ
@given(
    bodies=st.lists(st.binary(min_size=1, max_size=300), min_size=1, max_size=5),
    edits=st.lists(
        st.tuples(st.integers(min_value=0), st.binary(min_size=1, max_size=8)),
        min_size=1,
        max_size=4,
    ),
    cut=st.integers(min_value=0),
)
def test_mutated_streams_are_rejected_or_unchanged(
    bodies: list[bytes], edits: list[tuple[int, bytes]], cut: int
) -> None:
    """Overwrite a few byte runs and cut the tail: the scanner passes on exactly the
    records still intact, and raises CorruptRecordError at the first that is not."""
    data, records = stream(bodies)
    mutated = bytearray(data)
    for where, patch in edits:
        at = where % len(mutated)
        mutated[at : at + len(patch)] = patch[: len(mutated) - at]
    mutated = mutated[: max(1, len(mutated) - cut % 64)]
    try:
        requests = scan_records(bytes(mutated), BASE, SEGMENT)
    except CorruptRecordError as exc:
        assert exc.reason
        return
    # Accepted: every record is one of the originals, byte for byte, in place.
    originals = dict(records)
    for req in requests:
        start = req.physical_offset - BASE
        assert originals[req.physical_offset] == bytes(mutated[start : start + req.size])


def hostile_record(topic: bytes, props: bytes, body: bytes, pos: int) -> bytes:
    """A record with these raw topic and properties bytes and CRCs that check: what a
    buggy or hostile writer could produce."""
    body_crc = zlib.crc32(body)
    total = HEADER_SIZE + len(topic) + len(props) + len(body)
    head = HEADER.pack(
        total, record.MESSAGE_MAGIC, 0, body_crc, 0, 0, 0, pos, 0, 0, 0, len(topic), 0,
        len(props), len(body),
    )  # fmt: skip
    covered = head[12:] + topic + props
    return head[:8] + struct.pack(">I", zlib.crc32(covered)) + covered + body


@FUZZ
@given(
    topic=st.one_of(
        st.binary(max_size=40),
        st.sampled_from([b"../etc", b"a/b", b"..", b"t\x00", b"\xff\xfe", b"ok\n", b""]),
    ),
    props=st.binary(max_size=60),
    body=st.binary(min_size=1, max_size=40),
)
def test_crc_valid_hostile_records_never_reach_dispatch(
    topic: bytes, props: bytes, body: bytes
) -> None:
    data = hostile_record(topic, props, body, BASE)
    assert record.check_record(data, 0, BASE, SEGMENT).kind is RecordKind.MESSAGE
    with contextlib.suppress(ValueError):  # decode's documented failure: bytes not text
        record.decode(data)
    try:
        [request] = scan_records(data, BASE, SEGMENT)
    except CorruptRecordError as exc:
        assert exc.reason
        return
    assert topic_name_problem(request.topic) is None
