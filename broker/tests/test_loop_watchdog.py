"""The loop watchdog tells a loop held by the broker's own work (CPU in the loop's
thread) from one that was late for another reason (the process stopped, the host busy)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest

from rocketcluster.broker.loop_watchdog import REPORT_AFTER_S, Block, LoopWatchdog, late_wakeup


def test_only_wakeups_a_second_late_are_blocks() -> None:
    assert late_wakeup(0.25, 0.25 + REPORT_AFTER_S * 0.9, 0.2) is None
    assert late_wakeup(0.25, 5.25, 4.0) == Block(5.0, 4.0)
    assert late_wakeup(0.25, 2.25, 9.0) == Block(2.0, 2.25)  # never more CPU than time


def _spin(cpu_seconds: float) -> None:
    """Hold the loop with work: until this thread has used ``cpu_seconds`` of CPU."""
    until = time.thread_time() + cpu_seconds
    while time.thread_time() < until:
        pass


async def test_a_held_loop_is_reported_with_its_cpu_and_a_sleeping_one_without(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[float] = []
    watchdog = LoopWatchdog(seen.append, tick_s=0.05)
    task = asyncio.create_task(watchdog.run())
    try:
        await asyncio.sleep(0.2)
        with caplog.at_level(logging.WARNING, "rocketcluster.broker.loop_watchdog"):
            _spin(1.5)
            await asyncio.sleep(0.2)
            busy = watchdog.longest
            assert busy is not None and watchdog.blocks == 1
            assert busy.seconds >= 1.0 and busy.cpu_seconds >= 1.0
            time.sleep(1.5)  # noqa: ASYNC251 - blocked on purpose, with no CPU (as when stopped)
            await asyncio.sleep(0.2)
        assert watchdog.blocks == 2 and len(seen) == 2
        assert seen[1] >= 1.0
        lines = [r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage()]
        assert len(lines) == 2
        sleeping_cpu = float(lines[1].split("(")[1].split(" s")[0])
        assert sleeping_cpu < 0.5
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
