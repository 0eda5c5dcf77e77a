"""ArrivalNotifier: wakes long-polling receivers when their topic gets messages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


class ArrivalNotifier:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    async def wait(self, topic: str, seconds: float) -> bool:
        """Wait until ``topic`` is notified or ``seconds`` pass; True if notified."""
        if seconds <= 0:
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(topic, set())
        waiters.add(fut)
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await fut
                return True
            return False
        finally:
            waiters.discard(fut)
            if not waiters:
                self._waiters.pop(topic, None)

    def notify(self, topics: Iterable[str]) -> None:
        for topic in topics:
            for fut in self._waiters.pop(topic, ()):
                if not fut.done():
                    fut.set_result(None)

    def waiting(self) -> int:
        return sum(len(w) for w in self._waiters.values())
