"""Crash recovery, property-based: random batches, random sync points, a crash, then
the unsynced tail truncated or garbled at any byte. Recovery must yield exactly a
prefix of what was written that holds every synced record, with consume queues and
the index agreeing with it, and the store must keep working afterwards."""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketcluster.broker.store import FlushMode, MessageStore, MessageToStore, StoreConfig
from rocketcluster.broker.store.files import offset_name

from .conftest import small_config

TOPICS = ("alpha", "beta")
_RAM = "/dev/shm"


def build(i: int, size: int) -> MessageToStore:
    topic = TOPICS[i % 2]
    return MessageToStore.build(
        topic,
        i % 3,
        bytes([i % 251]) * size,
        tag=f"t{i % 4}",
        keys=(f"key-{i}",),
        msg_id=f"M{i:08d}",
    )


def damage_tail(cfg: StoreConfig, start: int, end: int, rng: random.Random, garble: bool) -> None:
    """Truncate or garble the commit log at one byte in [start, end)."""
    size = cfg.segment_size
    at = rng.randrange(start, end)
    base = at - at % size
    seg = cfg.commitlog_dir / offset_name(base)
    if garble:
        length = rng.randint(1, 64)
        with seg.open("r+b") as f:
            f.seek(at - base)
            f.write(bytes(rng.randrange(256) for _ in range(min(length, base + size - at))))
        return
    os.truncate(seg, at - base)
    for later in cfg.commitlog_dir.iterdir():
        if int(later.name) > base and rng.random() < 0.7:
            later.unlink()  # the later files may or may not have reached the disk


async def scenario(
    root: Path, batches: list[list[int]], sync_after: list[bool], seed: int, garble: bool
) -> None:
    cfg = small_config(
        root, flush=FlushMode.ASYNC, flush_interval_ms=3_600_000, flush_bytes=1 << 30
    )
    store = await MessageStore.open(cfg)
    written: list[MessageToStore] = []
    synced_count = 0
    counter = 0
    for sizes, sync in zip(batches, sync_after, strict=True):
        msgs = [build(counter + k, s) for k, s in enumerate(sizes)]
        counter += len(msgs)
        result = await store.put_batch(msgs)
        assert result.ok, result
        written.extend(msgs)
        if sync:
            await store.flush()
            synced_count = len(written)
    synced_offset = store.commitlog.flushed_offset
    end = store.commitlog.write_offset
    store.abandon()
    rng = random.Random(seed)
    if end > synced_offset:
        damage_tail(cfg, synced_offset, end, rng, garble)

    store = await MessageStore.open(cfg)
    try:
        recovered = list(store.commitlog.iter_records(store.commitlog.min_offset))
        n = len(recovered)
        assert synced_count <= n <= len(written), (synced_count, n, len(written))
        for rec, want in zip(recovered, written, strict=False):
            assert (rec.topic, rec.queue_id, rec.msg_id, rec.body) == (
                want.topic,
                want.queue_id,
                want.msg_id,
                want.body,
            )
        # Consume queues hold exactly the recovered records, in order, from 0.
        per_queue: dict[tuple[str, int], list[int]] = {}
        for rec in recovered:
            per_queue.setdefault((rec.topic, rec.queue_id), []).append(rec.physical_offset)
        for topic in TOPICS:
            for qid in range(3):
                expected = per_queue.get((topic, qid), [])
                lo, hi = store.queue_offsets(topic, qid)
                assert (lo, hi) == (0, len(expected))
                read = store.get_messages(topic, qid, 0, 10_000, max_scan=10_000)
                assert [m.physical_offset for m in read.messages] == expected
                assert [m.queue_offset for m in read.messages] == list(range(len(expected)))
        # The index finds what survived and nothing that did not.
        for i in (0, n // 2, n - 1, n, len(written) - 1):
            if 0 <= i < len(written):
                found = store.lookup_by_id(written[i].msg_id)
                assert len(found) == (1 if i < n else 0), (i, n, found)
        # Appending after recovery continues the queues without gaps or resurrection.
        more = [build(counter + k, 50) for k in range(6)]
        assert (await store.put_batch(more)).ok
        await store.close()
        store = await MessageStore.open(cfg)
        final = list(store.commitlog.iter_records(store.commitlog.min_offset))
        assert [m.msg_id for m in final] == [m.msg_id for m in written[:n] + more]
    finally:
        await store.close()


batch_sizes = st.lists(st.integers(min_value=1, max_value=1500), min_size=1, max_size=6)


@settings(
    max_examples=500,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(batch_sizes, min_size=1, max_size=12),
    syncs=st.lists(st.booleans(), min_size=12, max_size=12),
    seed=st.integers(min_value=0, max_value=2**32),
    garble=st.booleans(),
)
def test_recovery_yields_a_prefix_holding_every_synced_record(
    tmp_path_factory: object, batches: list[list[int]], syncs: list[bool], seed: int, garble: bool
) -> None:
    # RAM where there is one: the crash is simulated (abandon, then the tail damaged),
    # so what fsync costs on a disk says nothing here and took most of the time.
    with tempfile.TemporaryDirectory(dir=_RAM if os.path.isdir(_RAM) else None) as tmp:
        asyncio.run(scenario(Path(tmp), batches, syncs[: len(batches)], seed, garble))
