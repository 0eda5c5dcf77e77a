"""Python's cyclic garbage collector in a broker with many queues (issue #27).

A broker keeps a few objects per queue alive for its whole life (the queue, its
stats rows, its segment shares): with 100,000 queues that is millions of objects, and
a full collection walks all of them while the event loop waits — 100-250 ms measured
in a stats snapshot of 100,000 queues, more in a whole broker, landing in whatever
request allocated last. Almost all the broker's garbage is freed by reference
counting (records, rows, protobuf messages hold no cycles), so collections can be
rarer without holding memory for long:

- :data:`THRESHOLDS`: young collections every 20,000 allocations instead of 700 (fewer
  short-lived objects survive into the old generation, which is what makes full
  collections due), an old one every 20 young ones.
- :func:`freeze_survivors`: after the store's recovery and the servers' start, what is
  alive (modules, the recovered queues, the gRPC machinery) moves to the permanent
  generation, which no collection walks again.
- :class:`PauseObserver`: every collection's pause as a histogram, so a dashboard
  shows when the collector, not the broker's own work, held the loop.

Process-wide settings: the broker's ``main`` applies them; a broker embedded in
another process (tests) leaves that process's collector alone.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

THRESHOLDS = (20_000, 20, 20)


def tune_collector() -> None:
    gc.set_threshold(*THRESHOLDS)


def freeze_survivors() -> None:
    """Collect once, then exempt everything still alive from later collections."""
    gc.collect()
    gc.freeze()


class PauseObserver:
    """Feeds each collection's duration to ``observe(generation, seconds)`` while
    installed (``gc.callbacks`` is process-wide: install once per broker, uninstall
    at its stop)."""

    def __init__(self, observe: Callable[[int, float], None]) -> None:
        self._observe = observe
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._observe(int(info["generation"]), time.perf_counter() - self._started)

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
