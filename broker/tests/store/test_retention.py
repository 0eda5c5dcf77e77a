from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from rocketcluster.broker.store import GetStatus, MessageStore
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
    cfg = small_config(store_dir, max_store_bytes=4 * 8192)
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
