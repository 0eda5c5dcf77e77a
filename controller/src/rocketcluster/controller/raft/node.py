"""RaftNode: one asyncio task drives the pure core with a durable log and a transport.

The loop, as etcd's node does it: tick on a timer, step incoming messages, and for
each Ready persist (fsync on a worker thread, the loop keeps serving), then send, then
apply, then advance. A proposal's future resolves when its entry applies — or fails if
a new leader overwrote the entry. Snapshots every ``snapshot_every`` applied entries
keep the log bounded.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from rocketcluster.controller.raft.config import Config
from rocketcluster.controller.raft.disk import DiskStorage
from rocketcluster.controller.raft.errors import ProposalDroppedError
from rocketcluster.controller.raft.rawnode import RawNode, Ready
from rocketcluster.controller.raft.types import Message, SoftState

log = logging.getLogger(__name__)

KEEP_AFTER_SNAPSHOT = 100


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> Any: ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


class Transport(Protocol):
    def send(self, messages: tuple[Message, ...]) -> None: ...


class ProposalLost(RuntimeError):
    """The entry was replaced by a new leader's entry: the command did not happen."""


@dataclass
class NodeOptions:
    """Timing of one member. A follower calls an election after 8-16 ticks without a
    leader (0.8-1.6 s); the leader's heartbeat every 2 ticks (0.2 s) still reaches it
    four times in the shortest timeout. Heartbeats carry nothing new on an idle cluster
    (a commit is announced with the append that follows it); at one a tick they were
    most of an idle controller's CPU (three members: 12.7 % of a core, 8.0 % at two)."""

    tick_ms: int = 100
    election_tick: int = 8
    heartbeat_tick: int = 2
    snapshot_every: int = 1000


class RaftNode:
    def __init__(
        self,
        node_id: int,
        voters: tuple[int, ...],
        storage: DiskStorage,
        machine: StateMachine,
        options: NodeOptions,
        *,
        seed: int | None = None,
    ) -> None:
        self.id = node_id
        self.storage = storage
        self.machine = machine
        self.options = options
        snapshot = storage.snapshot()
        applied = snapshot.metadata.index
        if not snapshot.is_empty:
            machine.restore(snapshot.data)
        config = Config(
            id=node_id,
            voters=voters,
            election_tick=options.election_tick,
            heartbeat_tick=options.heartbeat_tick,
            applied=applied,
        )
        self.raw = RawNode(config, storage, rng=random.Random(seed))
        self.applied = applied
        self.transport: Transport | None = None
        self._pending: dict[int, tuple[int, asyncio.Future[Any]]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._tick_task: asyncio.Task[None] | None = None
        self.on_soft_state: list[Callable[[SoftState], None]] = []
        self.on_applied: list[Callable[[int], None]] = []
        # Times the leader this member knows changed, to another member or to none
        # (a role change under the same leader is not one).
        self.leader_changes = 0
        self._known_leader: int | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self, transport: Transport) -> None:
        self.transport = transport
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name=f"raft-{self.id}")
        self._tick_task = loop.create_task(self._ticker(), name=f"raft-tick-{self.id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._tick_task is not None:
            self._tick_task.cancel()
        for _, fut in self._pending.values():
            if not fut.done():
                fut.set_exception(ProposalLost("the member is stopping"))
        self.storage.close()

    async def _ticker(self) -> None:
        interval = self.options.tick_ms / 1000
        while self._task is not None and not self._task.done():
            await asyncio.sleep(interval)
            self.raw.tick()
            self._wake.set()

    # -- inputs ------------------------------------------------------------------

    def step(self, message: Message) -> None:
        try:
            self.raw.step(message)
        except Exception as exc:  # a stale or malformed message must not stop the node
            log.debug("dropped raft message %s from %d: %s", message.type, message.from_id, exc)
            return
        self._wake.set()

    def report_unreachable(self, peer: int) -> None:
        self.raw.report_unreachable(peer)
        self._wake.set()

    async def propose(self, data: bytes, wait_s: float = 5.0) -> Any:
        """Replicate ``data``; returns what the state machine answered when it applied.

        Raises NotLeaderError (with the leader's id) on a follower, ProposalLost when a
        new leader replaced the entry, TimeoutError when the outcome is unknown.
        """
        pid = self.raw.propose(data)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[pid.index] = (pid.term, fut)
        self._wake.set()
        try:
            async with asyncio.timeout(wait_s):
                return await asyncio.shield(fut)
        finally:
            if self._pending.get(pid.index, (0, None))[1] is fut:
                del self._pending[pid.index]

    def transfer_leadership(self, to: int) -> None:
        self.raw.transfer_leadership(to)
        self._wake.set()

    # -- the loop ----------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.raw.has_ready():
                rd = self.raw.ready()
                try:
                    await self._handle(rd)
                except Exception:
                    log.critical("raft member %d cannot persist; stopping", self.id, exc_info=True)
                    raise
                self.raw.advance(rd)
            self._maybe_snapshot()

    async def _handle(self, rd: Ready) -> None:
        storage = self.storage
        if rd.snapshot is not None:
            storage.apply_snapshot(rd.snapshot)
        if rd.entries:
            storage.append(rd.entries)
        if rd.hard_state is not None:
            storage.set_hard_state(rd.hard_state)
        if rd.must_sync:
            await asyncio.to_thread(storage.sync)
        if rd.messages and self.transport is not None:
            self.transport.send(rd.messages)
        if rd.snapshot is not None:
            self.machine.restore(rd.snapshot.data)
            self.applied = rd.snapshot.metadata.index
        for entry in rd.committed_entries:
            result: Any = None
            if entry.data:
                result = self.machine.apply(entry.index, entry.data)
            self.applied = entry.index
            waiting = self._pending.pop(entry.index, None)
            if waiting is not None and not waiting[1].done():
                term, fut = waiting
                if term == entry.term:
                    fut.set_result(result)
                else:
                    fut.set_exception(
                        ProposalLost(f"entry {entry.index} was replaced by a new leader")
                    )
        if rd.committed_entries:
            for applied_callback in self.on_applied:
                applied_callback(self.applied)
        if rd.soft_state is not None:
            if rd.soft_state.leader_id != self._known_leader:
                self._known_leader = rd.soft_state.leader_id
                self.leader_changes += 1
            # Proposals of a deposed leader stay pending: a new leader may still commit
            # them, or replace them; either way they resolve when their index applies.
            for callback in self.on_soft_state:
                callback(rd.soft_state)

    def _maybe_snapshot(self) -> None:
        snap_index = self.storage.snapshot().metadata.index
        if self.applied - snap_index < self.options.snapshot_every:
            return
        self.storage.create_snapshot(self.applied, self.machine.snapshot())
        compact_to = self.applied - KEEP_AFTER_SNAPSHOT
        if compact_to > self.storage.first_index():
            self.storage.compact(compact_to)

    # -- views ---------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.raw.is_leader

    @property
    def leader_id(self) -> int | None:
        return self.raw.leader_id

    def status(self) -> dict[str, Any]:
        st = self.raw.status()
        return {
            "id": st.id,
            "term": st.term,
            "vote": st.vote,
            "commit": st.commit,
            "applied": self.applied,
            "leader": st.leader_id,
            "state": st.state.value,
            "firstIndex": self.storage.first_index(),
            "lastIndex": self.storage.last_index(),
            "snapshotIndex": self.storage.snapshot().metadata.index,
            "walBytes": self.storage.wal_bytes(),
            "leaderChanges": self.leader_changes,
            "electionsStarted": st.elections_started,
        }


__all__ = ["NodeOptions", "ProposalDroppedError", "ProposalLost", "RaftNode"]
