"""The snapshot builder on a real store, against answers worked out independently:
offsets and store times from the records, per-segment shares by walking the commit log
record by record (8 KiB segments, so a queue spans many), consumer rows from known
consume state, and what retention and a truncated log do to the counts."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocketcluster.api.names import retry_topic
from rocketcluster.api.topics import TopicSpec
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.stats import collect
from rocketcluster.broker.stats.reads import ReadRecorder
from rocketcluster.broker.stats.rows import SegmentRow
from rocketcluster.broker.stats.segments import SegmentTracker
from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoredMessage
from rocketcluster.broker.store.replica import truncate_to
from rocketcluster.ctl.testing import small_store_config

SEGMENT = 8192


def _msg(topic: str, qid: int, i: int, size: int) -> MessageToStore:
    return MessageToStore.build(topic, qid, bytes([65 + i % 26]) * size, msg_id=f"{topic}-{i}")


async def _put(store: MessageStore, topic: str, qid: int, sizes: list[int]) -> None:
    """One batch per message, a couple of ms apart: store times then differ."""
    for i, size in enumerate(sizes):
        assert (await store.put(_msg(topic, qid, i, size))).ok
        await asyncio.sleep(0.002)


def _records(store: MessageStore, topic: str, qid: int) -> list[StoredMessage]:
    clog = store.commitlog
    return [m for m in clog.iter_records(clog.min_offset) if (m.topic, m.queue_id) == (topic, qid)]


def _expected(store: MessageStore, topic: str, qid: int) -> dict[int, tuple[int, int, int, int]]:
    """segment base -> (bytes, messages, min store time, max store time), walking the log."""
    out: dict[int, tuple[int, int, int, int]] = {}
    for m in _records(store, topic, qid):
        base = m.physical_offset - m.physical_offset % SEGMENT
        b, n, lo, hi = out.get(base, (0, 0, m.store_timestamp, m.store_timestamp))
        out[base] = (b + m.size, n + 1, min(lo, m.store_timestamp), max(hi, m.store_timestamp))
    return out


def _counted(tracker: SegmentTracker, topic: str, qid: int) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for row in tracker.rows():
        if (row.topic, row.queue_id) == (topic, qid):
            s = row.share
            assert s.min_store_time is not None and s.max_store_time is not None
            out[row.segment] = (s.bytes, s.messages, s.min_store_time, s.max_store_time)
    return out


def _tracker(store: MessageStore) -> SegmentTracker:
    clog = store.commitlog
    return SegmentTracker(clog.segment_size, clog.store_timestamp)


def _advance_all(store: MessageStore, tracker: SegmentTracker, budget: int = 10**9) -> int:
    return sum(tracker.advance(cq, store.commitlog.min_offset, budget) for cq in store.queues)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    opened = await MessageStore.open(small_store_config(tmp_path / "store", segment_size=SEGMENT))
    try:
        yield opened
    finally:
        await opened.close()


async def test_queue_rows_give_offsets_and_the_store_times_of_head_and_tail(
    store: MessageStore,
) -> None:
    await _put(store, "orders", 1, [100, 200, 300])
    reads = ReadRecorder(SEGMENT)
    reads.served("orders", 1, 0, 0, now_ms=1234)
    topics = [TopicSpec(name="orders", queues=2), TopicSpec(name="RMQ_SYS_BROKER_STATS")]
    keys = collect.topic_queue_keys(topics)
    assert keys == [("orders", 0), ("orders", 1)]  # the broker's own topics are left out
    empty, full = collect.queue_stats(keys, store.queues, store.commitlog, reads)
    records = _records(store, "orders", 1)
    assert (empty.min_offset, empty.max_offset, empty.head_store_time) == (0, 0, None)
    assert empty.last_read_time is None
    assert (full.min_offset, full.max_offset) == (0, 3)
    assert full.head_store_time == records[0].store_timestamp
    assert full.tail_store_time == records[2].store_timestamp
    assert records[0].store_timestamp < records[2].store_timestamp
    assert full.last_read_time == 1234


async def test_an_unchanged_queue_keeps_its_row_and_a_changed_one_is_read_again(
    store: MessageStore,
) -> None:
    await _put(store, "orders", 0, [100, 200])
    await _put(store, "orders", 1, [100])
    reads = ReadRecorder(SEGMENT)
    keys = [("orders", 0), ("orders", 1)]
    first = collect.queue_stats(keys, store.queues, store.commitlog, reads)
    previous = {(r.topic, r.queue_id): r for r in first}
    same = collect.queue_stats(keys, store.queues, store.commitlog, reads, previous)
    assert same[0] is first[0] and same[1] is first[1]  # nothing read or built again

    await _put(store, "orders", 1, [300])  # grew
    reads.served("orders", 0, 0, 0, now_ms=99)  # read from
    again = collect.queue_stats(keys, store.queues, store.commitlog, reads, previous)
    assert again[0] is not first[0] and again[0].last_read_time == 99
    assert again[1] is not first[1] and again[1].max_offset == 2
    assert again[1].tail_store_time == _records(store, "orders", 1)[1].store_timestamp


async def test_an_unchanged_share_keeps_its_segment_row(store: MessageStore) -> None:
    await _put(store, "orders", 0, [100, 200])
    tracker, reads = _tracker(store), ReadRecorder(SEGMENT)
    _advance_all(store, tracker)
    (first,) = collect.segment_stats(tracker.rows(), reads)
    previous = {(first.topic, first.queue_id, first.segment): first}
    (same,) = collect.segment_stats(tracker.rows(), reads, previous=previous)
    assert same is first
    await _put(store, "orders", 0, [300])
    _advance_all(store, tracker)
    (grown,) = collect.segment_stats(tracker.rows(), reads, previous=previous)
    assert grown is not first
    assert (grown.messages, grown.max_store_time) != (first.messages, first.max_store_time)
    assert grown.messages == first.messages + 1 and grown.bytes > first.bytes


async def test_consumer_rows_from_consume_state_and_saved_offsets(store: MessageStore) -> None:
    await _put(store, "orders", 0, [100] * 10)
    await _put(store, retry_topic("g"), 0, [100] * 5)
    times = [m.store_timestamp for m in _records(store, "orders", 0)]
    now = int(time.time() * 1000)
    state = QueueConsumeState(3)
    state.deliver(3, 1, now + 60_000, nonce=1)  # in flight
    state.deliver(4, 1, now - 1, nonce=2)  # its invisibility ran out: waiting to retry
    state.deliver(5, 2, now + 60_000, nonce=3)
    state.make_visible(5)  # nacked: waiting to retry
    caught_up = QueueConsumeState(10)
    states = {("g", "orders", 0): state, ("h", "orders", 0): caught_up}
    offsets = {
        ("g", "orders", 0): 1,  # older than the live state: the state wins
        ("g", retry_topic("g"), 0): 2,
        ("stopped", "orders", 0): 6,  # not seen since the start: from the metadata
        ("gone", "orders", 0): 0,  # a group this broker no longer serves
        ("g", "RMQ_SYS_WHEEL_TIMER", 0): 0,
    }
    where = collect.positions(states, offsets, {"g", "h", "stopped"}, now)
    rows = {
        (r.consumer_group, r.topic): r
        for r in collect.consumer_stats(where, store.queues, store.commitlog)
    }
    assert set(rows) == {("g", "orders"), ("h", "orders"), ("stopped", "orders"), ("g", "%RETRY%g")}
    g = rows[("g", "orders")]
    assert (g.committed_offset, g.min_offset, g.max_offset) == (3, 0, 10)
    assert g.committed_store_time == times[3]
    assert (g.inflight, g.retry) == (1, 2)
    assert rows[("h", "orders")].committed_store_time is None  # caught up
    stopped = rows[("stopped", "orders")]
    assert (stopped.committed_offset, stopped.committed_store_time) == (6, times[6])
    assert (stopped.inflight, stopped.retry) == (0, 0)
    own_retry = rows[("g", "%RETRY%g")]
    assert (own_retry.committed_offset, own_retry.retry) == (2, 3)


async def test_a_committed_offset_below_the_queue_start_reports_the_heads_store_time(
    store: MessageStore,
) -> None:
    await _put(store, "orders", 0, [1500] * 12)  # ~5 segments
    for seg in store.commitlog.segments[:-1]:
        os.utime(seg.path, (0, 0))
    assert store.apply_retention().delete_count > 0
    lo, hi = store.queue_offsets("orders", 0)
    assert 0 < lo < hi
    where = collect.positions({}, {("g", "orders", 0): 0}, {"g"}, 0)
    (row,) = collect.consumer_stats(where, store.queues, store.commitlog)
    assert (row.committed_offset, row.min_offset) == (0, lo)
    assert row.committed_store_time == _records(store, "orders", 0)[0].store_timestamp


async def test_segment_shares_match_a_walk_of_the_log_and_grow_incrementally(
    store: MessageStore,
) -> None:
    sizes = [90 + (i * 337) % 1200 for i in range(60)]
    for i in range(0, 40, 2):  # the two queues interleave in the log
        await _put(store, "orders", 0, sizes[i : i + 1])
        await _put(store, "orders", 1, sizes[i + 1 : i + 2])
    tracker = _tracker(store)
    assert _advance_all(store, tracker) == 40
    expected = _expected(store, "orders", 0)
    assert len(expected) >= 3  # the queue spans several segments
    assert _counted(tracker, "orders", 0) == expected
    assert _counted(tracker, "orders", 1) == _expected(store, "orders", 1)

    await _put(store, "orders", 0, sizes[40:])
    assert _advance_all(store, tracker) == 20  # only the new entries are read
    assert _counted(tracker, "orders", 0) == _expected(store, "orders", 0)
    assert _advance_all(store, tracker) == 0

    # A small budget counts the same in steps.
    stepwise = _tracker(store)
    while _advance_all(store, stepwise, budget=3):
        pass
    assert _counted(stepwise, "orders", 0) == _expected(store, "orders", 0)


async def test_segments_retention_deleted_are_dropped(store: MessageStore) -> None:
    await _put(store, "orders", 0, [700] * 40)
    tracker = _tracker(store)
    _advance_all(store, tracker)
    before = set(_counted(tracker, "orders", 0))
    for seg in store.commitlog.segments[:3]:
        os.utime(seg.path, (0, 0))
    assert store.apply_retention().delete_count == 3
    clog_min = store.commitlog.min_offset
    tracker.drop_below(clog_min)
    _advance_all(store, tracker)
    after = _counted(tracker, "orders", 0)
    assert set(after) == {b for b in before if b >= clog_min}
    assert after == _expected(store, "orders", 0)


async def test_a_truncated_and_rewritten_queue_is_counted_again(tmp_path: Path) -> None:
    # Async flush, as a slave's log after a truncation is written by replication.
    config = small_store_config(tmp_path / "store", segment_size=SEGMENT, flush=FlushMode.ASYNC)
    store = await MessageStore.open(config)
    try:
        await _truncate_and_rewrite(store)
    finally:
        await store.close()


async def _truncate_and_rewrite(store: MessageStore) -> None:
    await _put(store, "orders", 0, [600] * 30)
    tracker = _tracker(store)
    _advance_all(store, tracker)
    cut = _records(store, "orders", 0)[20].physical_offset
    truncate_to(store, cut)  # a slave following a new master cuts its diverged tail
    await _put(store, "orders", 0, [250] * 14)  # same queue offsets, other records
    _advance_all(store, tracker)
    assert _counted(tracker, "orders", 0) == _expected(store, "orders", 0)
    assert sum(n for _, n, _, _ in _counted(tracker, "orders", 0).values()) == 34


async def test_segment_rows_carry_read_times_and_skip_the_brokers_own_topics(
    store: MessageStore,
) -> None:
    await _put(store, "orders", 0, [700] * 15)
    await _put(store, "RMQ_SYS_BROKER_STATS", 0, [100])
    tracker = _tracker(store)
    _advance_all(store, tracker)
    reads = ReadRecorder(SEGMENT)
    first = _records(store, "orders", 0)[0].physical_offset
    reads.served("orders", 0, first, first, now_ms=99)
    rows = collect.segment_stats(tracker.rows(), reads)
    assert {r.topic for r in rows} == {"orders"}
    by_segment = {r.segment: r for r in rows}
    head = by_segment[first - first % SEGMENT]
    assert head.last_read_time == 99 and not head.tiered
    assert all(r.last_read_time is None for r in rows if r is not head)
    assert all(isinstance(r, SegmentRow) for r in rows)
