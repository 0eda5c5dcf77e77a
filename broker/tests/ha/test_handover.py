"""The master's side of a graceful switchover: the write gate and PrepareHandover.

While the gate is closed nothing reaches the commit log (requests wait, they are not
failed); the master answers caught up only once the target acknowledged the final log
end, keeps the gate closed until it follows a new master, and never pauses writes for
a target that cannot catch up.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rocketcluster.api.cluster import ReplicationSpec
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import EpochFileCache
from rocketcluster.broker.ha.handover import HandoverService
from rocketcluster.broker.ha.master import GroupView, HAMaster
from rocketcluster.broker.store import MessageStore, MessageToStore, PutResult
from rocketcluster.ctl.testing import small_store_config


def _msg(i: int) -> MessageToStore:
    return MessageToStore.build("t", 0, b"x" * 100, msg_id=f"m{i}")


class Slave:
    """Slave 2's side of a Replicate stream: a handshake, then the acks we choose."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[hpb.SlaveMessage | None] = asyncio.Queue()
        self.inbox.put_nowait(hpb.SlaveMessage(handshake=hpb.Handshake(group="g", broker_id=2)))

    async def requests(self) -> AsyncIterator[hpb.SlaveMessage]:
        while (message := await self.inbox.get()) is not None:
            yield message

    def ack(self, offset: int) -> None:
        self.inbox.put_nowait(hpb.SlaveMessage(ack=hpb.SlaveAck(max_offset=offset)))


@dataclass
class FakeRole:
    """What HandoverService reads of the RoleManager."""

    store: MessageStore
    ha_master: HAMaster
    broker_id: int = 1
    role: str = "master"
    view: dict[str, Any] = field(default_factory=lambda: {"masterEpoch": 1})
    master_client_endpoint: str = ""
    config: Any = field(default_factory=lambda: SimpleNamespace(group="g"))
    following: bool = False  # the new master accepted the replication handshake

    def is_master(self) -> bool:
        return self.role == "master"

    def replicating(self) -> bool:
        return self.following


async def _no_alter(*_: Any) -> tuple[bool, None]:
    return False, None


async def _running(aw: Awaitable[Any]) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(aw)
    await asyncio.sleep(0.05)
    return task


def _request(timeout_ms: int = 2000, hold_ms: int = 2000, epoch: int = 1) -> hpb.HandoverRequest:
    return hpb.HandoverRequest(
        group="g", master_epoch=epoch, target_broker_id=2, timeout_ms=timeout_ms, hold_ms=hold_ms
    )


class Setup:
    def __init__(self, store: MessageStore, tmp_path: Path) -> None:
        self.store = store
        self.ha = HAMaster(
            store,
            EpochFileCache(tmp_path / "epochs.json"),
            1,
            ReplicationSpec(in_sync_replicas=2),
            _no_alter,
            dict,
        )
        self.ha.activate(GroupView(1, 1, {1, 2}, 1))
        self.role = FakeRole(store, self.ha)
        self.handover = HandoverService(self.role)
        self.slave = Slave()

    async def __aenter__(self) -> Setup:
        async def drain() -> None:
            async for _ in self.ha.serve(self.slave.requests()):
                pass

        self._serving = await _running(drain())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.slave.inbox.put_nowait(None)
        await asyncio.wait_for(self._serving, 5)
        self.handover.close()
        await self.ha.close()


async def test_caught_up_holds_every_append_until_a_new_master_is_known(tmp_path: Path) -> None:
    store = await MessageStore.open(small_store_config(tmp_path / "store", segment_size=1 << 20))
    try:
        async with Setup(store, tmp_path) as s:
            assert (await store.put(_msg(0))).ok
            end = store.commitlog.write_offset
            s.slave.ack(end)
            reply = await s.handover.prepare(_request())
            assert reply.caught_up and reply.max_offset == reply.target_ack_offset == end
            assert store.write_gate.closed

            held: asyncio.Task[PutResult] = await _running(store.put(_msg(1)))
            assert not held.done() and store.commitlog.write_offset == end  # nothing appended

            s.role.role, s.role.view = "no-master", {"masterEpoch": 2}  # deposed
            s.handover.role_changed()
            await asyncio.sleep(0.05)
            assert not held.done(), "released before the new master was known"

            s.role.role, s.role.master_client_endpoint = "slave", "10.0.0.2:8081"
            s.handover.role_changed()
            await asyncio.sleep(0.05)
            assert not held.done(), "released before the new master serves"
            s.role.following = True
            await asyncio.wait_for(held, 5)  # released: the servicer would forward it now
            assert not store.write_gate.closed and s.handover.handed_over == 1
    finally:
        await store.close()


async def test_a_target_that_cannot_catch_up_never_pauses_writes(tmp_path: Path) -> None:
    store = await MessageStore.open(small_store_config(tmp_path / "store", segment_size=1 << 20))
    try:
        async with Setup(store, tmp_path) as s:
            assert (await store.put(_msg(0))).ok
            s.slave.ack(0)  # connected, then silent (paused)
            asking = await _running(s.handover.prepare(_request(timeout_ms=400)))
            assert (await asyncio.wait_for(store.put(_msg(1)), 1)).ok  # writes go on
            reply = await asyncio.wait_for(asking, 5)
            assert not reply.caught_up and not reply.refused
            assert reply.target_ack_offset == 0 and reply.max_offset > 0
            assert not store.write_gate.closed and s.handover.not_caught_up == 1
    finally:
        await store.close()


async def test_refused_for_another_epoch_and_released_by_abort_or_the_hold(
    tmp_path: Path,
) -> None:
    store = await MessageStore.open(small_store_config(tmp_path / "store", segment_size=1 << 20))
    try:
        async with Setup(store, tmp_path) as s:
            stale = await s.handover.prepare(_request(epoch=7))
            assert "master at epoch 1, not 7" in stale.refused and not store.write_gate.closed

            s.slave.ack(store.commitlog.write_offset)
            assert (await s.handover.prepare(_request())).caught_up
            assert store.write_gate.closed
            await s.handover.abort(_request())  # the controller could not depose it
            assert not store.write_gate.closed

            assert (await s.handover.prepare(_request(hold_ms=200))).caught_up
            assert store.write_gate.closed
            await asyncio.sleep(0.4)  # nobody deposed it: it carries on as master
            assert not store.write_gate.closed and s.handover.handed_over == 0
            assert (await store.put(_msg(2))).ok
    finally:
        await store.close()
