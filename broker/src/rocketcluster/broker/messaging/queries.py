"""Queries that reach past local retention: the offset of a queue for a store time,
messages by id or key, a queue's messages from an offset or in a time range — from
the local store, then from tiered storage for what the local store no longer holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import NamedTuple

from rocketcluster.broker.stats.collect import entry_store_time
from rocketcluster.broker.store import MessageStore, StoredMessage
from rocketcluster.broker.tiered.service import TieredStorage


async def offset_for_time(
    store: MessageStore, tier: TieredStorage | None, topic: str, queue_id: int, time_ms: int
) -> int:
    """The first offset of topic/queue stored at or after ``time_ms``; the queue's max
    offset when every message is older, its min when every one is newer: the tier's
    segments by their time range, then the local consume queue."""
    lo, hi = store.queue_offsets(topic, queue_id)
    cq = store.queues.get(topic, queue_id)
    if cq is None:
        return lo
    local_lo = cq.min_index
    first = entry_store_time(cq, local_lo, store.commitlog) if local_lo < hi else None
    if tier is not None and lo < local_lo and (first is None or first > time_ms):
        found = await tier.offset_for_time(topic, queue_id, time_ms)
        if found is not None and found < local_lo:
            return found
    return store.offset_at_time(topic, queue_id, time_ms)


MAX_READ_SCAN = 4096  # steps of one read_queue call (a hole costs one step)


class QueueRead(NamedTuple):
    messages: list[StoredMessage]
    next_offset: int  # where the next read continues
    past_end: bool = False  # stopped at a message stored after ``until_ms``


async def read_queue(
    store: MessageStore,
    tier: TieredStorage | None,
    topic: str,
    queue_id: int,
    offset: int,
    limit: int,
    *,
    until_ms: int | None = None,
) -> QueueRead:
    """Up to ``limit`` messages of topic/queue from ``offset`` (from the queue's first
    when ``offset`` is below it; none, and its end as the next offset, when at or
    after its end), in offset order: what the local store holds from
    disk, what only the tier holds from the tier, holes that neither holds skipped.
    ``until_ms``: stop before the first message stored after it. Reads serve no
    consumer, so the page-cache counters are left alone. Raises the tier's error when
    only the tier holds the next message and it cannot be read."""
    lo, hi = store.queue_offsets(topic, queue_id)
    offset = min(max(offset, lo), hi)
    cq = store.queues.get(topic, queue_id)
    out: list[StoredMessage] = []
    if cq is None:
        return QueueRead(out, offset)
    for _ in range(MAX_READ_SCAN):
        if offset >= hi or len(out) >= limit:
            break
        found: list[StoredMessage] = []
        if offset >= cq.min_index:  # the local store, while it still has the messages
            clog_min = store.commitlog.min_offset
            for entry in cq.entries(offset, min(64, limit - len(out))):
                if entry.physical_offset < clog_min:
                    break
                found.append(
                    store.read_message(entry.physical_offset, entry.size, count_cache=False)
                )
        if not found and tier is not None:
            found = await tier.read(topic, queue_id, offset, limit - len(out))
        if not found:  # neither holds it: go on where one of them does
            resume = tier.resume_at(topic, queue_id, offset + 1) if tier is not None else None
            later = [x for x in (resume, cq.min_index) if x is not None and x > offset]
            offset = min(later) if later else offset + 1
            continue
        for msg in found:
            if until_ms is not None and msg.store_timestamp > until_ms:
                return QueueRead(out, offset, True)
            out.append(msg)
            offset = msg.queue_offset + 1
    return QueueRead(out, offset, False)


async def lookup_by_id(
    store: MessageStore, tier: TieredStorage | None, msg_id: str
) -> list[StoredMessage]:
    found = await asyncio.to_thread(store.lookup_by_id, msg_id)  # may wait for the index
    if tier is None:
        return found
    cold = await _cold(store, tier, store.index.lookup_id(msg_id), lambda m: m.msg_id == msg_id)
    return found + cold


async def lookup_by_key(
    store: MessageStore, tier: TieredStorage | None, topic: str, key: str, limit: int
) -> list[StoredMessage]:
    found = await asyncio.to_thread(store.lookup_by_key, topic, key, limit)
    if tier is None or len(found) >= limit:
        return found
    cold = await _cold(
        store,
        tier,
        store.index.lookup_key(topic, key, limit),
        lambda m: m.topic == topic and key in m.keys,
    )
    return (found + cold)[:limit]


async def _cold(
    store: MessageStore,
    tier: TieredStorage,
    entries: Sequence[tuple[int, int]],
    matches: Callable[[StoredMessage], bool],
) -> list[StoredMessage]:
    """Messages of index entries the local log no longer holds, from the tier."""
    out = []
    clog_min = store.commitlog.min_offset
    for physical, size in entries:
        if physical >= clog_min:
            continue
        msg = await tier.message_at(physical, size)
        if msg is not None and matches(msg):
            out.append(msg)
    return out
