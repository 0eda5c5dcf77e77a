"""HAMaster's write path: sync writes wait for enough acks (one future per request,
woken in log order, timed out by one shared timer), and what it streams to a slave
is whole records, cut at a record boundary when the slave is far behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rocketcluster.api.cluster import ReplicationSpec
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import EpochFileCache
from rocketcluster.broker.ha.master import BATCH_BYTES, GroupView, HAMaster, whole_records
from rocketcluster.broker.store import MessageStore, MessageToStore, PutStatus
from rocketcluster.broker.store.record import RecordKind, check_record
from rocketcluster.ctl.testing import small_store_config

SEGMENT = 8 << 20


class Slave:
    """One slave's side of a Replicate stream: a handshake, then the acks we push."""

    def __init__(self, broker_id: int, max_offset: int = 0) -> None:
        self.inbox: asyncio.Queue[hpb.SlaveMessage | None] = asyncio.Queue()
        self.inbox.put_nowait(
            hpb.SlaveMessage(
                handshake=hpb.Handshake(group="g", broker_id=broker_id, max_offset=max_offset)
            )
        )
        self.frames: list[hpb.Data] = []

    async def requests(self) -> AsyncIterator[hpb.SlaveMessage]:
        while (message := await self.inbox.get()) is not None:
            yield message

    def ack(self, offset: int) -> None:
        self.inbox.put_nowait(hpb.SlaveMessage(ack=hpb.SlaveAck(max_offset=offset)))

    async def run(self, master: HAMaster) -> None:
        async for message in master.serve(self.requests()):
            if message.HasField("data"):
                self.frames.append(message.data)


async def _no_alter(*_: Any) -> tuple[bool, None]:
    return False, None


async def _open(tmp_path: Path, ack_timeout_s: float = 5.0) -> tuple[MessageStore, HAMaster]:
    store = await MessageStore.open(small_store_config(tmp_path / "store", segment_size=SEGMENT))
    master = HAMaster(
        store,
        EpochFileCache(tmp_path / "epochs.json"),
        1,
        ReplicationSpec(in_sync_replicas=2),
        _no_alter,
        dict,
        ack_timeout_s=ack_timeout_s,
    )
    master.activate(GroupView(1, 1, {1, 2, 3}, 1))
    store.add_write_listener(master.data_written)
    return store, master


async def _write(store: MessageStore, count: int, size: int = 1024) -> int:
    """Store ``count`` messages in one batch; the log's end after it."""
    result = await store.put_batch(
        [MessageToStore("t", 0, bytes([i % 251]) * size) for i in range(count)]
    )
    assert result.ok
    last = result.records[-1]
    return last.physical_offset + last.size


async def test_a_sync_write_is_acknowledged_only_once_two_of_three_hold_it(
    tmp_path: Path,
) -> None:
    store, master = await _open(tmp_path)
    slave2, slave3 = Slave(2), Slave(3)
    tasks = [asyncio.create_task(s.run(master)) for s in (slave2, slave3)]
    try:
        await asyncio.sleep(0.05)
        first_end = await _write(store, 32)
        second_end = await _write(store, 32)
        first = asyncio.create_task(master.wait_replicated(first_end))
        second = asyncio.create_task(master.wait_replicated(second_end))
        await asyncio.sleep(0.1)
        assert not first.done() and not second.done(), "acked before any slave held it"
        assert store.confirm_offset == 0
        slave2.ack(first_end)
        assert await asyncio.wait_for(first, 5) is PutStatus.PUT_OK
        await asyncio.sleep(0.05)
        assert not second.done(), "a slave holding the first write does not hold the second"
        # Two of three in the set hold the first write: consumers may read it.
        assert store.confirm_offset == 0  # slave 3 acked nothing: the confirm offset waits
        slave3.ack(second_end)  # the master and slave 3 hold it: two of three
        assert await asyncio.wait_for(second, 5) is PutStatus.PUT_OK
        assert store.confirm_offset == first_end  # slave 2 holds only the first
        slave2.ack(second_end)
        await asyncio.sleep(0.05)
        assert store.confirm_offset == second_end
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await master.close()
        await store.close()


async def test_unacknowledged_writes_time_out_and_a_demotion_wakes_the_rest(
    tmp_path: Path,
) -> None:
    store, master = await _open(tmp_path, ack_timeout_s=0.3)
    try:
        end = await _write(store, 4)
        timed_out = await asyncio.wait_for(master.wait_replicated(end), 5)
        assert timed_out is PutStatus.FLUSH_SLAVE_TIMEOUT
        # A cancelled waiter (the client went away) leaves the others alone.
        end2 = await _write(store, 4)
        cancelled = asyncio.create_task(master.wait_replicated(end2))
        waiting = asyncio.create_task(master.wait_replicated(end2))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        await asyncio.sleep(0.05)
        assert not waiting.done()
        master.deactivate()
        assert await asyncio.wait_for(waiting, 5) is PutStatus.SLAVE_NOT_AVAILABLE
    finally:
        await master.close()
        await store.close()


async def test_a_slave_far_behind_gets_whole_records_in_frames_of_about_batch_bytes(
    tmp_path: Path,
) -> None:
    store, master = await _open(tmp_path)
    end = 0
    for _ in range(3 * BATCH_BYTES // (64 * 1900) + 2):
        end = await _write(store, 64, size=1900)
    assert end > 2 * BATCH_BYTES
    slave = Slave(2)
    task = asyncio.create_task(slave.run(master))
    try:
        for _ in range(100):
            if slave.frames and slave.frames[-1].offset + len(slave.frames[-1].data) == end:
                break
            await asyncio.sleep(0.05)
        position = 0
        for frame in slave.frames:
            assert frame.offset == position
            assert len(frame.data) <= BATCH_BYTES or whole_records(frame.data) == 0
            assert whole_records(frame.data) == len(frame.data), "a frame ends mid-record"
            pos = 0
            while pos < len(frame.data):  # every record whole and valid where it lies
                offset = frame.offset + pos
                space_left = SEGMENT - offset % SEGMENT
                check = check_record(frame.data, pos, offset, space_left)
                assert check.kind == RecordKind.MESSAGE, check
                pos += check.size
            position += len(frame.data)
        assert position == end
        assert len(slave.frames) >= 3
        assert store.commitlog.read(0, end) == b"".join(f.data for f in slave.frames)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await master.close()
        await store.close()


def test_whole_records_stops_at_the_last_complete_record() -> None:
    record = (100).to_bytes(4, "big") + bytes(96)
    assert whole_records(record * 3) == 300
    assert whole_records(record * 3 + record[:50]) == 300
    assert whole_records(record[:3]) == 0
    assert whole_records(bytes(8)) == 0  # a zero size is no record
