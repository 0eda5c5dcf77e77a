from __future__ import annotations

from pathlib import Path

import pytest

from rocketcluster.broker.store import (
    FlushMode,
    GetStatus,
    MessageStore,
    MessageToStore,
    PutStatus,
    StoreLockedError,
    record,
)

from .conftest import message, small_config


async def test_put_then_read_by_queue_id_and_key(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        for i in range(60):
            assert (await store.put(message(i))).ok
        assert store.queue_offsets("orders", 0) == (0, 20)
        got = store.get_messages("orders", 1, 5, 4)
        assert got.status is GetStatus.FOUND
        assert [m.queue_offset for m in got.messages] == [5, 6, 7, 8]
        assert [m.msg_id for m in got.messages] == [f"ID{i:030d}" for i in (16, 19, 22, 25)]
        assert got.next_offset == 9
        assert [m.msg_id for m in store.lookup_by_id(f"ID{7:030d}")] == [f"ID{7:030d}"]
        shared = store.lookup_by_key("orders", "shared-3")
        assert sorted(m.msg_id for m in shared) == sorted(f"ID{i:030d}" for i in range(3, 60, 5))
        assert store.lookup_by_key("other-topic", "shared-3") == []
        assert store.lookup_by_id("nope") == []
    finally:
        await store.close()


async def test_filters_skip_messages(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        for i in range(30):
            await store.put(message(i, queues=1))
        even = record.tags_code("even")
        got = store.get_messages("orders", 0, 0, 100, tags_filter=lambda code: code == even)
        assert all(m.tag == "even" for m in got.messages) and len(got.messages) == 15
        got = store.get_messages("orders", 0, 0, 3, message_filter=lambda m: "key-2" in m.keys[0])
        assert [m.keys[0] for m in got.messages] == ["key-2", "key-20", "key-21"]
    finally:
        await store.close()


async def test_read_statuses_at_the_edges(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        await store.put(message(0, queues=1))
        assert store.get_messages("orders", 0, 1, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
        assert store.get_messages("orders", 0, 50, 10).status is GetStatus.OFFSET_OVERFLOW_BADLY
        assert store.get_messages("nope", 0, 0, 10).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_messages("orders", 0, 0, 10).status is GetStatus.FOUND
    finally:
        await store.close()


async def test_bad_input_is_refused_and_nothing_is_written(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        before = store.commitlog.write_offset
        too_big = MessageToStore.build("orders", 0, b"x" * 2049)
        result = await store.put(too_big)
        assert result.status is PutStatus.MESSAGE_ILLEGAL and "2049" in result.reason
        bad_topic = await store.put(MessageToStore.build("no spaces allowed", 0, b"x"))
        assert bad_topic.status is PutStatus.MESSAGE_ILLEGAL and "topic" in bad_topic.reason
        long_topic = await store.put(MessageToStore.build("t" * 200, 0, b"x"))
        assert long_topic.status is PutStatus.MESSAGE_ILLEGAL
        props = MessageToStore.build("orders", 0, b"x", properties={"p": "v" * 600})
        assert (await store.put(props)).status is PutStatus.PROPERTIES_SIZE_EXCEEDED
        assert (
            await store.put(MessageToStore.build("orders", -1, b"x"))
        ).status is PutStatus.MESSAGE_ILLEGAL
        assert (await store.put_batch([])).status is PutStatus.MESSAGE_ILLEGAL
        # A batch with one bad message is refused whole.
        batch = [message(1), too_big]
        assert (await store.put_batch(batch)).status is PutStatus.MESSAGE_ILLEGAL
        assert store.commitlog.write_offset == before
    finally:
        await store.close()
    closed = await store.put(message(1))
    assert closed.status is PutStatus.SERVICE_NOT_AVAILABLE


async def test_second_process_cannot_open_the_same_directory(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        with pytest.raises(StoreLockedError, match="in use"):
            await MessageStore.open(small_config(store_dir))
    finally:
        await store.close()
    reopened = await MessageStore.open(small_config(store_dir))
    await reopened.close()


@pytest.mark.parametrize("mode", [FlushMode.SYNC, FlushMode.ASYNC])
async def test_clean_restart_keeps_everything(store_dir: Path, mode: FlushMode) -> None:
    cfg = small_config(store_dir, flush=mode)
    store = await MessageStore.open(cfg)
    for i in range(100):
        await store.put(message(i))
    await store.close()
    store = await MessageStore.open(cfg)
    try:
        assert store.recovery.clean_shutdown and store.recovery.quarantined == []
        assert sum(store.queue_offsets("orders", q)[1] for q in range(3)) == 100
        assert (await store.put(message(100))).records[0].queue_offset == 33  # queue 1
    finally:
        await store.close()


async def test_sync_flush_acknowledges_only_after_fsync(store_dir: Path) -> None:
    store = await MessageStore.open(small_config(store_dir))
    try:
        result = await store.put(message(1))
        end = result.records[0].physical_offset + result.records[0].size
        assert store.commitlog.flushed_offset >= end
    finally:
        await store.close()
