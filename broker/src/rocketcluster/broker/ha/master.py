"""HAMaster: the master's side of replication, the confirm offset and the SyncStateSet.

Each slave opens ``Replicate``; the master answers its handshake with the consistent
point and streams raw commit-log bytes (whole records, never across an epoch start),
and the slave acks what it holds. From the acks the master computes the confirm
offset — the offset every in-sync replica holds — which is as far as consumers may
read, and wakes writers waiting for ``inSyncReplicas`` acks. It grows the
SyncStateSet when a slave has caught up and shrinks it when one has not caught up for
``max_time_not_catchup``; while a change is pending at the controller, the union of
the old and new sets counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rocketcluster.api.cluster import ReplicationMode, ReplicationSpec
from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.broker.ha.epoch import (
    EpochEntry,
    EpochFileCache,
    next_boundary,
)
from rocketcluster.broker.ha.protocol import handshake_reply
from rocketcluster.broker.store import MessageStore, PutStatus

log = logging.getLogger(__name__)

BATCH_BYTES = 1 << 20
# While a slave has not acked this stream's last frame, what the master appends waits
# to go out in one frame with what follows — unless this much is pending already (a
# slave catching up streams back to back). Frames, and the slave's acks, then follow
# the slave's pace instead of one per put: at low load a frame's ack is back before
# the next put and nothing waits; under load several puts share a frame.
COALESCE_BYTES = 256 << 10
IDLE_HEARTBEAT_S = 0.5
UPKEEP_S = 0.2

AlterSet = Callable[[list[int], int, int, int], Awaitable[tuple[bool, dict[str, Any] | None]]]


def whole_records(data: bytes) -> int:
    """How many leading bytes of ``data`` are whole records (by their size fields)."""
    pos = 0
    size = len(data)
    while pos + 4 <= size:
        total = int.from_bytes(data[pos : pos + 4], "big")
        if total <= 0 or pos + total > size:
            break
        pos += total
    return pos


@dataclass
class SlaveState:
    broker_id: int
    ack_offset: int = 0
    caught_up_at: float = 0.0
    connected: bool = False
    address: str = ""
    # The master's max offset at the previous ack: a slave that acks at least that
    # much has caught up (RocketMQ's lastMasterMaxOffset), even under steady load.
    last_master_max: int = 0
    # Which Replicate stream is this slave's current one. After a partition the
    # slave reconnects before the master notices that the old stream died; when the
    # old one finally ends (or a late ack arrives on it) it must not touch this state.
    stream: int = 0
    # This slave's stream waits for its ack before the next frame (_read_acks wakes it).
    awaiting_ack: bool = False


@dataclass
class GroupView:
    master_id: int
    master_epoch: int
    sync_state_set: set[int] = field(default_factory=set)
    sync_state_set_epoch: int = 0


class ReplicationOutcome:
    OK = PutStatus.PUT_OK


class HAMaster:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFileCache,
        broker_id: int,
        replication: ReplicationSpec,
        alter_sync_state_set: AlterSet,
        metadata_snapshot: Callable[[], dict[str, Any]],
        *,
        max_time_not_catchup_s: float = 3.0,
        ack_timeout_s: float = 3.0,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.broker_id = broker_id
        self.replication = replication
        self._alter = alter_sync_state_set
        self._metadata = metadata_snapshot
        self.max_time_not_catchup_s = max_time_not_catchup_s
        self.ack_timeout_s = ack_timeout_s
        self.slaves: dict[int, SlaveState] = {}
        self.view: GroupView | None = None
        self.active = False
        self._pending_set: set[int] | None = None
        # Writes waiting for acks, oldest first: (end offset, woken with the outcome,
        # deadline). One timer, for the oldest deadline, times them all out.
        self._waiters: deque[tuple[int, asyncio.Future[PutStatus | None], float]] = deque()
        self._expiry: asyncio.TimerHandle | None = None
        self._data_ready = asyncio.Event()
        self._upkeep: asyncio.Task[None] | None = None
        self.replicated_bytes = 0
        self._confirm = 0
        self._activated_at = 0.0
        self._streams = 0
        # A handover waiting for one slave's ack: (broker id, offset, woken when acked).
        self._ack_watch: tuple[int, int, asyncio.Future[None]] | None = None

    # -- becoming and stopping being master ------------------------------------------

    def activate(self, view: GroupView) -> None:
        self.view = view
        self.active = True
        self._activated_at = time.monotonic()
        self._confirm = self.store.commitlog.committed_offset
        if self._upkeep is None:
            self._upkeep = asyncio.get_running_loop().create_task(
                self._upkeep_loop(), name="ha-upkeep"
            )
        self._recompute()

    def update_view(self, view: GroupView) -> None:
        if self.view is not None and (view.master_epoch, view.sync_state_set_epoch) < (
            self.view.master_epoch,
            self.view.sync_state_set_epoch,
        ):
            return  # stale
        self.view = view
        self._pending_set = None
        self._recompute()

    def deactivate(self) -> None:
        self.active = False
        self.view = None
        for _, fut, _ in self._waiters:
            if not fut.done():
                fut.set_result(None)  # woken to find the broker demoted
        self._waiters.clear()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self._wake_ack_watch()
        self._data_ready.set()

    async def close(self) -> None:
        self.deactivate()
        if self._upkeep is not None:
            self._upkeep.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._upkeep

    # -- who counts -------------------------------------------------------------------

    def in_sync(self) -> set[int]:
        """The SyncStateSet, joined with a pending change until the controller answers."""
        members = set(self.view.sync_state_set) if self.view else {self.broker_id}
        if self._pending_set is not None:
            members |= self._pending_set
        members.add(self.broker_id)
        return members

    def _acked(self, broker_id: int) -> int:
        if broker_id == self.broker_id:
            return self.store.commitlog.committed_offset
        slave = self.slaves.get(broker_id)
        # A disconnected member still holds what it acked; the set shrinks after
        # max_time_not_catchup, and until then its last ack bounds the confirm offset.
        return slave.ack_offset if slave is not None else 0

    def needed_acks(self) -> int:
        members = self.in_sync()
        if self.replication.all_ack_in_sync_state_set:
            return len(members)
        return min(self.replication.in_sync_replicas, len(members))

    def confirm_offset(self) -> int:
        """Every in-sync replica holds the data below this offset (never decreasing:
        consumers may have read up to it)."""
        computed = min(self._acked(b) for b in self.in_sync())
        self._confirm = max(self._confirm, computed)
        return self._confirm

    def _recompute(self) -> None:
        """Raise the confirm offset and wake the writes enough replicas now hold. Runs
        per ack, per append and per waiting write — never per message."""
        if not self.active:
            return
        members = self.in_sync()
        acked = [self._acked(b) for b in members]
        computed = min(acked)
        self._confirm = max(self._confirm, computed)
        self.store.set_confirm_offset(self._confirm)
        waiters = self._waiters
        if not waiters:
            return
        need = len(members)
        if not self.replication.all_ack_in_sync_state_set:
            need = min(self.replication.in_sync_replicas, need)
        acked.sort(reverse=True)
        reached = acked[need - 1] if len(acked) >= need else 0
        # Ends grow with the log, so the writes to wake are at the front.
        while waiters and waiters[0][0] <= reached:
            _, fut, _ = waiters.popleft()
            if not fut.done():
                fut.set_result(PutStatus.PUT_OK)

    # -- the write path ------------------------------------------------------------

    def refuse_write(self) -> str | None:
        """Why a write must be refused before it is stored (IN_SYNC_REPLICAS_NOT_ENOUGH)."""
        if not self.active:
            return "this broker is not the master"
        if self.replication.mode is ReplicationMode.SYNC:
            members = len(self.in_sync())
            if members < self.replication.min_in_sync_replicas:
                return (
                    f"only {members} in-sync replica(s), fewer than minInSyncReplicas "
                    f"{self.replication.min_in_sync_replicas}"
                )
        return None

    async def wait_replicated(self, end_offset: int) -> PutStatus:
        """Sync replication: wait until enough in-sync replicas hold ``end_offset``
        (one future per request, whatever its number of messages)."""
        self._data_ready.set()
        if self.replication.mode is not ReplicationMode.SYNC:
            return PutStatus.PUT_OK
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutStatus | None] = loop.create_future()
        waiters = self._waiters
        if waiters and end_offset < waiters[-1][0]:
            # Not expected (appends end in order), but keep the queue sorted.
            items = sorted(
                [*waiters, (end_offset, fut, loop.time() + self.ack_timeout_s)],
                key=lambda w: w[0],
            )
            waiters.clear()
            waiters.extend(items)
        else:
            waiters.append((end_offset, fut, loop.time() + self.ack_timeout_s))
        self._recompute()
        if not fut.done() and self._expiry is None:
            self._arm_expiry()
        outcome = await fut
        if outcome is PutStatus.FLUSH_SLAVE_TIMEOUT:
            return outcome
        if not self.active or outcome is None:
            return PutStatus.SLAVE_NOT_AVAILABLE
        return PutStatus.PUT_OK

    def _arm_expiry(self) -> None:
        pending = [w[2] for w in self._waiters if not w[1].done()]
        self._expiry = (
            asyncio.get_running_loop().call_at(min(pending), self._expire) if pending else None
        )

    def _expire(self) -> None:
        """Time out the writes whose deadline passed (FLUSH_SLAVE_TIMEOUT); the timer
        then waits for the oldest deadline left, so it fires about once per
        ``ack_timeout_s`` under load, not once per write."""
        now = asyncio.get_running_loop().time()
        keep: deque[tuple[int, asyncio.Future[PutStatus | None], float]] = deque()
        for waiter in self._waiters:
            fut = waiter[1]
            if fut.done():
                continue
            if waiter[2] <= now:
                fut.set_result(PutStatus.FLUSH_SLAVE_TIMEOUT)
            else:
                keep.append(waiter)
        self._waiters = keep
        self._arm_expiry()

    def data_written(self) -> None:
        self._data_ready.set()
        self._recompute()

    # -- a handover --------------------------------------------------------------------

    async def wait_acked(self, broker_id: int, offset: int, timeout_s: float) -> bool:
        """Whether slave ``broker_id`` acknowledges ``offset`` within ``timeout_s`` while
        this broker stays master: a handover waits for its target to hold the log's
        end (final while the write gate is closed)."""
        if self._acked(broker_id) < offset and self.active:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._ack_watch = (broker_id, offset, fut)
            self._data_ready.set()  # stream what is pending now
            try:
                async with asyncio.timeout(timeout_s):
                    await fut
            except TimeoutError:
                pass
            finally:
                if self._ack_watch is not None and self._ack_watch[2] is fut:
                    self._ack_watch = None
        return self.active and self._acked(broker_id) >= offset

    def _wake_ack_watch(self) -> None:
        watch, self._ack_watch = self._ack_watch, None
        if watch is not None and not watch[2].done():
            watch[2].set_result(None)

    # -- serving a slave ---------------------------------------------------------------

    async def serve(
        self, requests: AsyncIterator[hpb.SlaveMessage]
    ) -> AsyncIterator[hpb.MasterMessage]:
        first = await anext(requests, None)
        if first is None or not first.HasField("handshake"):
            return
        hs = first.handshake
        if not self.active:
            yield hpb.MasterMessage(handshake=hpb.HandshakeReply(refused="not the master"))
            return
        reply = self._handshake(hs)
        yield hpb.MasterMessage(handshake=reply)
        if reply.refused:
            log.warning("refused a replication handshake: %s", reply.refused)
            return
        slave = self.slaves.setdefault(hs.broker_id, SlaveState(hs.broker_id))
        self._streams += 1
        stream = slave.stream = self._streams
        slave.connected = True
        slave.ack_offset = min(reply.start_offset, hs.max_offset)
        position = reply.start_offset
        acks = asyncio.get_running_loop().create_task(self._read_acks(requests, slave, stream))
        log.info(
            "slave %d replicating from %d (truncate to %d)",
            hs.broker_id,
            position,
            reply.truncate_to,
        )
        last_meta = last_beat = 0.0
        sent_end = position  # the end of the last data frame sent on this stream
        try:
            while self.active and not acks.done() and slave.stream == stream:
                clog = self.store.commitlog
                pending = clog.committed_offset - position
                if pending > 0 and (slave.ack_offset >= sent_end or pending >= COALESCE_BYTES):
                    data = self._next_data(position)
                    epoch = self._epoch_of(position)
                    yield hpb.MasterMessage(
                        data=hpb.Data(
                            offset=position,
                            data=data,
                            epoch=epoch.epoch,
                            epoch_start=epoch.start_offset,
                            confirm_offset=self.confirm_offset(),
                            master_max_offset=clog.committed_offset,
                        )
                    )
                    position += len(data)
                    sent_end = position
                    self.replicated_bytes += len(data)
                    last_beat = time.monotonic()  # a frame carries the confirm offset too
                    continue
                now = time.monotonic()
                if now - last_meta >= 1.0:
                    last_meta = now
                    yield hpb.MasterMessage(
                        metadata=hpb.Metadata(json=json.dumps(self._metadata()))
                    )
                    continue  # look again: a write or an ack during the yield is not lost
                self._data_ready.clear()
                # Woken by a write, a handover, a demotion, the upkeep tick (every
                # UPKEEP_S) or, while data waits for it, this slave's ack: no timeout
                # of its own, which cost a timer per frame.
                slave.awaiting_ack = pending > 0
                await self._data_ready.wait()
                slave.awaiting_ack = False
                if (
                    position >= self.store.commitlog.committed_offset
                    and time.monotonic() - last_beat >= IDLE_HEARTBEAT_S
                ):
                    last_beat = time.monotonic()
                    yield hpb.MasterMessage(
                        heartbeat=hpb.Heartbeat(
                            confirm_offset=self.confirm_offset(),
                            master_max_offset=self.store.commitlog.committed_offset,
                            master_epoch=self.view.master_epoch if self.view else 0,
                        )
                    )
        finally:
            acks.cancel()
            current = slave.stream == stream
            if current:
                slave.connected = False
            self._recompute()
            log.info(
                "slave %d disconnected%s",
                hs.broker_id,
                "" if current else " (an older stream; a newer one replicates)",
            )

    def _handshake(self, hs: hpb.Handshake) -> hpb.HandshakeReply:
        clog = self.store.commitlog
        return handshake_reply(
            hs,
            list(self.epochs.entries),
            clog.committed_offset,
            clog.min_offset,
            self.view.master_epoch if self.view else 0,
        )

    async def _read_acks(
        self, requests: AsyncIterator[hpb.SlaveMessage], slave: SlaveState, stream: int
    ) -> None:
        async for message in requests:
            if slave.stream != stream:
                return  # superseded: a late ack here may predate the new handshake's cut
            if message.HasField("ack"):
                slave.ack_offset = message.ack.max_offset
                if slave.ack_offset >= slave.last_master_max:
                    slave.caught_up_at = time.monotonic()
                slave.last_master_max = self.store.commitlog.committed_offset
                self._recompute()
                if slave.awaiting_ack:
                    self._data_ready.set()  # the next frame may go
                watch = self._ack_watch
                if watch and watch[0] == slave.broker_id and slave.ack_offset >= watch[1]:
                    self._wake_ack_watch()

    def _next_data(self, position: int) -> bytes:
        """The next frame's bytes from ``position``: whole records within one segment,
        one epoch and about BATCH_BYTES, read with one pread.

        The committed offset, an epoch's start and a segment's end are all record
        boundaries, so when everything up to the nearest of them fits in a frame —
        always, under steady load — no record header is looked at. Only a slave that
        is behind gets a BATCH_BYTES read cut at the last whole record in it."""
        clog = self.store.commitlog
        limit = clog.committed_offset
        boundary = next_boundary(self.epochs.entries, position)
        if boundary is not None and boundary < limit:
            limit = boundary
        segment_end = (position // clog.segment_size + 1) * clog.segment_size
        limit = min(limit, segment_end)
        if limit - position <= BATCH_BYTES:
            return clog.read(position, limit - position, count_cache=True)
        data = clog.read(position, BATCH_BYTES, count_cache=True)
        end = whole_records(data)
        if end:
            return data[:end]
        # One record larger than a frame: send it whole.
        total = int.from_bytes(data[:4], "big")
        size = total if 0 < total <= limit - position else limit - position
        return clog.read(position, size, count_cache=True)

    def _epoch_of(self, position: int) -> EpochEntry:
        found = EpochEntry(0, 0)
        for entry in self.epochs.entries:
            if entry.start_offset <= position:
                found = entry
        return found

    # -- SyncStateSet upkeep ----------------------------------------------------------

    async def _upkeep_loop(self) -> None:
        while True:
            await asyncio.sleep(UPKEEP_S)
            self._data_ready.set()  # idle streams: a heartbeat when one is due
            if not self.active or self.view is None or self._pending_set is not None:
                continue
            try:
                await self._maybe_alter()
            except Exception:
                log.exception("SyncStateSet upkeep failed")
            self._recompute()

    async def _maybe_alter(self) -> None:
        view_now = self.view
        if view_now is None:
            return
        now = time.monotonic()
        current = set(view_now.sync_state_set) | {self.broker_id}
        wanted = set(current)
        epoch_start = self.epochs.last.start_offset if self.epochs.last else 0
        confirm = self.confirm_offset()
        for slave in self.slaves.values():
            if slave.broker_id == self.broker_id:
                continue
            recent = now - slave.caught_up_at <= self.max_time_not_catchup_s
            caught_up = slave.connected and recent and slave.ack_offset >= max(confirm, epoch_start)
            if slave.broker_id not in current and caught_up:
                wanted.add(slave.broker_id)
            elif (
                slave.broker_id in current
                and now - slave.caught_up_at > self.max_time_not_catchup_s
            ):
                # Connected or not: a member leaves only after max_time_not_catchup, so
                # a replica that just dropped does not let writes be acknowledged by
                # fewer replicas at once.
                wanted.discard(slave.broker_id)
        if now - self._activated_at > self.max_time_not_catchup_s:
            for member in list(current):
                if member != self.broker_id and member not in self.slaves:
                    wanted.discard(member)  # never connected since this broker became master
        if wanted == current:
            return
        self._pending_set = wanted | current  # both count until the controller answers
        try:
            ok, view = await self._alter(
                sorted(wanted), view_now.master_epoch, view_now.sync_state_set_epoch, self.broker_id
            )
        finally:
            self._pending_set = None
        if ok and view is not None:
            self.update_view(
                GroupView(
                    view["masterId"],
                    view["masterEpoch"],
                    set(view["syncStateSet"]),
                    view["syncStateSetEpoch"],
                )
            )
            log.info(
                "SyncStateSet now %s (epoch %d)",
                sorted(view["syncStateSet"]),
                view["syncStateSetEpoch"],
            )
