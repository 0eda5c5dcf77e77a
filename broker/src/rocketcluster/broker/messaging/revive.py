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
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rocketcluster.broker.messaging.revive_index import RETRY_MS

if TYPE_CHECKING:
    from rocketcluster.broker.messaging.pop import PopService

log = logging.getLogger(__name__)

MAX_SLEEP_S = 0.2
SNAPSHOT_EVERY_S = 10.0


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
                    self.dead_lettered += await revive_due(self._pop)
                    if time.monotonic() - last_snapshot >= self._snapshot_every_s:
                        last_snapshot = time.monotonic()
                        self._pop.snapshot_active()
                    self._pop.checkpoint_if_due()
                except Exception:
                    log.exception("revive step failed; retrying")
                nxt = self._pop.revive_index.next_deadline()
                if nxt is not None:
                    delay = min(MAX_SLEEP_S, max(0.0, (nxt - time.time() * 1000) / 1000))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._wake.wait()


async def revive_due(pop: PopService) -> int:
    """Dead-letter the deliveries whose last attempt expired (on the master); returns
    how many went to their DLQ. Their journal records share one write."""
    now = int(time.time() * 1000)
    index = pop.revive_index
    moves = []
    for key, offset, nonce in index.due(now):
        state = pop.loaded(key)
        group = pop.group_spec(key[0])
        if state is None or group is None:
            continue
        entry = state.inflight.get(offset)
        if entry is not None:
            if nonce >= 0 and entry.nonce != nonce:
                continue  # delivered again, or its invisibility changed (indexed anew)
            if entry.deadline_ms > now:  # auto-renewed: look again then
                index.push(entry.deadline_ms, key, offset, entry.nonce)
                continue
            attempts = entry.attempt
        elif offset in state.waiting:
            attempts = state.waiting[offset]
        else:
            continue  # done meanwhile
        if attempts < group.max_delivery_attempts:
            continue
        msg, gone = await pop.read_at(key[1], key[2], offset)
        if msg is None:
            if gone:
                state.mark_done(offset)
            else:
                index.push(now + RETRY_MS, key, offset, -1)
            continue
        after = state.inflight.get(offset)
        if (after.nonce if after else None) != (entry.nonce if entry else None):
            continue  # a receive got to it while the message was read
        if offset in state.done or offset < state.committed:
            continue  # acknowledged meanwhile
        pop.trace_expired(
            (*key, offset), msg, attempts, entry.deadline_ms if entry is not None else None
        )
        moves.append(pop.dead_letter_now(key, state, offset, msg, attempts))
    if not moves:
        return 0
    return sum(await asyncio.gather(*moves))
