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
from rocketcluster.broker.ha.master import GroupView, HAMaster
from rocketcluster.broker.store import MessageStore
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
