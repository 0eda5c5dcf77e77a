"""The tier's pure parts: the read policy, batching, the object format, the cache and
the catalogue's chains."""

from __future__ import annotations

import pytest

from rocketcluster.api.tiered_spec import TieredReadPolicy as P
from rocketcluster.broker.store import MessageToStore, record
from rocketcluster.broker.tiered.cache import SegmentCache
from rocketcluster.broker.tiered.catalog import QueueTier, parse_segment_name, segment_name
from rocketcluster.broker.tiered.policy import Batch, plan_batch, read_from_tier
from rocketcluster.broker.tiered.segment import (
    SegmentFormatError,
    SegmentHeader,
    decode_header,
    decode_segment,
    encode_segment,
)


@pytest.mark.parametrize(
    ("policy", "on_disk", "in_memory", "expected"),
    [
        (P.DISABLE, False, None, False),
        (P.NOT_IN_DISK, True, False, False),
        (P.NOT_IN_DISK, False, None, True),
        (P.NOT_IN_MEM, True, True, False),
        (P.NOT_IN_MEM, True, False, True),
        (P.NOT_IN_MEM, True, None, False),  # the filesystem cannot tell: the disk
        (P.NOT_IN_MEM, False, None, True),
        (P.FORCE, True, True, True),
    ],
)
def test_read_policy(policy: P, on_disk: bool, in_memory: bool | None, expected: bool) -> None:
    assert read_from_tier(policy, in_tier=True, on_disk=on_disk, in_memory=in_memory) is expected
    assert read_from_tier(policy, in_tier=False, on_disk=on_disk, in_memory=in_memory) is False


def test_batches_fill_by_size_wait_by_time_and_never_block_on_a_big_message() -> None:
    assert plan_batch([], batch_bytes=100, pending_for_s=99, interval_s=1) is None
    assert plan_batch([30, 30], batch_bytes=100, pending_for_s=0.5, interval_s=1) is None
    assert plan_batch([30, 30], batch_bytes=100, pending_for_s=1, interval_s=1) == Batch(2, 60)
    assert plan_batch([60, 60, 60], batch_bytes=100, pending_for_s=0, interval_s=1) == Batch(1, 60)
    assert plan_batch([500, 10], batch_bytes=100, pending_for_s=0, interval_s=1) == Batch(1, 500)
    assert plan_batch([1] * 10, batch_bytes=100, pending_for_s=0, interval_s=1, max_count=4) == (
        Batch(4, 4)
    )


def _records(start: int, count: int, queue_id: int = 2) -> list[bytes]:
    out = []
    for i in range(count):
        msg = MessageToStore.build("t", queue_id, f"body-{start + i}".encode(), msg_id=f"M{i}")
        out.append(
            record.encode(
                msg,
                queue_offset=start + i,
                physical_offset=1000 + 100 * i,
                store_timestamp=1_700_000_000_000 + i,
            )
        )
    return out


def test_segments_round_trip_and_damage_is_found() -> None:
    header, data = encode_segment("t", 2, _records(10, 5), writer="g-0@3")
    assert (header.start, header.end, header.count, header.writer) == (10, 15, 5, "g-0@3")
    assert decode_header(data[:4096]) == header
    got, messages = decode_segment(data)
    assert got == header and [m.queue_offset for m in messages] == list(range(10, 15))
    damaged = bytearray(data)
    damaged[-3] ^= 0xFF
    with pytest.raises(SegmentFormatError, match="CRC"):
        decode_segment(bytes(damaged))
    with pytest.raises(SegmentFormatError, match="magic"):
        decode_header(b"nope" + data[4:])
    with pytest.raises(ValueError, match="consecutive"):
        encode_segment("t", 2, _records(10, 2) + _records(13, 1))
    with pytest.raises(ValueError, match="another queue"):
        encode_segment("t", 1, _records(10, 2))


def test_names_parse_back_and_strangers_are_ignored() -> None:
    root = "c/g/segments/"
    name = segment_name(root, "%RETRY%billing", 3, 42)
    assert parse_segment_name(root, name) == ("%RETRY%billing", 3, 42)
    for stranger in ("c/g/segments/t/3/42.seg", "c/g/segments/t/x/" + "0" * 20 + ".seg", "other"):
        assert parse_segment_name(root, stranger) is None


def _header(start: int, end: int) -> SegmentHeader:
    return SegmentHeader("t", 0, start, end, 10, 0, 0, 0, 0)


def test_chains_find_offsets_and_report_holes() -> None:
    tier = QueueTier("t", 0)
    for start, end in ((20, 30), (0, 10), (10, 20), (40, 50)):
        tier.add(_header(start, end), 100)
    assert (tier.start, tier.end, tier.bytes) == (0, 50, 400)
    found = tier.find(25)
    assert found is not None and found.start == 20
    assert tier.find(35) is None
    after = tier.first_at_or_after(35)
    assert after is not None and after.start == 40
    assert tier.holes() == [(30, 40)]
    assert [h.start for h in tier.remove_through(10)] == [0, 10]
    assert tier.start == 20


def test_the_cache_is_bounded_in_bytes_and_expires() -> None:
    now = [0.0]
    cache = SegmentCache(100, ttl_s=10, clock=lambda: now[0])
    cache.put(("t", 0, 0), 60, [])
    cache.put(("t", 0, 1), 60, [])  # over the bound: the least recently used goes
    assert cache.get(("t", 0, 0)) is None and cache.get(("t", 0, 1)) == []
    cache.put(("t", 0, 2), 500, [])  # larger than the whole cache: not kept
    assert ("t", 0, 2) not in cache and cache.bytes == 60
    now[0] = 11
    assert cache.get(("t", 0, 1)) is None and cache.bytes == 0
