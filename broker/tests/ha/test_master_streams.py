"""HAMaster bookkeeping when a slave's replication streams overlap.

After a partition heals, a slave notices first (its keepalive) and opens a new
Replicate stream while the master still holds the old, dead one; the old one ends
later. Found by the chaos suite: the late end marked the slave disconnected while its
new stream replicated, so it never re-entered the SyncStateSet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rocketcluster.api.cluster import ReplicationSpec
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import EpochFileCache
from rocketcluster.broker.ha.master import COALESCE_BYTES, GroupView, HAMaster
from rocketcluster.broker.store import MessageStore, MessageToStore
from rocketcluster.ctl.testing import small_store_config


class Stream:
    """One slave's side of a Replicate stream: a handshake, then what we push."""

    def __init__(self, broker_id: int) -> None:
        self.inbox: asyncio.Queue[hpb.SlaveMessage | None] = asyncio.Queue()
        self.inbox.put_nowait(
            hpb.SlaveMessage(handshake=hpb.Handshake(group="g", broker_id=broker_id))
        )

    async def requests(self) -> AsyncIterator[hpb.SlaveMessage]:
        while (message := await self.inbox.get()) is not None:
            yield message

    def ack(self, offset: int) -> None:
        self.inbox.put_nowait(hpb.SlaveMessage(ack=hpb.SlaveAck(max_offset=offset)))

    def end(self) -> None:
        self.inbox.put_nowait(None)


async def _drain(master: HAMaster, stream: Stream) -> None:
    async for _ in master.serve(stream.requests()):
        pass


async def _no_alter(*_: Any) -> tuple[bool, None]:
    return False, None


async def test_a_late_end_of_an_old_stream_leaves_the_new_one_alone(tmp_path: Path) -> None:
    config = small_store_config(tmp_path / "store", segment_size=1 << 20)
    store = await MessageStore.open(config)
    try:
        master = HAMaster(
            store,
            EpochFileCache(tmp_path / "epochs.json"),
            1,
            ReplicationSpec(in_sync_replicas=2),
            _no_alter,
            dict,
        )
        master.activate(GroupView(1, 1, {1, 2}, 1))
        old, new = Stream(2), Stream(2)
        old_task = asyncio.create_task(_drain(master, old))
        await asyncio.sleep(0.05)
        assert master.slaves[2].connected
        new_task = asyncio.create_task(_drain(master, new))
        await asyncio.sleep(0.05)
        new.ack(0)
        old.ack(10_000)  # stale: must not count
        old.end()  # the dead stream finally ends
        await asyncio.wait_for(old_task, 5)
        await asyncio.sleep(0.05)
        slave = master.slaves[2]
        assert slave.connected, "the old stream's end marked the live slave disconnected"
        assert slave.ack_offset == 0
        new.end()
        await asyncio.wait_for(new_task, 5)
        assert not master.slaves[2].connected
        await master.close()
    finally:
        await store.close()


async def _frames(master: HAMaster, stream: Stream, into: list[hpb.Data]) -> None:
    async for message in master.serve(stream.requests()):
        if message.HasField("data"):
            into.append(message.data)


async def test_frames_wait_for_the_slaves_ack_and_carry_every_put_since(tmp_path: Path) -> None:
    """One frame in flight per slave: what is appended while the slave has not acked
    the last frame goes out in one frame when it does (fewer frames and acks per
    message under load), and a backlog of COALESCE_BYTES goes out without waiting
    (a slave catching up is not held to one frame per round trip)."""
    config = small_store_config(
        tmp_path / "store", segment_size=4 << 20, max_message_bytes=COALESCE_BYTES
    )
    store = await MessageStore.open(config)
    try:
        master = HAMaster(
            store,
            EpochFileCache(tmp_path / "epochs.json"),
            1,
            ReplicationSpec(in_sync_replicas=2),
            _no_alter,
            dict,
        )
        master.activate(GroupView(1, 1, {1, 2}, 1))
        stream, frames = Stream(2), list[hpb.Data]()
        task = asyncio.create_task(_frames(master, stream, frames))

        async def put(i: int, size: int = 100) -> int:
            assert (await store.put(MessageToStore.build("t", 0, b"x" * size, msg_id=f"m{i}"))).ok
            master.data_written()
            await asyncio.sleep(0.05)
            return store.commitlog.write_offset

        first_end = await put(0)
        assert [(f.offset, len(f.data)) for f in frames] == [(0, first_end)]
        await put(1)
        third_end = await put(2)
        assert len(frames) == 1, "a frame went out before the slave acked the last one"
        stream.ack(first_end)
        await asyncio.sleep(0.05)
        assert [(f.offset, f.offset + len(f.data)) for f in frames[1:]] == [(first_end, third_end)]
        body = COALESCE_BYTES // 4
        ends = [await put(i, body) for i in range(3, 8)]  # no ack
        # The fourth put made COALESCE_BYTES pending: out at once, unacked; the fifth
        # waits for the ack again.
        assert [(f.offset, f.offset + len(f.data)) for f in frames[2:]] == [(third_end, ends[3])]
        stream.ack(ends[3])
        await asyncio.sleep(0.05)
        assert [(f.offset, f.offset + len(f.data)) for f in frames[3:]] == [(ends[3], ends[4])]
        stream.end()
        await asyncio.wait_for(task, 5)
    finally:
        await master.close()
        await store.close()
