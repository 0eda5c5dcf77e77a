"""HASlave: a slave's side of replication.

Connect to the master's HA endpoint, send the epoch table and max offset, cut the
log back to the consistent point the master names (or start over empty at its first
segment), then append what streams in — every record checked — and ack it. The
master's confirm offset decides what this slave's consumers could see. Reconnects
with a short, bounded backoff; stops the moment the broker's role changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import grpc

from rocketcluster.api.generated import ha_pb2 as hpb
from rocketcluster.api.generated.ha_pb2_grpc import HAServiceStub
from rocketcluster.api.tls import ClientTls, grpc_channel
from rocketcluster.broker.ha.epoch import EpochFileCache
from rocketcluster.broker.ha.protocol import ReplicationProtocolError, data_problem, plan_alignment
from rocketcluster.broker.store import DiskFullError, MessageStore
from rocketcluster.broker.store.replica import append_replicated, reset_to, truncate_to

log = logging.getLogger(__name__)

CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", -1),
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
]
IDLE_TIMEOUT_S = 5.0
RETRY_S = 0.2
DISK_POLL_S = 1.0  # how often a slave whose disk is full looks for room again
STOP_RECANCEL_S = 0.5


class HASlave:
    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFileCache,
        group: str,
        broker_id: int,
        master_address: str,
        on_metadata: Callable[[dict[str, Any]], None],
        tls: ClientTls | None = None,
    ) -> None:
        self.store = store
        self.tls = tls  # the master's HA port is mutual TLS when on
        self.epochs = epochs
        self.group = group
        self.broker_id = broker_id
        self.master_address = master_address
        self._on_metadata = on_metadata
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.connected = False
        self.received_bytes = 0
        self.master_max_offset = 0
        # Set while this slave's disk has no room for what the master sends: it stays
        # disconnected (acks nothing it did not store, so the master drops it from the
        # SyncStateSet after maxTimeNotCatchup) and reconnects once there is room.
        self.disk_full: DiskFullError | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="ha-slave")

    async def stop(self) -> None:
        """Stop replicating, for sure: the role manager waits for this, holding its
        transition lock, before it follows the next master. One cancel can be lost
        (a library that swallows it while a read completes at the same moment): the
        loop also checks ``_stopping``, and the cancel is repeated until the task ends.
        """
        self._stopping = True
        task, self._task = self._task, None
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL_S)
        if task is not None and not task.cancelled() and task.exception() is not None:
            log.warning("replication task ended with %r", task.exception())

    async def _run(self) -> None:
        while not self._stopping:
            try:
                await self._replicate()
            except asyncio.CancelledError:
                raise
            except DiskFullError as exc:
                self.connected = False
                await self._wait_for_room(exc)
                continue
            except grpc.aio.AioRpcError as exc:
                log.info("replication from %s broke: %s", self.master_address, exc.code().name)
            except (ConnectionError, TimeoutError, ReplicationProtocolError) as exc:
                log.info("replication from %s broke: %r", self.master_address, exc)
            except Exception:
                log.exception("replication from %s failed", self.master_address)
            self.connected = False
            if not self._stopping:
                await asyncio.sleep(RETRY_S)

    async def _wait_for_room(self, exc: DiskFullError) -> None:
        """The disk is full: nothing more is stored nor acknowledged until it has room
        for what failed; then replication reconnects and catches up from where the log
        ends."""
        self.disk_full = exc
        log.warning(
            "replication from %s paused: %s; resuming when the disk has room",
            self.master_address,
            exc,
        )
        store = self.store
        while not self._stopping:
            await asyncio.sleep(DISK_POLL_S)
            store.refresh_disk_usage()
            space = store.disk_space()
            if space is not None and space[0] >= exc.needed:
                break
        self.disk_full = None
        log.info("replication from %s resumes: the disk has room again", self.master_address)

    async def _replicate(self) -> None:
        async with grpc_channel(self.master_address, self.tls, CHANNEL_OPTIONS) as channel:
            outbox = _Outbox()
            clog = self.store.commitlog
            outbox.queue.put_nowait(
                hpb.SlaveMessage(
                    handshake=hpb.Handshake(
                        group=self.group,
                        broker_id=self.broker_id,
                        epochs=[
                            hpb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset)
                            for e in self.epochs.entries
                        ],
                        max_offset=clog.write_offset,
                        min_offset=clog.min_offset,
                    )
                )
            )

            stream = HAServiceStub(channel).Replicate(outbox)
            try:
                await self._follow(stream, outbox)
            finally:
                # Ends gRPC's task that feeds the outbox to the call; left pending,
                # it is destroyed with the channel ("Task was destroyed but it is
                # pending!" at every reconnect). cancel() does nothing to it once
                # the call has ended, so the outbox ends too.
                outbox.close()
                stream.cancel()

    async def _follow(self, stream: Any, outbox: _Outbox) -> None:
        """Handshake, align, then apply what streams in and ack it."""
        clog = self.store.commitlog
        async with asyncio.timeout(IDLE_TIMEOUT_S):
            reply_message = await stream.read()
        if reply_message is grpc.aio.EOF or not reply_message.HasField("handshake"):
            raise ConnectionError("the master closed the replication stream")
        self._align(reply_message.handshake)
        self.connected = True
        log.info("replicating from %s at %d", self.master_address, clog.write_offset)
        while not self._stopping:
            async with asyncio.timeout(IDLE_TIMEOUT_S):
                message = await stream.read()
            if message is grpc.aio.EOF:
                raise ConnectionError("the master ended the replication stream")
            which = message.WhichOneof("body")
            if which == "data":
                self._apply(message.data)
                outbox.queue.put_nowait(
                    hpb.SlaveMessage(ack=hpb.SlaveAck(max_offset=clog.write_offset))
                )
            elif which == "heartbeat":
                self._confirm(message.heartbeat.confirm_offset)
                self.master_max_offset = message.heartbeat.master_max_offset
                outbox.queue.put_nowait(
                    hpb.SlaveMessage(ack=hpb.SlaveAck(max_offset=clog.write_offset))
                )
            elif which == "metadata":
                self._on_metadata(json.loads(message.metadata.json))

    def _align(self, reply: hpb.HandshakeReply) -> None:
        """Cut the diverged tail (or start over), and adopt the master's epochs up to
        the point where the two logs agree."""
        store = self.store
        plan = plan_alignment(reply, store.commitlog.write_offset)
        if plan.action == "reset":
            log.warning(
                "starting over empty at %d (no shared history with the master)", plan.offset
            )
            reset_to(store, plan.offset)
            self.epochs.replace([])
        elif plan.action == "truncate":
            log.warning(
                "cutting %d bytes that diverged from the master (log %d -> %d)",
                store.commitlog.write_offset - plan.offset,
                store.commitlog.write_offset,
                plan.offset,
            )
            truncate_to(store, plan.offset)
            self.epochs.truncate_from(plan.offset)

    def _apply(self, data: hpb.Data) -> None:
        last = self.epochs.last
        problem = data_problem(data, self.store.commitlog.write_offset, last)
        if problem:
            raise ReplicationProtocolError(f"bad data frame from the master: {problem}")
        if last is None or data.epoch > last.epoch:
            self.epochs.append(data.epoch, data.epoch_start)
        append_replicated(self.store, data.offset, data.data)
        self.received_bytes += len(data.data)
        self.master_max_offset = data.master_max_offset
        self._confirm(data.confirm_offset)

    def _confirm(self, confirm: int) -> None:
        self.store.set_confirm_offset(min(confirm, self.store.commitlog.write_offset))


class _Outbox:
    """The slave's side of the Replicate stream: what is queued goes out. A plain
    async iterator, not an async generator: gRPC closes a generator from its own
    task when the call ends, and closing one that is waiting on the queue fails
    ("aclose(): asynchronous generator is already running") in a task nobody awaits."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[hpb.SlaveMessage | None] = asyncio.Queue()

    def close(self) -> None:
        """End the stream: gRPC's task feeding it finishes instead of being left
        waiting (and destroyed with the channel) when the call already ended."""
        self.queue.put_nowait(None)

    def __aiter__(self) -> _Outbox:
        return self

    async def __anext__(self) -> hpb.SlaveMessage:
        message = await self.queue.get()
        if message is None:
            raise StopAsyncIteration
        return message
