"""The read-ahead cache: decoded tier segments, bounded in bytes, for a while.

A consumer reading cold data asks for a few messages at a time; the tier answers with
whole segments (one request for thousands of messages), which stay here for the next
receives. Least recently used segments go first when the bound is reached, and every
entry expires after ``ttl_s`` (RocketMQ's read-ahead keeps 15 s) so a quiet broker
gives its memory back. A segment larger than the whole bound is served once and not
kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from rocketcluster.broker.store.record import StoredMessage

CacheKey = tuple[str, int, int]  # topic, queue id, segment start


class SegmentCache:
    def __init__(
        self, max_bytes: int, ttl_s: float = 15.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[CacheKey, tuple[float, int, list[StoredMessage]]] = OrderedDict()
        self._lock = threading.Lock()  # prefetches fill it from worker threads
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: CacheKey) -> list[StoredMessage] | None:
        now = self._clock()
        with self._lock:
            found = self._entries.get(key)
            if found is None or now - found[0] > self.ttl_s:
                if found is not None:
                    self._drop(key)
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return found[2]

    def __contains__(self, key: CacheKey) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: CacheKey, size: int, messages: list[StoredMessage]) -> None:
        if size > self.max_bytes:
            return
        now = self._clock()
        with self._lock:
            if key in self._entries:
                self._drop(key)
            self._expire(now)
            while self._entries and self.bytes + size > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[key] = (now, size, messages)
            self.bytes += size

    def room_for(self, size: int) -> bool:
        return size <= self.max_bytes

    def _expire(self, now: float) -> None:
        for key in [k for k, (at, _, _) in self._entries.items() if now - at > self.ttl_s]:
            self._drop(key)

    def _drop(self, key: CacheKey) -> None:
        _, size, _ = self._entries.pop(key)
        self.bytes -= size

    def __len__(self) -> int:
        return len(self._entries)
