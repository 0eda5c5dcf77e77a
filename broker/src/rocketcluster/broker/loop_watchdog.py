"""LoopWatchdog: notices when something held the broker's event loop.

A broker does everything on one event loop: client requests, replication, the
controller heartbeats that keep it in its group's SyncStateSet. Work that runs on it
for seconds without yielding stops all of them at once, and from outside it looks like
a network fault: the seed-3 soak found a replica rebuilding its POP state for up to
33 s while its group counted it out. The watchdog sleeps a short tick and measures how
late it wakes. A wake-up later than :data:`REPORT_AFTER_S` is logged (the line the
chaos suite's check reads: ``ctl/chaos/loop_blocks.py``) and observed in a histogram.

It reports how much of the late time the loop's thread spent *on CPU*. Only that part
is the broker's own work: a process stopped (SIGSTOP, a frozen VM) or starved by a
busy host is late too, but its thread used no CPU meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

TICK_S = 0.25
REPORT_AFTER_S = 1.0
# Read by the chaos check (loop_blocks.py): keep the wording, or change both.
BLOCK_MESSAGE = "event loop blocked for %.2f s (%.2f s of it on CPU in the loop's thread)"
BLOCK_BUCKETS = (1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True, slots=True)
class Block:
    seconds: float  # how much later than its tick the watchdog woke
    cpu_seconds: float  # of which the loop's thread ran on CPU


def late_wakeup(tick_s: float, slept_s: float, cpu_s: float) -> Block | None:
    """A block, if a ``tick_s`` sleep took ``slept_s`` (``cpu_s`` of CPU meanwhile)."""
    late = slept_s - tick_s
    if late < REPORT_AFTER_S:
        return None
    return Block(late, min(cpu_s, slept_s))


class LoopWatchdog:
    def __init__(self, observe: Callable[[float], None], tick_s: float = TICK_S) -> None:
        self._observe = observe
        self._tick_s = tick_s
        self.blocks = 0
        self.longest: Block | None = None

    async def run(self) -> None:
        while True:
            began, cpu = time.monotonic(), time.thread_time()
            await asyncio.sleep(self._tick_s)
            block = late_wakeup(self._tick_s, time.monotonic() - began, time.thread_time() - cpu)
            if block is not None:
                self.record(block)

    def record(self, block: Block) -> None:
        self.blocks += 1
        if self.longest is None or block.seconds > self.longest.seconds:
            self.longest = block
        self._observe(block.seconds)
        log.warning(BLOCK_MESSAGE, block.seconds, block.cpu_seconds)
