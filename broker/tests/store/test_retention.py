from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from rocketcluster.broker.store import DiskFullPolicy, GetStatus, MessageStore
from rocketcluster.broker.store.housekeeping import RETENTION_PAGE
from rocketcluster.broker.store.retention import DeleteReason, SegmentInfo, plan_retention

from .conftest import message, small_config

HOUR = 3600.0


def infos(n: int, ages_hours: list[float], now: float) -> list[SegmentInfo]:
    return [SegmentInfo(i * 100, (i + 1) * 100, now - ages_hours[i] * HOUR) for i in range(n)]


def plan(
    segments: list[SegmentInfo], now: float, **kw: object
) -> tuple[int, tuple[DeleteReason, ...]]:
    args: dict[str, object] = {
        "now": now,
        "retention_hours": 10.0,
        "flushed_offset": 10**9,
        "disk_used_ratio": 0.5,
        "disk_max_used_ratio": 0.75,
        "segment_size": 100,
        "disk_total_bytes": 10_000,
        "max_store_bytes": None,
    }
    args.update(kw)
    decision = plan_retention(segments, **args)  # type: ignore[arg-type]
    return decision.delete_count, decision.reasons


def test_expired_segments_go_from_the_head_only() -> None:
    now = 1e9
    segs = infos(5, [30, 20, 5, 40, 1], now)  # the fourth is old but behind a young one
    assert plan(segs, now) == (2, (DeleteReason.EXPIRED,))


def test_the_last_segment_and_unflushed_ones_stay() -> None:
    now = 1e9
    segs = infos(3, [99, 99, 99], now)
    assert plan(segs, now)[0] == 2
    assert plan(segs, now, flushed_offset=150)[0] == 1


def test_space_ceilings_delete_young_segments_too() -> None:
    now = 1e9
    segs = infos(6, [1] * 6, now)
    count, reasons = plan(segs, now, disk_used_ratio=0.80)  # 5% of 10,000 over = 500 bytes
    assert count == 5 and reasons == (DeleteReason.DISK_RATIO,)
    count, reasons = plan(segs, now, max_store_bytes=350)
    assert count == 3 and reasons == (DeleteReason.STORE_SIZE,)


def test_what_the_tier_does_not_hold_stays_and_is_counted() -> None:
    now = 1e9
    segs = infos(5, [50, 40, 30, 20, 1], now)
    base = {
        "now": now,
        "retention_hours": 10.0,
        "flushed_offset": 10**9,
        "disk_used_ratio": 0.9,  # disk pressure wants space too
        "disk_max_used_ratio": 0.75,
        "segment_size": 100,
        "disk_total_bytes": 10_000,
        "max_store_bytes": None,
    }
    free = plan_retention(segs, **base)  # type: ignore[arg-type]
    held = plan_retention(segs, **base, held_from=250)  # type: ignore[arg-type]
    assert (free.delete_count, free.held_by_tier) == (4, 0)
    assert (held.delete_count, held.held_by_tier) == (2, 2)  # [200, 300) holds offset 250
    assert plan_retention(segs, **base, held_from=0).delete_count == 0  # type: ignore[arg-type]


async def test_store_retention_moves_queue_minimums_and_forgets_index(store_dir: Path) -> None:
    cfg = small_config(store_dir, retention_hours=1.0)
    store = await MessageStore.open(cfg)
    try:
        for i in range(120):
            assert (await store.put(message(i, size=300))).ok
        await store.checkpoint()
        segments = store.commitlog.segments
        old = time.time() - 5 * HOUR
        for seg in segments[:3]:
            os.utime(seg.path, (old, old))
        decision = store.apply_retention()
        assert decision.delete_count == 3 and decision.reasons == (DeleteReason.EXPIRED,)
        new_min = store.commitlog.min_offset
        assert new_min == segments[3].base
        assert not any(s.path.exists() for s in segments[:3])
        for qid in range(3):
            lo, hi = store.queue_offsets("orders", qid)
            assert lo > 0 and hi == 40
            assert store.get_messages("orders", qid, 0, 5).status is GetStatus.OFFSET_TOO_SMALL
            first = store.get_messages("orders", qid, lo, 1).messages[0]
            assert first.physical_offset >= new_min
        assert store.lookup_by_id(f"ID{0:030d}") == []
        assert len(store.lookup_by_id(f"ID{119:030d}")) == 1
        before = [store.queue_offsets("orders", q) for q in range(3)]
    finally:
        await store.close()
    store = await MessageStore.open(cfg)
    try:
        assert [store.queue_offsets("orders", q) for q in range(3)] == before
        assert store.commitlog.min_offset == new_min
    finally:
        await store.close()


async def test_store_size_ceiling(store_dir: Path) -> None:
    cfg = small_config(store_dir, max_store_bytes=4 * 8192, disk_full=DiskFullPolicy.DELETE_OLDEST)
    store = await MessageStore.open(cfg)
    try:
        for i in range(150):
            await store.put(message(i, size=300))
        await store.checkpoint()
        decision = store.apply_retention()
        assert DeleteReason.STORE_SIZE in decision.reasons
        assert len(store.commitlog.segments) <= 4
    finally:
        await store.close()


async def test_the_periodic_run_serves_the_event_loop_between_pages_of_queues(
    store_dir: Path,
) -> None:
    """Three pages of queues, a message each in old segments and one in new ones: the
    periodic run (``run_retention``) lets the event loop run between its pages, and
    leaves every queue where the all-at-once run would: its first message forgotten
    exactly when that message's segment went, across a restart too."""
    queues = 3 * RETENTION_PAGE
    cfg = small_config(store_dir, retention_hours=1.0)
    store = await MessageStore.open(cfg)
    try:
        first_at: dict[int, int] = {}
        for round_ in range(2):
            for start in range(0, queues, 64):
                batch = [
                    message(round_ * queues + q, queues=queues, size=40)
                    for q in range(start, start + 64)
                ]
                result = await store.put_batch(batch)
                assert result.ok
                if round_ == 0:
                    for q, record in zip(range(start, start + 64), result.records, strict=True):
                        first_at[q] = record.physical_offset
        await store.checkpoint()
        boundary = min(store.commitlog.segments[-1].base, max(first_at.values()))
        old = time.time() - 5 * HOUR
        for seg in store.commitlog.segments:
            if seg.end <= boundary:
                os.utime(seg.path, (old, old))

        served = 0
        seen_at_pages: list[int] = []

        async def loop_turns() -> None:
            nonlocal served
            while True:
                await asyncio.sleep(0)
                served += 1

        cuts = store.queues.retention_cuts

        def counted(*args: Any, **kwargs: Any) -> list[tuple[int, int]]:
            seen_at_pages.append(served)
            return cuts(*args, **kwargs)

        store.queues.retention_cuts = counted  # type: ignore[method-assign]
        turns = asyncio.create_task(loop_turns())
        try:
            decision = await store.run_retention()
        finally:
            turns.cancel()
        assert decision.delete_count > 0
        assert len(seen_at_pages) == 3
        assert seen_at_pages == sorted(set(seen_at_pages)), "a page followed another at once"
        new_min = store.commitlog.min_offset
        expected = {q: (1 if first_at[q] < new_min else 0, 2) for q in range(queues)}
        assert 0 < sum(lo for lo, _ in expected.values()) < queues  # some went, some stayed
        got = {q: store.queue_offsets("orders", q) for q in range(queues)}
        assert got == expected
    finally:
        await store.close()
    store = await MessageStore.open(cfg)
    try:
        assert {q: store.queue_offsets("orders", q) for q in range(queues)} == expected
    finally:
        await store.close()


# -- the disk-full policy: what consumer groups still need -----------------------------


def test_reject_keeps_what_consumers_need_but_not_what_expired() -> None:
    now = 1e9
    segs = infos(6, [30, 20, 5, 4, 3, 1], now)  # two expired
    full: dict[str, Any] = {"disk_used_ratio": 0.99, "disk_max_used_ratio": 0.75}
    # deleteOldest: the disk ratio takes young segments too (0.24 * 10,000 / 100).
    assert plan(segs, now, **full) == (5, (DeleteReason.EXPIRED, DeleteReason.DISK_RATIO))
    # reject, consumers need from offset 250 (inside the third segment): the expired two
    # go, nothing a consumer needs does, and the kept ones are counted.
    decision = plan_retention(
        segs,
        now=now,
        retention_hours=10.0,
        flushed_offset=10**9,
        segment_size=100,
        disk_total_bytes=10_000,
        max_store_bytes=None,
        needed_from=250,
        **full,
    )
    assert decision.delete_count == 2
    assert decision.reasons == (DeleteReason.EXPIRED,)
    assert decision.held_for_consumers == 3
    # Consumers need nothing below 400: the disk ratio may take the third and fourth.
    decision = plan_retention(
        segs,
        now=now,
        retention_hours=10.0,
        flushed_offset=10**9,
        segment_size=100,
        disk_total_bytes=10_000,
        max_store_bytes=None,
        needed_from=400,
        **full,
    )
    assert (decision.delete_count, decision.held_for_consumers) == (4, 1)
    assert DeleteReason.DISK_RATIO in decision.reasons
    # Expired segments go even when a consumer needs them: retention time is the promise.
    decision = plan_retention(
        segs,
        now=now,
        retention_hours=10.0,
        flushed_offset=10**9,
        segment_size=100,
        disk_total_bytes=10_000,
        max_store_bytes=None,
        needed_from=0,
        **full,
    )
    assert (decision.delete_count, decision.reasons) == (2, (DeleteReason.EXPIRED,))


def test_reject_and_the_tier_hold_together() -> None:
    now = 1e9
    segs = infos(6, [1, 1, 1, 1, 1, 1], now)
    args: dict[str, Any] = {
        "now": now,
        "retention_hours": 10.0,
        "flushed_offset": 10**9,
        "disk_used_ratio": 0.99,
        "disk_max_used_ratio": 0.75,
        "segment_size": 100,
        "disk_total_bytes": 10_000,
        "max_store_bytes": None,
    }
    # The tier holds from 300, consumers from 200: the smaller bound wins; each counts
    # what it alone held back.
    decision = plan_retention(segs, held_from=300, needed_from=200, **args)
    assert decision.delete_count == 2
    assert decision.held_by_tier == 2  # the disk wanted 5, the tier allows 3
    assert decision.held_for_consumers == 1  # the tier allows 3, consumers 2
    decision = plan_retention(segs, held_from=200, needed_from=300, **args)
    assert (decision.delete_count, decision.held_for_consumers) == (2, 0)


def test_store_size_ceiling_respects_consumers_under_reject() -> None:
    now = 1e9
    segs = infos(6, [1] * 6, now)
    args: dict[str, Any] = {
        "now": now,
        "retention_hours": 10.0,
        "flushed_offset": 10**9,
        "disk_used_ratio": 0.1,
        "disk_max_used_ratio": 0.75,
        "segment_size": 100,
        "disk_total_bytes": 10_000,
        "max_store_bytes": 200,
    }
    assert plan_retention(segs, **args).delete_count == 4
    decision = plan_retention(segs, needed_from=100, **args)
    assert (decision.delete_count, decision.held_for_consumers) == (1, 3)
    assert decision.reasons == (DeleteReason.STORE_SIZE,)


async def test_reject_deletes_only_what_every_group_consumed(store_dir: Path) -> None:
    """A store over its size ceiling under reject: nothing goes while a queue nobody
    read holds the head; once each group known on each queue has consumed past a
    segment, that segment may go — and nothing is counted as deleted unconsumed."""
    cfg = small_config(store_dir, max_store_bytes=3 * 8192)
    store = await MessageStore.open(cfg)
    try:
        for i in range(120):  # 3 queues of 40, about a segment per 25 messages
            await store.put(message(i, size=300))
        await store.checkpoint()
        segments = len(store.commitlog.segments)
        assert segments > 4
        decision = store.apply_retention()
        assert decision.delete_count == 0 and decision.held_for_consumers > 0
        assert store.retention_held_for_consumers == decision.held_for_consumers
        # Group a consumed queues 0 and 1 to 30, queue 2 not at all: queue 2 needs
        # everything (a group known on the topic starts it at the earliest message).
        for qid in (0, 1):
            store.metadata.commit_offset("a", "orders", qid, 30)
        assert store.apply_retention().delete_count == 0
        store.metadata.commit_offset("a", "orders", 2, 30)
        # Group b, known on queue 0 only, needs queues 1 and 2 from their start.
        store.metadata.commit_offset("b", "orders", 0, 35)
        assert store.apply_retention().delete_count == 0
        for qid in (1, 2):
            store.metadata.commit_offset("b", "orders", qid, 35)
        # Group c has a consumer subscribed to the topic but no offset yet: it will
        # start at the earliest message, so it needs every one.
        store.subscribers = lambda: {"orders": {"c"}, "other": {"d"}}
        assert store.apply_retention().delete_count == 0
        store.subscribers = dict
        assert store.apply_retention().delete_count > 0
        # Everything left begins at or below what the slowest group needs (offset 30).
        for qid in range(3):
            lo, hi = store.queue_offsets("orders", qid)
            assert lo <= 30 < hi
            got = store.get_messages("orders", qid, 30, 1)
            assert got.status is GetStatus.FOUND
        assert store.deleted_unconsumed_messages == 0
        # Bookkeeping topics the broker names hold nothing.
        store.bookkeeping_topics = frozenset({"journal"})
        await store.put(message(999, topic="journal", queues=1))
        for qid in range(3):
            for group in ("a", "b"):
                store.metadata.commit_offset(group, "orders", qid, 40)
        await store.checkpoint()
        store.apply_retention()
        assert len(store.commitlog.segments) <= 4
        assert store.deleted_unconsumed_messages == 0
    finally:
        await store.close()


async def test_delete_oldest_counts_exactly_what_was_deleted_unread(store_dir: Path) -> None:
    cfg = small_config(store_dir, max_store_bytes=3 * 8192, disk_full=DiskFullPolicy.DELETE_OLDEST)
    store = await MessageStore.open(cfg)
    try:
        for i in range(120):
            await store.put(message(i, size=300))
        store.metadata.commit_offset("a", "orders", 0, 10)  # read 10 of queue 0 only
        await store.checkpoint()
        before = {q: store.queue_offsets("orders", q)[0] for q in range(3)}
        decision = store.apply_retention()
        assert decision.delete_count > 0 and decision.held_for_consumers == 0
        after = {q: store.queue_offsets("orders", q)[0] for q in range(3)}
        removed = {q: after[q] - before[q] for q in range(3)}
        assert all(removed.values()), removed
        # Queue 0: group a had read 10 of them; queues 1 and 2: nobody read any.
        expected = max(0, removed[0] - 10) + removed[1] + removed[2]
        assert store.deleted_unconsumed_messages == expected
    finally:
        await store.close()
