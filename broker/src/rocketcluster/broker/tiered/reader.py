"""Cold reads: messages served from the tier's segments, through the read-ahead cache.

A read names a queue offset; the segment holding it is fetched whole (one request),
decoded with every record's CRC checked, kept in the cache, and the messages from the
offset on are returned. Fetching segment *n* also starts fetching segment *n+1* in the
background when the cache has room: a consumer working through cold data finds the
next segment waiting. Backend calls and decoding run on worker threads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocketcluster.broker.store.record import StoredMessage
from rocketcluster.broker.tiered.backend import TierBackend
from rocketcluster.broker.tiered.cache import CacheKey, SegmentCache
from rocketcluster.broker.tiered.catalog import TierCatalog
from rocketcluster.broker.tiered.segment import SegmentHeader, decode_segment


@dataclass
class ReadCounters:
    reads: int = 0  # reads served from the tier (cache or backend)
    messages: int = 0
    fetches: int = 0  # segments fetched from the backend
    fetched_bytes: int = 0
    fallbacks: int = 0  # tier reads that failed and were served locally instead
    errors: int = 0  # failed fetches
    last_error: str = ""


class TierReader:
    def __init__(
        self,
        catalog: TierCatalog,
        backend: TierBackend,
        cache: SegmentCache,
        on_fetch: Callable[[float], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self.backend = backend
        self.cache = cache
        self.counters = ReadCounters()
        self._on_fetch = on_fetch
        self._inflight: dict[CacheKey, asyncio.Task[list[StoredMessage]]] = {}

    async def read(
        self, topic: str, queue_id: int, offset: int, max_count: int
    ) -> list[StoredMessage]:
        """Messages of one segment from ``offset`` (at most ``max_count``); empty when
        the tier does not hold ``offset``. Raises :class:`BackendError` or
        :class:`SegmentFormatError` when the segment cannot be read."""
        tier = self.catalog.get(topic, queue_id)
        header = tier.find(offset) if tier is not None else None
        if header is None:
            return []
        messages = await self.segment(header)
        self.counters.reads += 1
        picked = messages[offset - header.start : offset - header.start + max_count]
        self.counters.messages += len(picked)
        if tier is not None and offset - header.start + max_count >= header.count // 2:
            following = tier.find(header.end)
            if following is not None:
                self._prefetch(following)
        return picked

    async def segment(self, header: SegmentHeader) -> list[StoredMessage]:
        """Every message of a segment (reads, and lookups by time, key or id)."""
        cached = self.cache.get((header.topic, header.queue_id, header.start))
        if cached is not None:
            return cached
        return await asyncio.shield(self._fetching(header))

    def _fetching(self, header: SegmentHeader) -> asyncio.Task[list[StoredMessage]]:
        """The one fetch of a segment, started now if none runs (however many readers
        and prefetches want it)."""
        key = (header.topic, header.queue_id, header.start)
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._fetch(header))
            self._inflight[key] = task
            task.add_done_callback(lambda _: self._inflight.pop(key, None))
        return task

    async def _fetch(self, header: SegmentHeader) -> list[StoredMessage]:
        name = self.catalog.name_of(header)
        started = time.monotonic()

        def get() -> tuple[int, SegmentHeader, list[StoredMessage]]:
            data = self.backend.get(name)
            got, messages = decode_segment(data)  # CRCs checked here, off the loop
            return len(data), got, messages

        try:
            size, got, messages = await asyncio.to_thread(get)
        except Exception as exc:
            self.counters.errors += 1
            self.counters.last_error = f"{name}: {type(exc).__name__}: {exc}"
            raise
        if (got.start, got.end) != (header.start, header.end):
            self.counters.errors += 1
            raise ValueError(f"{name} covers [{got.start}, {got.end}), not the catalogued range")
        seconds = time.monotonic() - started
        self.counters.fetches += 1
        self.counters.fetched_bytes += size
        if self._on_fetch is not None:
            self._on_fetch(seconds)
        self.cache.put((header.topic, header.queue_id, header.start), size, messages)
        return messages

    def _prefetch(self, header: SegmentHeader) -> None:
        key = (header.topic, header.queue_id, header.start)
        if key in self.cache or key in self._inflight:
            return
        if not self.cache.room_for(header.records_bytes):
            return
        task = self._fetching(header)
        # A read that needs it will try again and report; nothing to log twice.
        task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
