"""One lookup per key at a time, its answer kept for a moment.

Why: at start-up (kopf's resume) or when a user applies thousands of RocketTopic
objects at once, thousands of handlers run together and each would ask the API server
for the same RocketCluster, Secret and pod list, and every broker for the catalogue
version it serves. They all want the same answer: the first one asks, the others
await it, and whoever comes within ``ttl_s`` after reuses it. A failed lookup is not
kept: its waiters get the error, the next caller asks again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class Recent(Generic[K, V]):
    ttl_s: float
    clock: Callable[[], float] = time.monotonic
    _answers: dict[K, tuple[float, V]] = field(default_factory=dict, init=False)
    _asking: dict[K, asyncio.Task[V]] = field(default_factory=dict, init=False)

    async def get(self, key: K, ask: Callable[[], Awaitable[V]]) -> V:
        kept = self._answers.get(key)
        if kept is not None and self.clock() - kept[0] < self.ttl_s:
            return kept[1]
        task = self._asking.get(key)
        if task is None:
            # A task of its own: a caller cancelled (its handler stopped) does not
            # cancel the lookup the others await.
            task = asyncio.ensure_future(self._ask(key, ask))
            self._asking[key] = task
            task.add_done_callback(_retrieve)  # no warning when every waiter left
        return await asyncio.shield(task)

    async def _ask(self, key: K, ask: Callable[[], Awaitable[V]]) -> V:
        try:
            answer = await ask()
        finally:
            self._asking.pop(key, None)
        self._answers[key] = (self.clock(), answer)
        return answer

    def forget(self, key: K) -> None:
        """Drop the kept answer (it proved stale: the next caller asks again)."""
        self._answers.pop(key, None)


def _retrieve(task: asyncio.Task[V]) -> None:
    if not task.cancelled():
        task.exception()
