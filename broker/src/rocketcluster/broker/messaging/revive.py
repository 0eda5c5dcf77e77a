"""PopReviveService: dead letters and journal snapshots, in the background.

RocketMQ's revive service moves a message whose last allowed attempt expired to
``%DLQ%<group>`` whether or not any consumer of the group still receives; without it
a consumer that never acks and goes away leaves the message where it was forever.
Only deliveries at their group's last attempt are indexed (a heap by deadline, fed
by PopService); earlier attempts simply become redeliverable when they expire. The
same loop writes the periodic snapshot ops of the POP journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.pop import PopService

log = logging.getLogger(__name__)

StateKey = tuple[str, str, int]
MAX_SLEEP_S = 0.2
SNAPSHOT_EVERY_S = 10.0


class ReviveIndex:
    """Deliveries to look at again at their deadline: (deadline, queue, offset, nonce);
    nonce -1 names a message already visible. Entries are checked when due, so stale
    ones (acked, delivered again) cost nothing but a pop."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, StateKey, int, int]] = []

    def push(self, deadline_ms: int, key: StateKey, offset: int, nonce: int) -> None:
        heapq.heappush(self._heap, (deadline_ms, key, offset, nonce))

    def due(self, now_ms: int, limit: int = 1024) -> list[tuple[StateKey, int, int]]:
        out: list[tuple[StateKey, int, int]] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms and len(out) < limit:
            _, key, offset, nonce = heapq.heappop(heap)
            out.append((key, offset, nonce))
        return out

    def next_deadline(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


class PopReviveService:
    def __init__(
        self,
        pop: PopService,
        is_master: Callable[[], bool],
        *,
        snapshot_every_s: float = SNAPSHOT_EVERY_S,
    ) -> None:
        self._pop = pop
        self._is_master = is_master
        self._snapshot_every_s = snapshot_every_s
        self._wake = asyncio.Event()
        self.dead_lettered = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        last_snapshot = time.monotonic()
        while True:
            delay = MAX_SLEEP_S
            if self._is_master() and self._pop.master:
                try:
                    self.dead_lettered += await self._pop.revive_due()
                    if time.monotonic() - last_snapshot >= self._snapshot_every_s:
                        last_snapshot = time.monotonic()
                        self._pop.snapshot_active()
                except Exception:
                    log.exception("revive step failed; retrying")
                nxt = self._pop.revive_index.next_deadline()
                if nxt is not None:
                    delay = min(MAX_SLEEP_S, max(0.0, (nxt - time.time() * 1000) / 1000))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()
