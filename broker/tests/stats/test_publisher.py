"""The publisher and the reader in one process on a real store: what is appended,
split, refused and logged, and how pages and time lookups read it back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rocketcluster.api.stats import (
    STATS_TOPIC,
    ConsumerStats,
    QueueStats,
    SnapshotTooLargeError,
    StatsSnapshot,
    decode_snapshot,
    encode_snapshot,
)
from rocketcluster.api.topics import ConsumerGroupSpec, TopicSpec
from rocketcluster.broker.messaging.consume_state import QueueConsumeState
from rocketcluster.broker.messaging.registry import TopicRegistry
from rocketcluster.broker.stats import ReadRecorder, StatsPublisherService, StatsSources
from rocketcluster.broker.stats import collect as collect_module
from rocketcluster.broker.stats import publisher as publisher_module
from rocketcluster.broker.stats.collect import Identity
from rocketcluster.broker.stats.reader import offset_for_time, read_page
from rocketcluster.broker.store import (
    AppendedRecord,
    MessageStore,
    MessageToStore,
    PutResult,
    PutStatus,
)
from rocketcluster.ctl.testing import small_store_config

IDENTITY = Identity("c1", "c1-broker-0", 0)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    config = small_store_config(tmp_path / "store", segment_size=1 << 20, max_message_bytes=65536)
    opened = await MessageStore.open(config)
    try:
        yield opened
    finally:
        await opened.close()


def _publisher(
    store: MessageStore,
    *,
    write: object = None,
    active: object = None,
    states: dict[tuple[str, str, int], QueueConsumeState] | None = None,
    interval_s: float = 1.0,
    max_body: int = 65536,
) -> tuple[StatsPublisherService, TopicRegistry]:
    registry = TopicRegistry(store.metadata, auto_create=False)
    registry.put_topic(TopicSpec(name="orders", queues=2))
    registry.put_group(ConsumerGroupSpec(name="g"))
    sources = StatsSources(
        store,
        registry,
        lambda: dict(states or {}),
        ReadRecorder(store.commitlog.segment_size),
        lambda: IDENTITY,
    )
    publisher = StatsPublisherService(
        sources,
        write or store.put_batch,  # type: ignore[arg-type]
        active or (lambda: True),  # type: ignore[arg-type]
        interval_s=interval_s,
        max_body=max_body,
    )
    return publisher, registry


async def _orders(store: MessageStore, count: int) -> None:
    batch = [
        MessageToStore.build("orders", i % 2, b"x" * 100, msg_id=f"o{i}") for i in range(count)
    ]
    assert (await store.put_batch(batch)).ok


async def test_a_published_snapshot_reads_back_whole(store: MessageStore) -> None:
    await _orders(store, 10)
    states = {("g", "orders", 1): QueueConsumeState(2)}
    publisher, registry = _publisher(store, states=states)
    published = await publisher.publish_once(now_ms=1_000)
    assert published is not None
    assert (published.time, published.messages, published.first_offset) == (1_000, 1, 0)
    topic = registry.get_topic(STATS_TOPIC)
    assert topic is not None and topic.queues == 1  # created with its first snapshot

    page = read_page(store, 0, 10)
    assert (page.min_offset, page.max_offset, page.next_offset, page.skipped) == (0, 1, 1, 0)
    (item,) = page.snapshots
    snapshot = StatsSnapshot.model_validate(item["snapshot"])
    assert item["offset"] == 0 and item["storeTime"] > 0
    assert (snapshot.time, snapshot.cluster, snapshot.broker_group) == (1_000, "c1", "c1-broker-0")
    assert [(q.topic, q.queue_id, q.max_offset) for q in snapshot.queues] == [
        ("orders", 0, 5),
        ("orders", 1, 5),
    ]
    (consumer,) = snapshot.consumers
    assert (consumer.consumer_group, consumer.committed_offset, consumer.max_offset) == ("g", 2, 5)
    assert sum(s.messages for s in snapshot.segments) == 10

    await publisher.publish_once(now_ms=2_000)
    second = read_page(store, page.next_offset, 10)
    assert [s["offset"] for s in second.snapshots] == [1]
    # The stats topic itself is never reported, though it now holds a message.
    later = StatsSnapshot.model_validate(second.snapshots[0]["snapshot"])
    assert {q.topic for q in later.queues} == {"orders"}


def _big_snapshot(rows: int) -> StatsSnapshot:
    return StatsSnapshot(
        time=5,
        cluster="c1",
        broker_group="g0",
        broker_id=1,
        queues=[
            QueueStats(topic=f"t{i}", queue_id=0, min_offset=0, max_offset=i) for i in range(rows)
        ],
        consumers=[
            ConsumerStats(
                consumer_group="g", topic=f"t{i}", queue_id=0, committed_offset=0, max_offset=i
            )
            for i in range(rows)
        ],
    )


def test_bodies_are_split_to_fit_the_message_limit() -> None:
    snapshot = _big_snapshot(300)
    bodies = encode_snapshot(snapshot, 4096)
    assert len(bodies) > 2 and all(len(b) <= 4096 for b in bodies)
    assert all(len(b) > 3500 for b in bodies[:-1])  # packed, not halved until it fits
    parts = [decode_snapshot(b) for b in bodies]
    assert {p.time for p in parts} == {5}
    assert [q for p in parts for q in p.queues] == snapshot.queues
    assert [c for p in parts for c in p.consumers] == snapshot.consumers
    assert len(encode_snapshot(snapshot, 1 << 20)) == 1  # 600 rows: one body
    assert len(encode_snapshot(snapshot)) == 1
    assert len(encode_snapshot(_big_snapshot(600))) == 2  # MAX_ROWS_PER_MESSAGE a body
    with pytest.raises(SnapshotTooLargeError, match="raise maxMessageBytes"):
        encode_snapshot(snapshot, 60)


async def test_a_small_message_limit_splits_a_snapshot_into_several_messages(
    store: MessageStore,
) -> None:
    await _orders(store, 20)
    publisher, _ = _publisher(store, max_body=400)
    published = await publisher.publish_once(now_ms=7)
    assert published is not None and published.messages > 1
    page = read_page(store, 0, 100)
    assert len(page.snapshots) == published.messages
    rows = [StatsSnapshot.model_validate(s["snapshot"]) for s in page.snapshots]
    assert {r.time for r in rows} == {7}
    assert sum(len(r.queues) + len(r.consumers) + len(r.segments) for r in rows) == published.rows


async def test_a_broker_that_is_not_master_cannot_append(store: MessageStore) -> None:
    publisher, _ = _publisher(store)
    store.writable = False  # what a demoted master's store says
    assert await publisher.publish_once() is None
    assert publisher.failure is not None and "not its group's master" in publisher.failure
    store.writable = True
    assert await publisher.publish_once() is not None


class ScriptedWriter:
    """Answers each write with the next status of a script, and counts the calls."""

    def __init__(self, statuses: list[PutStatus]) -> None:
        self.statuses = statuses
        self.calls = 0
        self.done = asyncio.Event()

    async def __call__(self, records: Sequence[MessageToStore]) -> PutResult:
        status = self.statuses[min(self.calls, len(self.statuses) - 1)]
        self.calls += 1
        if self.calls >= len(self.statuses):
            self.done.set()
        if status is PutStatus.PUT_OK:
            return PutResult(status, [AppendedRecord(0, 0, 0)])
        return PutResult(status, reason=f"scripted {status.value}")


async def test_failures_are_logged_once_per_change_and_retried(
    store: MessageStore, caplog: pytest.LogCaptureFixture
) -> None:
    full, lost = PutStatus.DISK_FULL, PutStatus.SERVICE_NOT_AVAILABLE
    script = [full, full, full, lost, lost, PutStatus.PUT_OK, PutStatus.PUT_OK]
    writer = ScriptedWriter(script)
    publisher, _ = _publisher(store, write=writer, interval_s=0.01)
    caplog.set_level(logging.INFO, logger="rocketcluster.broker.stats.publisher")
    task = asyncio.create_task(publisher.run())
    try:
        async with asyncio.timeout(30):
            await writer.done.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    messages = [r.getMessage() for r in caplog.records]
    warnings = [m for m in messages if "failed" in m]
    assert len(warnings) == 2, messages
    assert "DISK_FULL" in warnings[0] and "SERVICE_NOT_AVAILABLE" in warnings[1]
    assert sum("works again" in m for m in messages) == 1
    assert publisher.failure is None


async def test_a_slave_does_not_publish(store: MessageStore) -> None:
    writer = ScriptedWriter([PutStatus.PUT_OK])
    master = asyncio.Event()
    publisher, _ = _publisher(store, write=writer, active=master.is_set, interval_s=0.01)
    task = asyncio.create_task(publisher.run())
    try:
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert writer.calls == 0
        master.set()  # promoted
        async with asyncio.timeout(30):
            await writer.done.wait()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_an_interval_of_zero_disables_publishing(store: MessageStore) -> None:
    publisher, _ = _publisher(store, interval_s=0)
    async with asyncio.timeout(5):
        await publisher.run()  # returns at once
    with pytest.raises(ValueError, match="statsIntervalSeconds"):
        _publisher(store, interval_s=-1)


async def test_pages_skip_unreadable_bodies_and_respect_their_bounds(
    store: MessageStore,
) -> None:
    publisher, _ = _publisher(store)
    await publisher.publish_once(now_ms=1)
    junk = MessageToStore.build(STATS_TOPIC, 0, b"not a snapshot", msg_id="junk")
    assert (await store.put(junk)).ok
    await publisher.publish_once(now_ms=3)
    page = read_page(store, 0, 1000)
    assert [s["offset"] for s in page.snapshots] == [0, 2]
    assert (page.skipped, page.next_offset) == (1, 3)
    assert [s["offset"] for s in read_page(store, 1, 1).snapshots] == []
    assert read_page(store, 1, 1).next_offset == 2
    assert read_page(store, 0, 2).next_offset == 2
    small = read_page(store, 0, 1000, max_bytes=1)  # a byte budget: one message
    assert (len(small.snapshots), small.next_offset) == (1, 1)
    beyond = read_page(store, 50, 10)
    assert (beyond.snapshots, beyond.next_offset, beyond.max_offset) == ([], 50, 3)
    with pytest.raises(ValueError, match="limit"):
        read_page(store, 0, 0)


async def test_the_offset_of_a_time_is_found_by_store_time(store: MessageStore) -> None:
    assert offset_for_time(store, 0) == (0, 0, 0)  # no stats topic yet
    publisher, _ = _publisher(store)
    for _ in range(6):
        await publisher.publish_once()
        await asyncio.sleep(0.003)
    times = [s["storeTime"] for s in read_page(store, 0, 100).snapshots]
    assert times == sorted(times) and len(set(times)) == 6
    for k, stored in enumerate(times):
        assert offset_for_time(store, stored) == (k, 0, 6)
        assert offset_for_time(store, stored - 1) == (k, 0, 6)  # times are >= 3 ms apart
    assert offset_for_time(store, times[-1] + 1) == (6, 0, 6)


async def test_a_snapshot_of_many_queues_is_built_a_part_at_a_time_between_loop_turns(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pass over every queue holds the loop (issue #27: with 100,000 queues one
    such pass was 30-250 ms): each step of the snapshot takes at most ROWS_PER_STEP
    queues, and the loop turns between any two steps of the same kind."""
    step = 16
    monkeypatch.setattr(publisher_module, "ROWS_PER_STEP", step)
    publisher, registry = _publisher(store)
    for t in range(12):
        registry.put_topic(TopicSpec(name=f"many-{t:02d}", queues=8))
    batch = [
        MessageToStore.build(f"many-{t:02d}", q, b"y" * 64, msg_id=f"m{t}-{q}")
        for t in range(12)
        for q in range(8)
    ]
    assert (await store.put_batch(batch)).ok
    retired = MessageToStore.build("gone", 0, b"z", msg_id="gone")  # no topic serves it
    assert (await store.put_batch([retired])).ok
    turns = 0
    steps: dict[str, list[tuple[int, int]]] = {}  # kind: (items, turns so far) per call

    def counted(kind: str, func: Any, size_of: Any = len) -> Any:
        def call(items: Any, *args: Any, **kwargs: Any) -> Any:
            items = list(items)
            steps.setdefault(kind, []).append((size_of(items), turns))
            return func(items, *args, **kwargs)

        return call

    topic_keys = collect_module.topic_queue_keys
    monkeypatch.setattr(
        collect_module,
        "topic_queue_keys",
        counted("topic keys", topic_keys, lambda ts: sum(t.queues for t in ts)),
    )
    for name in ("retired_queue_keys", "queue_stats", "segment_stats"):
        monkeypatch.setattr(collect_module, name, counted(name, getattr(collect_module, name)))

    async def ticker() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    ticking = asyncio.create_task(ticker())
    try:
        snapshot = await publisher.collect(now_ms=5_000)
    finally:
        ticking.cancel()
    queues = {(q.topic, q.queue_id) for q in snapshot.queues}
    assert {(f"many-{t:02d}", q) for t in range(12) for q in range(8)} <= queues
    assert ("gone", 0) in queues  # a retired topic's queue still reported
    assert set(steps) == {"topic keys", "retired_queue_keys", "queue_stats", "segment_stats"}
    for kind, calls in steps.items():
        assert len(calls) > 1, (kind, calls)
        assert all(items <= step for items, _ in calls), (kind, calls)
        at = [seen for _, seen in calls]
        assert at == sorted(set(at)), f"{kind}: two steps without a loop turn between: {at}"
