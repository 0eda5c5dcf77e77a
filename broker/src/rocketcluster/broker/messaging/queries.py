"""Queries that reach past local retention: the offset of a queue for a store time,
and messages by id or key — from the local store, then from tiered storage for what
the local store no longer holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

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
