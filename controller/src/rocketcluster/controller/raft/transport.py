"""Raft transport over gRPC: message codecs and one sender task per peer.

Messages to a peer queue up and leave in batches on one unary ``Raft`` call; a call
that fails reports the peer unreachable to the core (which then probes instead of
streaming) and the sender backs off (explicitly bounded: gRPC's default reconnect
backoff grows to minutes, which would make recovery times meaningless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import grpc

from rocketcluster.api.generated import controller_pb2 as cpb
from rocketcluster.api.generated.controller_pb2_grpc import ControllerServiceStub
from rocketcluster.api.tls import ChannelPool, ClientTls
from rocketcluster.controller.raft.types import (
    Entry,
    Message,
    MessageType,
    Snapshot,
    SnapshotMetadata,
)

log = logging.getLogger(__name__)

CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 500),
    ("grpc.enable_retries", 0),
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
]
SEND_TIMEOUT_S = 2.0
MAX_BATCH = 256
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 0.5


def encode(m: Message) -> cpb.RaftMessage:
    out = cpb.RaftMessage(
        type=int(m.type),
        to=m.to,
        term=m.term,
        log_term=m.log_term,
        index=m.index,
        commit=m.commit,
        reject=m.reject,
        reject_hint=m.reject_hint,
        transfer=m.transfer,
        entries=[cpb.Entry(term=e.term, index=e.index, data=e.data) for e in m.entries],
    )
    setattr(out, "from", m.from_id)
    if m.snapshot is not None:
        out.has_snapshot = True
        out.snapshot.index = m.snapshot.metadata.index
        out.snapshot.term = m.snapshot.metadata.term
        out.snapshot.data = m.snapshot.data
    return out


def decode(m: cpb.RaftMessage) -> Message:
    snapshot = None
    if m.has_snapshot:
        snapshot = Snapshot(SnapshotMetadata(m.snapshot.index, m.snapshot.term), m.snapshot.data)
    return Message(
        type=MessageType(m.type),
        to=m.to,
        from_id=getattr(m, "from"),
        term=m.term,
        log_term=m.log_term,
        index=m.index,
        entries=tuple(Entry(e.term, e.index, e.data) for e in m.entries),
        commit=m.commit,
        snapshot=snapshot,
        reject=m.reject,
        reject_hint=m.reject_hint,
        transfer=m.transfer,
    )


class PeerSender:
    def __init__(
        self,
        peer: int,
        address: str,
        on_unreachable: Callable[[int], None],
        tls: ClientTls | None = None,
    ) -> None:
        self.peer = peer
        self.address = address
        self._on_unreachable = on_unreachable
        self._queue: asyncio.Queue[Message] = asyncio.Queue()
        # One channel, replaced when our certificate is renewed (mutual TLS).
        self._channels = ChannelPool(tls, CHANNEL_OPTIONS)
        self._channel = self._channels.channel(address)
        self._stub = ControllerServiceStub(self._channel)
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"raft-send-{peer}")
        self.failures = 0

    def send(self, message: Message) -> None:
        self._queue.put_nowait(message)

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            batch = [await self._queue.get()]
            while not self._queue.empty() and len(batch) < MAX_BATCH:
                batch.append(self._queue.get_nowait())
            channel = self._channels.channel(self.address)
            if channel is not self._channel:
                self._channel, self._stub = channel, ControllerServiceStub(channel)
            try:
                await self._stub.Raft(
                    cpb.RaftBatch(messages=[encode(m) for m in batch]), timeout=SEND_TIMEOUT_S
                )
                backoff = BACKOFF_MIN_S
            except grpc.aio.AioRpcError as exc:
                self.failures += 1
                if self.failures == 1 or self.failures % 50 == 0:
                    log.info(
                        "raft peer %d at %s unreachable: %s", self.peer, self.address, exc.code()
                    )
                self._on_unreachable(self.peer)
                # Drop what piled up meanwhile: Raft resends what still matters.
                while not self._queue.empty():
                    self._queue.get_nowait()
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        await self._channels.close()


class GrpcTransport:
    def __init__(
        self,
        peers: dict[int, str],
        on_unreachable: Callable[[int], None],
        tls: ClientTls | None = None,
    ) -> None:
        self._senders = {
            pid: PeerSender(pid, addr, on_unreachable, tls) for pid, addr in peers.items()
        }

    def send(self, messages: Sequence[Message]) -> None:
        for m in messages:
            sender = self._senders.get(m.to)
            if sender is not None:
                sender.send(m)

    async def close(self) -> None:
        for sender in self._senders.values():
            await sender.close()
