"""Tiered storage on a real store and a real directory: uploads form gap-free chains
that the backend alone can tell, retention deletes only what is uploaded, reads and
lookups reach what retention removed, and a second writer never duplicates."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rocketcluster.api.tiered_spec import TieredReadPolicy, TieredStorageSpec
from rocketcluster.broker.messaging import queries
from rocketcluster.broker.store import MessageStore, MessageToStore
from rocketcluster.broker.tiered.backend import BackendError, TierBackend
from rocketcluster.broker.tiered.catalog import parse_segment_name
from rocketcluster.broker.tiered.posix import PosixBackend
from rocketcluster.broker.tiered.segment import decode_segment
from rocketcluster.broker.tiered.service import TieredStorage
from rocketcluster.ctl.testing import small_store_config

TOPIC = "orders"
QUEUES = 3


def _spec(path: Path, **changes: object) -> TieredStorageSpec:
    path.mkdir(parents=True, exist_ok=True)  # the shared volume, mounted
    settings: dict[str, object] = {
        "enabled": True,
        "backend": "posix",
        "posix": {"path": str(path)},
        "uploadBatchBytes": 4096,
        "uploadIntervalSeconds": 0.1,
        "readAheadBytes": 1 << 20,
    }
    settings.update(changes)
    return TieredStorageSpec.model_validate(settings)


def _message(i: int, size: int = 200) -> MessageToStore:
    return MessageToStore.build(
        TOPIC,
        i % QUEUES,
        (f"m{i}-".encode() * size)[:size],
        keys=(f"key-{i}",),
        msg_id=f"ID{i:030d}",
    )


def tier_contents(backend: TierBackend, root: str) -> dict[tuple[str, int], list[int]]:
    """Every queue offset in the tier, read back object by object."""
    out: dict[tuple[str, int], list[int]] = {}
    for info in backend.list(root):
        parsed = parse_segment_name(root, info.name)
        assert parsed is not None, info.name
        header, messages = decode_segment(backend.get(info.name))
        assert header.start == parsed[2]
        out.setdefault((header.topic, header.queue_id), []).extend(m.queue_offset for m in messages)
    return out


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    s = await MessageStore.open(small_store_config(tmp_path / "store", max_store_bytes=4 * 8192))
    yield s
    await s.close()


def _tier(store: MessageStore, path: Path, writer: str = "g-0", **spec: object) -> TieredStorage:
    tier = TieredStorage(
        _spec(path, **spec),
        store,
        PosixBackend(path),
        cluster="c",
        group="g",
        writer=writer,
        is_master=lambda: True,
    )
    store.attach_tier(tier)
    return tier


async def _produce(store: MessageStore, start: int, count: int) -> None:
    for i in range(start, start + count):
        assert (await store.put(_message(i))).ok


async def test_uploads_are_gap_free_chains_and_retention_waits_for_them(
    store: MessageStore, tmp_path: Path
) -> None:
    tier = _tier(store, tmp_path / "tier")
    await _produce(store, 0, 300)  # ~70 KiB: many 8 KiB commit-log segments
    decision = store.apply_retention()
    assert decision.delete_count == 0 and decision.held_by_tier > 0  # nothing uploaded yet
    assert tier.uploaded_below(TOPIC, 0) == 0  # stats: no segment of it is tiered yet
    assert await tier.flush() > 0
    assert tier.uploaded_below(TOPIC, 0) == float("inf")
    contents = tier_contents(tier.backend, tier.catalog.root)
    for qid in range(QUEUES):
        assert contents[(TOPIC, qid)] == list(range(100))  # every message once, in order
    decision = store.apply_retention()
    assert decision.delete_count > 0 and decision.held_by_tier == 0
    cq = store.queues.get(TOPIC, 0)
    assert cq is not None and cq.min_index > 0  # local data is gone ...
    assert store.queue_offsets(TOPIC, 0) == (0, 100)  # ... and the queue still starts at 0
    got = await tier.read(TOPIC, 0, 0, 1000)
    assert [m.queue_offset for m in got][:3] == [0, 1, 2]
    assert got[0].body.startswith(b"m0-")


async def test_a_message_larger_than_the_batch_is_uploaded_alone(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store", segment_size=32768, max_message_bytes=12000)
    store = await MessageStore.open(config)
    try:
        tier = _tier(store, tmp_path / "tier", uploadBatchBytes=4096)
        big = MessageToStore.build(TOPIC, 0, b"x" * 10000, msg_id="BIG")
        for msg in (_message(0), big, _message(3)):
            assert (await store.put(msg)).ok
        await tier.flush()
        chain = tier.catalog.queue(TOPIC, 0)
        assert [(s.start, s.end) for s in chain.segments] == [(0, 1), (1, 2), (2, 3)]
        assert tier_contents(tier.backend, tier.catalog.root)[(TOPIC, 0)] == [0, 1, 2]
        assert (await tier.read(TOPIC, 0, 1, 5))[0].body == b"x" * 10000
    finally:
        await store.close()


class LostAnswers(PosixBackend):
    """Writes land, but the first ``lost`` answers never arrive (a timeout after the
    backend committed the object)."""

    def __init__(self, root: Path, lost: int) -> None:
        super().__init__(root)
        self.lost = lost

    def put_new(self, name: str, data: bytes | memoryview) -> None:
        super().put_new(name, data)
        if self.lost > 0:
            self.lost -= 1
            raise BackendError(f"timed out waiting for {name}")


async def test_a_write_whose_answer_was_lost_is_adopted_not_repeated(
    store: MessageStore, tmp_path: Path
) -> None:
    backend = LostAnswers(tmp_path / "tier", lost=2)
    tier = TieredStorage(
        _spec(tmp_path / "tier"),
        store,
        backend,
        cluster="c",
        group="g",
        writer="g-0",
        is_master=lambda: True,
    )
    await _produce(store, 0, 60)
    with pytest.raises(BackendError):
        await tier.flush()
    assert tier.uploader.counters.errors >= 1
    await _produce(store, 60, 30)  # the retry's batch is longer than what landed
    for _ in range(3):  # the next tries meet the second lost answer, then succeed
        with contextlib.suppress(BackendError):
            await tier.flush()
            break
    assert tier.uploader.counters.adopted == 2
    for qid in range(QUEUES):
        assert tier_contents(backend, tier.catalog.root)[(TOPIC, qid)] == list(range(30))


async def test_restart_keeps_the_catalogue_and_refresh_finds_a_lost_one(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store")
    store = await MessageStore.open(config)
    tier = _tier(store, tmp_path / "tier")
    await _produce(store, 0, 90)
    await tier.flush()
    before = {(t.topic, t.queue_id): t.end for t in tier.catalog}
    await store.close()
    store = await MessageStore.open(config)
    try:
        again = _tier(store, tmp_path / "tier")
        assert {(t.topic, t.queue_id): t.end for t in again.catalog} == before  # local copy
        other = await MessageStore.open(small_store_config(tmp_path / "fresh"))
        try:
            fresh = _tier(other, tmp_path / "tier")
            assert not list(fresh.catalog)
            await fresh.refresh()  # a new replica learns it from the backend
            assert {(t.topic, t.queue_id): t.end for t in fresh.catalog} == before
        finally:
            await other.close()
    finally:
        await store.close()


async def test_lookups_and_time_queries_reach_tiered_messages(
    store: MessageStore, tmp_path: Path
) -> None:
    tier = _tier(store, tmp_path / "tier")
    await _produce(store, 0, 300)
    await tier.flush()
    store.apply_retention()
    assert store.commitlog.min_offset > 0
    found = await queries.lookup_by_id(store, tier, f"ID{0:030d}")
    assert [m.body[:3] for m in found] == [b"m0-"]
    by_key = await queries.lookup_by_key(store, tier, TOPIC, "key-3", 10)
    assert [m.queue_offset for m in by_key] == [1]
    assert await queries.lookup_by_id(store, None, f"ID{0:030d}") == []  # without the tier
    first = (await tier.read(TOPIC, 1, 0, 1))[0]
    assert await queries.offset_for_time(store, tier, TOPIC, 1, first.store_timestamp) == 0
    assert await queries.offset_for_time(store, tier, TOPIC, 1, 0) == 0
    assert await queries.offset_for_time(store, tier, TOPIC, 1, 1 << 62) == 100


async def test_disable_uploads_but_never_reads(store: MessageStore, tmp_path: Path) -> None:
    tier = _tier(store, tmp_path / "tier", readPolicy=TieredReadPolicy.DISABLE.value)
    await _produce(store, 0, 300)
    await tier.flush()
    store.apply_retention()
    lo, _ = store.queue_offsets(TOPIC, 0)
    assert lo > 0  # consumers see the local store only
    cq = store.queues.get(TOPIC, 0)
    assert cq is not None and not tier.wants(cq, 0)


async def test_remote_retention_deletes_whole_old_segments(
    store: MessageStore, tmp_path: Path
) -> None:
    tier = _tier(store, tmp_path / "tier", remoteRetentionHours=1)
    await _produce(store, 0, 90)
    await tier.flush()
    segments = sum(len(t.segments) for t in tier.catalog)
    assert await tier.apply_remote_retention() == 0  # all of it is new
    hour_later = max(s.max_store_time for t in tier.catalog for s in t.segments) + 3_600_001
    assert await tier.apply_remote_retention(now_ms=hour_later) == segments
    assert tier.backend.list(tier.catalog.root) == []


async def test_a_broker_writes_segments_in_a_worker_process(
    store: MessageStore, tmp_path: Path
) -> None:
    """What a broker runs: the uploader's writes in a process of its own (started with
    the tier, stopped with it), the catalogue kept here."""
    tier = _tier(store, tmp_path / "tier")
    tier.start()
    try:
        workers = multiprocessing.active_children()
        assert workers, "no worker process"
        await _produce(store, 0, 90)
        deadline = time.monotonic() + 60
        while tier.uploader.pending() and time.monotonic() < deadline:  # noqa: ASYNC110 (polling the uploader)
            await asyncio.sleep(0.05)
        assert tier.uploader.pending() == {}
    finally:
        await tier.stop()
    assert not any(w.is_alive() for w in workers)
    for qid in range(QUEUES):
        assert tier_contents(tier.backend, tier.catalog.root)[(TOPIC, qid)] == list(range(30))
    assert tier.uploader.counters.segments > 0 and tier.uploader.counters.errors == 0
