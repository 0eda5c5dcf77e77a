"""Group commit: concurrent sync-flush writers share fsyncs, and every acknowledged
write is covered by an fsync."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore

from .conftest import small_config


async def test_concurrent_writers_share_fsyncs_and_each_ack_is_durable(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir, segment_size=1 << 20))
    violations: list[int] = []
    acked = 0

    async def writer(w: int) -> None:
        nonlocal acked
        for n in range(40):
            msg = MessageToStore.build("gc", w % 4, b"x" * 200, msg_id=f"{w}-{n}")
            result = await store.put(msg)
            assert result.ok
            end = result.records[0].physical_offset + result.records[0].size
            if store.commitlog.flushed_offset < end:
                violations.append(end)
            acked += 1

    try:
        await asyncio.gather(*(writer(w) for w in range(64)))
        assert violations == []
        assert acked == 64 * 40
        # Sharing happened: far fewer fsyncs than writes.
        assert store._flush.fsync_count < acked / 4
    finally:
        await store.close()


async def test_async_flush_syncs_by_bytes_and_on_demand(store_dir: Path) -> None:
    cfg = small_config(
        store_dir,
        flush=FlushMode.ASYNC,
        flush_interval_ms=3_600_000,
        flush_bytes=64 * 1024,
        segment_size=1 << 20,
    )
    store = await MessageStore.open(cfg)
    try:
        for i in range(400):  # ~100 KiB: at least one size-triggered flush
            await store.put(MessageToStore.build("a", 0, b"y" * 250, msg_id=str(i)))
        for _ in range(100):
            if store.commitlog.flushed_offset > 0:
                break
            await asyncio.sleep(0.01)
        assert store.commitlog.flushed_offset >= 64 * 1024
        assert await store.flush() == store.commitlog.write_offset
    finally:
        await store.close()
