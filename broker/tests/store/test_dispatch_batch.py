"""Batched dispatch of replicated bytes: a slave's consume queues, index and queue
offsets match its master's, also when the confirm offset stops inside a frame and
when a pending tail is cut (epoch change) and copied again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rocketcluster.broker.store import MessageStore, MessageToStore
from rocketcluster.broker.store import record as rec
from rocketcluster.broker.store.record_scan import scan_batch
from rocketcluster.broker.store.replica import append_replicated, scan_records, truncate_to

from .conftest import message, small_config

QUEUES = 3
MasterLog = tuple[bytes, dict[tuple[str, int], bytes]]


def batch_of(first: int, count: int) -> list[MessageToStore]:
    """Messages over three queues and two topics; every third has no keys."""
    out = []
    for i in range(first, first + count):
        msg = message(i, queues=QUEUES, topic="orders" if i % 7 else "audit")
        if i % 3 == 0:
            msg.keys = ()
            msg.properties = rec.encode_properties({rec.PROPERTY_UNIQ_KEY: msg.msg_id})
        out.append(msg)
    return out


SEGMENT = 8192  # small_config's: records cross no boundary, blanks fill segment ends


def message_starts(data: bytes) -> list[int]:
    """Where each message record of a log starting at 0 starts (blanks skipped)."""
    starts, pos = [], 0
    while pos < len(data):
        check = rec.check_record(data, pos, pos, SEGMENT - pos % SEGMENT)
        assert check.kind is not None, check.reason
        if check.kind == rec.RecordKind.MESSAGE:
            starts.append(pos)
        pos += check.size
    return starts


def message_ends(data: bytes) -> list[int]:
    return [p + int.from_bytes(data[p : p + 4], "big") for p in message_starts(data)]


def copy(slave: MessageStore, data: bytes, start: int, stop: int) -> None:
    """Replicate ``data[start:stop]`` as a master does: frames within one segment."""
    while start < stop:
        end = min(stop, (start // SEGMENT + 1) * SEGMENT)
        append_replicated(slave, start, data[start:end])
        start = end


def queue_state(store: MessageStore) -> dict[tuple[str, int], bytes]:
    """Every consume queue's entries, as bytes (across its files)."""
    state = {}
    for cq in store.queues:
        raw, index = b"", cq.min_index
        while index < cq.max_index:
            part = cq.raw_entries(index, cq.max_index - index)
            raw += part
            index += len(part) // 20
        state[(cq.topic, cq.queue_id)] = raw
    return state


async def settle(store: MessageStore) -> None:
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.fixture(scope="module")
def master_log(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[bytes, dict[tuple[str, int], bytes]]:
    """A master's whole commit log and its consume queues after 90 messages."""

    async def run() -> tuple[bytes, dict[tuple[str, int], bytes]]:
        master = await MessageStore.open(small_config(tmp_path_factory.mktemp("m")))
        for first in range(0, 90, 15):
            assert (await master.put_batch(batch_of(first, 15))).ok
        await settle(master)
        data = master.commitlog.read(0, master.commitlog.write_offset)
        state = queue_state(master)
        await master.close()
        return data, state

    return asyncio.run(run())


async def test_confirm_inside_a_frame_then_all(
    tmp_path: Path, master_log: tuple[bytes, dict[tuple[str, int], bytes]]
) -> None:
    data, master_queues = master_log
    ends = message_ends(data)
    slave = await MessageStore.open(small_config(tmp_path / "s"))
    try:
        slave.writable = False
        copy(slave, data, 0, len(data))
        cut = ends[17]  # inside the first frame
        slave.set_confirm_offset(cut)
        await settle(slave)
        assert slave.dispatched_offset == cut
        dispatched = sum(len(v) // 20 for v in queue_state(slave).values())
        assert dispatched == 18
        slave.set_confirm_offset(ends[-1])
        await settle(slave)
        assert slave.dispatched_offset >= ends[-1]
        assert queue_state(slave) == master_queues
        # Index entries of both kinds, from the scan's columns.
        assert [m.msg_id for m in slave.lookup_by_id(f"ID{50:030d}")] == [f"ID{50:030d}"]
        found = slave.lookup_by_key("orders", "key-52")
        assert [m.msg_id for m in found] == [f"ID{52:030d}"]
        assert slave.lookup_by_key("orders", "key-51") == []  # 51 has no keys
        assert slave.commitlog.queue_offsets == {k: len(v) // 20 for k, v in master_queues.items()}
    finally:
        await slave.close()


async def test_pending_tail_cut_and_copied_again(
    tmp_path: Path, master_log: tuple[bytes, dict[tuple[str, int], bytes]]
) -> None:
    data, master_queues = master_log
    ends = message_ends(data)
    slave = await MessageStore.open(small_config(tmp_path / "s"))
    try:
        slave.writable = False
        copy(slave, data, 0, ends[60])
        slave.set_confirm_offset(ends[20])
        await settle(slave)
        truncate_to(slave, ends[33])  # pending records 34.. go; 21..33 stay pending
        assert slave.dispatcher.pending == 13
        copy(slave, data, ends[33], len(data))
        slave.set_confirm_offset(ends[-1])
        await settle(slave)
        assert queue_state(slave) == master_queues
        assert slave.commitlog.queue_offsets == {k: len(v) // 20 for k, v in master_queues.items()}
    finally:
        await slave.close()


def test_batch_scan_says_what_summarize_says(
    master_log: tuple[bytes, dict[tuple[str, int], bytes]],
) -> None:
    data, _ = master_log
    summaries = [rec.summarize(data, p) for p in message_starts(data)]
    assert scan_records(data, 0, SEGMENT) == summaries
    batch = scan_batch(data, 0, SEGMENT)
    # One run per topic/queue: consecutive queue offsets inside a frame.
    assert len(batch.runs) == len({(r.topic, r.queue_id) for r in batch.runs})
