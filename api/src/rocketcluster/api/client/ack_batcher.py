"""AckBatcher: group commit for LeanClient's acks.

Every RPC costs both ends a fixed few hundred µs of CPU on grpc.aio (DESIGN §9), as
much as the POP work for dozens of messages. Acks of one (group, topic) made while an
AckBatch for it is in flight wait for it to return and then go out together in the
next one; each caller still gets the answer for its own receipts, and only after the
broker answered them. A lone ack goes out at once: nothing waits for company.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from rocketcluster.api.client.batch_codec import RECEIPT_SIZE
from rocketcluster.api.generated import consume_pb2 as cpb

# Receipts per AckBatch at most (the broker refuses more: consume_service.MAX_ACK).
MAX_RECEIPTS = 4096

Send = Callable[[str, str, bytes], Awaitable[cpb.AckBatchReply]]
Key = tuple[str, str]


class AckAnswer(NamedTuple):
    """The reply's status and the failures among one caller's receipts (indexes
    into the caller's own receipts)."""

    status: cpb.Status
    failed: list[tuple[int, cpb.Status]]


class _Waiting(NamedTuple):
    receipts: bytes
    future: asyncio.Future[AckAnswer]


class AckBatcher:
    def __init__(self, send: Send) -> None:
        self._send = send
        self._waiting: dict[Key, list[_Waiting]] = {}
        self._busy: set[Key] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.requests = 0  # AckBatch calls made (tests, benchmarks)

    async def ack(self, group: str, topic: str, receipts: bytes) -> AckAnswer:
        key = (group, topic)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AckAnswer] = loop.create_future()
        self._waiting.setdefault(key, []).append(_Waiting(receipts, future))
        if key not in self._busy:  # nothing in flight: this caller sends, now
            self._busy.add(key)
            try:
                await self._drain(key, until=future)
            finally:
                # Acks that came meanwhile go on in the background: this caller has
                # its answer and does not wait for theirs.
                if self._waiting.get(key):
                    task = loop.create_task(self._drain_rest(key), name="lean-acks")
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                else:
                    self._busy.discard(key)
        return await future

    async def _drain_rest(self, key: Key) -> None:
        try:
            await self._drain(key)
        finally:
            self._busy.discard(key)

    async def _drain(self, key: Key, until: asyncio.Future[AckAnswer] | None = None) -> None:
        """Send what waits for ``key`` (until ``until`` is answered, when given)."""
        while until is None or not until.done():
            waiting = self._waiting.pop(key, None)
            if not waiting:
                return
            batch: list[_Waiting] = []
            rest: list[_Waiting] = []
            count = 0
            for w in waiting:
                n = len(w.receipts) // RECEIPT_SIZE
                if batch and count + n > MAX_RECEIPTS:
                    rest.append(w)
                else:
                    batch.append(w)
                    count += n
            if rest:
                self._waiting.setdefault(key, [])[:0] = rest
            self.requests += 1
            try:
                reply = await self._send(key[0], key[1], b"".join(w.receipts for w in batch))
            except BaseException as exc:
                for w in batch:
                    if not w.future.done():
                        w.future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            failed = sorted((f.index, f.status) for f in reply.failed)
            start = 0
            for w in batch:
                end = start + len(w.receipts) // RECEIPT_SIZE
                mine = [(i - start, st) for i, st in failed if start <= i < end]
                if not w.future.done():
                    w.future.set_result(AckAnswer(reply.status, mine))
                start = end
